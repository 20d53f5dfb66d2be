"""Errors of the model layer: message formats, model references, model calls.

Model call failures share one base, :class:`ModelError`, and say by their type
what the caller may do next:

* :class:`RetryableModelError` -- the world broke it for now (rate limit, 5xx,
  timeout, connection). Retrying the same model later may work; a fallback
  chain moves on to the next model.
* :class:`ModelRequestError`, :class:`ModelAuthError`,
  :class:`ModelResponseError` -- retrying the same request on the same model is
  pointless; a fallback chain moves on.
* :class:`ContextOverflowError` -- the conversation does not fit the model's
  window. It is a property of the request, not of the provider, so a fallback
  chain does *not* swallow it: the turn runner compacts and tries again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from claw._errors import ClawError

if TYPE_CHECKING:
    from ._ref import ModelRef


class MessageFormatError(ClawError, ValueError):
    """A message, tool call or tool spec in JSON form is malformed.

    ``field`` is the path of the bad field (``toolCalls[1].arguments``), so the
    storage or wire layer that produced it can be fixed.
    """

    field: str

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class UnknownModelProviderError(ClawError, LookupError):
    """A model reference names a provider that nobody registered."""


class ModelRegistryError(ClawError, ValueError):
    """A provider registration was refused (for example, the name is taken)."""


class ModelError(ClawError, RuntimeError):
    """A model call failed. ``retryable`` says whether trying again later may help."""

    retryable: bool = False


class RetryableModelError(ModelError):
    """A transient failure: rate limit, server error, timeout, lost connection."""

    retryable = True
    status_code: int | None

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        self.status_code = status_code
        super().__init__(message)


class ModelRequestError(ModelError):
    """The provider refused the request as invalid (bad model name, bad payload)."""

    status_code: int | None

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        self.status_code = status_code
        super().__init__(message)


class ModelAuthError(ModelRequestError):
    """The provider refused the credentials (HTTP 401/403)."""


class ModelResponseError(ModelError):
    """The provider answered with something that is not a usable completion."""


class ContextOverflowError(ModelError):
    """The request does not fit the model's context window.

    The turn runner reacts by compacting the transcript and retrying; a fallback
    chain re-raises it at once instead of trying other models.
    """

    context_window: int | None

    def __init__(self, message: str, *, context_window: int | None = None) -> None:
        self.context_window = context_window
        super().__init__(message)


class AllModelsFailedError(ModelError):
    """Every model of a fallback chain (or the one pinned model) failed.

    ``attempts`` lists each reference tried with its error, in order; the last
    error is also the ``__cause__``.
    """

    attempts: tuple[tuple[ModelRef, ModelError], ...]

    def __init__(self, attempts: Sequence[tuple[ModelRef, ModelError]]) -> None:
        self.attempts = tuple(attempts)
        self.retryable = any(err.retryable for _, err in self.attempts)
        tried = "; ".join(f"{ref}: {type(err).__name__}: {err}" for ref, err in self.attempts)
        super().__init__(f"every model failed ({tried})")
