"""The gateway client: one authenticated connection, concurrent requests matched by id.

:func:`open_gateway_client` connects over TCP; :func:`open_in_memory_gateway_client`
serves a :class:`Gateway` over an in-memory stream pair, so tests and the harness talk
the real protocol without sockets. Either way the client sends the ``connect`` frame,
checks the answer, and then multiplexes requests: each waits for the response with
its id, and a request whose caller is cancelled sends a ``cancel`` frame for it.
"""

from __future__ import annotations

import itertools
import json
import logging
import urllib.parse
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any, NoReturn, cast

import attrs
import trio
import trio.testing
import trio_websocket
from trio_websocket import ConnectionClosed, WebSocketConnection

from .._util import NoPublicConstructor, final
from ._auth import READ_SCOPE
from ._errors import GatewayConnectionError, GatewayRequestError
from ._protocol import RequestId, encode
from ._server import Gateway, transport_limit

logger = logging.getLogger("claw.gateway.client")

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# A cancel frame is a courtesy to the server; do not hold a cancelled caller for long.
_CANCEL_SEND_TIMEOUT = 1.0


@attrs.define(eq=False)
class _Pending:
    method: str
    done: trio.Event = attrs.field(factory=trio.Event)
    response: dict[str, Any] | None = None
    failure: GatewayConnectionError | None = None


def _raise_single(group: BaseExceptionGroup[Any]) -> NoReturn:
    """Re-raise the lone exception of a nursery's group as itself, context intact."""
    inner = group.exceptions[0]
    context = inner.__context__
    try:
        raise inner
    finally:
        inner.__context__ = context


@final
class GatewayClient(metaclass=NoPublicConstructor):
    """A connected, authenticated gateway client; from :func:`open_gateway_client`.

    ``hello`` is the server's ``hello-ok`` payload; ``scopes`` what was granted.
    """

    def __init__(self, ws: WebSocketConnection, hello: Mapping[str, Any]) -> None:
        self._ws = ws
        self.hello: Mapping[str, Any] = hello
        self._pending: dict[RequestId, _Pending] = {}
        self._ids = itertools.count(1)
        self._closed: GatewayConnectionError | None = None

    @property
    def connection_id(self) -> str | None:
        """The server's id for this connection (``connectionId`` in the hello)."""
        value = self.hello.get("connectionId")
        return value if isinstance(value, str) else None

    @property
    def scopes(self) -> frozenset[str]:
        """The scopes the gateway granted."""
        return frozenset(s for s in self.hello.get("scopes", ()) if isinstance(s, str))

    @property
    def closed(self) -> bool:
        """Whether the connection has closed."""
        return self._closed is not None

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        request_id: RequestId | None = None,
    ) -> dict[str, Any]:
        """Send a request and wait for its answer; return the payload.

        Raises :class:`GatewayRequestError` when the gateway answers with an error and
        :class:`GatewayConnectionError` when the connection closes first. ``request_id``
        picks the id (for :meth:`cancel`); by default the client numbers requests.
        If the caller is cancelled, a ``cancel`` frame is sent for the request.
        """
        if request_id is None:
            request_id = f"c{next(self._ids)}"
        if request_id in self._pending:
            raise ValueError(f"request id {request_id!r} is already in flight on this client")
        if self._closed is not None:
            raise GatewayConnectionError(str(self._closed))
        slot = _Pending(method=method)
        self._pending[request_id] = slot
        try:
            await self._send(
                {"type": "req", "id": request_id, "method": method, "params": dict(params or {})}
            )
            await slot.done.wait()
        except trio.Cancelled:
            if not slot.done.is_set() and self._closed is None:
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(_CANCEL_SEND_TIMEOUT),
                    suppress(GatewayConnectionError),
                ):
                    await self._send({"type": "cancel", "id": request_id})
            raise
        finally:
            del self._pending[request_id]
        if slot.failure is not None:
            raise slot.failure
        response = slot.response
        assert response is not None
        if response.get("ok") is True:
            payload = response.get("payload")
            if not isinstance(payload, dict):
                raise GatewayConnectionError(f"the gateway answered {method} without a payload")
            return payload
        code, message = _error_fields(response)
        raise GatewayRequestError(code, message, request_id=request_id, method=method)

    async def cancel(self, request_id: RequestId) -> None:
        """Ask the gateway to abort an in-flight request (it then answers UNAVAILABLE)."""
        await self._send({"type": "cancel", "id": request_id})

    async def send_raw(self, message: str | bytes) -> None:
        """Send one frame as is (for protocol tests); answers to it are not awaited."""
        try:
            await self._ws.send_message(message)
        except ConnectionClosed as exc:
            raise self._connection_closed(exc) from None

    async def _send(self, frame: Mapping[str, Any]) -> None:
        await self.send_raw(encode(frame))

    def _connection_closed(self, exc: ConnectionClosed) -> GatewayConnectionError:
        if self._closed is None:
            reason = exc.reason
            detail = f" ({reason.code} {reason.reason or reason.name})" if reason else ""
            self._closed = GatewayConnectionError(f"the gateway connection closed{detail}")
        return self._closed

    def _fail_pending(self, failure: GatewayConnectionError) -> None:
        if self._closed is None:
            self._closed = failure
        for slot in self._pending.values():
            if not slot.done.is_set():
                slot.failure = failure
                slot.done.set()

    async def _read_loop(self) -> None:
        while True:
            try:
                message = await self._ws.get_message()
            except ConnectionClosed as exc:
                self._fail_pending(self._connection_closed(exc))
                return
            frame = _parse_response(message)
            if frame is None:
                logger.warning("ignoring a frame from the gateway that is not a response")
                continue
            request_id = frame.get("id")
            waiting = self._pending.get(request_id) if isinstance(request_id, str | int) else None
            if waiting is None or waiting.done.is_set():
                logger.debug("ignoring a response for unknown request %r", request_id)
                continue
            waiting.response = frame
            waiting.done.set()


def _parse_response(message: str | bytes) -> dict[str, Any] | None:
    try:
        frame = json.loads(message)
    except (ValueError, RecursionError):
        return None
    if not isinstance(frame, dict) or frame.get("type") != "res":
        return None
    return frame


def _error_fields(frame: Mapping[str, Any]) -> tuple[str, str]:
    error = frame.get("error")
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
        if isinstance(code, str) and isinstance(message, str):
            return code, message
    raise GatewayConnectionError("the gateway sent an error response without code and message")


async def _connect(ws: WebSocketConnection, token: str, scopes: Iterable[str]) -> GatewayClient:
    scope_list = [scopes] if isinstance(scopes, str) else list(scopes)
    frame = {
        "type": "req",
        "id": "connect",
        "method": "connect",
        "params": {"auth": {"token": token}, "scopes": scope_list},
    }
    try:
        await ws.send_message(encode(frame))
        message = await ws.get_message()
    except ConnectionClosed as exc:
        raise GatewayConnectionError(
            f"the gateway closed the connection during connect ({exc.reason})"
        ) from None
    response = _parse_response(message)
    if response is None:
        raise GatewayConnectionError("the gateway did not answer the connect request")
    if response.get("ok") is not True:
        code, text = _error_fields(response)
        raise GatewayRequestError(code, text, request_id="connect", method="connect")
    hello = response.get("payload")
    if not isinstance(hello, dict) or hello.get("type") != "hello-ok":
        raise GatewayConnectionError("the gateway answered connect without a hello-ok payload")
    return GatewayClient._create(ws, hello)


@asynccontextmanager
async def _session(
    ws: WebSocketConnection, token: str, scopes: Iterable[str]
) -> AsyncIterator[GatewayClient]:
    client = await _connect(ws, token, scopes)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client._read_loop)
            try:
                yield client
            finally:
                nursery.cancel_scope.cancel()
                client._fail_pending(GatewayConnectionError("the gateway client was closed"))
    except BaseExceptionGroup as group:
        # The reader never raises, so a lone exception is the caller's own.
        if len(group.exceptions) == 1:
            _raise_single(group)
        raise


def _split_url(url: str) -> tuple[str, int, str, bool]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ValueError(f"a gateway URL looks like ws://HOST:PORT, got {url!r}")
    secure = parts.scheme == "wss"
    port = parts.port or (443 if secure else 80)
    resource = parts.path or "/"
    if parts.query:
        resource += "?" + parts.query
    return parts.hostname, port, resource, secure


@asynccontextmanager
async def open_websocket_stream(
    url: str,
    *,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    message_queue_size: int = 16,
    connect_timeout: float = 10.0,
    disconnect_timeout: float = 10.0,
) -> AsyncIterator[WebSocketConnection]:
    """A client WebSocket whose TCP stream this function owns and always closes.

    trio-websocket's own client leaves its socket open when the server closes first
    (its ``aclose`` returns early once a close reason is recorded), so the stream is
    opened here and closed here.
    """
    host, port, resource, secure = _split_url(url)
    try:
        with trio.fail_after(connect_timeout):
            stream: trio.abc.Stream = (
                await trio.open_ssl_over_tcp_stream(host, port)
                if secure
                else await trio.open_tcp_stream(host, port)
            )
    except (OSError, trio.TooSlowError) as exc:
        raise GatewayConnectionError(f"could not connect to the gateway at {url}: {exc}") from None
    try:
        async with trio.open_nursery() as nursery:
            try:
                with trio.fail_after(connect_timeout):
                    # trio-websocket annotates a socket stream; it only uses Stream methods.
                    ws = await trio_websocket.wrap_client_stream(
                        nursery,
                        cast(Any, stream),
                        host if port in (80, 443) else f"{host}:{port}",
                        resource,
                        message_queue_size=message_queue_size,
                        max_message_size=max_message_bytes,
                    )
            except (trio.TooSlowError, trio_websocket.HandshakeError, OSError) as exc:
                raise GatewayConnectionError(
                    f"the WebSocket handshake with {url} failed: {exc!r}"
                ) from None
            try:
                yield ws
            finally:
                with trio.move_on_after(disconnect_timeout) as cleanup:
                    cleanup.shield = True
                    await ws.aclose()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            _raise_single(group)
        raise
    finally:
        await trio.aclose_forcefully(stream)


@asynccontextmanager
async def open_gateway_client(
    url: str,
    token: str,
    *,
    scopes: Iterable[str] = (READ_SCOPE,),
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    connect_timeout: float = 10.0,
    disconnect_timeout: float = 10.0,
) -> AsyncIterator[GatewayClient]:
    """Connect to the gateway at ``url`` (``ws://host:port``) and authenticate.

    Requests ``scopes`` (``operator.read`` by default); the granted ones are in
    :attr:`GatewayClient.scopes`. Raises :class:`GatewayRequestError` (``UNAUTHORIZED``)
    for a refused token and :class:`GatewayConnectionError` when the gateway cannot be
    reached. Leaving the block closes the connection.
    """
    async with (
        open_websocket_stream(
            url,
            max_message_bytes=max_message_bytes,
            connect_timeout=connect_timeout,
            disconnect_timeout=disconnect_timeout,
        ) as ws,
        _session(ws, token, scopes) as client,
    ):
        yield client


@asynccontextmanager
async def open_in_memory_gateway_client(
    gateway: Gateway,
    token: str,
    *,
    scopes: Iterable[str] = (READ_SCOPE,),
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> AsyncIterator[GatewayClient]:
    """A client of ``gateway`` over an in-memory stream pair: the real protocol, no socket.

    The gateway serves this one connection in a task of its own; leaving the block
    closes the connection and waits until the gateway has finished with it (so its
    capabilities are revoked when this returns).
    """
    client_stream, server_stream = trio.testing.memory_stream_pair()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gateway.serve_stream, server_stream)
            # trio-websocket annotates a socket stream but only uses the Stream interface.
            ws = await trio_websocket.wrap_client_stream(
                nursery,
                cast(Any, client_stream),
                "claw-gateway",
                "/",
                max_message_size=max(max_message_bytes, transport_limit(1)),
            )
            try:
                async with _session(ws, token, scopes) as client:
                    yield client
            finally:
                with trio.move_on_after(gateway.close_timeout) as cleanup:
                    cleanup.shield = True
                    await ws.aclose()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            _raise_single(group)
        raise
