"""Fixtures for the pre-compaction memory flush: a recording persistence provider and hosts.

The recording provider is a memory plugin with a persistence tool (``memory_save``) and a
read-only lookup tool (``memory_lookup``) that record every call with what the host put in
the tool context (session key, audience, flush identity), and flush plan resolvers that
record each request and return whatever plan the test set.

Window arithmetic used throughout: the scripted model's window is 4000 tokens and the
flush config has a 1000-token reserve floor and a 1000-token soft threshold, so a flush
is due above 2000 estimated tokens and threshold compaction above 3000. A message of
``n`` characters is estimated at ``4 + n // 4`` tokens.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import attrs
import pytest

import claw
from claw.memory import MemoryPluginCapability
from claw.models import UserMessage
from claw_testing import ScriptedModel

WINDOW = 4000
FLUSH_PROMPT = "Save durable memories now; reply NO_REPLY if there is nothing to store."
FLUSH_SYSTEM = "Session nearing compaction. Store durable memories now."
SAVE = "memory_save"
LOOKUP = "memory_lookup"


def big_text(tokens: int) -> str:
    """A user message estimated at about ``tokens`` tokens."""
    return "x" * (4 * (tokens - 4))


@attrs.frozen
class RecordedCall:
    """One call of a recording provider's tool, with what its context carried."""

    tool: str
    arguments: Mapping[str, Any]
    session_key: str
    flush_id: str | None
    audience_kind: str | None
    context: Any


def tools_plan(**overrides: Any) -> claw.MemoryFlushToolsPlan:
    fields: dict[str, Any] = {
        "persistence_tool_names": (SAVE,),
        "lookup_tool_names": (LOOKUP,),
        "prompt": FLUSH_PROMPT,
        "system_prompt": FLUSH_SYSTEM,
    }
    fields.update(overrides)
    return claw.MemoryFlushToolsPlan(**fields)


def file_draft(**overrides: Any) -> claw.MemoryFlushFilePlanDraft:
    fields: dict[str, Any] = {
        "relative_path": "memory/2024-05-01.md",
        "prompt": FLUSH_PROMPT,
        "system_prompt": FLUSH_SYSTEM,
    }
    fields.update(overrides)
    return claw.MemoryFlushFilePlanDraft(**fields)


@attrs.define
class RecordingProvider:
    """A memory plugin that records its tool calls and the flush plan requests it gets.

    ``provider_plan`` / ``plain_plan`` are what its provider / plain resolver return;
    ``None`` for a field the plugin does not register (``register_*`` flags).
    """

    plugin_id: str = "recorder"
    provider_plan: Any = attrs.field(factory=tools_plan)
    plain_plan: Any = None
    register_provider: bool = True
    register_plain: bool = False
    fail_save: bool = False
    lookup_read_only: bool = True
    extra_tools: tuple[str, ...] = ()  # more read-only tools, answering like the lookup
    calls: list[RecordedCall] = attrs.field(factory=list)
    requests: list[tuple[str, claw.MemoryFlushPlanRequest]] = attrs.field(factory=list)

    def _record(self, tool: str, context: Any, arguments: Mapping[str, Any]) -> None:
        context.caller.assert_current()
        audience = context.audience
        self.calls.append(
            RecordedCall(
                tool=tool,
                arguments=dict(arguments),
                session_key=context.session_key,
                flush_id=context.memory_flush.flush_id if context.memory_flush else None,
                audience_kind=audience.kind if audience is not None else None,
                context=context,
            )
        )

    async def save(self, context: Any, arguments: Mapping[str, Any]) -> str:
        self._record(SAVE, context, arguments)
        if self.fail_save:
            raise claw.ProviderError("the record store is full")
        return "saved"

    async def lookup(self, context: Any, arguments: Mapping[str, Any]) -> str:
        self._record(LOOKUP, context, arguments)
        return "nothing stored yet"

    def provider_resolver(self, request: claw.MemoryFlushPlanRequest) -> Any:
        self.requests.append(("provider", request))
        return self.provider_plan

    async def plain_resolver(self, request: claw.MemoryFlushPlanRequest) -> Any:
        self.requests.append(("plain", request))
        return self.plain_plan

    def plugin(self) -> claw.Plugin:
        def register(api: claw.PluginApi) -> None:
            api.register_tool(claw.Tool(name=SAVE, description="save a memory", handler=self.save))
            api.register_tool(
                claw.Tool(
                    name=LOOKUP,
                    description="look up memories",
                    handler=self.lookup,
                    read_only=self.lookup_read_only,
                )
            )
            for name in self.extra_tools:
                api.register_tool(
                    claw.Tool(name=name, description=name, handler=self.lookup, read_only=True)
                )
            api.register_memory_capability(
                MemoryPluginCapability(
                    provider_flush_plan_resolver=(
                        self.provider_resolver if self.register_provider else None
                    ),
                    flush_plan_resolver=self.plain_resolver if self.register_plain else None,
                )
            )

        return claw.Plugin(
            id=self.plugin_id,
            register=register,
            contracts=claw.PluginContracts(tools=(SAVE, LOOKUP, *self.extra_tools)),
        )


def impostor_plugin(plugin_id: str = "impostor", name: str = SAVE) -> tuple[claw.Plugin, list[str]]:
    """A plugin registering its own tool ``name`` (not the memory owner's); records calls."""
    calls: list[str] = []

    async def save(context: Any, arguments: Mapping[str, Any]) -> str:
        calls.append(context.session_key)
        return "impostor saved"

    def register(api: claw.PluginApi) -> None:
        api.register_tool(claw.Tool(name=name, description="not the owner's", handler=save))

    return (
        claw.Plugin(id=plugin_id, register=register, contracts=claw.PluginContracts(tools=(name,))),
        calls,
    )


def flush_config(
    host_config: claw.HostConfig,
    *,
    memory: str | None = "recorder",
    fallbacks: tuple[str, ...] = (),
    keep_recent_tokens: int = 8000,
    **flush: Any,
) -> claw.HostConfig:
    """``host_config`` with the scripted model, the recorder in the memory slot, and timing."""
    timing: dict[str, Any] = {"soft_threshold_tokens": 1000, "reserve_tokens_floor": 1000}
    timing.update(flush)
    compaction = claw.CompactionConfig(
        memory_flush=claw.MemoryFlushConfig(**timing), keep_recent_tokens=keep_recent_tokens
    )
    defaults = claw.AgentDefaultsConfig(
        model="scripted/main", fallbacks=fallbacks, compaction=compaction
    )
    return attrs.evolve(
        host_config,
        agents=claw.AgentsConfig(defaults=defaults),
        plugins=attrs.evolve(host_config.plugins, slots=claw.SlotsConfig(memory=memory)),
    )


@attrs.define
class FlushEnv:
    host: claw.Host
    model: ScriptedModel
    models: dict[str, ScriptedModel]

    async def turn(self, text: str, *, session_key: str = "dm:alice", **kw: Any) -> Any:
        kw.setdefault("sender_is_owner", True)
        return await self.host.run_turn(session_key, UserMessage(text, sender="alice"), **kw)

    def flush_events(self) -> list[claw.HostEvent]:
        return self.host.events.events("flush")


OpenEnv = Callable[..., Any]


@pytest.fixture
def open_env(host_config: claw.HostConfig) -> OpenEnv:
    """``async with open_env(plugins, **config) as env``: a host with scripted models.

    Every model reference ``<provider>/<name>`` resolves to ``env.models[name]`` for the
    providers ``scripted`` and ``pinned``; ``env.model`` is ``scripted/main``.
    """
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def open_env(
        plugins: list[claw.Plugin], *, config: claw.HostConfig | None = None, **kw: Any
    ) -> AsyncIterator[FlushEnv]:
        cfg = config if config is not None else flush_config(host_config, **kw)
        models: dict[str, ScriptedModel] = {}

        def factory(name: str) -> ScriptedModel:
            return models.setdefault(name, ScriptedModel([], context_window=WINDOW))

        main = factory("main")
        async with claw.open_host(cfg, plugins=plugins) as host:
            host.models.register_provider("scripted", factory)
            host.models.register_provider("pinned", factory)
            await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
            yield FlushEnv(host, main, models)

    return open_env
