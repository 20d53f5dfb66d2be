"""memory_add and memory_forget: offered only with --allow-writes, only to writers."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import mcp_types as types
import pytest
import trio
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import claw
from claw.gateway._auth import TokenTable
from claw.mcp import MemoryMcpServer

from .conftest import (
    READ_TOKEN,
    WRITE_TOKEN,
    claw_mcp_command,
    in_process_client,
    structured,
    subprocess_env,
    text_of,
)

NOTE = "The spare key is under the blue flowerpot."
T = TypeVar("T")


def _memory_files(workspace: Path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in sorted(workspace.rglob("*.md")))


async def test_without_allow_writes_no_write_tool_is_listed_or_callable(
    core_host: claw.Host,
) -> None:
    async with in_process_client(core_host) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        with pytest.raises(MCPError) as info:
            await client.call_tool("memory_add", {"text": NOTE})
    assert "memory_add" not in names and "memory_forget" not in names
    assert info.value.code == types.INVALID_PARAMS
    assert NOTE not in _memory_files(core_host.config.workspace_dir)


async def test_the_write_tools_are_annotated_as_writes(core_host: claw.Host) -> None:
    async with in_process_client(core_host, allow_writes=True) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert list(tools) == [
        "memory_search",
        "memory_get",
        "memory_status",
        "memory_add",
        "memory_forget",
    ]
    add, forget = tools["memory_add"].annotations, tools["memory_forget"].annotations
    assert add is not None and forget is not None
    assert add.read_only_hint is False and add.destructive_hint is False
    assert forget.read_only_hint is False and forget.destructive_hint is True
    assert tools["memory_add"].input_schema["required"] == ["text"]


async def test_an_added_memory_is_found_read_and_forgotten(core_host: claw.Host) -> None:
    async with in_process_client(core_host, allow_writes=True) as client:
        added = structured(await client.call_tool("memory_add", {"text": NOTE, "section": "House"}))
        assert (added["version"], added["agentId"], added["providerId"]) == (
            2,
            "main",
            "memory-core",
        )
        citation = added["citation"]
        assert citation["path"].startswith("memory/") and citation["source"] == "memory"
        assert added["timestamp"]
        search = structured(
            await client.call_tool("memory_search", {"query": "spare key blue flowerpot"})
        )
        assert NOTE in search["hits"][0]["excerpt"]
        got = structured(await client.call_tool("memory_get", {"reference": added["reference"]}))
        assert NOTE in got["text"]
        dry = structured(
            await client.call_tool(
                "memory_forget", {"reference": added["reference"], "dryRun": True}
            )
        )
        assert dry["dryRun"] is True
        assert NOTE in _memory_files(core_host.config.workspace_dir)
        forgot = structured(
            await client.call_tool("memory_forget", {"reference": added["reference"]})
        )
        assert forgot["dryRun"] is False
        assert NOTE in forgot["removedText"]
        assert NOTE not in _memory_files(core_host.config.workspace_dir)
        after = structured(
            await client.call_tool("memory_search", {"query": "spare key blue flowerpot"})
        )
        assert all(NOTE not in hit["excerpt"] for hit in after["hits"])


async def test_a_hit_covering_several_entries_is_refused_unless_the_range_is_asked_for(
    core_host: claw.Host,
) -> None:
    """Issue 24: an agent forgets exactly one entry unless told a range; whatever goes
    can be restored with the removal id the result carries."""
    before = _memory_files(core_host.config.workspace_dir)
    async with in_process_client(core_host, allow_writes=True) as client:
        search = structured(await client.call_tool("memory_search", {"query": "staging"}))
        hit = next(h["reference"] for h in search["hits"] if "fragment" in h["reference"])
        # A hit cites one entry; an agent citing several (the whole file) must say so.
        lines = (core_host.config.workspace_dir / hit["id"]).read_text().count("\n")
        reference = {"providerId": hit["providerId"], "id": hit["id"], "fragment": f"L1-L{lines}"}
        refused = await client.call_tool("memory_forget", {"reference": reference})
        assert refused.is_error and text_of(refused).startswith("INVALID_REQUEST: ")
        assert "entries" in text_of(refused) and "nothing was removed" in text_of(refused)
        assert _memory_files(core_host.config.workspace_dir) == before
        whole = structured(
            await client.call_tool("memory_forget", {"reference": reference, "wholeRange": True})
        )
        assert whole["entries"] > 1 and whole["removalId"]
    async with core_host.open_scope("op") as scope:
        ctx = scope.mint_caller_context(scope.mint_operator_authority({"operator.write"}))
        await core_host.memory.restore(ctx, whole["removalId"])
    assert _memory_files(core_host.config.workspace_dir) == before


async def test_a_client_without_the_write_scope_cannot_write(core_host: claw.Host) -> None:
    async with in_process_client(core_host, allow_writes=True, scopes={"operator.read"}) as c:
        result = await c.call_tool("memory_add", {"text": NOTE})
        forget = await c.call_tool(
            "memory_forget", {"reference": {"providerId": "memory-core", "id": "MEMORY.md"}}
        )
    for refused in (result, forget):
        assert refused.is_error
        assert text_of(refused).startswith("FORBIDDEN: ")
        assert "operator.write" in text_of(refused)
    assert NOTE not in _memory_files(core_host.config.workspace_dir)
    assert "staging database" in _memory_files(core_host.config.workspace_dir)


@pytest.mark.parametrize(
    ("tool", "arguments", "code", "needle"),
    [
        ("memory_add", {}, "INVALID_REQUEST", "text"),
        ("memory_add", {"text": " "}, "INVALID_REQUEST", "text"),
        ("memory_add", {"text": 42}, "INVALID_REQUEST", "text"),
        ("memory_add", {"text": "a\x00b"}, "INVALID_REQUEST", "text"),
        ("memory_add", {"text": "x" * 40_000}, "INVALID_REQUEST", "text"),
        ("memory_add", {"text": "x", "path": ""}, "INVALID_REQUEST", "path"),
        ("memory_add", {"text": "x", "path": 7}, "INVALID_REQUEST", "path"),
        ("memory_add", {"text": "x", "path": "notes.txt"}, "FORBIDDEN", "notes.txt"),
        ("memory_add", {"text": "x", "path": "../MEMORY.md"}, "FORBIDDEN", "../MEMORY.md"),
        ("memory_add", {"text": "x", "path": "/etc/motd.md"}, "FORBIDDEN", "/etc/motd.md"),
        ("memory_add", {"text": "x", "section": "a\nb"}, "INVALID_REQUEST", "section"),
        ("memory_add", {"text": "x", "owner": True}, "INVALID_REQUEST", "owner"),
        ("memory_add", {"text": "x", "audience": "owner"}, "INVALID_REQUEST", "audience"),
        ("memory_add", {"text": "x", "agentId": "main"}, "INVALID_REQUEST", "agentId"),
        ("memory_forget", {}, "INVALID_REQUEST", "reference"),
        ("memory_forget", {"reference": "MEMORY.md"}, "INVALID_REQUEST", "reference"),
        (
            "memory_forget",
            {"reference": {"providerId": "memory-core", "id": "MEMORY.md"}, "dryRun": "yes"},
            "INVALID_REQUEST",
            "dryRun",
        ),
        (
            "memory_forget",
            {"reference": {"providerId": "other", "id": "MEMORY.md"}},
            "INVALID_REQUEST",
            "other",
        ),
    ],
)
async def test_bad_write_arguments_are_refused_naming_them_and_write_nothing(
    core_host: claw.Host, tool: str, arguments: dict[str, Any], code: str, needle: str
) -> None:
    before = _memory_files(core_host.config.workspace_dir)
    async with in_process_client(core_host, allow_writes=True) as client:
        result = await client.call_tool(tool, arguments)
        assert result.is_error
        assert text_of(result).startswith(f"{code}: "), text_of(result)
        assert needle in text_of(result)
        assert not (await client.call_tool("memory_status", {})).is_error
    assert _memory_files(core_host.config.workspace_dir) == before


@pytest.mark.slow
async def test_claw_mcp_allow_writes_adds_over_stdio_and_the_next_search_sees_it(
    workspace: Path,
) -> None:
    command = claw_mcp_command(workspace, "--allow-writes")
    server = StdioServerParameters(command=command[0], args=command[1:], env=subprocess_env())
    async with Client(server) as client:
        added = structured(await client.call_tool("memory_add", {"text": NOTE}))
        search = structured(
            await client.call_tool("memory_search", {"query": "spare key blue flowerpot"})
        )
    assert search["hits"][0]["reference"]["id"] == added["citation"]["path"]
    assert NOTE in (workspace / added["citation"]["path"]).read_text(encoding="utf-8")


async def _as_each_token(host: claw.Host, call: Callable[[Client], Awaitable[T]]) -> dict[str, T]:
    """``call(client)`` over HTTP as a read-token client, then as a write-token one."""
    server = MemoryMcpServer(host, allow_writes=True)
    tokens = TokenTable.from_config(host.config.gateway)
    results: dict[str, T] = {}
    async with trio.open_nursery() as nursery:
        serve = functools.partial(server.serve_http, tokens=tokens)
        url = await nursery.start(serve, "127.0.0.1", 0)
        for name, token in (("read", READ_TOKEN), ("write", WRITE_TOKEN)):
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx2.AsyncClient(headers=headers) as http:
                async with Client(streamable_http_client(url, http_client=http)) as client:
                    results[name] = await call(client)
        nursery.cancel_scope.cancel()
    return results


async def test_over_http_only_a_token_with_the_write_scope_may_add(core_host: claw.Host) -> None:
    async def add(client: Client) -> types.CallToolResult:
        return await client.call_tool("memory_add", {"text": NOTE})

    results = await _as_each_token(core_host, add)
    assert results["read"].is_error
    assert text_of(results["read"]).startswith("FORBIDDEN: ")
    assert structured(results["write"])["citation"]["path"].startswith("memory/")
    assert _memory_files(core_host.config.workspace_dir).count(NOTE) == 1


async def test_over_http_tools_list_shows_each_token_only_the_tools_it_may_call(
    core_host: claw.Host,
) -> None:
    async def names(client: Client) -> list[str]:
        return [tool.name for tool in (await client.list_tools()).tools]

    listed = await _as_each_token(core_host, names)
    assert listed["read"] == ["memory_search", "memory_get", "memory_status"]
    assert listed["write"] == [*listed["read"], "memory_add", "memory_forget"]
