"""The embedding provider contract.

Embedding providers are registered with ``api.register_embedding_provider(...)`` and
declared in the plugin manifest's ``contracts.embedding_providers``; there is no
separate memory-only registry. Memory Core (or any memory plugin) looks providers up
by id through the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Turns texts into vectors.

    ``id`` names the provider (what the manifest declares), ``model`` the model it
    serves, ``dims`` the vector width. ``max_input_bytes`` is the largest UTF-8 input
    the provider accepts: callers split longer texts before embedding. ``embed``
    returns a float32 array of shape ``(len(texts), dims)``; rows need not be
    normalised. It is async because remote providers block on I/O; local ones run
    their work on the host's worker pool.
    """

    @property
    def id(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def dims(self) -> int: ...

    @property
    def max_input_bytes(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...
