"""Gateway methods: the registry entry, and the per-request context a handler receives.

A handler is an async function taking a :class:`GatewayRequestContext` and returning a
JSON-serializable mapping (the response payload), or raising :class:`GatewayError`.
The gateway checks the method's required scope before the handler runs; the context
carries the connection's operator authority and a :class:`~claw.MemoryCallerContext`
minted for this one request, whose cancel scope is the request's own: a ``cancel``
frame or the connection closing cancels it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

from .._capabilities import MemoryCallerContext, OperatorAuthority
from .._errors import ForgedCapabilityError, StaleCapabilityError
from .._util import NoPublicConstructor, final
from ..memory import MemoryRuntime
from ._auth import READ_SCOPE
from ._errors import GatewayError
from ._protocol import MAX_METHOD_CHARS, RequestId

GatewayHandler = Callable[["GatewayRequestContext"], Awaitable[Mapping[str, Any]]]
"""What a method handler is: ``async def handler(ctx) -> payload``."""

RESERVED_METHODS = frozenset({"connect"})


def _check_name(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_METHOD_CHARS:
        raise ValueError(
            f"a gateway method name must be a non-empty string of at most {MAX_METHOD_CHARS} "
            f"characters, got {value!r}"
        )
    if value in RESERVED_METHODS:
        raise ValueError(f"{value!r} is reserved by the gateway protocol; choose another name")


def _check_scope(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"required_scope must be a non-empty string, got {value!r}")


@attrs.frozen
class GatewayMethod:
    """One method the gateway serves: its wire name, handler and required operator scope."""

    name: str = attrs.field(validator=_check_name)
    handler: GatewayHandler
    required_scope: str = attrs.field(default=READ_SCOPE, validator=_check_scope)
    #: The handler's last step is the memory guard's release check, with nothing awaited
    #: after it: the gateway does not check the request's currency again afterwards.
    releases: bool = False


@final
class GatewayRequestContext(metaclass=NoPublicConstructor):
    """What a method handler receives for one request; created by the gateway only.

    ``authority`` is the connection's :class:`~claw.OperatorAuthority`; ``caller`` the
    :class:`~claw.MemoryCallerContext` minted for this request (pass it to providers);
    ``params`` the request's ``params`` object; ``memory`` the host's memory guard.
    Call :meth:`check_current` before and after every effect: it raises
    ``GatewayError("UNAVAILABLE", ...)`` once the request was aborted, the connection
    closed, or the client's authority was revoked.
    """

    def __init__(
        self,
        *,
        memory: MemoryRuntime,
        verify: Callable[[object], None],
        request_id: RequestId,
        method: str,
        params: dict[str, Any],
        authority: OperatorAuthority,
        caller: MemoryCallerContext,
        connection_problem: Callable[[], str | None],
    ) -> None:
        self._verify = verify
        self.memory: MemoryRuntime = memory
        self.request_id: RequestId = request_id
        self.method: str = method
        self.params: dict[str, Any] = params
        self.authority: OperatorAuthority = authority
        self.caller: MemoryCallerContext = caller
        self._connection_problem = connection_problem

    @property
    def connection_id(self) -> str:
        """The id of the connection the request came on (also in the hello payload)."""
        assert self.authority.connection_id is not None
        return self.authority.connection_id

    @property
    def cancel_scope(self) -> trio.CancelScope:
        """The request's cancel scope (the caller context's abort signal)."""
        return self.caller.cancel_scope

    def check_request(self) -> None:
        """Raise ``GatewayError("UNAVAILABLE")`` once the request was aborted or its
        connection closed (the request's own condition, without the capability check:
        the memory guard checks it with every currency check it makes)."""
        if self.caller.cancel_scope.cancel_called:
            raise GatewayError("UNAVAILABLE", f"request {self.request_id!r} was aborted")
        self.check_connection()

    def check_connection(self) -> None:
        """Raise ``GatewayError("UNAVAILABLE")`` once the request's connection closed or
        its client's authority was revoked: the condition the memory guard checks with
        every currency check, beside the caller context (whose own check refuses an
        aborted request, so the guard does not ask the request's scope twice)."""
        problem = self._connection_problem()
        if problem is not None:
            raise GatewayError("UNAVAILABLE", problem)

    def check_current(self) -> None:
        """Raise ``GatewayError("UNAVAILABLE")`` unless the request may still have effects."""
        self.check_request()
        try:
            self._verify(self.caller)
        except (StaleCapabilityError, ForgedCapabilityError):
            raise GatewayError(
                "UNAVAILABLE", "the request's authority is no longer current"
            ) from None
