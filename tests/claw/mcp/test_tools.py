"""The MCP tools through the SDK's own client, connected in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import mcp_types as types
import pytest
from mcp import MCPError

import claw
from claw.mcp import MemoryMcpServer
from claw.plugin_sdk import MemoryProviderOpenResult
from claw_testing import MemoryRecord, RecordingMemoryProvider

from .conftest import host_config, in_process_client, structured, text_of

READ_TOOLS = ["memory_search", "memory_get", "memory_status"]


async def test_only_the_read_tools_are_listed_all_read_only_with_schemas(
    core_host: claw.Host,
) -> None:
    async with in_process_client(core_host) as client:
        listed = await client.list_tools()
    assert [tool.name for tool in listed.tools] == READ_TOOLS
    for tool in listed.tools:
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
        assert tool.input_schema["type"] == "object"
        assert tool.input_schema["additionalProperties"] is False
        assert "agentId" not in tool.input_schema["properties"]
        assert tool.output_schema is not None


async def test_search_get_and_status_answer_structured_content_and_the_same_text(
    core_host: claw.Host,
) -> None:
    async with in_process_client(core_host) as client:
        search = structured(
            await client.call_tool(
                "memory_search", {"query": "staging database password", "minScore": 0}
            )
        )
        assert (search["version"], search["agentId"], search["providerId"]) == (
            2,
            "main",
            "memory-core",
        )
        hit = search["hits"][0]
        assert set(hit) >= {"reference", "excerpt", "score", "citation"}
        assert hit["citation"] == {
            "path": "MEMORY.md",
            "startLine": 2,
            "endLine": 2,
            "source": "memory",
        }
        got = structured(
            await client.call_tool(
                "memory_get", {"reference": hit["reference"], "from": 2, "lines": 1}
            )
        )
        assert got["status"] == "ok"
        assert got["text"] == "- The staging database password rotates monthly."
        status = structured(await client.call_tool("memory_status", {}))
        assert status["status"] == "ready"
        assert "/" not in repr(status.get("details"))


async def test_search_sources_and_max_results_reach_the_provider(core_host: claw.Host) -> None:
    async with in_process_client(core_host) as client:
        search = structured(
            await client.call_tool(
                "memory_search",
                {"query": "lunch", "maxResults": 1, "sources": ["memory"], "minScore": 0},
            )
        )
    assert len(search["hits"]) == 1
    assert search["coverage"]["sources"] == ["memory"]


@pytest.mark.parametrize(
    ("tool", "arguments", "needle"),
    [
        ("memory_search", {}, "query"),
        ("memory_search", {"query": "  "}, "query"),
        ("memory_search", {"query": 7}, "query"),
        ("memory_search", {"query": "x", "maxResults": -1}, "maxResults"),
        ("memory_search", {"query": "x", "maxResults": 0}, "maxResults"),
        ("memory_search", {"query": "x", "maxResults": 10**30}, "maxResults"),
        ("memory_search", {"query": "x", "maxResults": 2.5}, "maxResults"),
        ("memory_search", {"query": "x", "minScore": "high"}, "minScore"),
        ("memory_search", {"query": "x", "sources": ["web"]}, "sources"),
        ("memory_search", {"query": "x", "sources": []}, "sources"),
        ("memory_search", {"query": "x", "cursor": 5}, "cursor"),
        ("memory_search", {"query": "x", "bogus": 1}, "bogus"),
        ("memory_search", {"query": "x", "version": 1}, "version"),
        ("memory_search", {"query": "x", "agentId": "other"}, "agentId"),
        ("memory_get", {}, "reference"),
        ("memory_get", {"reference": "MEMORY.md"}, "reference"),
        ("memory_get", {"reference": {"providerId": "memory-core"}}, "id"),
        (
            "memory_get",
            {"reference": {"providerId": "memory-core", "id": "MEMORY.md"}, "from": -3},
            "from",
        ),
        (
            "memory_get",
            {"reference": {"providerId": "memory-core", "id": "MEMORY.md"}, "lines": 0},
            "lines",
        ),
        ("memory_status", {"agentId": "main"}, "agentId"),
        ("memory_status", {"owner": True}, "owner"),
    ],
)
async def test_bad_arguments_are_tool_errors_naming_the_argument(
    core_host: claw.Host, tool: str, arguments: dict[str, Any], needle: str
) -> None:
    async with in_process_client(core_host) as client:
        result = await client.call_tool(tool, arguments)
        assert result.is_error
        text = text_of(result)
        assert text.startswith("INVALID_REQUEST: ")
        assert needle in text
        # The server answered and goes on answering.
        assert not (await client.call_tool("memory_status", {})).is_error


async def test_the_bounds_in_the_input_schemas_are_the_ones_enforced(core_host: claw.Host) -> None:
    async with in_process_client(core_host) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        search = listed["memory_search"].input_schema["properties"]
        longest = search["query"]["maxLength"]
        most = search["maxResults"]["maximum"]
        assert not (await client.call_tool("memory_search", {"query": "a" * longest})).is_error
        over = await client.call_tool("memory_search", {"query": "a" * (longest + 1)})
        assert over.is_error and "query" in text_of(over)
        assert not (
            await client.call_tool("memory_search", {"query": "x", "maxResults": most})
        ).is_error
        over = await client.call_tool("memory_search", {"query": "x", "maxResults": most + 1})
        assert over.is_error and "maxResults" in text_of(over)
        last = listed["memory_get"].input_schema["properties"]["from"]["maximum"]
        reference = {"providerId": "memory-core", "id": "MEMORY.md"}
        beyond = await client.call_tool("memory_get", {"reference": reference, "from": last + 1})
        assert beyond.is_error and "from" in text_of(beyond)


async def test_a_huge_unknown_argument_name_is_not_echoed_whole(core_host: claw.Host) -> None:
    name = "k" * 100_000
    async with in_process_client(core_host) as client:
        result = await client.call_tool("memory_search", {"query": "x", name: 1})
    assert result.is_error
    assert "unknown argument 'kkkk" in text_of(result)
    assert len(text_of(result)) < 500


async def test_unknown_tool_is_an_invalid_params_error_listing_the_tools(
    core_host: claw.Host,
) -> None:
    async with in_process_client(core_host) as client:
        with pytest.raises(MCPError) as info:
            await client.call_tool("memory_add", {"text": "x"})
    assert info.value.code == types.INVALID_PARAMS
    assert "memory_add" in info.value.message
    assert "memory_search, memory_get, memory_status" in info.value.message


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("memory_search", {"query": "x", "cursor": "c" * 1_000_000}),
        ("memory_search", {"query": "x", "cursor": "v1.\x00\xff not a cursor"}),
        ("memory_search", {"query": "q" * 200_000}),
        ("memory_search", {"query": "x", "minScore": -(10**300)}),
        ("memory_get", {"reference": {"providerId": "memory-core", "id": "memory/a\x00b.md"}}),
        ("memory_get", {"reference": {"providerId": "memory-core", "id": "../../etc/passwd"}}),
        ("memory_get", {"reference": {"providerId": "memory-core", "id": "/etc/passwd"}}),
        ("memory_get", {"reference": {"providerId": "other", "id": "MEMORY.md"}}),
        (
            "memory_get",
            {"reference": {"providerId": "memory-core", "id": "MEMORY.md"}, "from": 10**18},
        ),
    ],
)
async def test_hostile_arguments_get_an_answer_and_the_server_keeps_serving(
    core_host: claw.Host, tool: str, arguments: dict[str, Any]
) -> None:
    async with in_process_client(core_host) as client:
        result = await client.call_tool(tool, arguments)
        if result.is_error:
            assert not text_of(result).startswith("INTERNAL"), text_of(result)
            assert "/etc" not in text_of(result)
        else:
            payload = structured(result)
            assert payload.get("status") != "ok" or "root:" not in payload.get("text", "")
        again = await client.call_tool("memory_search", {"query": "lunch", "minScore": 0})
        assert structured(again)["hits"]


async def test_the_agent_is_the_servers_not_the_callers(core_host: claw.Host) -> None:
    await core_host.sessions.create("dm:bob", agent_id="helper", chat_type="direct")
    async with in_process_client(core_host, agent_id="helper") as client:
        search = structured(await client.call_tool("memory_search", {"query": "lunch"}))
        status = structured(await client.call_tool("memory_status", {}))
        refused = await client.call_tool("memory_search", {"query": "x", "agentId": "main"})
    assert search["agentId"] == status["agentId"] == "helper"
    assert refused.is_error and "agentId" in text_of(refused)


async def test_a_server_for_an_unknown_agent_answers_invalid_request_naming_it(
    core_host: claw.Host,
) -> None:
    async with in_process_client(core_host, agent_id="../../nobody") as client:
        result = await client.call_tool("memory_search", {"query": "lunch"})
    assert result.is_error
    assert text_of(result).startswith("INVALID_REQUEST: ")
    assert "'../../nobody' is not an agent of this host" in text_of(result)


async def test_a_client_without_the_read_scope_is_refused(core_host: claw.Host) -> None:
    async with in_process_client(core_host, scopes={"operator.admin"}) as client:
        result = await client.call_tool("memory_search", {"query": "lunch"})
    assert result.is_error
    assert text_of(result).startswith("FORBIDDEN: ")
    assert "operator.read" in text_of(result)


@attrs.define(eq=False)
class ContextRecorder(RecordingMemoryProvider):
    """A recording provider that keeps the caller context of every open."""

    contexts: list[claw.MemoryCallerContext] = attrs.field(factory=list)

    async def open(
        self, *, agent_id: str, context: claw.MemoryCallerContext
    ) -> MemoryProviderOpenResult:
        self.contexts.append(context)
        return await super().open(agent_id=agent_id, context=context)


async def test_each_call_mints_operator_authority_that_is_revoked_when_it_returns(
    tmp_path: Path,
) -> None:
    provider = ContextRecorder(
        provider_id="recording-memory",
        records=[MemoryRecord(id="note", text="the quarterly report is due friday")],
    )
    plugin = claw.Plugin(
        id="recording-memory",
        register=lambda api: api.register_memory_capability(provider.capability()),
    )
    config = attrs.evolve(
        host_config(tmp_path),
        plugins=claw.PluginsConfig(
            discover=False, slots=claw.SlotsConfig(memory="recording-memory")
        ),
    )
    async with claw.open_host(config, plugins=[plugin]) as host:
        async with in_process_client(host, agent_id="main") as client:
            search = structured(await client.call_tool("memory_search", {"query": "report"}))
            structured(await client.call_tool("memory_status", {}))
        assert search["hits"][0]["reference"]["id"] == "note"
        first, second = provider.contexts
        assert first is not second
        for context in (first, second):
            authority = context.authority
            assert isinstance(authority, claw.OperatorAuthority)
            assert authority.scopes == frozenset({"operator.read"})
            with pytest.raises(claw.StaleCapabilityError):
                host.verify(context)


async def test_an_empty_agent_id_is_refused_when_the_server_is_built(core_host: claw.Host) -> None:
    with pytest.raises(ValueError, match="agent_id"):
        MemoryMcpServer(core_host, agent_id=" ")
