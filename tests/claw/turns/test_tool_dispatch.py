"""Tool dispatch: the memory slot owner's tools run only while the run's caller is current."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

import claw
from claw.models import ToolResult, UserMessage
from claw_testing import RecordingMemoryProvider, ScriptedModel, ScriptedReply


@attrs.define
class World:
    host: claw.Host | None = None
    ran: list[str] = attrs.field(factory=list)


def _plugins(world: World) -> list[claw.Plugin]:
    provider = RecordingMemoryProvider(provider_id="owner")

    async def owner_tool(context: Any, arguments: Mapping[str, Any]) -> str:
        world.ran.append("owner_tool")
        return "owner result"

    async def reset_tool(context: Any, arguments: Mapping[str, Any]) -> str:
        world.ran.append("reset_tool")
        assert world.host is not None
        await world.host.sessions.reset(context.session_key)  # the audience goes stale
        return "reset"

    async def plain_tool(context: Any, arguments: Mapping[str, Any]) -> str:
        world.ran.append("plain_tool")
        return "plain"

    def register_owner(api: claw.PluginApi) -> None:
        api.register_memory_capability(provider.capability())
        api.register_tool(claw.Tool(name="owner_tool", description="d", handler=owner_tool))

    def register_other(api: claw.PluginApi) -> None:
        api.register_tool(claw.Tool(name="reset_tool", description="d", handler=reset_tool))
        api.register_tool(claw.Tool(name="plain_tool", description="d", handler=plain_tool))

    return [
        claw.Plugin(
            id="owner",
            register=register_owner,
            contracts=claw.PluginContracts(tools=("owner_tool",)),
        ),
        claw.Plugin(
            id="other",
            register=register_other,
            contracts=claw.PluginContracts(tools=("reset_tool", "plain_tool")),
        ),
    ]


async def test_a_memory_owner_tool_is_not_dispatched_once_the_runs_caller_is_stale(
    host_config: claw.HostConfig,
) -> None:
    world = World()
    defaults = attrs.evolve(host_config.agents.defaults, model="scripted/main")
    config = attrs.evolve(
        host_config,
        agents=claw.AgentsConfig(defaults=defaults),
        plugins=attrs.evolve(host_config.plugins, slots=claw.SlotsConfig(memory="owner")),
    )
    calls = [("owner_tool", {}), ("reset_tool", {}), ("owner_tool", {}), ("plain_tool", {})]
    model = ScriptedModel([ScriptedReply(tool_calls=calls), "done"], context_window=100_000)
    async with claw.open_host(config, plugins=_plugins(world)) as host:
        world.host = host
        host.models.register_provider("scripted", lambda name: model)
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        result = await host.run_turn("dm:alice", UserMessage("go"), sender_is_owner=True)
    assert result.reply.text == "done"
    # The owner's tool ran while the caller was current, not after the reset; another
    # plugin's tool does not depend on the memory caller.
    assert world.ran == ["owner_tool", "reset_tool", "plain_tool"]
    results = [m for m in model.calls[1].messages if isinstance(m, ToolResult)]
    assert [r.is_error for r in results] == [False, False, True, False]
    assert "not run" in results[2].content
    assert "StaleCapabilityError" in results[2].content


async def test_a_tool_failing_on_its_storage_shows_the_model_no_host_path_or_address(
    host_config: claw.HostConfig,
) -> None:
    """The model sees the error's type; the paths and the database address stay in the
    log. A claw error about the call itself (refused, stale) keeps its message."""
    secret = "database claw on /run/postgresql/.s.PGSQL.5432 failed; /srv/claw/.claw/x"

    async def on_the_database(context: Any, arguments: Mapping[str, Any]) -> str:
        raise claw.DatabaseUnavailableError(secret)

    async def on_the_disk(context: Any, arguments: Mapping[str, Any]) -> str:
        raise claw.StorageFullError(secret, path="/srv/claw/.claw/x")

    async def refused(context: Any, arguments: Mapping[str, Any]) -> str:
        raise claw.CapabilityDeniedError("the audience does not allow this")

    async def echo(context: Any, arguments: Mapping[str, Any]) -> str:
        return "stored \ud800 text"  # a tool's output that is not storable text

    def register(api: claw.PluginApi) -> None:
        for name, handler in [
            ("db", on_the_database),
            ("disk", on_the_disk),
            ("refused", refused),
            ("echo", echo),
        ]:
            api.register_tool(claw.Tool(name=name, description="d", handler=handler))

    names = ("db", "disk", "refused", "echo")
    plugin = claw.Plugin(id="p", register=register, contracts=claw.PluginContracts(tools=names))
    defaults = attrs.evolve(host_config.agents.defaults, model="scripted/main")
    config = attrs.evolve(host_config, agents=claw.AgentsConfig(defaults=defaults))
    calls = [("db", {}), ("disk", {}), ("refused", {}), ("echo", {})]
    model = ScriptedModel([ScriptedReply(tool_calls=calls), "done"], context_window=100_000)
    async with claw.open_host(config, plugins=[plugin]) as host:
        host.models.register_provider("scripted", lambda name: model)
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        result = await host.run_turn("dm:alice", UserMessage("go"), sender_is_owner=True)
    assert result.reply.text == "done"
    seen = {m.name: m for m in model.calls[-1].messages if isinstance(m, ToolResult)}
    for name in ("db", "disk"):
        assert seen[name].is_error
        assert "PGSQL" not in seen[name].content and "/srv" not in seen[name].content
        assert "the host's log has the details" in seen[name].content
    assert seen["db"].content.startswith("DatabaseUnavailableError: ")
    assert seen["refused"].content == "CapabilityDeniedError: the audience does not allow this"
    assert seen["echo"].content == "stored \\ud800 text"
