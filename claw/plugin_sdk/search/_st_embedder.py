"""An embedding provider over a local sentence-transformers model (optional extra).

The ``sentence-transformers`` package is imported only when such an embedder is
created; without it, creation raises :class:`ConfigError` naming the extra to
install. The model is loaded from a local path (no download), and encoding runs on
the host's worker pool.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._errors import ConfigError
from ..._workers import WorkerPool

# sentence-transformers models count word pieces; one piece is at least one byte of
# text and rarely more than four, so four bytes per position keeps inputs under the
# model's window without cutting text the model would have read.
BYTES_PER_POSITION = 4


def max_input_bytes_for(max_seq_length: int) -> int:
    """The byte limit for a model that reads ``max_seq_length`` positions."""
    if max_seq_length < 1:
        raise ValueError(f"max_seq_length must be positive, got {max_seq_length}")
    return max(4, max_seq_length * BYTES_PER_POSITION)


def _import_sentence_transformers() -> Any:
    try:
        return importlib.import_module("sentence_transformers")
    except ImportError as exc:
        raise ConfigError(
            "memory_core.embedder",
            "the sentence-transformers embedder needs the optional package;"
            " install it with `pip install sentence-transformers`",
        ) from exc


class SentenceTransformerEmbedder:
    """Embeds with a sentence-transformers model loaded from ``model_path``."""

    def __init__(
        self,
        model_path: str,
        *,
        workers: WorkerPool,
        device: str | None = None,
        batch_size: int = 32,
        provider_id: str = "sentence-transformers",
    ) -> None:
        module = _import_sentence_transformers()
        self._model = module.SentenceTransformer(model_path, device=device)
        self._workers = workers
        self._batch_size = batch_size
        self._id = provider_id
        self._name = model_path
        # sentence-transformers 6 renamed the accessor (the old name warns).
        getter = getattr(self._model, "get_embedding_dimension", None)
        if getter is None:
            getter = self._model.get_sentence_embedding_dimension
        dims = getter()
        if not isinstance(dims, int) or dims < 1:
            raise ConfigError("memory_core.embedder", f"model {model_path!r} reports no dims")
        self._dims = dims
        self._max_bytes = max_input_bytes_for(int(self._model.max_seq_length or 256))

    @property
    def id(self) -> str:
        return self._id

    @property
    def model(self) -> str:
        return self._name

    @property
    def dims(self) -> int:
        return self._dims

    @property
    def max_input_bytes(self) -> int:
        return self._max_bytes

    def _encode(self, texts: list[str]) -> npt.NDArray[np.float32]:
        out = self._model.encode(texts, batch_size=self._batch_size, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float32)

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self._dims), dtype=np.float32)
        return await self._workers.run_sync(self._encode, list(texts))
