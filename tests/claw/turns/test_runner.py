"""The turn runner and the context engine contract."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import claw
from claw.context import (
    AssembleParams,
    AssembleResult,
    CompactParams,
    CompactResult,
    ContextEngineInfo,
    IngestParams,
    IngestResult,
    build_memory_system_prompt_addition,
)
from claw.models import ContextOverflowError, ModelError, ToolResult, UserMessage
from claw_testing import ReferenceContextEngine, ScriptedFailure, ScriptedModel, ScriptedReply


def make_config(host_config: claw.HostConfig, **agent: Any) -> claw.HostConfig:
    defaults = attrs.evolve(host_config.agents.defaults, model="scripted/main", **agent)
    return attrs.evolve(host_config, agents=claw.AgentsConfig(defaults=defaults))


def with_engine(config: claw.HostConfig, engine_id: str) -> claw.HostConfig:
    return attrs.evolve(
        config,
        plugins=attrs.evolve(config.plugins, slots=claw.SlotsConfig(context_engine=engine_id)),
    )


def engine_plugin(engine: object, engine_id: str = "reference") -> claw.Plugin:
    def register(api: claw.PluginApi) -> None:
        api.register_context_engine(engine_id, lambda ctx: engine)

    return claw.Plugin(id=f"{engine_id}-plugin", register=register)


async def _echo(context: Any, arguments: Mapping[str, Any]) -> str:
    context.caller.assert_current()
    return f"echo {arguments.get('text')} for {context.session_key}"


def tool_plugin() -> claw.Plugin:
    def register(api: claw.PluginApi) -> None:
        api.register_tool(claw.Tool(name="echo", description="echo text", handler=_echo))

    return claw.Plugin(
        id="tools", register=register, contracts=claw.PluginContracts(tools=("echo",))
    )


@attrs.define
class Env:
    host: claw.Host
    model: ScriptedModel


@asynccontextmanager
async def _env(
    config: claw.HostConfig, model: ScriptedModel, plugins: list[claw.Plugin]
) -> AsyncIterator[Env]:
    async with claw.open_host(config, plugins=plugins) as host:
        host.models.register_provider("scripted", lambda name: model)
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        yield Env(host, model)


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel([], context_window=100_000)


@pytest.fixture
async def legacy_env(host_config: claw.HostConfig, model: ScriptedModel) -> AsyncIterator[Env]:
    async with _env(make_config(host_config), model, [tool_plugin()]) as env:
        yield env


@pytest.fixture
def engine(tmp_path: Path) -> ReferenceContextEngine:
    return ReferenceContextEngine(tmp_path / "engine.sqlite3")


@pytest.fixture
async def engine_env(
    host_config: claw.HostConfig, model: ScriptedModel, engine: ReferenceContextEngine
) -> AsyncIterator[Env]:
    config = with_engine(make_config(host_config), "reference")
    async with _env(config, model, [engine_plugin(engine), tool_plugin()]) as env:
        yield env


async def test_legacy_turn_admits_runs_and_ends_with_a_terminal_entry(legacy_env: Env) -> None:
    legacy_env.model.extend(["hello alice"])
    result = await legacy_env.host.run_turn(
        "dm:alice", UserMessage("hi", sender="alice"), sender_is_owner=True
    )
    assert result.reply.text == "hello alice"
    assert result.engine_id == "legacy"
    assert result.commit == "legacy"
    assert len(result.entry_ids) == 2
    turn = await legacy_env.host.transcripts.get_turn(result.turn_id)
    assert turn.terminal_entry_id == result.entry_ids[-1]
    assert turn.engine_id is None
    kinds = legacy_env.host.events.kinds()
    assert kinds.index("turn.admitted") < kinds.index("turn.terminal")


async def test_tools_run_in_a_bounded_loop_with_the_runs_capabilities(legacy_env: Env) -> None:
    legacy_env.model.extend([ScriptedReply(tool_calls=[("echo", {"text": "ping"})]), "done"])
    result = await legacy_env.host.run_turn(
        "dm:alice", UserMessage("use echo"), sender_is_owner=True
    )
    assert result.reply.text == "done"
    assert result.tool_rounds == 1
    second_call = legacy_env.model.calls[1]
    (tool_result,) = [m for m in second_call.messages if isinstance(m, ToolResult)]
    assert tool_result.content == "echo ping for dm:alice"
    assert "echo" in second_call.tool_names


async def test_tool_loop_stops_at_max_tool_rounds(
    host_config: claw.HostConfig, model: ScriptedModel
) -> None:
    config = make_config(host_config, max_tool_rounds=2)
    model.extend([ScriptedReply(tool_calls=[("echo", {"text": str(i)})]) for i in range(3)])
    async with _env(config, model, [tool_plugin()]) as env:
        result = await env.host.run_turn("dm:alice", UserMessage("loop"), sender_is_owner=True)
        assert result.tool_rounds == 2
        assert "stopped after 2 tool rounds" in result.reply.text


async def test_unknown_and_disallowed_tools_are_error_results(legacy_env: Env) -> None:
    legacy_env.model.extend([ScriptedReply(tool_calls=[("echo", {"text": "x"})]), "ok"])
    await legacy_env.host.run_turn(
        "dm:alice",
        UserMessage("no tools"),
        sender_is_owner=True,
        tool_policy=claw.ToolPolicy(deny={"echo"}),
    )
    first, second = legacy_env.model.calls
    assert first.tool_names == ()
    (result,) = [m for m in second.messages if isinstance(m, ToolResult)]
    assert result.is_error
    assert "unknown tool" in result.content


async def test_durable_engine_commits_the_inclusive_accepted_turn(
    engine_env: Env, engine: ReferenceContextEngine
) -> None:
    engine_env.model.extend([ScriptedReply(tool_calls=[("echo", {"text": "a"})]), "final"])
    result = await engine_env.host.run_turn("dm:alice", UserMessage("go"), sender_is_owner=True)
    assert result.engine_id == "reference"
    assert result.commit == "committed"
    ((key, turn_id, count),) = engine.advancements()
    assert (key, turn_id) == (result.advancement_key, result.turn_id)
    assert count == 4  # user, assistant with call, tool result, final assistant
    assert engine.calls[:2] == ["bootstrap:0", "assemble"]
    assert "commit_turn" in engine.calls
    assert "after_turn" in engine.calls


async def test_commit_is_idempotent_under_retry(
    engine_env: Env, engine: ReferenceContextEngine
) -> None:
    engine_env.model.extend(["first"])
    result = await engine_env.host.run_turn("dm:alice", UserMessage("go"), sender_is_owner=True)
    turn = await engine_env.host.transcripts.get_turn(result.turn_id)
    status = await engine_env.host.turns._commit(turn)
    assert status == "duplicate"
    assert len(engine.advancements()) == 1


async def test_advancement_keys_are_deterministic(engine_env: Env) -> None:
    from claw.turns._runner import advancement_key_for

    engine_env.model.extend(["a", "b"])
    first = await engine_env.host.run_turn("dm:alice", UserMessage("1"), sender_is_owner=True)
    second = await engine_env.host.run_turn("dm:alice", UserMessage("2"), sender_is_owner=True)
    assert first.advancement_key == advancement_key_for(first.session_id, 1)
    assert second.advancement_key == advancement_key_for(second.session_id, 3)
    assert first.advancement_key != second.advancement_key


@attrs.define
class PartialEngine:
    """An engine whose durable declaration can be switched on and off between turns."""

    inner: ReferenceContextEngine

    @property
    def info(self) -> ContextEngineInfo:
        return self.inner.info

    async def ingest(self, params: IngestParams) -> IngestResult:
        return await self.inner.ingest(params)

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        return await self.inner.assemble(params)

    async def compact(self, params: CompactParams) -> CompactResult:
        return await self.inner.compact(params)

    async def commit_turn(self, params: Any) -> Any:
        return await self.inner.commit_turn(params)


async def test_without_the_full_contract_a_turn_and_its_retries_take_the_legacy_path(
    host_config: claw.HostConfig, model: ScriptedModel, tmp_path: Path
) -> None:
    inner = ReferenceContextEngine(tmp_path / "e.sqlite3", durable=False)
    engine = PartialEngine(inner)
    config = with_engine(make_config(host_config), "reference")
    model.extend([ScriptedFailure(ModelError("down")), "recovered", "next"])
    async with _env(config, model, [engine_plugin(engine)]) as env:
        with pytest.raises(claw.models.AllModelsFailedError):
            await env.host.run_turn("dm:alice", UserMessage("one"), sender_is_owner=True)
        (turn,) = await env.host.transcripts.turns()
        assert turn.engine_id is None  # admitted on the legacy path: nothing to commit
        inner.durable = True  # the engine now declares the contract ...
        retried = await env.host.retry_turn(turn.turn_id, sender_is_owner=True)
        assert retried.path == "legacy"  # ... but the retry keeps its turn's path
        assert retried.engine_id == "reference"  # the configured engine is left in place
        assert retried.commit == "legacy"
        assert "commit_turn" not in inner.calls
        assert "ingest" in inner.calls  # the legacy path feeds the engine message by message
        following = await env.host.run_turn("dm:alice", UserMessage("two"), sender_is_owner=True)
        assert following.path == "durable"  # the next logical turn tries the contract again
        assert following.commit == "committed"
        assert [a[1] for a in inner.advancements()] == [following.turn_id]
        assert "turn.legacy_path" in env.host.events.kinds()


async def test_an_engine_without_the_contract_still_ingests_and_assembles(
    host_config: claw.HostConfig, model: ScriptedModel, tmp_path: Path
) -> None:
    """The seed's simplest engines declare no transcript semantics; they still serve turns."""
    inner = ReferenceContextEngine(tmp_path / "e.sqlite3", durable=False)
    config = with_engine(make_config(host_config), "reference")
    model.extend([ScriptedReply(tool_calls=[("echo", {"text": "a"})]), "done"])
    async with _env(config, model, [engine_plugin(PartialEngine(inner)), tool_plugin()]) as env:
        result = await env.host.run_turn("dm:alice", UserMessage("hi"), sender_is_owner=True)
    assert (result.path, result.engine_id, result.commit) == ("legacy", "reference", "legacy")
    assert inner.calls.index("ingest") < inner.calls.index("assemble")
    assert inner.calls.count("ingest") == 4  # user, assistant with call, tool result, reply
    assert "commit_turn" not in inner.calls
    assert inner.advancements() == []


@attrs.define
class ExplodingEngine:
    calls: list[str] = attrs.field(factory=list)

    @property
    def info(self) -> ContextEngineInfo:
        return ContextEngineInfo(id="boom", name="Boom")

    async def ingest(self, params: IngestParams) -> IngestResult:
        raise AssertionError("not called")  # pragma: no cover

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        self.calls.append("assemble")
        raise RuntimeError("engine bug")

    async def compact(self, params: CompactParams) -> CompactResult:
        raise AssertionError("not called")  # pragma: no cover


async def test_a_failing_engine_is_quarantined_and_the_legacy_engine_takes_over(
    host_config: claw.HostConfig, model: ScriptedModel, tmp_path: Path
) -> None:
    exploding = ExplodingEngine()

    @attrs.define
    class DurableExploding(ExplodingEngine):
        @property
        def info(self) -> ContextEngineInfo:
            return ContextEngineInfo(
                id="boom",
                name="Boom",
                transcript_semantics=ReferenceContextEngine(
                    tmp_path / "x.sqlite3"
                ).info.transcript_semantics,
            )

        async def commit_turn(self, params: Any) -> Any:
            raise AssertionError("not called")  # pragma: no cover

    exploding = DurableExploding()
    config = with_engine(make_config(host_config), "boom")
    model.extend(["answer one", "answer two"])
    async with _env(config, model, [engine_plugin(exploding, "boom")]) as env:
        result = await env.host.run_turn("dm:alice", UserMessage("hi"), sender_is_owner=True)
        assert result.reply.text == "answer one"
        record = env.host.turns.slot.quarantined["boom"]
        assert (record.engine_id, record.plugin_id, record.operation) == (
            "boom",
            "boom-plugin",
            "assemble",
        )
        assert record.reason == "RuntimeError: engine bug"
        (event,) = env.host.events.events("engine.quarantined")
        assert event.data == {
            "engine_id": "boom",
            "plugin_id": "boom-plugin",
            "operation": "assemble",
            "reason": "RuntimeError: engine bug",
        }
        again = await env.host.run_turn("dm:alice", UserMessage("hi again"), sender_is_owner=True)
        assert again.engine_id == "legacy"
        assert exploding.calls == ["assemble"]


async def test_accepted_host_params_filters_host_fields(
    host_config: claw.HostConfig, model: ScriptedModel, tmp_path: Path
) -> None:
    inner = ReferenceContextEngine(tmp_path / "e.sqlite3")

    @attrs.define
    class Restricted(PartialEngine):
        @property
        def info(self) -> ContextEngineInfo:
            return attrs.evolve(
                self.inner.info, accepted_host_params=["session_key", "available_tools"]
            )

    config = with_engine(make_config(host_config), "reference")
    model.extend(["x"])
    async with _env(config, model, [engine_plugin(Restricted(inner)), tool_plugin()]) as env:
        await env.host.run_turn("dm:alice", UserMessage("hi"), sender_is_owner=True)
    (params,) = inner.assembled
    assert params.session_key == "dm:alice"
    assert params.available_tools == frozenset({"echo"})
    assert params.session_id is not None  # the session's identity is never filtered
    assert params.agent_id is None
    assert params.context_window is None


async def test_undeclared_engines_receive_all_host_fields(
    engine_env: Env, engine: ReferenceContextEngine
) -> None:
    engine_env.model.extend(["x"])
    await engine_env.host.run_turn("dm:alice", UserMessage("hi"), sender_is_owner=True)
    (params,) = engine.assembled
    assert params.session_key == "dm:alice"
    assert params.session_id is not None
    assert params.agent_id == "main"
    assert params.context_window == 100_000
    assert params.model == "scripted/main"


def test_unknown_accepted_host_params_are_a_contract_error() -> None:
    with pytest.raises(claw.ContractError, match="unknown host fields"):
        ContextEngineInfo(id="x", name="x", accepted_host_params=["sessionKey"])


def test_prompt_addition_is_refused_outside_assemble() -> None:
    with pytest.raises(claw.ContractError, match="only available while"):
        build_memory_system_prompt_addition(
            available_tools=set(), citations_mode="auto", agent_session_key="dm:alice"
        )


async def test_prompt_addition_refuses_another_runs_context(
    host_config: claw.HostConfig, model: ScriptedModel, tmp_path: Path
) -> None:
    errors: list[Exception] = []

    @attrs.define
    class Crossing(PartialEngine):
        async def assemble(self, params: AssembleParams) -> AssembleResult:
            try:
                build_memory_system_prompt_addition(
                    available_tools=params.available_tools or (),
                    citations_mode=params.citations_mode,
                    agent_session_key="grp:other",
                )
            except claw.ContractError as exc:
                errors.append(exc)
            return await self.inner.assemble(params)

    config = with_engine(make_config(host_config), "reference")
    model.extend(["x"])
    inner = ReferenceContextEngine(tmp_path / "e.sqlite3")
    async with _env(config, model, [engine_plugin(Crossing(inner))]) as env:
        await env.host.run_turn("dm:alice", UserMessage("hi"), sender_is_owner=True)
    assert len(errors) == 1
    assert "unchanged" in str(errors[0])


async def test_prompt_addition_inside_assemble_names_the_memory_tools(
    host_config: claw.HostConfig, model: ScriptedModel, tmp_path: Path
) -> None:
    async def search(context: Any, arguments: Mapping[str, Any]) -> str:
        return ""

    def register(api: claw.PluginApi) -> None:
        api.register_tool(claw.Tool(name="memory_search", description="d", handler=search))
        api.register_tool(claw.Tool(name="memory_get", description="d", handler=search))

    tools = claw.Plugin(
        id="mem-tools",
        register=register,
        contracts=claw.PluginContracts(tools=("memory_search", "memory_get")),
    )
    engine = ReferenceContextEngine(tmp_path / "e.sqlite3")
    config = with_engine(make_config(host_config), "reference")
    model.extend(["x"])
    async with _env(config, model, [engine_plugin(engine), tools]) as env:
        await env.host.run_turn("dm:alice", UserMessage("hi"), sender_is_owner=True)
    prompt = model.calls[0].system_prompt
    assert "## Memory" in prompt
    assert "memory_search" in prompt
    assert "memory_get" in prompt


async def test_thread_bootstrap_projection_is_reused_until_the_epoch_changes(
    host_config: claw.HostConfig, model: ScriptedModel, engine: ReferenceContextEngine
) -> None:
    compaction = attrs.evolve(host_config.agents.defaults.compaction, keep_recent_tokens=1)
    config = with_engine(make_config(host_config, compaction=compaction), "reference")
    async with _env(config, model, [engine_plugin(engine), tool_plugin()]) as engine_env:
        await _projection_scenario(engine_env)


async def _projection_scenario(engine_env: Env) -> None:
    engine_env.model.extend(
        [
            ScriptedReply(tool_calls=[("echo", {"text": "secret-token-123"})]),
            "one",
            "two",
            "summary",
            "three",
        ]
    )
    first = await engine_env.host.run_turn("dm:alice", UserMessage("a"), sender_is_owner=True)
    assert first.projection == "bootstrapped"
    projected = engine_env.host.turns.thread_projection(first.session_id)
    assert projected is not None
    assert "secret-token-123" not in repr(projected)
    second = await engine_env.host.run_turn("dm:alice", UserMessage("b"), sender_is_owner=True)
    assert second.projection == "reused"
    assert (await engine_env.host.compact("dm:alice")).compacted
    third = await engine_env.host.run_turn("dm:alice", UserMessage("c"), sender_is_owner=True)
    assert third.projection == "bootstrapped"


async def test_legacy_compaction_summarises_older_entries_and_keeps_the_tail(
    host_config: claw.HostConfig, model: ScriptedModel
) -> None:
    compaction = attrs.evolve(host_config.agents.defaults.compaction, keep_recent_tokens=10)
    config = make_config(host_config, compaction=compaction)
    model.extend(["reply " * 20, "reply two " * 20, "the summary"])
    async with _env(config, model, []) as env:
        await env.host.run_turn(
            "dm:alice", UserMessage("first question " * 10), sender_is_owner=True
        )
        await env.host.run_turn("dm:alice", UserMessage("second question"), sender_is_owner=True)
        result = await env.host.compact("dm:alice")
        assert result.compacted
        assert result.tokens_before is not None and result.tokens_after is not None
        assert result.tokens_after < result.tokens_before
        row = env.host.sessions.get_nowait("dm:alice")
        assert row is not None
        visible = await env.host.transcripts.visible_messages(row.session_id)
        assert isinstance(visible[0], claw.models.CompactionSummary)
        assert visible[0].text == "the summary"
        assert isinstance(visible[1], UserMessage)
        assert visible[1].text == "second question"
        assert "compaction.completed" in env.host.events.kinds()


async def test_overflow_compacts_once_and_retries(
    host_config: claw.HostConfig, model: ScriptedModel
) -> None:
    compaction = attrs.evolve(host_config.agents.defaults.compaction, keep_recent_tokens=5)
    config = make_config(host_config, compaction=compaction)
    model.extend(
        ["early answer " * 30, ScriptedFailure(ContextOverflowError("too long")), "sum", "fits now"]
    )
    async with _env(config, model, []) as env:
        await env.host.run_turn("dm:alice", UserMessage("early " * 40), sender_is_owner=True)
        result = await env.host.run_turn("dm:alice", UserMessage("late"), sender_is_owner=True)
        assert result.reply.text == "fits now"
        assert result.compaction is not None and result.compaction.compacted
        assert "turn.overflow" in env.host.events.kinds()


async def test_no_model_configured_is_a_config_error(host_config: claw.HostConfig) -> None:
    async with claw.open_host(host_config) as host:
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        with pytest.raises(claw.ConfigError, match="agents.defaults.model"):
            await host.run_turn("dm:alice", UserMessage("hi"), sender_is_owner=True)


async def test_turns_of_one_session_are_serialised(legacy_env: Env) -> None:
    legacy_env.model.extend(["one", "two"])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_turn, legacy_env.host, "a")
        nursery.start_soon(_turn, legacy_env.host, "b")
    turns = await legacy_env.host.transcripts.turns()
    assert [t.first_seq for t in turns] == [1, 3]


async def _turn(host: claw.Host, text: str) -> None:
    await host.run_turn("dm:alice", UserMessage(text), sender_is_owner=True)


async def test_engine_bootstraps_once_per_incarnation_maintains_and_is_disposed(
    host_config: claw.HostConfig, model: ScriptedModel, tmp_path: Path
) -> None:
    engine = ReferenceContextEngine(tmp_path / "e.sqlite3")
    legacy_first = with_engine(make_config(host_config), "legacy")
    model.extend(["earlier", "one", "two"])
    async with _env(legacy_first, model, []) as env:
        await env.host.run_turn("dm:alice", UserMessage("before the engine"), sender_is_owner=True)
    config = with_engine(make_config(host_config), "reference")
    async with claw.open_host(config, plugins=[engine_plugin(engine)]) as host:
        host.models.register_provider("scripted", lambda name: model)
        await host.run_turn("dm:alice", UserMessage("first"), sender_is_owner=True)
        await host.run_turn("dm:alice", UserMessage("second"), sender_is_owner=True)
    assert engine.calls.count("bootstrap:2") == 1  # the two messages before its first turn
    assert not [c for c in engine.calls if c.startswith("bootstrap:") and c != "bootstrap:2"]
    assert engine.calls.count("maintain") == 2
    assert engine.calls[-1] == "dispose"


async def test_a_turn_whose_model_call_fails_is_closed_as_failed_on_the_spot(
    legacy_env: Env,
) -> None:
    legacy_env.model.extend([ScriptedFailure(ModelError("down")), "later", "retried"])
    with pytest.raises(claw.models.AllModelsFailedError):
        await legacy_env.host.run_turn("dm:alice", UserMessage("one"), sender_is_owner=True)
    (turn,) = await legacy_env.host.transcripts.turns()
    assert turn.status is claw.turns.TurnStatus.FAILED
    assert turn.close_reason is not None and "AllModelsFailedError" in turn.close_reason
    (event,) = legacy_env.host.events.events("turn.failed")
    assert event.data["turn_id"] == turn.turn_id
    await legacy_env.host.run_turn("dm:alice", UserMessage("two"), sender_is_owner=True)
    with pytest.raises(claw.turns.TurnLedgerError, match="was admitted after it"):
        await legacy_env.host.retry_turn(turn.turn_id, sender_is_owner=True)


async def test_a_turn_on_an_unknown_session_says_how_to_create_it(claw_host: claw.Host) -> None:
    with pytest.raises(claw.sessions.SessionNotFoundError) as info:
        await claw_host.run_turn("dm:bob", UserMessage("hi"), sender_is_owner=True)
    message = str(info.value)
    assert message.startswith("no session 'dm:bob': create it before its first turn")
    assert "host.sessions.create('dm:bob', agent_id='main', chat_type='direct')" in message
    with pytest.raises(claw.sessions.SessionNotFoundError, match=r"host\.sessions\.create"):
        async with claw_host.open_run("dm:bob", sender_is_owner=True):
            pass  # pragma: no cover
