"""Embedding inputs: byte-limit splitting, batching and contract checks.

Providers accept at most ``max_input_bytes`` of UTF-8 per input. A longer text is
split into pieces that fit; the text's vector is the length-weighted mean of its
pieces' unit vectors. Provider output is checked (shape, finiteness) so that a
broken provider fails the sync instead of poisoning the index.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ..._embeddings import EmbeddingProvider
from ..._errors import EmbeddingError
from ._chunking import split_by_bytes


def plan_pieces(texts: Sequence[str], max_bytes: int) -> tuple[list[str], list[int]]:
    """Pieces to embed and, for each piece, the index of the text it belongs to."""
    # A text of at most max_bytes / 4 characters fits whatever it holds (UTF-8 takes at
    # most 4 bytes a character): most texts, and then no encoding is needed.
    fits = max_bytes // 4 if max_bytes >= 4 else -1
    if all(len(text) <= fits for text in texts):
        return list(texts), list(range(len(texts)))
    pieces: list[str] = []
    owners: list[int] = []
    for i, text in enumerate(texts):
        for piece in [text] if len(text) <= fits else split_by_bytes(text, max_bytes):
            pieces.append(piece)
            owners.append(i)
    return pieces, owners


def combine_pieces(
    vectors: npt.NDArray[np.float32], owners: Sequence[int], weights: Sequence[int], count: int
) -> npt.NDArray[np.float32]:
    """Per text, the weighted mean of its pieces' normalised vectors."""
    dims = vectors.shape[1]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit = vectors / norms
    out = np.zeros((count, dims), dtype=np.float64)
    np.add.at(out, np.asarray(owners, dtype=np.intp), unit * np.asarray(weights)[:, None])
    return out.astype(np.float32)


def check_output(
    provider: EmbeddingProvider, result: object, expected_rows: int
) -> npt.NDArray[np.float32]:
    """``result`` as a float32 ``(expected_rows, dims)`` array, or :class:`EmbeddingError`."""
    arr = np.asarray(result, dtype=np.float32)
    if arr.ndim != 2 or arr.shape != (expected_rows, provider.dims):
        raise EmbeddingError(
            f"embedding provider {provider.id!r} returned shape {arr.shape};"
            f" expected ({expected_rows}, {provider.dims})"
        )
    if not np.isfinite(arr).all():
        raise EmbeddingError(f"embedding provider {provider.id!r} returned non-finite values")
    return arr


async def embed_texts(
    provider: EmbeddingProvider, texts: Sequence[str], batch_size: int
) -> npt.NDArray[np.float32]:
    """Embed ``texts`` in batches, splitting oversize ones by the provider's byte limit."""
    if not texts:
        return np.zeros((0, provider.dims), dtype=np.float32)
    pieces, owners = plan_pieces(texts, provider.max_input_bytes)
    parts: list[npt.NDArray[np.float32]] = []
    for i in range(0, len(pieces), batch_size):
        batch = pieces[i : i + batch_size]
        parts.append(check_output(provider, await provider.embed(batch), len(batch)))
    vectors = np.concatenate(parts, axis=0)
    if len(pieces) == len(texts):
        return vectors
    weights = [max(1, len(p.encode("utf-8"))) for p in pieces]
    return combine_pieces(vectors, owners, weights, len(texts))
