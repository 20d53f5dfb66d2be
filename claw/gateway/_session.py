"""One authenticated connection: its authority, in-flight requests and outgoing queue.

A session starts once the ``connect`` frame was accepted and runs three kinds of task
in the connection's host scope: a reader (decodes frames, answers malformed ones,
starts a task per request), a sender (draining a bounded queue, so a client that stops
reading stalls only its own session), and one task per in-flight request inside that
request's own cancel scope. An answer is written by the task that made it when nothing
is being written or waiting to be (the common case: no hand-off to the sender, one
task switch less a request); otherwise it joins the queue, so that a client that stops
reading still holds at most ``max_in_flight`` answers in tasks and
``max_queued_messages`` in the queue.

Everything the session minted dies with it: the operator authority lives in a nested
host scope held open by a task, so revoking the client (:meth:`Session.revoke`) can
end that scope while the connection stays up, and closing the connection ends it too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

from .._capabilities import OperatorAuthority
from .._errors import (
    CapabilityDeniedError,
    ForgedCapabilityError,
    HostClosedError,
    StaleCapabilityError,
)
from .._host import Host
from ._errors import GatewayError
from ._methods import GatewayMethod, GatewayRequestContext
from ._protocol import (
    CancelFrame,
    FrameError,
    RequestFrame,
    RequestId,
    decode_frame,
    encode_error,
    encode_result,
)

logger = logging.getLogger("claw.gateway")


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    """The exceptions inside ``group`` and its nested groups."""
    found: list[BaseException] = []
    for inner in group.exceptions:
        if isinstance(inner, BaseExceptionGroup):
            found.extend(_leaves(inner))
        else:
            found.append(inner)
    return found


@attrs.define(eq=False)
class Session:
    """The server side of one authenticated connection (gateway-internal)."""

    connection_id: str
    scopes: frozenset[str]
    ws: WebSocketConnection
    host: Host
    methods: Mapping[str, GatewayMethod]
    max_message_bytes: int
    max_in_flight: int
    max_queued_messages: int
    idle_timeout: float = float("inf")
    idle_closed: bool = attrs.field(default=False, init=False)
    authority: OperatorAuthority | None = attrs.field(default=None, init=False)
    inflight: dict[RequestId, trio.CancelScope] = attrs.field(factory=dict, init=False)
    closed_reason: str | None = attrs.field(default=None, init=False)
    revoked_reason: str | None = attrs.field(default=None, init=False)
    revoke_requested: trio.Event = attrs.field(factory=trio.Event, init=False)
    authority_released: trio.Event = attrs.field(factory=trio.Event, init=False)
    _cancel_scope: trio.CancelScope | None = attrs.field(default=None, init=False)
    # Tasks writing to the socket now (answers written directly, and the sender).
    _writers: int = attrs.field(default=0, init=False)
    # When the reader last received a message (the idle timer's reference).
    _last_message: float = attrs.field(default=0.0, init=False)
    # Answers handed to the outbox and not yet taken by the sender (buffered, or waiting
    # for room): what an answer must not overtake. A count rather than the channel's
    # statistics(), which builds an object on every answer.
    _queued: int = attrs.field(default=0, init=False)
    _outbox_send: trio.MemorySendChannel[str] = attrs.field(init=False)
    _outbox_receive: trio.MemoryReceiveChannel[str] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._outbox_send, self._outbox_receive = trio.open_memory_channel[str](
            self.max_queued_messages
        )

    # -- state seen by handlers --------------------------------------------------

    def problem(self) -> str | None:
        """Why requests on this connection may no longer have effects, or ``None``."""
        if self.closed_reason is not None:
            return self.closed_reason
        if self.revoked_reason is not None:
            return f"this connection's authority was revoked ({self.revoked_reason})"
        return None

    @property
    def responses_queued(self) -> int:
        """Responses waiting for the client to read them."""
        return self._outbox_send.statistics().current_buffer_used

    def revoke(self, reason: str) -> None:
        """Revoke the client's authority; the connection stays open, requests are refused."""
        if self.revoked_reason is None:
            self.revoked_reason = reason
        self.revoke_requested.set()

    def close(self, reason: str) -> None:
        """End the session: refuse further effects and cancel every in-flight request."""
        if self.closed_reason is None:
            self.closed_reason = reason
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()

    # -- running -----------------------------------------------------------------

    async def run(
        self, nursery: trio.Nursery, connect_id: RequestId, hello: Mapping[str, Any]
    ) -> None:
        """Serve the connection until it closes; ``nursery`` is the connection scope's."""
        self._cancel_scope = nursery.cancel_scope
        try:
            self.authority = await nursery.start(self._hold_authority)
            await self.ws.send_message(encode_result(connect_id, hello))
            nursery.start_soon(self._send_loop)
            await self._read_loop(nursery)
        except ConnectionClosed:
            pass
        finally:
            self.close("the connection closed")

    async def _hold_authority(
        self, *, task_status: trio.TaskStatus[OperatorAuthority] = trio.TASK_STATUS_IGNORED
    ) -> None:
        # The authority gets a scope of its own, so that revoking it (closing this scope)
        # does not need the connection to close, and closing the connection revokes it.
        try:
            async with self.host.open_scope("gateway-connection-authority") as scope:
                authority = scope.mint_operator_authority(
                    self.scopes, connection_id=self.connection_id
                )
                task_status.started(authority)
                await self.revoke_requested.wait()
        finally:
            self.authority_released.set()

    async def _send_loop(self) -> None:
        async with self._outbox_receive:
            async for text in self._outbox_receive:
                self._queued -= 1
                if not await self._write(text):
                    return

    async def _write(self, text: str) -> bool:
        """Write one message; ``False`` (the session closed) once the connection is gone."""
        self._writers += 1
        try:
            await self.ws.send_message(text)
        except ConnectionClosed:
            self.close("the connection closed")
            return False
        finally:
            self._writers -= 1
        return True

    async def _reply(self, text: str) -> None:
        if self._writers or self._queued:
            self._queued += 1
            try:
                await self._outbox_send.send(text)
            except BaseException:
                self._queued -= 1  # not queued after all (cancelled, or the sender is gone)
                raise
        else:
            # Nothing ahead of this answer: write it now rather than wake the sender.
            await self._write(text)

    async def _watch_idle(self, reading: trio.CancelScope) -> None:
        """End the read loop (``reading``) once the connection has been idle for
        ``idle_timeout``: no message for that long, and no answer the client still
        waits for. One timer per quiet period rather than a cancel scope per message."""
        idle = self.idle_timeout
        busy_since = self._last_message
        while True:
            await trio.sleep_until(max(self._last_message, busy_since) + idle)
            now = trio.current_time()
            if self._last_message + idle > now:
                continue  # a message came since the timer was set: wait out the rest
            if self.inflight or self.responses_queued or self._writers:
                # Not idle while the client waits for answers; look again a period later.
                busy_since = now
                continue
            # Nothing in flight, queued or being written: the reader waits for a message
            # (its only other waits are writing or queueing an answer).
            self.idle_closed = True
            reading.cancel()
            return

    async def _read_loop(self, nursery: trio.Nursery) -> None:
        self._last_message = trio.current_time()
        with trio.CancelScope() as reading:
            nursery.start_soon(self._watch_idle, reading)
            await self._read_messages(nursery)

    async def _read_messages(self, nursery: trio.Nursery) -> None:
        ws = self.ws
        while True:
            try:
                message = await ws.get_message()
            except ConnectionClosed:
                return
            self._last_message = trio.current_time()
            try:
                frame = decode_frame(message, max_bytes=self.max_message_bytes)
            except FrameError as exc:
                await self._reply(encode_error(exc.request_id, "INVALID_REQUEST", exc.message))
                continue
            if isinstance(frame, CancelFrame):
                scope = self.inflight.get(frame.id)
                if scope is not None:
                    scope.cancel()
                continue
            method = self.methods.get(frame.method)
            refusal = self._refusal(frame, method)
            if refusal is not None:
                await self._reply(refusal)
                continue
            assert method is not None
            cancel_scope = trio.CancelScope()
            self.inflight[frame.id] = cancel_scope
            nursery.start_soon(self._serve_request, frame, method, cancel_scope)

    def _refusal(self, frame: RequestFrame, method: GatewayMethod | None) -> str | None:
        if frame.method == "connect":
            return encode_error(
                frame.id, "INVALID_REQUEST", "already connected; connect is only the first frame"
            )
        if method is None:
            known = ", ".join(sorted(self.methods)) or "none"
            return encode_error(
                frame.id,
                "INVALID_REQUEST",
                f'unknown method "{frame.method}" (this gateway serves: {known})',
            )
        if frame.id in self.inflight:
            return encode_error(
                frame.id,
                "INVALID_REQUEST",
                f"request id {frame.id!r} is already in flight; use a new id per request",
            )
        if len(self.inflight) >= self.max_in_flight:
            return encode_error(
                frame.id,
                "UNAVAILABLE",
                f"too many requests in flight on this connection (limit {self.max_in_flight}); "
                "wait for answers before sending more",
            )
        return None

    async def _serve_request(
        self, frame: RequestFrame, method: GatewayMethod, cancel_scope: trio.CancelScope
    ) -> None:
        # The slot is held until the answer is queued, so a client that does not read
        # cannot make the gateway hold more than max_in_flight answers for it. The answer
        # is made inside the request's own cancel scope and written outside it (a cancel
        # frame aborts the work, never a half-written answer); one coroutine, not two.
        try:
            answer: str | None = None
            with cancel_scope:
                try:
                    answer = await self._call(frame, method, cancel_scope)
                except BaseExceptionGroup as group:
                    answer = self._group_answer(frame, method, group)
                except Exception as exc:
                    answer = self._error_for(frame, method, exc)
            if answer is None:
                # The request's own scope caught the cancellation: a cancel frame aborted
                # it. (Connection close cancels an outer scope and never gets here.)
                answer = encode_error(frame.id, "UNAVAILABLE", f"request {frame.id!r} was aborted")
            await self._reply(answer)
        finally:
            del self.inflight[frame.id]

    def _group_answer(
        self, frame: RequestFrame, method: GatewayMethod, group: BaseExceptionGroup[Any]
    ) -> str:
        """The answer for a handler's own nursery's error group: a lone error as if it
        were raised directly; cancellation (and KeyboardInterrupt) goes on unwinding."""
        cancelled, rest = group.split(trio.Cancelled)
        leaves = _leaves(rest) if rest is not None else []
        if any(not isinstance(leaf, Exception) for leaf in leaves):
            raise group
        if cancelled is not None:
            if rest is not None:
                self._log_failure(frame, method, rest)
            raise cancelled from None
        if len(leaves) == 1 and isinstance(leaves[0], Exception):
            return self._error_for(frame, method, leaves[0])
        self._log_failure(frame, method, group)
        return self._internal(frame, method)

    def _error_for(self, frame: RequestFrame, method: GatewayMethod, exc: Exception) -> str:
        if isinstance(exc, GatewayError):
            return encode_error(frame.id, exc.code, exc.message)
        if isinstance(exc, StaleCapabilityError | ForgedCapabilityError):
            return encode_error(
                frame.id, "UNAVAILABLE", "the request's authority is no longer current"
            )
        if isinstance(exc, CapabilityDeniedError):
            return encode_error(
                frame.id, "FORBIDDEN", "the connection's authority does not allow this request"
            )
        if isinstance(exc, HostClosedError):
            return encode_error(frame.id, "UNAVAILABLE", "the host is shutting down")
        self._log_failure(frame, method, exc)
        return self._internal(frame, method)

    def _log_failure(self, frame: RequestFrame, method: GatewayMethod, exc: BaseException) -> None:
        logger.error(
            "gateway method %s failed (connection %s, request %r)",
            method.name,
            self.connection_id,
            frame.id,
            exc_info=exc,
        )

    @staticmethod
    def _internal(frame: RequestFrame, method: GatewayMethod) -> str:
        # The exception's text stays in the log: it may name paths or other internals.
        return encode_error(
            frame.id, "INTERNAL", f"internal error in {method.name}; the gateway log has details"
        )

    async def _call(
        self, frame: RequestFrame, method: GatewayMethod, cancel_scope: trio.CancelScope
    ) -> str:
        problem = self.problem()
        if problem is not None:
            raise GatewayError("UNAVAILABLE", problem)
        authority = self.authority
        assert authority is not None
        if not authority.has_scope(method.required_scope):
            raise GatewayError(
                "FORBIDDEN",
                f"{method.name} needs the {method.required_scope} scope; connect with a token "
                f"that allows it and request it in scopes",
            )
        # The request mints only its caller context: a scope without a nursery does
        # (a nursery per request cost about as much as the rest of this method).
        with self.host.open_minting_scope("gateway-request") as request_scope:
            caller = request_scope.mint_caller_context(authority, cancel_scope=cancel_scope)
            context = GatewayRequestContext._create(
                memory=self.host.memory,
                verify=self.host.verify,
                request_id=frame.id,
                method=frame.method,
                params=frame.params,
                authority=authority,
                caller=caller,
                connection_problem=self.problem,
            )
            payload = await method.handler(context)
            # An abort or revocation that landed while the handler finished must not let
            # its result through (a releasing handler's last step was that check).
            if not method.releases:
                context.check_current()
        # A dict (every handler's answer) is told apart without the ABC's isinstance.
        if type(payload) is not dict and not isinstance(payload, Mapping):
            raise TypeError(
                f"gateway method {method.name} returned {type(payload).__name__}, not a mapping"
            )
        return encode_result(frame.id, payload)
