"""Strings Python cannot encode, NaN, NUL and deep JSON, at every entry point.

A lone surrogate (``"\\ud800"``) is a valid JSON escape and a valid Python ``str``, but
not Unicode: whatever encodes it (SQLite, PostgreSQL, a socket, a log) raises. Each
value below is sent the way a hostile client or model would send it, through the
gateway (a real socket), the MCP server (the SDK's client) and agent tools (a turn whose
scripted model calls the tool), and every one must be answered as invalid input naming
the field, before provider code runs: never INTERNAL, never a dropped connection, never
a failed turn, never a host path or a database address.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio_websocket

import claw
import claw_memory
from claw._input import InvalidInputError
from claw.gateway import Gateway, GatewayAddress
from claw.gateway._client import open_websocket_stream
from claw.models import ToolResult, UserMessage
from claw_testing import ScriptedModel, ScriptedReply

# Memory Records' host fixture (a host on the test PostgreSQL), for the records cases.
from ...claw_records.conftest import OpenRecordsHost, open_records_host  # noqa: F401
from ..mcp.conftest import in_process_client, text_of

S = "\ud800"
TOKEN = "hostile-strings-token-0"


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


GATEWAY_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("memory.status", {"agentId": S}, "params.agentId"),
    ("memory.search", {"version": 2, "query": "deploy", "agentId": S}, "params.agentId"),
    ("memory.search", {"version": 2, "query": "deploy " + S}, "params.query"),
    ("memory.search", {"version": 1, "query": S + "deploy"}, "params.query"),
    ("memory.search", {"version": 2, "query": "deploy", "cursor": S}, "params.cursor"),
    ("memory.search", {"version": 2, "query": "deploy", "sources": [S]}, "params.sources[0]"),
    ("memory.get", {"reference": {"providerId": "memory-core", "id": S}}, "params.reference.id"),
    (
        "memory.get",
        {"reference": {"providerId": S, "id": "MEMORY.md"}},
        "params.reference.providerId",
    ),
    (
        "memory.get",
        {"reference": {"providerId": "memory-core", "id": "MEMORY.md", "revision": S}},
        "params.reference.revision",
    ),
    (
        "memory.get",
        {"reference": {"providerId": "memory-core", "id": "MEMORY.md", "fragment": S}},
        "params.reference.fragment",
    ),
    ("memory.search", {"version": 2, "query": "deploy", S: 1}, "params['\\ud800'] (a key)"),
    ("memory.search", {"version": 2, "query": "deploy\x00"}, "params.query"),
    ("memory.search", {"version": 2, "query": "deploy", "x": _deep(40)}, "params.x"),
]


def _config(tmp_path: Path) -> claw.HostConfig:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "MEMORY.md").write_text("- The deploy window is Friday.\n", encoding="utf-8")
    return claw.HostConfig(
        workspace_dir=workspace,
        state_dir=tmp_path / "state",
        plugins=claw.PluginsConfig(discover=False, slots=claw.SlotsConfig(memory="memory-core")),
        workers=claw.WorkersConfig(inline=True),
        gateway=claw.GatewayConfig(tokens={TOKEN: ("operator.read", "operator.write")}),
        agents=claw.AgentsConfig(defaults=claw.AgentDefaultsConfig(model="scripted/main")),
    )


@pytest.fixture
async def core_host(tmp_path: Path) -> AsyncIterator[claw.Host]:
    async with claw.open_host(_config(tmp_path), plugins=[claw_memory.plugin]) as host:
        yield host


async def _ask(address: GatewayAddress, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One request on a fresh connection; the frame's JSON escapes the surrogate."""
    async with open_websocket_stream(address.url) as ws:
        connect = {"auth": {"token": TOKEN}, "scopes": ["operator.read"]}
        await ws.send_message(
            json.dumps({"type": "req", "id": "c", "method": "connect", "params": connect})
        )
        await ws.get_message()
        await ws.send_message(
            json.dumps({"type": "req", "id": "1", "method": method, "params": params})
        )
        try:
            with trio.fail_after(30):
                answer: dict[str, Any] = json.loads(await ws.get_message())
        except trio_websocket.ConnectionClosed:
            return {"dropped": True}
        # The connection goes on.
        await ws.send_message(json.dumps({"type": "req", "id": "2", "method": "memory.status"}))
        with trio.fail_after(30):
            follow_up = json.loads(await ws.get_message())
        answer["connection_survived"] = follow_up["ok"]
        return answer


async def test_every_gateway_field_refuses_text_that_is_not_text(
    core_host: claw.Host, nursery: trio.Nursery
) -> None:
    address: GatewayAddress = await nursery.start(Gateway(core_host).serve)
    outcomes: dict[str, int] = {}
    wrong: list[str] = []
    for method, params, field in GATEWAY_CASES:
        answer = await _ask(address, method, params)
        kind = "dropped" if answer.get("dropped") else (
            "ok" if answer["ok"] else answer["error"]["code"]
        )
        outcomes[kind] = outcomes.get(kind, 0) + 1
        if kind != "INVALID_REQUEST" or not answer["error"]["message"].startswith(field):
            wrong.append(f"{method} {field}: {answer}")
        elif not answer["connection_survived"]:
            wrong.append(f"{method} {field}: the connection did not go on")
    print(f"\ngateway: {len(GATEWAY_CASES)} hostile strings: {outcomes}")
    assert wrong == [], "\n".join(wrong)


MCP_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("memory_search", {"query": "deploy " + S}, "arguments.query"),
    ("memory_search", {"query": "deploy", "cursor": S}, "arguments.cursor"),
    ("memory_get", {"reference": {"providerId": "memory-core", "id": S}}, "arguments.reference.id"),
    ("memory_add", {"text": "tea " + S}, "arguments.text"),
    ("memory_add", {"text": "tea\x00"}, "arguments.text"),
    ("memory_search", {"query": "deploy", "sources": [S]}, "arguments.sources[0]"),
]


async def test_every_mcp_tool_argument_refuses_text_that_is_not_text(
    core_host: claw.Host,
) -> None:
    wrong: list[str] = []
    async with in_process_client(core_host, allow_writes=True) as client:
        for tool, arguments, field in MCP_CASES:
            result = await client.call_tool(tool, arguments)
            said = text_of(result)
            if not (result.is_error and said.startswith(f"INVALID_REQUEST: {field}:")):
                wrong.append(f"{tool} {field}: {said[:200]}")
        # The server goes on.
        assert not (await client.call_tool("memory_status", {})).is_error
    print(f"\nmcp: {len(MCP_CASES)} hostile arguments, {len(wrong)} not refused as invalid")
    assert wrong == [], "\n".join(wrong)


TOOL_CASES: dict[str, tuple[str, dict[str, Any], str]] = {
    "search, surrogate": ("memory_search", {"query": S}, "arguments.query"),
    "get, surrogate": ("memory_get", {"path": "MEMORY" + S}, "arguments.path"),
    "add, surrogate": ("memory_add", {"text": "tea " + S}, "arguments.text"),
    "add, NUL": ("memory_add", {"text": "tea\x00"}, "arguments.text"),
    "add, NaN": ("memory_add", {"text": "tea", "n": math.nan}, "arguments.n"),
    "add, 900 deep": ("memory_add", {"text": "tea", "m": _deep(900)}, "arguments.m"),
}


async def _turn_with_tool_call(
    host: claw.Host, model: ScriptedModel, key: str
) -> tuple[str | None, list[ToolResult]]:
    """Run a turn; ``(failure, the tool results the model saw)``."""
    try:
        await host.run_turn(key, UserMessage("go on", sender="alice"), sender_is_owner=True)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}", []
    seen = [m for m in model.calls[-1].messages if isinstance(m, ToolResult)]
    return None, seen


@pytest.mark.parametrize("case", list(TOOL_CASES))
async def test_a_tool_call_with_hostile_arguments_is_a_tool_error_not_a_failed_turn(
    tmp_path: Path, case: str
) -> None:
    tool, arguments, field = TOOL_CASES[case]
    model = ScriptedModel([ScriptedReply(tool_calls=[(tool, arguments)]), "done"])
    async with claw.open_host(_config(tmp_path), plugins=[claw_memory.plugin]) as host:
        host.models.register_provider("scripted", lambda name: model)
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        failure, seen = await _turn_with_tool_call(host, model, "dm:alice")
        assert failure is None, failure
        [result] = seen
        assert result.is_error
        assert field in result.content and "not run" in result.content
        assert str(tmp_path) not in result.content
        # The transcript holds the turn, and the next turn runs.
        model.extend(["fine"])
        await host.run_turn("dm:alice", UserMessage("again", sender="alice"), sender_is_owner=True)


@pytest.mark.parametrize(
    ("text", "field"),
    [("tea " + S, "text: contains a lone surrogate"), ("tea\x00", "text: contains NUL")],
)
async def test_an_operator_add_of_text_that_is_not_text_is_invalid_input(
    core_host: claw.Host, text: str, field: str
) -> None:
    """Not a provider failure: the caller's text is refused before the provider runs."""
    async with core_host.open_scope("test") as scope:
        writer = scope.mint_caller_context(scope.mint_operator_authority({"operator.write"}))
        with pytest.raises(InvalidInputError, match=field):
            await core_host.memory.add(writer, text)
    memory_dir = core_host.config.workspace_dir / "memory"
    assert not memory_dir.exists() or not any(memory_dir.iterdir())


RECORDS_CASES: dict[str, tuple[str, dict[str, Any], str]] = {
    "text, surrogate": ("record_add", {"text": "tea " + S}, "arguments.text"),
    "metadata value, surrogate": (
        "record_add",
        {"text": "tea", "metadata": {"k": S}},
        "arguments.metadata.k",
    ),
    "metadata key, surrogate": (
        "record_add",
        {"text": "tea", "metadata": {S: 1}},
        "arguments.metadata['\\ud800'] (a key)",
    ),
    "search, surrogate": ("record_search", {"query": S}, "arguments.query"),
    "get, surrogate": ("record_get", {"ref": "rec_" + S}, "arguments.ref"),
    "metadata, NaN": ("record_add", {"text": "tea", "metadata": {"k": math.nan}}, "metadata.k"),
    "metadata, 900 deep": ("record_add", {"text": "tea", "metadata": _deep(900)}, "metadata.a"),
    "metadata, NUL": ("record_add", {"text": "tea", "metadata": {"k": "a\x00b"}}, "metadata.k"),
    "text, NUL": ("record_add", {"text": "tea\x00"}, "arguments.text"),
}


@pytest.mark.postgres
@pytest.mark.parametrize("case", list(RECORDS_CASES))
async def test_a_records_tool_call_with_hostile_arguments_never_reaches_postgresql(
    open_records_host: OpenRecordsHost,  # noqa: F811 - the fixture imported above
    case: str,
) -> None:
    """Memory Records' tools: the turn goes on, the model hears which field, and nothing
    reaches the database (whose errors would name its socket, port and database)."""
    tool, arguments, field = RECORDS_CASES[case]
    model = ScriptedModel([ScriptedReply(tool_calls=[(tool, arguments)]), "done"])
    async with open_records_host(model=model) as host:
        failure, seen = await _turn_with_tool_call(host, model, "dm:alice")
        assert failure is None, failure
        [result] = seen
        assert result.is_error and field in result.content and "not run" in result.content
        for leak in ("PGSQL", "postgres", "port", "dbname", "/tmp", "/run"):
            assert leak not in result.content


@pytest.mark.slow
@pytest.mark.postgres
async def test_a_records_tool_whose_database_is_gone_shows_the_model_no_address(
    open_records_host: OpenRecordsHost,  # noqa: F811 - the fixture imported above
    postgres_server: Any,
    postgres_dsn: str,
) -> None:
    """The database refuses connections mid-session: the tool fails, the turn goes on,
    and the model hears the failure's type, not the server's socket, port or name."""
    dbname = postgres_dsn.rsplit("dbname=", 1)[1]
    model = ScriptedModel([ScriptedReply(tool_calls=[("record_add", {"text": "tea"})]), "done"])
    async with open_records_host(model=model, plugin_config={"pool_timeout": 1.0}) as host:
        postgres_server.psql(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')
        postgres_server.psql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{dbname}' AND pid <> pg_backend_pid()"
        )
        try:
            failure, seen = await _turn_with_tool_call(host, model, "dm:alice")
        finally:
            postgres_server.psql(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
    assert failure is None, failure
    [result] = seen
    assert result.is_error, result.content
    assert "the host's log has the details" in result.content
    for leak in (dbname, str(postgres_server.socket_dir), str(postgres_server.port)):
        assert leak not in result.content
