"""The MCP server of one host: tools over the provider-neutral memory runtime.

:class:`MemoryMcpServer` builds the official SDK's low-level ``Server`` (it runs on
anyio, hence on Trio, inside claw's own event loop) and answers ``tools/list`` and
``tools/call``. Each call opens a host scope, mints an operator authority and a caller
context in it, runs the tool through ``host.memory.open(...)`` (via the gateway's
memory methods) and closes the scope, which revokes what it minted.

Authority. The server mints every capability itself, from its own configuration:
the agent is fixed when the server is built (``agent_id``), and the scopes come from
the transport: over stdio, the scopes the server was configured with (the local user
who started ``claw mcp`` is the workspace's operator, as with ``claw memory``); over
HTTP, the scopes the presented bearer token allows in the gateway's token table,
never more than the server's. Nothing in a tool's arguments names an identity, an
owner flag or an audience.

Errors. A tool's failure is a tool result with ``isError: true`` whose text starts
with the gateway's error code (``INVALID_REQUEST: maxResults must be a positive
integer``), as the MCP specification asks for argument and execution errors; an
unknown tool is a JSON-RPC ``INVALID_PARAMS`` error. Unexpected exceptions are logged
(to stderr; stdout is the stdio transport) and answered with ``INTERNAL`` text that
names no internals.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import mcp_types as types
import trio
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from .. import __version__
from .._config import McpConfig
from .._errors import ClawError
from .._util import final
from ..gateway._auth import READ_SCOPE, TokenTable
from ..gateway._errors import GatewayError
from ..gateway._memory import translate_error
from ._http import serve_http
from ._tools import READ_TOOLS, WRITE_SCOPE, WRITE_TOOLS, ToolSpec, check_arguments

if TYPE_CHECKING:
    from mcp.server import ServerRequestContext

    from .._host import Host

logger = logging.getLogger("claw.mcp")

SERVER_NAME = "claw-memory"
Granted = Callable[["ServerRequestContext[Any, Any]"], frozenset[str]]
"""How a transport says which scopes the current request's client holds."""


def _error_result(code: str, message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {message}")], is_error=True
    )


def _ok_result(payload: Mapping[str, Any]) -> types.CallToolResult:
    text = json.dumps(payload, ensure_ascii=False, sort_keys=True)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=dict(payload)
    )


def _check_agent(instance: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"agent_id must be a non-empty string or None, got {value!r}")


@final
@attrs.define(eq=False)
class MemoryMcpServer:
    """Serves ``host``'s memory to MCP clients (see the module docstring).

    ``agent_id`` is the one agent served (default: the host's ``default_agent_id``);
    ``allow_writes`` adds the write tools (``memory_add``, ``memory_forget``) and lets
    the server grant the write scope.
    """

    host: Host
    agent_id: str | None = attrs.field(default=None, validator=_check_agent)
    allow_writes: bool = False
    _tools: dict[str, ToolSpec] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        tools = READ_TOOLS + (WRITE_TOOLS if self.allow_writes else ())
        self._tools = {spec.name: spec for spec in tools}

    @property
    def agent(self) -> str:
        """The agent whose memory this server serves."""
        return self.agent_id if self.agent_id is not None else self.host.config.default_agent_id

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The tools this server lists, in listing order."""
        return tuple(self._tools)

    @property
    def scopes(self) -> frozenset[str]:
        """The most this server grants any client: read, plus write when allowed."""
        return frozenset({READ_SCOPE, WRITE_SCOPE} if self.allow_writes else {READ_SCOPE})

    def grant(self, allowed: Iterable[str]) -> frozenset[str]:
        """The scopes a client allowed ``allowed`` gets here (never more than :attr:`scopes`)."""
        return self.scopes & frozenset(allowed)

    # -- the SDK server ----------------------------------------------------------

    def sdk_server(self, granted: Granted, *, transport: str) -> Server[Any]:
        """A low-level SDK ``Server`` whose calls hold the scopes ``granted`` returns."""

        async def list_tools(
            ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            # Only what this client may call: a read-only token sees no write tool.
            held = granted(ctx)
            return types.ListToolsResult(
                tools=[_sdk_tool(s) for s in self._tools.values() if s.scope in held]
            )

        async def call_tool(
            ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
        ) -> types.CallToolResult:
            return await self._call_tool(params, granted(ctx), transport)

        return Server(
            SERVER_NAME,
            version=__version__,
            title="claw memory",
            instructions=(
                f"Memory of agent {self.agent!r}: memory_search finds what was noted or said "
                "before; memory_get reads the text behind a hit's reference; memory_status "
                "reports the provider's health."
                + (
                    " memory_add remembers something new; memory_forget takes back what a "
                    "reference names."
                    if self.allow_writes
                    else ""
                )
            ),
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )

    async def _call_tool(
        self, params: types.CallToolRequestParams, granted: frozenset[str], transport: str
    ) -> types.CallToolResult:
        spec = self._tools.get(params.name)
        if spec is None:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"unknown tool {params.name!r} (this server offers: "
                f"{', '.join(self._tools)})",
            )
        arguments = dict(params.arguments or {})
        try:
            check_arguments(spec, arguments)
            _require_scope(spec, granted)
            payload = await self._run(spec, arguments, granted, transport)
        except Exception as exc:
            translated = _error_for(exc)
            if isinstance(translated, GatewayError):
                return _error_result(translated.code, translated.message)
            logger.exception("MCP tool %s failed", spec.name)
            return _error_result("INTERNAL", f"internal error in {spec.name}; see the server log")
        return _ok_result(payload)

    async def _run(
        self, spec: ToolSpec, arguments: dict[str, Any], granted: frozenset[str], transport: str
    ) -> dict[str, Any]:
        async with self.host.open_scope(f"mcp-{transport}-request") as scope:
            authority = scope.mint_operator_authority(granted, connection_id=f"mcp-{transport}")
            caller = scope.mint_caller_context(authority)
            return await spec.run(self.host.memory, caller, arguments, self.agent)

    # -- transports --------------------------------------------------------------

    async def serve_stdio(self) -> None:
        """Serve one client on this process's stdin/stdout until stdin closes.

        The client holds :attr:`scopes`: it is whoever started the process, the
        workspace's local operator.
        """
        scopes = self.scopes
        server = self.sdk_server(lambda ctx: scopes, transport="stdio")
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    async def serve_http(
        self,
        bind_host: str,
        port: int,
        *,
        tokens: TokenTable,
        config: McpConfig | None = None,
        task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve streamable HTTP on ``bind_host``:``port`` until cancelled.

        For ``url = await nursery.start(server.serve_http, host, port, tokens=...)``; a
        client holds the scopes its bearer token allows in ``tokens`` (see ``_http``).
        ``config`` (sessions, Host and Origin) defaults to the host's ``[mcp]`` section.
        """
        await serve_http(
            self,
            bind_host,
            port,
            tokens=tokens,
            max_body_bytes=self.host.config.gateway.max_message_bytes,
            config=config if config is not None else self.host.config.mcp,
            task_status=task_status,
        )


def _error_for(exc: Exception) -> BaseException:
    """The gateway's mapping, and a provider's refusal of a path it may not touch.

    A claw error that is a :class:`PermissionError` (Memory Core's ``SourcePathError``
    for a write target outside its memory files) is the caller's mistake: it is
    answered ``FORBIDDEN`` with its message (which names only what the caller sent),
    not ``INTERNAL``.
    """
    translated = translate_error(exc)
    if translated is exc and isinstance(exc, ClawError) and isinstance(exc, PermissionError):
        return GatewayError("FORBIDDEN", str(exc))
    return translated


def _require_scope(spec: ToolSpec, granted: frozenset[str]) -> None:
    if spec.scope not in granted:
        raise GatewayError(
            "FORBIDDEN",
            f"{spec.name} needs the {spec.scope} scope, which this client was not granted",
        )


def _sdk_tool(spec: ToolSpec) -> types.Tool:
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=dict(spec.input_schema),
        output_schema=dict(spec.output_schema),
        annotations=types.ToolAnnotations(
            title=spec.title,
            read_only_hint=spec.read_only,
            destructive_hint=None if spec.read_only else spec.destructive,
            idempotent_hint=spec.read_only,
            open_world_hint=False,
        ),
    )
