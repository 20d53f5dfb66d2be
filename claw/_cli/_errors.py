"""How a failed command is reported: one line, an error code for ``--json``."""

from __future__ import annotations

from .._errors import CapabilityDeniedError, ClawError, ConfigError, UnsupportedRequestError
from ._common import NotFoundError, UsageError


def innermost(exc: BaseException) -> BaseException:
    """``exc`` without the single-exception groups around it."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def one_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its type's name when it has none)."""
    exc = innermost(exc)
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def error_code(exc: BaseException) -> str:
    """The ``code`` of ``--json``'s error object for ``exc``."""
    exc = innermost(exc)
    if isinstance(exc, UsageError):
        return "USAGE"
    if isinstance(exc, NotFoundError | FileNotFoundError):
        return "NOT_FOUND"
    if isinstance(exc, ConfigError):
        return "CONFIG"
    if isinstance(exc, CapabilityDeniedError):
        return "FORBIDDEN"
    if isinstance(exc, UnsupportedRequestError | ValueError):
        return "INVALID_REQUEST"
    if isinstance(exc, ClawError | OSError):
        return "ERROR"
    return "INTERNAL"


def broken_pipe(exc: BaseException) -> bool:
    """Whether ``exc`` is (or holds) a closed pipe: the reader went away."""
    if isinstance(exc, BrokenPipeError):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(broken_pipe(e) for e in exc.exceptions)
    return False
