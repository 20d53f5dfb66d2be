"""Streamable HTTP: the SDK's session manager behind claw's checks, served by hypercorn on Trio.

Every request passes three checks, outermost first:

1. **Host and Origin, exactly** (:class:`HostOriginGuard`), on every bind address. The
   ``Host`` header must name the server: the address the request arrived on with the
   listening port (``127.0.0.2:8765``, ``[::1]:8765``; ``localhost:8765`` too on a
   loopback address), or one of ``[mcp] allowed_hosts``; an ``Origin`` header, when
   present, must be ``http://`` plus one of those default names or one of
   ``[mcp] allowed_origins``. Comparison is of whole values (case-insensitive), never a
   prefix: ``http://127.0.0.1:8765.evil.example`` is not ``http://127.0.0.1:8765``. A
   DNS-rebinding page sends its own name as ``Host``, which none of these is. The
   SDK's own check (on only for three loopback bind names, and a prefix match) is
   turned off in favour of this one.
2. **The bearer token**, exactly as the gateway checks its ``connect`` token: the
   gateway's :class:`~claw.gateway._auth.TokenTable` compares it with every configured
   token in constant time. A request without a valid token is answered ``401`` by the
   SDK's ``RequireAuthMiddleware`` before any MCP message is read. A valid token's
   scopes, intersected with the server's, are the scopes every tool call on that
   request holds; the SDK binds an HTTP session to the token that opened it, so another
   token cannot continue someone else's session.
3. **Sessions per token** (:class:`TokenBoundSessionManager`): a token holding
   ``[mcp] max_sessions_per_token`` open sessions is answered ``429`` when it asks for
   another, naming the bound, while every other token still opens sessions; all tokens
   together stay within ``[mcp] max_sessions`` (``503`` beyond it). A session with no
   request in flight for ``[mcp] session_idle_timeout`` seconds is closed.

hypercorn's Trio worker serves the app in claw's own event loop (uvicorn would need
asyncio). Request bodies are capped at the gateway's ``max_message_bytes``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware, get_access_token
from mcp.server.auth.middleware.bearer_auth import (
    AuthorizationContext,
    BearerAuthBackend,
    RequireAuthMiddleware,
)
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import INVALID_REQUEST, ErrorData, JSONRPCError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Route

from .._config import McpConfig
from .._errors import ClawError
from ..gateway._auth import TokenTable

if TYPE_CHECKING:
    from mcp.server import Server, ServerRequestContext
    from mcp.server.streamable_http import StreamableHTTPServerTransport


class HttpServable(Protocol):
    """What the HTTP transport needs of the server it serves (``MemoryMcpServer``)."""

    @property
    def scopes(self) -> frozenset[str]: ...

    def sdk_server(
        self,
        granted: Callable[[ServerRequestContext[Any, Any]], frozenset[str]],
        *,
        transport: str,
    ) -> Server[Any]: ...

MCP_PATH = "/mcp"

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_App = Callable[[_Scope, _Receive, _Send], Awaitable[None]]

# The one SDK method the per-token bound overrides; checked at import so that an SDK
# release that renamed it fails loudly here rather than lose the bound silently.
if not hasattr(StreamableHTTPSessionManager, "_admit_session"):  # pragma: no cover
    raise ImportError(
        "this mcp release has no StreamableHTTPSessionManager._admit_session; claw's "
        "per-token session bound needs it (install mcp>=2.3,<3)"
    )


class ListenError(ClawError, OSError):
    """The HTTP server could not listen on the address it was given (names it)."""


def _listen(bind_host: str, port: int) -> int:
    """Bind and listen; the socket's file descriptor, for hypercorn's ``fd://`` bind.

    claw binds the socket itself so that a failure names the address, and so that a
    failed bind leaves no socket behind (hypercorn's own bind leaks one when it fails).
    """
    shown = f"[{bind_host}]" if ":" in bind_host else bind_host
    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    try:
        sock = socket.create_server((bind_host, port), family=family)
    except OSError as exc:
        raise ListenError(f"cannot listen on {shown}:{port}: {exc.strerror or exc}") from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock.detach()


@attrs.frozen
class TokenVerifier:
    """The SDK's ``TokenVerifier`` over the gateway's token table.

    The access token's ``client_id`` is a digest of the token, not the token: it only
    tells sessions of different tokens apart.
    """

    tokens: TokenTable
    server_scopes: frozenset[str]

    async def verify_token(self, token: str) -> AccessToken | None:
        await trio.lowlevel.checkpoint()
        allowed = self.tokens.allowed_scopes(token)
        if allowed is None:
            return None
        digest = hashlib.sha256(token.encode("utf-8", errors="surrogatepass")).hexdigest()
        return AccessToken(
            token=token,
            client_id=f"token-{digest[:16]}",
            scopes=sorted(allowed & self.server_scopes),
        )


def _granted(ctx: ServerRequestContext[Any, Any]) -> frozenset[str]:
    access = get_access_token()
    return frozenset(access.scopes) if access is not None else frozenset()


# -- Host and Origin -------------------------------------------------------------------


def _authority(address: str, port: int) -> str:
    """``host:port`` as a Host header writes it (IPv6 in brackets)."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _lowered(values: Iterable[str]) -> frozenset[str]:
    return frozenset(v.lower() for v in values)


@attrs.frozen
class HostOriginGuard:
    """ASGI middleware: refuse a request whose ``Host`` or ``Origin`` is not the server's.

    The default names come from the address each request arrived on (the ASGI
    ``server`` of the connection), so a wildcard bind (``0.0.0.0``) answers to the
    address the client actually reached, and nothing else unless configured.
    """

    app: _App
    allowed_hosts: frozenset[str] = attrs.field(converter=_lowered)
    allowed_origins: frozenset[str] = attrs.field(converter=_lowered)

    def default_hosts(self, scope: _Scope) -> frozenset[str]:
        """The Host values a request on this connection may send without configuration."""
        server = scope.get("server")
        if not server or server[1] is None:
            return frozenset()
        address, port = str(server[0]), int(server[1])
        names = {_authority(address.lower(), port)}
        if _is_loopback(address):
            names.add(f"localhost:{port}")
        return frozenset(names)

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = origin = None
        hosts = 0
        for key, value in scope["headers"]:
            if key == b"host":
                host = value.decode("latin-1").lower()
                hosts += 1
            elif key == b"origin":
                origin = value.decode("latin-1").lower()
        defaults = self.default_hosts(scope)
        if hosts != 1 or host is None or (host not in defaults and host not in self.allowed_hosts):
            await _plain(
                send,
                421,
                "this server does not answer to that Host header; add the name clients use "
                "to [mcp] allowed_hosts",
            )
            return
        if origin is not None and not (
            origin in self.allowed_origins
            or (origin.startswith("http://") and origin[len("http://") :] in defaults)
        ):
            await _plain(
                send,
                403,
                "requests from that Origin are refused; add it to [mcp] allowed_origins if "
                "it is yours",
            )
            return
        await self.app(scope, receive, send)


async def _plain(send: _Send, status: int, text: str) -> None:
    await _respond(send, status, b"text/plain; charset=utf-8", text.encode("utf-8"))


async def _respond(send: _Send, status: int, content_type: bytes, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode("ascii")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# -- sessions per token ----------------------------------------------------------------


class TokenSessionLimitError(ClawError, RuntimeError):
    """A token asked for another HTTP session while holding its bound of open ones."""

    def __init__(self, held: int, idle_timeout: float | None) -> None:
        expiry = f" or let one expire ({idle_timeout:g} s idle)" if idle_timeout else ""
        super().__init__(
            f"this token already holds {held} open MCP sessions, the most one token may "
            f"([mcp] max_sessions_per_token); end one (HTTP DELETE with its Mcp-Session-Id)"
            f"{expiry}"
        )


class TokenBoundSessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager, with a bound on the sessions each token holds.

    The SDK decides admission in ``_admit_session``, under its creation lock, with the
    credential (one per token here) that every later request of the session must
    present; the per-token count is taken there too, so two concurrent requests of one
    token cannot both take the last place.
    """

    def __init__(self, app: Any, *, max_sessions_per_token: int, **options: Any) -> None:
        super().__init__(app, **options)
        self.max_sessions_per_token = max_sessions_per_token

    def sessions_held(self, requestor: AuthorizationContext | None) -> int:
        """How many open sessions ``requestor``'s credential holds."""
        return sum(1 for owner in self._session_owners.values() if owner == requestor)

    def _admit_session(
        self, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        if requestor is not None:
            held = self.sessions_held(requestor)
            if held >= self.max_sessions_per_token:
                raise TokenSessionLimitError(held, self.session_idle_timeout)
        return super()._admit_session(requestor)


@attrs.frozen
class _AnswerTokenLimit:
    """Answers a :class:`TokenSessionLimitError` with ``429`` and a JSON-RPC error body."""

    app: _App

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        try:
            await self.app(scope, receive, send)
        except TokenSessionLimitError as exc:
            await _json_rpc_error(send, 429, str(exc))


async def _json_rpc_error(send: _Send, status: int, message: str) -> None:
    body = JSONRPCError(
        jsonrpc="2.0", id=None, error=ErrorData(code=INVALID_REQUEST, message=message)
    ).model_dump_json(by_alias=True, exclude_unset=True)
    await _respond(send, status, b"application/json", body.encode("utf-8"))


def build_app(
    server: HttpServable,
    *,
    tokens: TokenTable,
    max_body_bytes: int,
    config: McpConfig,
) -> Any:
    """The ASGI app: Host/Origin, then the bearer check, then the bounded sessions."""
    verifier = TokenVerifier(tokens=tokens, server_scopes=server.scopes)
    sdk = server.sdk_server(_granted, transport="http")
    manager = TokenBoundSessionManager(
        sdk,
        # HostOriginGuard checks Host and Origin exactly; the SDK's check stays off.
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=max_body_bytes,
        max_sessions=config.max_sessions,
        max_sessions_per_token=min(config.max_sessions_per_token, config.max_sessions),
        session_idle_timeout=config.session_idle_timeout,
    )
    endpoint = RequireAuthMiddleware(_AnswerTokenLimit(StreamableHTTPASGIApp(manager)), [])
    app = Starlette(
        routes=[Route(MCP_PATH, endpoint=endpoint)],
        middleware=[
            # Authentication runs, then the access token is put in the context the tool
            # handlers read (get_access_token).
            Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(verifier)),
            Middleware(AuthContextMiddleware),
        ],
        lifespan=lambda app: manager.run(),
    )
    return HostOriginGuard(
        app, allowed_hosts=config.allowed_hosts, allowed_origins=config.allowed_origins
    )


async def serve_http(
    server: HttpServable,
    bind_host: str,
    port: int,
    *,
    tokens: TokenTable,
    max_body_bytes: int,
    config: McpConfig,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``server`` over streamable HTTP until cancelled; reports the endpoint URL.

    Port 0 binds a free port; the URL given to ``task_status`` names the one bound.
    ``config`` is the ``[mcp]`` section (sessions, Host and Origin).
    """
    app = build_app(server, tokens=tokens, max_body_bytes=max_body_bytes, config=config)
    hypercorn = HypercornConfig()
    hypercorn.bind = [f"fd://{_listen(bind_host, port)}"]
    hypercorn.accesslog = None
    hypercorn.graceful_timeout = 2.0
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(serve, app, hypercorn)
        task_status.started(binds[0].rstrip("/") + MCP_PATH)
