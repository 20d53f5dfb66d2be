"""Errors of the gateway: the wire's error codes, raised on either side of the socket.

A method handler raises :class:`GatewayError` to answer a request with a chosen code;
the client raises :class:`GatewayRequestError` when the gateway answered with an error
and :class:`GatewayConnectionError` when there was no answer to be had (the connection
failed or closed).
"""

from __future__ import annotations

import typing
from typing import Literal

from .._errors import ClawError

ErrorCode = Literal[
    "INVALID_REQUEST", "UNAUTHORIZED", "FORBIDDEN", "NOT_FOUND", "UNAVAILABLE", "INTERNAL"
]
"""The error codes of the wire protocol, exactly as they are spelled on the wire."""

ERROR_CODES: frozenset[str] = frozenset(typing.get_args(ErrorCode))


class GatewayError(ClawError, RuntimeError):
    """Answer the current request with an error: ``code`` and ``message`` go on the wire.

    Raised by method handlers (and by :meth:`GatewayRequestContext.check_current`). The
    message is sent to the client as is, so it must not carry host paths or secrets.
    """

    code: ErrorCode
    message: str

    def __init__(self, code: ErrorCode, message: str) -> None:
        if code not in ERROR_CODES:
            known = ", ".join(sorted(ERROR_CODES))
            raise ValueError(f"{code!r} is not a gateway error code (use one of {known})")
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


class GatewayRequestError(ClawError, RuntimeError):
    """The gateway answered a request with an error (raised by the client).

    ``code`` is the wire code as received (one of :data:`ERROR_CODES` for a claw
    gateway), ``message`` the server's text, ``request_id`` and ``method`` what was asked.
    """

    code: str
    message: str
    request_id: str | int | None
    method: str | None

    def __init__(
        self,
        code: str,
        message: str,
        *,
        request_id: str | int | None = None,
        method: str | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.request_id = request_id
        self.method = method
        what = f"{method} " if method else ""
        super().__init__(f"{what}failed with {code}: {message}")


class GatewayConnectionError(ClawError, ConnectionError):
    """The client could not reach the gateway, or the connection closed before an answer."""
