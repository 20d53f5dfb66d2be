"""The SDK's provider skeleton: what every provider gets written once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs
import pytest
import trio

import claw
from claw.plugin_sdk import (
    SEARCH_TOOL_MAX_RESULTS,
    MemoryCallerContext,
    MemoryHealth,
    MemorySearchRequest,
    MemorySearchResult,
    ProviderCapabilities,
    ProviderHandle,
    ProviderMaintenance,
    ProviderRuntime,
    build_capability,
    offset_cursor,
    parse_offset_cursor,
    search_tool_request,
)


@attrs.define(eq=False)
class _Store:
    opened: list[str] = attrs.field(factory=list)


@attrs.define(eq=False)
class _Handle(ProviderHandle[_Store]):
    async def search(self, request: MemorySearchRequest) -> MemorySearchResult:
        await self.effect(trio.lowlevel.checkpoint)
        return MemorySearchResult(hits=())

    async def health(self) -> MemoryHealth:
        return MemoryHealth(status="ready")


@attrs.define(eq=False)
class _Runtime(ProviderRuntime[_Store, _Handle]):
    handle_class = _Handle

    def capabilities(self) -> ProviderCapabilities:
        return ProviderCapabilities(sources=("memory",))


@attrs.define(eq=False)
class _Maintenance(ProviderMaintenance[_Store]):
    provider_name = "Store"


@pytest.fixture
async def host(host_config: claw.HostConfig) -> AsyncIterator[claw.Host]:
    async with claw.open_host(host_config) as opened:
        await opened.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        yield opened


@pytest.mark.parametrize("cursor", ["", "-1", "1.5", "\u00b9", "\u0661", "1234567890", " 1"])
def test_a_cursor_is_one_to_nine_ascii_digits(cursor: str) -> None:
    with pytest.raises(claw.UnsupportedRequestError, match='provider "store" cannot read'):
        parse_offset_cursor(cursor, "store")


def test_an_offset_round_trips_through_its_cursor() -> None:
    assert parse_offset_cursor(None, "store") == 0
    assert parse_offset_cursor(offset_cursor(123_456_789), "store") == 123_456_789
    assert offset_cursor(None) is None


async def test_a_runtime_opens_its_handle_class_for_a_current_caller_of_the_agent(
    host: claw.Host,
) -> None:
    runtime = _Runtime(_Store())
    async with host.open_run("dm:alice", sender_is_owner=True) as run:
        opened = await runtime.open(agent_id="main", context=run.caller)
        handle = opened.provider
        assert isinstance(handle, _Handle)
        assert (handle.agent_id, handle.context, handle.service) == (
            "main",
            run.caller,
            runtime.service,
        )
        assert handle.capabilities == ProviderCapabilities(sources=("memory",))
        with pytest.raises(claw.CapabilityDeniedError, match="another agent"):
            await runtime.open(agent_id="other", context=run.caller)
        await host.sessions.reset("dm:alice")
        with pytest.raises(claw.StaleCapabilityError):
            await handle.search(MemorySearchRequest(query="x"))
    with pytest.raises(claw.StaleCapabilityError):
        await runtime.open(agent_id="main", context=run.caller)


async def test_maintenance_refuses_anything_but_an_operator(host: claw.Host) -> None:
    maintenance = _Maintenance(_Store())
    async with host.open_run("dm:alice", sender_is_owner=True) as run:
        with pytest.raises(claw.CapabilityDeniedError, match="Store maintenance needs an operator"):
            maintenance.operator(run.caller)
    async with host.open_scope("op") as scope:
        operator = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
        maintenance.operator(operator)


async def test_guidance_becomes_the_async_prompt_preparation(host: claw.Host) -> None:
    seen: list[tuple[str, MemoryCallerContext]] = []

    def guidance(agent_id: str, caller: MemoryCallerContext) -> list[str]:
        seen.append((agent_id, caller))
        return ["one", "two"]

    capability = build_capability(
        provider_runtime=_Runtime(_Store()), guidance=guidance, recall_tool_names=("find",)
    )
    assert capability.recall_tool_names == ("find",)
    assert capability.prompt_preparation is not None
    async with host.open_run("dm:alice", sender_is_owner=True) as run:
        lines = await capability.prompt_preparation(
            agent_id="main", session_key="dm:alice", caller=run.caller
        )
    assert lines == ["one", "two"] and seen == [("main", run.caller)]


def test_search_tool_arguments_are_checked_once_into_a_request() -> None:
    request = search_tool_request("find", {"query": "tea"})
    assert (request.query, request.max_results) == ("tea", 6)
    big = search_tool_request("find", {"query": "tea", "max_results": 500})
    assert big.max_results == SEARCH_TOOL_MAX_RESULTS
    for bad, named in (({}, "'query'"), ({"query": "  "}, "'query'")):
        with pytest.raises(claw.UnsupportedRequestError, match=f"find needs a non-empty {named}"):
            search_tool_request("find", bad)
    for limit in (0, -1, True, "3", 2.5):
        with pytest.raises(claw.UnsupportedRequestError, match="'max_results' must be"):
            search_tool_request("find", {"query": "tea", "max_results": limit})


@attrs.define(eq=False)
class _LeasingHandle(_Handle):
    """A handle whose close waits (returning a lease takes a checkpoint)."""

    async def close(self) -> None:
        await trio.sleep(0.5)
        self.service.opened.append("closed")


@attrs.define(eq=False)
class _LeasingRuntime(ProviderRuntime[_Store, _LeasingHandle]):
    handle_class = _LeasingHandle

    def capabilities(self) -> ProviderCapabilities:
        return ProviderCapabilities(sources=("memory",))


def test_only_a_handle_that_overrides_close_says_its_close_may_wait() -> None:
    assert ProviderHandle.close_waits is False
    assert _Handle.close_waits is False
    assert _LeasingHandle.close_waits is True


async def test_a_close_that_waits_runs_to_its_end_when_the_search_is_cancelled(
    host_config: claw.HostConfig, autojump_clock: trio.testing.MockClock
) -> None:
    """The guard shields a close that may wait from the request's cancellation."""
    store = _Store()
    capability = build_capability(provider_runtime=_LeasingRuntime(store))
    plugin = claw.Plugin(
        id="store", register=lambda api: api.register_memory_capability(capability)
    )
    slots = claw.SlotsConfig(memory="store")
    config = attrs.evolve(host_config, plugins=attrs.evolve(host_config.plugins, slots=slots))
    async with claw.open_host(config, plugins=[plugin]) as host:
        async with host.open_scope("op") as scope:
            ctx = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
            start = trio.current_time()
            with trio.move_on_after(0.1):  # lands while the close waits
                await host.memory.search(ctx, MemorySearchRequest(query="tea"))
            assert trio.current_time() - start >= 0.5
    assert store.opened == ["closed"]
