"""No attribute path from an object a plugin receives leads to the host or to minting power.

A snooping plugin registers a tool, a service, a context engine and a memory capability
(native and legacy runtimes), keeps every object the host hands it, and the test walks
breadth-first from each of them (see ``tests/claw/_reach.py``) looking for the
:class:`~claw.Host`, a :class:`~claw._capabilities.CapabilityRegistry`, a
:class:`~claw.HostScope`, the session store or a mint function.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

import claw
import claw_memory
from claw import MemoryCallerContext
from claw.context import (
    AfterTurnParams,
    AssembleParams,
    AssembleResult,
    BootstrapParams,
    CommitTurnParams,
    CommitTurnResult,
    CompactParams,
    CompactResult,
    IngestParams,
    IngestResult,
    MaintainParams,
)
from claw.memory import (
    AuthorizeSearchHitsRequest,
    Citation,
    LegacySearchResult,
    MemoryAddResult,
    MemoryPluginCapability,
    MemoryProviderOpenResult,
    MemoryReference,
    MemorySearchHit,
    MemorySearchRequest,
    ToolMemory,
    voice_fast_context,
)
from claw.models import UserMessage
from claw_testing import (
    MemoryRecord,
    RecordingMemoryProvider,
    ReferenceContextEngine,
    ScriptedModel,
    ScriptedReply,
)

from ._reach import find_minting_power, reaches, walk_count, walk_routes


@attrs.define
class Seen:
    """Everything the host handed the snooping plugin, by where it came from."""

    objects: dict[str, object] = attrs.field(factory=dict)
    register_time_paths: list[str] | None = None

    def add(self, name: str, *values: object, **named: object) -> None:
        for index, value in enumerate(values):
            self.objects.setdefault(f"{name}[{index}]", value)
        for key, value in named.items():
            self.objects.setdefault(f"{name}.{key}", value)


@attrs.define(eq=False)
class SnoopRuntime:
    inner: RecordingMemoryProvider
    seen: Seen

    async def open(
        self, *, agent_id: str, context: MemoryCallerContext
    ) -> MemoryProviderOpenResult:
        self.seen.add("provider_runtime.open", agent_id=agent_id, context=context)
        return await self.inner.open(agent_id=agent_id, context=context)

    async def authorize_search_hits(
        self, request: AuthorizeSearchHitsRequest
    ) -> Sequence[MemorySearchHit]:
        self.seen.add("authorize_search_hits", request)
        return await self.inner.authorize_search_hits(request)


@attrs.define(eq=False)
class SnoopManager:
    seen: Seen

    async def search(self, query: str, **options: Any) -> list[LegacySearchResult]:
        self.seen.add("legacy.search", query, **options)
        return []

    async def read_file(self, path: str, **options: Any) -> None:
        return None

    async def status(self) -> Mapping[str, Any]:
        return {"status": "ready"}

    async def close(self) -> None:
        return None


@attrs.define(eq=False)
class SnoopLegacyRuntime:
    seen: Seen

    async def get_search_manager(self, *, agent_id: str, context: MemoryCallerContext) -> Any:
        self.seen.add("legacy.get_search_manager", agent_id=agent_id, context=context)
        return SnoopManager(self.seen)


@attrs.define(eq=False)
class SnoopEngine(ReferenceContextEngine):
    seen: Seen = attrs.field(kw_only=True)

    async def ingest(self, params: IngestParams) -> IngestResult:
        self.seen.add("engine.ingest", params)
        return await super().ingest(params)

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        self.seen.add("engine.assemble", params)
        return await super().assemble(params)

    async def compact(self, params: CompactParams) -> CompactResult:
        self.seen.add("engine.compact", params)
        return await super().compact(params)

    async def after_turn(self, params: AfterTurnParams) -> None:
        self.seen.add("engine.after_turn", params)
        await super().after_turn(params)

    async def bootstrap(self, params: BootstrapParams) -> None:
        self.seen.add("engine.bootstrap", params)
        await super().bootstrap(params)

    async def maintain(self, params: MaintainParams) -> None:
        self.seen.add("engine.maintain", params)
        await super().maintain(params)

    async def commit_turn(self, params: CommitTurnParams) -> CommitTurnResult:
        self.seen.add("engine.commit_turn", params)
        return await super().commit_turn(params)


@attrs.define(eq=False)
class SnoopMaintenance:
    seen: Seen

    async def add(self, **named: Any) -> MemoryAddResult:
        self.seen.add("maintenance.add", **named)
        return MemoryAddResult(
            reference=MemoryReference(provider_id="snoop", id="memory/today.md", fragment="L1-L1"),
            citation=Citation(path="memory/today.md", start_line=1, end_line=1, source="memory"),
            timestamp="2026-12-01T00:00:00Z",
        )


def snoop_plugin(seen: Seen, engine_path: Path) -> claw.Plugin:
    provider = RecordingMemoryProvider(
        provider_id="snoop", records=[MemoryRecord(id="m1", text="the friday deploy")]
    )

    async def tool(context: Any, arguments: Mapping[str, Any]) -> str:
        seen.add("tool", context, arguments)
        return "ok"

    async def service(task_status: Any) -> None:
        seen.add("service", task_status=task_status)
        task_status.started()

    async def prepare(**named: Any) -> list[str]:
        seen.add("prompt_preparation", **named)
        return []

    def register(api: claw.PluginApi) -> None:
        # While registration is open the facet holds the plugin registry, and through it
        # what earlier plugins registered: walk it now, too.
        seen.register_time_paths = find_minting_power({"api (registering)": api})
        seen.add("register", api)
        seen.add("api", transcripts=api.transcripts, workers=api.workers, config=api.config)
        api.register_tool(claw.Tool(name="snoop_tool", description="snoop", handler=tool))
        api.register_service("snoop", service)

        def factory(ctx: Any) -> SnoopEngine:
            seen.add("engine.factory", ctx)
            return SnoopEngine(engine_path, engine_id="snoop", seen=seen)

        api.register_context_engine("snoop", factory)
        api.register_memory_capability(
            MemoryPluginCapability(
                provider_runtime=SnoopRuntime(provider, seen),
                runtime=SnoopLegacyRuntime(seen),
                prompt_preparation=prepare,
                recall_tool_names=("snoop_tool",),
                maintenance=SnoopMaintenance(seen),  # type: ignore[arg-type]
            )
        )

    return claw.Plugin(
        id="snoop", register=register, contracts=claw.PluginContracts(tools=("snoop_tool",))
    )


@pytest.fixture
async def snooped(host_config: claw.HostConfig, tmp_path: Path) -> AsyncIterator[Snooped]:
    seen = Seen()
    defaults = attrs.evolve(host_config.agents.defaults, model="scripted/main")
    config = attrs.evolve(
        host_config,
        agents=claw.AgentsConfig(defaults=defaults),
        plugins=attrs.evolve(
            host_config.plugins,
            slots=claw.SlotsConfig(memory="snoop", context_engine="snoop"),
        ),
    )
    model = ScriptedModel(
        [ScriptedReply(tool_calls=[("snoop_tool", {"q": "x"})]), "done"], context_window=100_000
    )
    # Memory Core registers first, so the snooping plugin's facet already leads to it.
    plugins = [claw_memory.plugin, snoop_plugin(seen, tmp_path / "engine.sqlite3")]
    async with claw.open_host(config, plugins=plugins) as host:
        host.models.register_provider("scripted", lambda name: model)
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        await host.run_turn("dm:alice", UserMessage("hi", sender="alice"), sender_is_owner=True)
        async with host.open_run("dm:alice", sender_is_owner=True) as run:
            await voice_fast_context(host, run.caller, query="friday")
            async with host.memory.open(run.caller, legacy=True) as handle:
                await handle.search(MemorySearchRequest(query="friday"))
        await host.compact("dm:alice")
        async with host.open_scope("cli") as scope:
            writer = scope.mint_caller_context(scope.mint_operator_authority({"operator.write"}))
            await host.memory.add(writer, "remember the friday deploy")
        # Walk while the host is open: a closed host's objects may have dropped references.
        yield Snooped(seen.objects, host, seen.register_time_paths)


@attrs.frozen
class Snooped:
    objects: dict[str, object]
    host: claw.Host
    register_time_paths: list[str] | None


async def test_the_walk_sees_every_kind_of_object_a_plugin_receives(snooped: Snooped) -> None:
    names = {name.split("[")[0].split(".context")[0] for name in snooped.objects}
    expected = {
        "register",
        "api.transcripts",
        "tool",
        "service.task_status",
        "provider_runtime.open",
        "authorize_search_hits",
        "legacy.get_search_manager",
        "engine.factory",
        "engine.assemble",
        "engine.compact",
        "engine.commit_turn",
        "prompt_preparation.caller",
        "maintenance.add",
    }
    missing = {e for e in expected if not any(n.startswith(e) for n in names)}
    assert not missing, f"the snooping plugin never received {sorted(missing)}"
    assert walk_count(snooped.objects.values()) > 100


async def test_the_walk_finds_a_host_reference_planted_in_a_closure(snooped: Snooped) -> None:
    """The walk follows closure cells, bound methods and slots (it is not vacuous)."""
    host = snooped.host

    def planted() -> object:
        return host

    holder = claw.Tool(name="x", description="x", handler=planted)  # type: ignore[arg-type]
    assert reaches(holder, host)
    assert find_minting_power({"planted": holder}) == [
        "planted.handler.__closure__[0].cell_contents -> Host"
    ]


async def test_the_walk_follows_weak_references_and_their_callbacks(snooped: Snooped) -> None:
    """Anyone holding an object can list its weak references (``weakref.getweakrefs``), and
    a ``WeakKeyDictionary``'s reference leads back to the dictionary through its
    callback's default argument: the route issue 25 found from a caller context to the
    registry. The walk finds a host planted behind such a table."""
    host = snooped.host
    key = _Key()
    table: weakref.WeakKeyDictionary[_Key, claw.Host] = weakref.WeakKeyDictionary()
    table[key] = host
    [path] = find_minting_power({"key": key})
    assert path.startswith("key<weakref.getweakrefs()[0]>.__callback__.__defaults__[0]()[")
    assert path.endswith("-> Host")


async def test_no_plugin_object_reaches_the_host_a_registry_or_a_mint_function(
    snooped: Snooped,
) -> None:
    found = find_minting_power(snooped.objects)
    routes = walk_routes(snooped.objects.values())
    print(
        f"\nreach: {len(snooped.objects)} objects a plugin received, {routes['objects']} "
        f"objects walked; steps tried: {dict(sorted(routes.items()))}; paths to the host, a "
        f"registry, a scope or a mint: {len(found)}"
    )
    assert found == [], "\n".join(found)
    assert snooped.register_time_paths == []
    # The walk tried the routes issue 25 named, not only attributes.
    assert routes["weak references listed (getweakrefs)"] > 0
    assert routes["weak reference callbacks"] > 0


async def test_a_facet_kept_after_loading_no_longer_holds_the_plugin_registry(
    snooped: Snooped,
) -> None:
    api = snooped.objects["register[0]"]
    assert isinstance(api, claw.PluginApi)
    assert not reaches(api, snooped.host.plugin_registry)
    assert api.get_embedding_provider("claw-hash") is not None  # lookups still work
    with pytest.raises(claw.ContractError, match="after loading finished"):
        api.register_tool(claw.Tool(name="snoop_tool", description="x", handler=_unused))


class _Key:
    """A plain object (hashable by identity, weakly referenceable)."""


async def _unused(context: Any, arguments: Mapping[str, Any]) -> str:
    raise AssertionError("never dispatched")  # pragma: no cover


async def test_a_tools_memory_facet_does_not_hold_the_guard(snooped: Snooped) -> None:
    """A tool gets its memory through the host's guard, yet no attribute path from the
    facet leads to the guard (and through it to the currency checker and registry)."""
    context = snooped.objects["tool[0]"]
    assert isinstance(context, claw.ToolContext)
    assert isinstance(context.memory, ToolMemory)
    assert context.memory.plugin_id == "snoop"
    assert not reaches(context, snooped.host.memory)
    assert find_minting_power({"tool memory": context.memory}) == []
