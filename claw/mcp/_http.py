"""Streamable HTTP: the SDK's ASGI app behind a bearer token, served by hypercorn on Trio.

The bearer token is checked exactly as the gateway checks its ``connect`` token: the
gateway's :class:`~claw.gateway._auth.TokenTable` (from the ``[gateway]`` tokens)
compares it with every configured token in constant time. A request without a valid
token is answered ``401`` by the SDK's ``RequireAuthMiddleware`` before any MCP
message is read. A valid token's scopes, intersected with the server's, are the
scopes every tool call on that request holds; the SDK binds an HTTP session to the
token that opened it, so another token cannot continue someone else's session.

hypercorn's Trio worker serves the app in claw's own event loop (uvicorn would need
asyncio). Request bodies are capped at the gateway's ``max_message_bytes``, and the
number of open sessions at :data:`MAX_SESSIONS`.
"""

from __future__ import annotations

import hashlib
import socket
from typing import TYPE_CHECKING, Any

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware, get_access_token
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
from mcp.server.auth.provider import AccessToken
from starlette.middleware.authentication import AuthenticationMiddleware

from .._errors import ClawError
from ..gateway._auth import TokenTable

if TYPE_CHECKING:
    from mcp.server import ServerRequestContext

    from ._server import MemoryMcpServer

MCP_PATH = "/mcp"
MAX_SESSIONS = 256
SESSION_IDLE_TIMEOUT = 30 * 60.0


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


def build_app(
    server: MemoryMcpServer, *, bind_host: str, tokens: TokenTable, max_body_bytes: int
) -> Any:
    """The ASGI app: the SDK's streamable-HTTP app with claw's bearer check in front."""
    verifier = TokenVerifier(tokens=tokens, server_scopes=server.scopes)
    sdk = server.sdk_server(_granted, transport="http")
    app = sdk.streamable_http_app(
        streamable_http_path=MCP_PATH,
        host=bind_host,
        token_verifier=verifier,
        max_request_body_size=max_body_bytes,
        max_sessions=MAX_SESSIONS,
        session_idle_timeout=SESSION_IDLE_TIMEOUT,
    )
    # Inserted outermost-first: authentication runs, then the access token is put in
    # the context the tool handlers read (get_access_token).
    app.add_middleware(AuthContextMiddleware)
    app.add_middleware(AuthenticationMiddleware, backend=BearerAuthBackend(verifier))
    return app


async def serve_http(
    server: MemoryMcpServer,
    bind_host: str,
    port: int,
    *,
    tokens: TokenTable,
    max_body_bytes: int | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``server`` over streamable HTTP until cancelled; reports the endpoint URL.

    Port 0 binds a free port; the URL given to ``task_status`` names the one bound.
    """
    limit = max_body_bytes or server.host.config.gateway.max_message_bytes
    app = build_app(server, bind_host=bind_host, tokens=tokens, max_body_bytes=limit)
    config = HypercornConfig()
    config.bind = [f"fd://{_listen(bind_host, port)}"]
    config.accesslog = None
    config.graceful_timeout = 2.0
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(serve, app, config)
        task_status.started(binds[0].rstrip("/") + MCP_PATH)
