"""The semantic default embedder: static token vectors distilled from MiniLM, numpy only.

A text's vector is the mean of the vectors of its WordPiece tokens, looked up in a
table that ships with claw (``claw/_data/static_minilm.npz``, 3.6 MB), less the
direction every text's mean shares (the table's common component). The table was
distilled from all-MiniLM-L6-v2 (:mod:`._distil` rebuilds it from the model's
packaged weights): every token of MiniLM's vocabulary was passed through the model on
its own, its output mean-pooled, the vectors centred and rotated onto their principal
axes, and each token weighted down the more common it is (punctuation and function
words to nothing). What the model learnt about single words stays in the vectors
("servers" lies near "cloud", "expenses" near "spend"); what a transformer adds by
reading words in context does not: word order, negation and sense by context are
lost, and a word the vocabulary lacks is the mean of its pieces ("prod" is ``pro`` and
``##d``, nowhere near "production").

Why static and not the transformer itself: MiniLM costs about 21 MFLOP a token, so
embedding 10,000 chunks of 400 tokens is about 80 TFLOP, many minutes on two cores;
a table lookup embeds the same chunks in seconds, a query in well under a
millisecond, with no runtime beyond numpy and no download at run time.
"""

from __future__ import annotations

import functools
import io
import json
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import trio

from ..._workers import WorkerPool
from ._vectors import normalise_rows
from ._wordpiece import WordPiece

#: The table that ships with claw.
PACKAGED_TABLE = Path(__file__).resolve().parents[2] / "_data" / "static_minilm.npz"
# Tokens gathered at once: bounds the temporary (32k tokens x 128 float32 = 16 MiB).
_GATHER_TOKENS = 32_768
#: The format of a table file (``meta.json``'s ``format``).
TABLE_FORMAT = "claw-static-embeddings/1"


@attrs.frozen(eq=False, repr=False)
class StaticTable:
    """A tokeniser and one vector per token (weights applied, float32)."""

    name: str
    tokenizer: WordPiece
    vectors: npt.NDArray[np.float32]
    meta: dict[str, Any]
    #: Unit vectors (``k x dims``) every text's vector is cleared of: the direction
    #: that all texts share (see :mod:`._distil`); empty for a table without one.
    common: npt.NDArray[np.float32] = attrs.field(
        factory=lambda: np.zeros((0, 0), dtype=np.float32)
    )

    @property
    def dims(self) -> int:
        return int(self.vectors.shape[1])

    @classmethod
    def load(cls, path: Path) -> StaticTable:
        """Read a table file (a zip of ``meta.json``, ``vocab.txt`` and ``vectors.npy``
        holding int8 rows, with ``scales.npy``: one float32 scale per row, and
        optionally ``common.npy``: the common component)."""
        with zipfile.ZipFile(path) as z:
            meta = json.loads(z.read("meta.json"))
            if meta.get("format") != TABLE_FORMAT:
                raise ValueError(f"{path}: not a {TABLE_FORMAT} table")
            vocab = z.read("vocab.txt").decode("utf-8").split("\n")
            rows = np.load(io.BytesIO(z.read("vectors.npy")), allow_pickle=False)
            scales = np.load(io.BytesIO(z.read("scales.npy")), allow_pickle=False)
            common = (
                np.load(io.BytesIO(z.read("common.npy")), allow_pickle=False)
                if "common.npy" in z.namelist()
                else np.zeros((0, rows.shape[1]), dtype=np.float32)
            )
        if rows.shape[0] != len(vocab) or scales.shape != (len(vocab),):
            raise ValueError(f"{path}: {len(vocab)} tokens but {rows.shape[0]} vectors")
        if common.ndim != 2 or common.shape[1] != rows.shape[1]:
            raise ValueError(f"{path}: the common component is not {rows.shape[1]}-dimensional")
        vectors = (rows.astype(np.float32) * scales[:, None]).astype(np.float32)
        return cls(str(meta["name"]), WordPiece(vocab), vectors, meta, common.astype(np.float32))


@functools.cache
def packaged_table() -> StaticTable:
    """The table that ships with claw, read once per process."""
    return StaticTable.load(PACKAGED_TABLE)


@attrs.frozen
class StaticEmbedder:
    """Mean static token vectors (:class:`StaticTable`), L2-normalised.

    ``workers``, when given, is where batches are computed (off the event loop); a
    query is short enough to embed inline. A text with no known token embeds as the
    zero vector (it matches nothing).
    """

    workers: WorkerPool | None = None
    #: ``None``: the table that ships with claw, read on first use (a host that
    #: registers this embedder and never uses it does not read it).
    table: StaticTable | None = attrs.field(default=None, repr=False)
    id: str = "claw-static"
    # No window: a mean of token vectors has no length limit, only the chunk's.
    max_input_bytes: int = 256 * 1024
    # Hybrid weight of these vectors against BM25 when the settings leave it open.
    # Turn recall_any@1 / @10 on both tuning splits (LoCoMo's 760 questions; the
    # LongMemEval tuning file's 238) with the 128-dimensional table: 0.466 / 0.839 and
    # 0.609 / 0.929 at 0.125, 0.463 / 0.838 and 0.613 / 0.929 at 0.15, 0.466 / 0.839 and
    # 0.613 / 0.929 at 0.2 (session recall@10 0.972 and 0.996), 0.462 / 0.836 and 0.618 /
    # 0.929 at 0.25 (lexical: 0.463 / 0.838 and 0.609 / 0.920). 0.2 is the weight at
    # which the vectors beat lexical at both ranks on both splits. Context-free token
    # vectors blur which turn holds the answer; at a small weight they still decide
    # between texts BM25 cannot tell apart.
    fusion_vector_weight: float = 0.2
    # What a cosine means alone (claw_memory's ranking: a hit found by meaning only
    # scores 0 up to the floor, 0.5 at the match cosine).
    similarity_floor: float = 0.25
    similarity_match: float = 0.40

    def _table(self) -> StaticTable:
        return self.table if self.table is not None else packaged_table()

    @property
    def model(self) -> str:
        return self._table().name

    @property
    def dims(self) -> int:
        return self._table().dims

    def embed_sync(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed on the calling thread."""
        table = self._table()
        out = np.zeros((len(texts), table.dims), dtype=np.float32)
        tokenizer = table.tokenizer
        vectors = table.vectors
        ids: list[int] = []
        starts: list[int] = []
        rows: list[int] = []

        def flush() -> None:
            # One gather and one segmented sum for the texts collected so far.
            out[rows] = np.add.reduceat(vectors[np.asarray(ids, dtype=np.intp)], starts)
            ids.clear()
            starts.clear()
            rows.clear()

        for row, text in enumerate(texts):
            found = tokenizer.ids(text)
            if found:
                rows.append(row)
                starts.append(len(ids))
                ids.extend(found)
                if len(ids) >= _GATHER_TOKENS:
                    flush()
        if ids:
            flush()
        common = table.common
        if common.size:
            out -= (out @ common.T) @ common
        return normalise_rows(out)

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self.workers is not None:
            return await self.workers.run_sync(self.embed_sync, list(texts))
        await trio.lowlevel.checkpoint()
        return self.embed_sync(texts)
