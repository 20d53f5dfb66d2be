"""The host's memory consumers, each on a native provider and on the legacy runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest

import claw
import claw_memory
from claw.memory import (
    BUILTIN_RECALL_TOOLS,
    MemoryPluginCapability,
    ProviderCapabilities,
    deep_recall_tools,
    dreaming_owner,
    project_recall,
    provider_status,
    trigger_recall,
    voice_fast_context,
    wiki_search,
)
from claw_testing import MemoryRecord, RecordingMemoryProvider

from .conftest import RECORDS, memory_config


@asynccontextmanager
async def operator(host: claw.Host) -> AsyncIterator[claw.MemoryCallerContext]:
    async with host.open_scope("op") as scope:
        yield scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))


async def _echo(context: Any, arguments: Any) -> str:
    return ""


@asynccontextmanager
async def native(
    host_config: claw.HostConfig,
    *,
    capabilities: ProviderCapabilities,
    recall_tool_names: tuple[str, ...] = ("recall_search",),
    records: list[MemoryRecord] | None = None,
    extra_plugins: tuple[claw.Plugin, ...] = (),
) -> AsyncIterator[tuple[claw.Host, RecordingMemoryProvider]]:
    provider = RecordingMemoryProvider(
        provider_id="rec", records=list(records or RECORDS), capabilities=capabilities
    )
    capability = attrs.evolve(provider.capability(), recall_tool_names=recall_tool_names)

    def register(api: claw.PluginApi) -> None:
        api.register_memory_capability(capability)
        for name in recall_tool_names:
            api.register_tool(claw.Tool(name=name, description="d", handler=_echo))

    plugin = claw.Plugin(
        id="rec", register=register, contracts=claw.PluginContracts(tools=recall_tool_names)
    )
    async with claw.open_host(
        memory_config(host_config, "rec"), plugins=[plugin, *extra_plugins]
    ) as host:
        yield host, provider


FULL = ProviderCapabilities(
    sources=("memory", "sessions"), candidates=("trigger", "project"), project_filter=True
)


async def test_provider_status_works_for_host_status_authority(
    host_config: claw.HostConfig,
) -> None:
    async with native(host_config, capabilities=FULL) as (host, _):
        async with host.open_scope("status") as scope:
            ctx = scope.mint_caller_context(scope.mint_host_authority("status"))
            health = await provider_status(host, ctx)
    assert health.status == "ready"


async def test_project_recall_uses_project_candidates(host_config: claw.HostConfig) -> None:
    async with native(host_config, capabilities=FULL) as (host, provider):
        async with operator(host) as ctx:
            result = await project_recall(host, ctx, project_keys=["apollo"])
    assert [i.reference_id for i in result.items] == ["proj-1"]
    assert result.items[0].kind == "project"
    assert "candidates" in provider.call_names()


async def test_project_recall_injects_nothing_without_the_declaration(
    host_config: claw.HostConfig,
) -> None:
    caps = ProviderCapabilities(sources=("memory",), candidates=("trigger",))
    async with native(host_config, capabilities=caps) as (host, provider):
        async with operator(host) as ctx:
            result = await project_recall(host, ctx, project_keys=["apollo"])
    assert result.items == ()
    assert result.skipped_reason is not None and "project candidates" in result.skipped_reason
    assert "candidates" not in provider.call_names()


async def test_trigger_recall_runs_lexical_search_and_trigger_candidates(
    host_config: claw.HostConfig,
) -> None:
    async with native(host_config, capabilities=FULL) as (host, provider):
        async with operator(host) as ctx:
            result = await trigger_recall(
                host, ctx, message="when is the friday deploy", tool_policy=claw.ToolPolicy()
            )
    kinds = {i.kind for i in result.items}
    assert kinds == {"search", "trigger"}
    search_request = next(c[1] for c in provider.calls if c[0] == "search")
    assert search_request.lexical_only is True
    assert search_request.sources == ("memory",)


@pytest.mark.parametrize(
    ("caps", "tools", "policy", "keys", "needle"),
    [
        (FULL, (), claw.ToolPolicy(), (), "recall_tool_names"),
        (FULL, ("recall_search",), claw.ToolPolicy(deny={"recall_search"}), (), "does not allow"),
        (
            ProviderCapabilities(sources=("sessions",), candidates=("trigger",)),
            ("recall_search",),
            claw.ToolPolicy(),
            (),
            "memory source",
        ),
        (
            ProviderCapabilities(sources=("memory",), candidates=("project",)),
            ("recall_search",),
            claw.ToolPolicy(),
            (),
            "trigger candidates",
        ),
        (
            ProviderCapabilities(sources=("memory",), candidates=("trigger",)),
            ("recall_search",),
            claw.ToolPolicy(),
            ("apollo",),
            "project filtering",
        ),
    ],
    ids=["no-recall-tools", "policy-denies", "no-memory-source", "no-trigger", "no-project-filter"],
)
async def test_trigger_recall_injects_nothing_unless_every_need_is_declared(  # noqa: PLR0917
    host_config: claw.HostConfig,
    caps: ProviderCapabilities,
    tools: tuple[str, ...],
    policy: claw.ToolPolicy,
    keys: tuple[str, ...],
    needle: str,
) -> None:
    async with native(host_config, capabilities=caps, recall_tool_names=tools) as (host, provider):
        async with operator(host) as ctx:
            result = await trigger_recall(
                host, ctx, message="friday deploy", tool_policy=policy, project_keys=keys
            )
    assert result.items == ()
    assert result.skipped_reason is not None and needle in result.skipped_reason
    assert "search.enter" not in provider.call_names()
    assert "candidates" not in provider.call_names()


async def test_deep_recall_tool_precedence(host_config: claw.HostConfig) -> None:
    async with native(host_config, capabilities=FULL) as (host, _):
        assert deep_recall_tools(host, tools_allow=["recall_search"]) == ("recall_search",)
        assert deep_recall_tools(host, tools_allow=["no_such_tool"]) == ("recall_search",)
        assert deep_recall_tools(host) == ("recall_search",)
    async with native(host_config, capabilities=FULL, recall_tool_names=()) as (host, _):
        assert deep_recall_tools(host) == BUILTIN_RECALL_TOOLS


async def test_unselected_sidecars_cannot_contribute_recall_tools(
    host_config: claw.HostConfig,
) -> None:
    sidecar_cap = MemoryPluginCapability(recall_tool_names=("sidecar_recall",))
    sidecar = claw.Plugin(
        id="sidecar", register=lambda api: api.register_memory_capability(sidecar_cap)
    )
    async with native(
        host_config, capabilities=FULL, recall_tool_names=(), extra_plugins=(sidecar,)
    ) as (host, _):
        assert host.slots.memory_sidecars == ("sidecar",)
        assert deep_recall_tools(host) == BUILTIN_RECALL_TOOLS


async def test_voice_fast_context_searches_every_configured_source(
    host_config: claw.HostConfig,
) -> None:
    async with native(host_config, capabilities=FULL) as (host, provider):
        async with operator(host) as ctx:
            await voice_fast_context(host, ctx, query="friday deploy")
    request = next(c[1] for c in provider.calls if c[0] == "search")
    assert request.sources == ("memory", "sessions")


async def test_wiki_protected_transcripts_need_the_sessions_source(
    host_config: claw.HostConfig,
) -> None:
    caps = ProviderCapabilities(sources=("memory",))
    async with native(host_config, capabilities=caps) as (host, _):
        async with operator(host) as ctx:
            plain = await wiki_search(host, ctx, query="friday deploy")
            assert plain.items
            with pytest.raises(claw.UnsupportedRequestError, match="sessions"):
                await wiki_search(host, ctx, query="friday", protected_transcripts=True)


async def test_legacy_runtime_consumers_keep_manager_results_and_citation_labels(
    legacy_host: claw.Host, legacy_manager: Any
) -> None:
    async with operator(legacy_host) as ctx:
        result = await trigger_recall(
            legacy_host, ctx, message="deploy", tool_policy=claw.ToolPolicy()
        )
        voice = await voice_fast_context(legacy_host, ctx, query="deploy")
    assert not result.native
    assert [i.citation for i in result.items] == ["MEMORY.md#L2"]
    assert "search" in legacy_manager.calls
    assert [i.source for i in voice.items] == ["memory"]  # session hits withheld: no hook


async def test_memory_core_loads_as_a_dreaming_sidecar_unless_disabled(
    host_config: claw.HostConfig,
) -> None:
    async with native(host_config, capabilities=FULL, extra_plugins=(claw_memory.plugin,)) as (
        host,
        _,
    ):
        assert host.slots.memory_plugin == "rec"
        assert "memory-core" in host.slots.memory_sidecars
        assert dreaming_owner(host) == "memory-core"
    disabled = attrs.evolve(
        host_config,
        plugins=attrs.evolve(
            host_config.plugins,
            entries={"memory-core": claw.PluginEntryConfig(enabled=False)},
        ),
    )
    async with native(disabled, capabilities=FULL, extra_plugins=(claw_memory.plugin,)) as (
        host,
        _,
    ):
        assert "memory-core" not in host.plugin_registry.plugins
        assert dreaming_owner(host) is None


async def test_post_compaction_refresh_is_called_or_its_omission_logged(
    host_config: claw.HostConfig,
) -> None:
    async with native(host_config, capabilities=FULL) as (host, provider):
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        row = host.sessions.get_nowait("dm:alice")
        assert row is not None
        await host.turns.maintenance.refresh(row)
        assert "memory.refresh_omitted" in host.events.kinds()
        provider.refreshable = True
        await host.turns.maintenance.refresh(row)
        assert "memory.refreshed" in host.events.kinds()
        assert "refresh" in provider.call_names()


@pytest.mark.parametrize("message", ["", "   ", "\n\t "])
async def test_trigger_recall_does_nothing_for_a_message_without_text(
    host_config: claw.HostConfig, message: str
) -> None:
    async with native(host_config, capabilities=FULL) as (host, provider):
        async with operator(host) as ctx:
            result = await trigger_recall(host, ctx, message=message, tool_policy=claw.ToolPolicy())
    assert result.items == ()
    assert result.skipped_reason is not None and "no text" in result.skipped_reason
    assert provider.call_names() == []


async def test_legacy_trigger_recall_does_nothing_for_a_message_without_text(
    legacy_host: claw.Host, legacy_manager: Any
) -> None:
    async with operator(legacy_host) as ctx:
        result = await trigger_recall(legacy_host, ctx, message="  ", tool_policy=claw.ToolPolicy())
    assert result.items == () and result.skipped_reason is not None
    assert "search" not in legacy_manager.calls


@pytest.mark.parametrize(
    "policy",
    [claw.ToolPolicy(deny={"memory_search"}), claw.ToolPolicy(allow={"memory_get"})],
    ids=["denied", "not-allowed"],
)
async def test_legacy_trigger_recall_honours_the_turns_tool_policy(
    legacy_host: claw.Host, legacy_manager: Any, policy: claw.ToolPolicy
) -> None:
    async with operator(legacy_host) as ctx:
        result = await trigger_recall(legacy_host, ctx, message="deploy", tool_policy=policy)
    assert result.items == ()
    assert result.skipped_reason is not None and "memory_search" in result.skipped_reason
    assert "search" not in legacy_manager.calls


async def test_legacy_trigger_recall_needs_the_owners_memory_search_tool(
    host_config: claw.HostConfig, legacy_manager: Any
) -> None:
    from .conftest import LegacyRuntime

    cap = MemoryPluginCapability(runtime=LegacyRuntime(legacy_manager))
    plugin = claw.Plugin(id="bare", register=lambda api: api.register_memory_capability(cap))
    sidecar = claw.Plugin(
        id="other",
        register=lambda api: api.register_tool(
            claw.Tool(name="memory_search", description="d", handler=_echo)
        ),
        contracts=claw.PluginContracts(tools=("memory_search",)),
    )
    async with (
        claw.open_host(memory_config(host_config, "bare"), plugins=[plugin, sidecar]) as host,
        operator(host) as ctx,
    ):
        result = await trigger_recall(host, ctx, message="deploy", tool_policy=claw.ToolPolicy())
    assert result.items == ()
    assert (
        result.skipped_reason is not None and "registers no memory_search" in result.skipped_reason
    )
    assert "search" not in legacy_manager.calls
