"""The gateway server: transport, connect handshake, method registry and lifecycle.

:class:`Gateway` binds one host to a method table and serves it over WebSocket
(:meth:`Gateway.serve`, for ``nursery.start``) or over any connected byte stream
(:meth:`Gateway.serve_stream`, which the in-memory harness uses with no sockets).
:func:`run_gateway_until_signal` is the CLI's runner.

Shutdown. Cancelling the serving nursery must still close every connection with
1001 (going away), and a close handshake needs trio-websocket's reader task, which
runs in the same cancelled region; left alone it dies at once and every client sees
an abrupt 1006. So each connection is served inside a shielded scope, and a sibling
task that only sleeps turns the outer cancellation into an orderly close: it marks the
connection going-away, cancels the connection's work, and gives the shielded part a
deadline of ``close_timeout`` to finish the handshake. Nothing can outlive that deadline.

Unauthenticated connections. A connection is *pending* from its TCP accept until its
``connect`` is accepted, and pending connections are counted apart from authenticated
ones: they have one deadline (``gateway.handshake_timeout``) for the upgrade and the
``connect`` together, and at most ``gateway.max_pending_connections`` of them wait at
once. Refusing the next socket at that bound would let a flood of silent sockets
(reopened as soon as they are dropped) keep every real client out, so the bound is kept
by dropping the pending connection that has waited longest instead: an authenticating
client needs only the few round trips of its own handshake, while the flood must open
``max_pending_connections`` sockets in that time to push it out. ``max_connections``
counts only authenticated connections, so the flood never takes their places either.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import secrets
import signal
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import attrs
import trio
import trio_websocket
from trio_websocket import ConnectionClosed, WebSocketConnection

from .._config import GatewayConfig
from .._errors import HostClosedError
from .._host import Host
from .._util import final
from ._auth import READ_SCOPE, TokenTable
from ._errors import ErrorCode
from ._memory import register_memory_methods
from ._methods import GatewayHandler, GatewayMethod, GatewayRequestContext
from ._protocol import (
    CancelFrame,
    FrameError,
    RequestId,
    decode_frame,
    encode_error,
    json_type_name,
)
from ._session import Session
from ._slots import gateway_section

logger = logging.getLogger("claw.gateway")

PROTOCOL_VERSION = 1
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_POLICY_VIOLATION = 1008
CLOSE_TRY_AGAIN_LATER = 1013
MAX_REQUESTED_SCOPES = 64

# Frames up to max_message_bytes are read; larger ones up to this bound are read and
# answered with INVALID_REQUEST, so the connection survives them. Beyond it the
# transport refuses to buffer the frame and closes with 1009 (message too big).
_OVERSIZE_ALLOWANCE = 8 * 1024 * 1024
# The reader drains the transport's queue at once; a deeper queue would only multiply
# the memory one flooding client can pin.
_TRANSPORT_QUEUE = 1


def transport_limit(max_message_bytes: int) -> int:
    """The largest frame the transport buffers for a given application limit."""
    return max(4 * max_message_bytes, max_message_bytes + _OVERSIZE_ALLOWANCE)


@attrs.frozen
class GatewayAddress:
    """Where a serving gateway listens."""

    host: str
    port: int

    @property
    def url(self) -> str:
        """The ``ws://`` URL clients connect to."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}"


@attrs.frozen
class GatewayConnectionStatistics:
    """One open connection: its id, granted scopes and the work it holds."""

    connection_id: str
    scopes: tuple[str, ...]
    requests_in_flight: int
    responses_queued: int
    revoked: bool


@attrs.frozen
class GatewayStatistics:
    """A snapshot of the gateway's open connections.

    ``connections`` are the authenticated ones; ``pending_connections`` counts those
    still in the WebSocket upgrade or waiting for their ``connect``.
    """

    connections: tuple[GatewayConnectionStatistics, ...]
    pending_connections: int = 0

    @property
    def requests_in_flight(self) -> int:
        """Requests in flight over all connections."""
        return sum(c.requests_in_flight for c in self.connections)

    def connection(self, connection_id: str) -> GatewayConnectionStatistics | None:
        """The statistics of one connection, or ``None`` when it is not open."""
        for stats in self.connections:
            if stats.connection_id == connection_id:
                return stats
        return None


@attrs.define(eq=False)
class _Link:
    """A connection's close code and work scope, shared with its shutdown watcher."""

    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    close_code: int = CLOSE_NORMAL
    close_reason: str | None = None
    session: Session | None = None
    finished: bool = False
    # Dropped without a closing handshake (a pending connection pushed out by newer ones).
    abrupt: bool = False

    def drop(self) -> None:
        """End an unauthenticated connection at once: no close frame, no waiting."""
        self.abrupt = True
        self.scope.cancel()

    def begin_close(self, code: int, reason: str) -> None:
        self.close_code = code
        self.close_reason = reason
        if self.session is not None:
            self.session.close(reason)
        self.scope.cancel()


def _default_config(gateway: Gateway) -> GatewayConfig:
    return gateway.host.config.gateway


def _default_handshake_timeout(gateway: Gateway) -> float:
    return gateway.config.handshake_timeout


@final
@attrs.define(eq=False)
class Gateway:
    """The WebSocket gateway of one host: a method table served to authenticated clients.

    ``config`` defaults to the host's ``gateway`` section. Register methods before or
    while serving; each needs an operator scope (``operator.read`` by default) that is
    checked before its handler runs. ``handshake_timeout`` (default: the config's) bounds
    the WebSocket upgrade and the wait for the ``connect`` frame together, from the TCP
    accept; ``close_timeout`` the closing handshake.
    ``worker_index`` is set in the worker processes of ``claw serve --workers N``: the
    ``hello-ok`` payload then names the worker (``worker: {index, pid}``), and
    ``workers_status`` is the file where the supervisor records every worker slot's state
    (:mod:`claw.gateway._slots`), which ``memory.status`` reports as its ``gateway``
    section.
    """

    host: Host
    config: GatewayConfig = attrs.field(default=attrs.Factory(_default_config, takes_self=True))
    handshake_timeout: float = attrs.field(
        default=attrs.Factory(_default_handshake_timeout, takes_self=True)
    )
    close_timeout: float = 2.0
    memory_methods: bool = True
    worker_index: int | None = None
    workers_status: Path | None = None
    _registry: dict[str, GatewayMethod] = attrs.field(factory=dict, init=False)
    _tokens: TokenTable = attrs.field(init=False)
    _sessions: dict[str, Session] = attrs.field(factory=dict, init=False)
    # Connections not authenticated yet, oldest first (a dict as an ordered set).
    _pending: dict[_Link, None] = attrs.field(factory=dict, init=False)
    # Authenticated connections, counted against max_connections.
    _authenticated: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        self._tokens = TokenTable.from_config(self.config)
        if self.memory_methods:
            register_memory_methods(self)
            if self.workers_status is not None:
                self._report_workers_in_status(self.workers_status)

    def _report_workers_in_status(self, path: Path) -> None:
        """Add the supervisor's record of the worker slots to ``memory.status``."""
        plain = self._registry["memory.status"]

        async def status_with_workers(context: GatewayRequestContext) -> Mapping[str, Any]:
            payload = dict(await plain.handler(context))
            section = await trio.to_thread.run_sync(gateway_section, path)
            if section is not None:
                payload["gateway"] = section
            return payload

        self._registry["memory.status"] = attrs.evolve(plain, handler=status_with_workers)

    # -- methods -----------------------------------------------------------------

    def register_method(
        self, name: str, handler: GatewayHandler, *, required_scope: str = READ_SCOPE
    ) -> None:
        """Serve ``name`` with ``handler`` to connections granted ``required_scope``."""
        self.add_method(GatewayMethod(name=name, handler=handler, required_scope=required_scope))

    def add_method(self, method: GatewayMethod) -> None:
        """Register a :class:`GatewayMethod`; a name can be registered once."""
        if method.name in self._registry:
            raise ValueError(f'gateway method "{method.name}" is already registered')
        self._registry[method.name] = method

    @property
    def method_names(self) -> tuple[str, ...]:
        """The registered method names, sorted."""
        return tuple(sorted(self._registry))

    # -- connections -------------------------------------------------------------

    def statistics(self) -> GatewayStatistics:
        """A snapshot of the open connections."""
        return GatewayStatistics(
            connections=tuple(
                GatewayConnectionStatistics(
                    connection_id=s.connection_id,
                    scopes=tuple(sorted(s.scopes)),
                    requests_in_flight=len(s.inflight),
                    responses_queued=s.responses_queued,
                    revoked=s.revoked_reason is not None,
                )
                for s in self._sessions.values()
            ),
            pending_connections=len(self._pending),
        )

    async def invalidate(self, connection_id: str, reason: str = "invalidated by the host") -> bool:
        """Revoke a connection's authority; returns once it is revoked.

        The connection stays open: later requests, and in-flight ones at their next
        check, fail with ``UNAVAILABLE``. Returns ``False`` when no such connection is
        open (it may have just closed, which revoked it already).
        """
        session = self._sessions.get(connection_id)
        if session is None:
            await trio.lowlevel.checkpoint()
            return False
        session.revoke(reason)
        await session.authority_released.wait()
        return True

    # -- serving -----------------------------------------------------------------

    async def serve(
        self,
        *,
        listeners: Sequence[trio.SocketListener] | None = None,
        task_status: trio.TaskStatus[GatewayAddress] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        """Listen on ``config.host``/``config.port`` until cancelled.

        For ``address = await nursery.start(gateway.serve)``; port 0 binds an ephemeral
        port, which the returned :class:`GatewayAddress` reports. ``listeners`` serves
        sockets the caller opened instead (a worker's ``SO_REUSEPORT`` ones); the
        gateway closes them when it stops.
        """
        if listeners is not None:
            listeners = list(listeners)
        else:
            listeners = await self._open_listeners()
        port = listeners[0].socket.getsockname()[1]
        address = GatewayAddress(host=self.config.host, port=port)
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._serve_tcp_stream, listeners)
            logger.info("gateway listening on %s", address.url)
            task_status.started(address)
            await trio.sleep_forever()

    async def _open_listeners(self) -> list[trio.SocketListener]:
        listeners = await trio.open_tcp_listeners(self.config.port, host=self.config.host)
        if self.config.port == 0 and len(listeners) > 1:
            # Port 0 on a name with several addresses gives each its own port; keep one
            # so that the reported URL reaches every connection.
            for extra in listeners[1:]:
                await extra.aclose()
            listeners = listeners[:1]
        return listeners

    async def _serve_tcp_stream(self, stream: trio.SocketStream) -> None:
        # One broken connection must not take the listener (and every other client) down.
        try:
            await self.serve_stream(stream)
        except Exception:
            logger.exception("gateway connection failed")

    async def serve_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one client over a connected byte stream (a socket or an in-memory pair).

        Returns when the client has gone; if cancelled, first closes the WebSocket with
        1001 (going away), taking at most ``close_timeout``.
        """
        link = _Link()
        shelter = trio.CancelScope(shield=True)
        self._admit_pending(link)
        try:
            async with trio.open_nursery() as guard:
                guard.start_soon(self._forward_cancellation, link, shelter)
                try:
                    with shelter:
                        await self._serve_shielded(stream, link)
                finally:
                    link.finished = True
                    guard.cancel_scope.cancel()
        finally:
            self._pending.pop(link, None)

    def _admit_pending(self, link: _Link) -> None:
        """Count a new connection as pending; at the bound, drop the longest-waiting one."""
        while len(self._pending) >= self.config.max_pending_connections:
            oldest = next(iter(self._pending))
            del self._pending[oldest]
            oldest.drop()
        self._pending[link] = None

    async def _forward_cancellation(self, link: _Link, shelter: trio.CancelScope) -> None:
        try:
            await trio.sleep_forever()
        finally:
            if not link.finished:
                link.begin_close(CLOSE_GOING_AWAY, "gateway shutting down")
                shelter.deadline = min(shelter.deadline, trio.current_time() + self.close_timeout)

    async def _serve_shielded(self, stream: trio.abc.Stream, link: _Link) -> None:
        limit = transport_limit(self.config.max_message_bytes)
        deadline = trio.current_time() + self.handshake_timeout
        ws: WebSocketConnection | None = None
        try:
            async with trio.open_nursery() as transport:
                try:
                    with link.scope:
                        with trio.move_on_at(deadline):
                            request = await trio_websocket.wrap_server_stream(
                                transport,
                                stream,
                                message_queue_size=_TRANSPORT_QUEUE,
                                max_message_size=limit,
                            )
                            ws = await request.accept()
                        if ws is not None and self._full():
                            await self._refuse_over_cap(ws, link)
                        elif ws is not None:
                            await self._serve_connection(ws, link, deadline)
                except ConnectionClosed:
                    pass
                finally:
                    if ws is not None and not link.abrupt:
                        with trio.move_on_after(self.close_timeout):
                            await ws.aclose(link.close_code, link.close_reason)
                    transport.cancel_scope.cancel()
        finally:
            await trio.aclose_forcefully(stream)

    def _full(self) -> bool:
        return self._authenticated >= self.config.max_connections

    async def _refuse_over_cap(
        self, ws: WebSocketConnection, link: _Link, request_id: RequestId | None = None
    ) -> None:
        link.close_code = CLOSE_TRY_AGAIN_LATER
        link.close_reason = "too many connections"
        await ws.send_message(
            encode_error(
                request_id,
                "UNAVAILABLE",
                f"the gateway serves at most {self.config.max_connections} connections; "
                "try again later",
            )
        )

    async def _serve_connection(
        self, ws: WebSocketConnection, link: _Link, deadline: float
    ) -> None:
        accepted = await self._accept_connect(ws, deadline)
        if accepted is None:
            link.close_code = CLOSE_POLICY_VIOLATION
            link.close_reason = "unauthorized"
            return
        if link not in self._pending:
            # Dropped as the longest-waiting pending connection just as its connect
            # arrived: the drop cancelled this scope, and this checkpoint ends it.
            await trio.lowlevel.checkpoint()
        del self._pending[link]
        if self._full():
            await self._refuse_over_cap(ws, link, accepted[0])
            return
        self._authenticated += 1
        try:
            await self._serve_authenticated(ws, link, *accepted)
        finally:
            self._authenticated -= 1

    async def _serve_authenticated(
        self,
        ws: WebSocketConnection,
        link: _Link,
        connect_id: RequestId,
        granted: frozenset[str],
    ) -> None:
        connection_id = f"conn-{secrets.token_hex(8)}"
        hello: dict[str, Any] = {
            "type": "hello-ok",
            "protocol": PROTOCOL_VERSION,
            "connectionId": connection_id,
            "scopes": sorted(granted),
            "methods": list(self.method_names),
            "maxMessageBytes": self.config.max_message_bytes,
            "maxInFlight": self.config.max_in_flight,
        }
        if self.worker_index is not None:
            hello["worker"] = {"index": self.worker_index, "pid": os.getpid()}
        try:
            async with self.host.open_scope("gateway-connection") as scope:
                session = Session(
                    connection_id=connection_id,
                    scopes=granted,
                    ws=ws,
                    host=self.host,
                    methods=self._registry,
                    max_message_bytes=self.config.max_message_bytes,
                    max_in_flight=self.config.max_in_flight,
                    max_queued_messages=self.config.max_queued_messages,
                    idle_timeout=self.config.idle_timeout,
                )
                link.session = session
                self._sessions[connection_id] = session
                try:
                    await session.run(scope.nursery, connect_id, hello)
                finally:
                    del self._sessions[connection_id]
                if session.idle_closed:
                    link.close_code = CLOSE_GOING_AWAY
                    link.close_reason = f"idle timeout ({self.config.idle_timeout:g} s)"
        except HostClosedError:
            link.close_code = CLOSE_GOING_AWAY
            link.close_reason = "host shutting down"
            if link.session is None:
                await ws.send_message(
                    encode_error(connect_id, "UNAVAILABLE", "the host is shutting down")
                )

    async def _accept_connect(
        self, ws: WebSocketConnection, deadline: float
    ) -> tuple[RequestId, frozenset[str]] | None:
        """Read and check the connect frame; ``None`` after refusing it with UNAUTHORIZED."""
        message: str | bytes | None = None
        with trio.move_on_at(deadline):
            message = await ws.get_message()
        if message is None:
            await self._refuse(ws, None, "no connect request arrived in time")
            return None
        try:
            frame = decode_frame(message, max_bytes=self.config.max_message_bytes)
        except FrameError as exc:
            await self._refuse(ws, exc.request_id, f"expected a connect request: {exc.message}")
            return None
        if isinstance(frame, CancelFrame) or frame.method != "connect":
            await self._refuse(
                ws, frame.id, 'the first frame must be a request with method "connect"'
            )
            return None
        auth = frame.params.get("auth")
        token = auth.get("token") if isinstance(auth, dict) else None
        if not isinstance(token, str):
            await self._refuse(ws, frame.id, "connect needs params.auth.token (a string)")
            return None
        requested = frame.params.get("scopes", [READ_SCOPE])
        if (
            not isinstance(requested, list)
            or len(requested) > MAX_REQUESTED_SCOPES
            or not all(isinstance(s, str) for s in requested)
        ):
            shown = json_type_name(requested)
            await self._refuse(
                ws,
                frame.id,
                f"connect params.scopes must be an array of at most {MAX_REQUESTED_SCOPES} "
                f"strings, got {shown}",
            )
            return None
        allowed = self._tokens.allowed_scopes(token)
        if allowed is None:
            await self._refuse(ws, frame.id, "the token is not valid for this gateway")
            return None
        granted = allowed & frozenset(requested)
        if not granted:
            # A connection with no scopes could do nothing; say what the token allows.
            asked = ", ".join(repr(s[:64]) for s in sorted(requested)[:8]) or "none"
            await self._refuse(
                ws,
                frame.id,
                f"the token grants none of the requested scopes ({asked}); it allows: "
                f"{', '.join(sorted(allowed))}",
                code="FORBIDDEN",
            )
            return None
        return frame.id, granted

    @staticmethod
    async def _refuse(
        ws: WebSocketConnection,
        request_id: RequestId | None,
        message: str,
        *,
        code: ErrorCode = "UNAUTHORIZED",
    ) -> None:
        await ws.send_message(encode_error(request_id, code, message))


async def run_gateway_until_signal(
    gateway: Gateway,
    *,
    listeners: Sequence[trio.SocketListener] | None = None,
    signals: Iterable[int] = (signal.SIGINT, signal.SIGTERM),
    task_status: trio.TaskStatus[GatewayAddress] = trio.TASK_STATUS_IGNORED,
) -> int:
    """Serve ``gateway`` until one of ``signals`` arrives; return that signal's number.

    For ``address = await nursery.start(run_gateway_until_signal, gateway)`` in the CLI:
    the signal handlers are installed before the address is reported, so a signal sent
    right after startup is not lost. On the signal, every connection is closed with
    1001 (going away) before this returns. ``listeners`` as for :meth:`Gateway.serve`.
    Must run in the main thread.
    """
    with trio.open_signal_receiver(*signals) as received, _serving_collector():
        async with trio.open_nursery() as nursery:
            address: GatewayAddress = await nursery.start(
                functools.partial(gateway.serve, listeners=listeners)
            )
            task_status.started(address)
            async for signum in received:
                logger.info("gateway stopping on signal %d", signum)
                nursery.cancel_scope.cancel()
                return int(signum)
    raise RuntimeError("the signal receiver stopped without a signal")  # pragma: no cover


#: How many allocations (net of deallocations) of container objects start a pass of the
#: cycle collector's youngest generation while a process serves a gateway (Python's
#: default is 700).
SERVING_GC_THRESHOLD = 20_000


@contextlib.contextmanager
def _serving_collector() -> Iterator[None]:
    """While a process serves (:func:`run_gateway_until_signal`), the cycle collector's
    youngest generation runs every :data:`SERVING_GC_THRESHOLD` allocations instead of
    every 700; the earlier thresholds come back on the way out.

    A request allocates some hundred objects that its own end frees (reference counts,
    not the collector), so the default ran a pass every few requests, and each one walks
    what the last requests left behind. Cycles are still collected, a few hundred
    requests later. A process-wide setting, so it is made here, where the process is
    given to the gateway, and not by a :class:`Gateway` an application embeds.
    """
    saved = gc.get_threshold()
    gc.set_threshold(max(saved[0], SERVING_GC_THRESHOLD), *saved[1:])
    try:
        yield
    finally:
        gc.set_threshold(*saved)
