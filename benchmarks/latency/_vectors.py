"""The embedding provider the claw workers use: the corpus vectors, so no system pays
for a model."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from benchmarks._corpus import DIMS

from ._shared import _text_lines


class CorpusVectors:
    """An embedding provider serving the corpus vectors (unknown text: a seeded vector)."""

    id = "bench-vectors"
    model = "zipf-word-sum"
    dims = DIMS
    max_input_bytes = 64 * 1024

    def __init__(self, texts: Sequence[str], vecs: npt.NDArray[np.float32]) -> None:
        self._row = {t: i for i, t in enumerate(texts)}
        self._vecs = vecs

    def lookup(self, text: str) -> npt.NDArray[np.float32]:
        row = self._row.get(text)
        if row is not None:
            return self._vecs[row]
        return _unknown_vector(text)

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import trio

        await trio.lowlevel.checkpoint()
        return np.stack([self.lookup(t) for t in texts]).astype(np.float32)


def _unknown_vector(text: str) -> npt.NDArray[np.float32]:
    seed = int.from_bytes(text.encode()[:64].ljust(8, b"\0")[:8], "little") ^ len(text)
    v = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
    out: npt.NDArray[np.float32] = v / np.linalg.norm(v)
    return out


class StoredCorpusVectors(CorpusVectors):
    """:class:`CorpusVectors` that holds no copy of the corpus: a sorted array of the
    texts' hashes maps a text to its row, read from ``vectors.npy`` with ``pread`` (the
    page cache, not this process's memory), so claw's peak RSS is claw's own (at 1M
    chunks a list of the texts and an in-memory matrix added about 4 GiB to it).
    ``chunks=False``: the queries only."""

    def __init__(self, root: Path, *, chunks: bool = True) -> None:
        qs = (root / "queries.txt").read_text(encoding="utf-8").splitlines()
        super().__init__(qs, np.load(root / "qvectors.npy"))
        hashes = np.fromiter((hash(t) for t in _text_lines(root)) if chunks else (), dtype=np.int64)
        order = np.argsort(hashes, kind="stable")
        self._hashes, self._rows = hashes[order], order
        with (root / "vectors.npy").open("rb") as f:
            np.lib.format.read_magic(f)
            np.lib.format.read_array_header_1_0(f)
            self._offset = f.tell()
        self._fd = os.open(root / "vectors.npy", os.O_RDONLY)

    def lookup(self, text: str) -> npt.NDArray[np.float32]:
        row = self._row.get(text)
        if row is not None:
            return self._vecs[row]
        h = hash(text)
        i = int(np.searchsorted(self._hashes, h))
        if i < len(self._hashes) and int(self._hashes[i]) == h:
            row = int(self._rows[i])
            raw = os.pread(self._fd, DIMS * 4, self._offset + row * DIMS * 4)
            return np.frombuffer(raw, dtype=np.float32)
        return _unknown_vector(text)

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """:meth:`lookup` of every text, the hash search done for all at once (its
        per-text cost would be counted in claw's build CPU)."""
        import trio

        await trio.lowlevel.checkpoint()
        out = np.empty((len(texts), DIMS), dtype=np.float32)
        if not len(self._hashes):
            for i, text in enumerate(texts):
                out[i] = self.lookup(text)
            return out
        hashes = np.fromiter((hash(t) for t in texts), dtype=np.int64, count=len(texts))
        at = np.minimum(np.searchsorted(self._hashes, hashes), len(self._hashes) - 1)
        found = self._hashes[at] == hashes
        rows = self._rows[at]
        for i, text in enumerate(texts):
            query_row = self._row.get(text)
            if query_row is not None:
                out[i] = self._vecs[query_row]
            elif found[i]:
                raw = os.pread(self._fd, DIMS * 4, self._offset + int(rows[i]) * DIMS * 4)
                out[i] = np.frombuffer(raw, dtype=np.float32)
            else:
                out[i] = _unknown_vector(text)
        return out
