"""A failing context engine loses no turn and affects no other session (issue 14 §2)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import claw
from claw.context import (
    AssembleParams,
    AssembleResult,
    BootstrapParams,
    CommitTurnParams,
    CommitTurnResult,
    CompactParams,
    CompactResult,
    ContextEngineInfo,
    ContextProjection,
    IngestParams,
    IngestResult,
)
from claw.models import UserMessage
from claw.turns import TurnStatus
from claw_testing import ReferenceContextEngine, ScriptedModel

from .test_runner import Env, _env, engine_plugin, make_config, with_engine


@attrs.define
class FlakyEngine:
    """Delegates to a reference engine; ``commit`` says how commit_turn misbehaves."""

    inner: ReferenceContextEngine
    commit: str = "ok"  # ok | raise | none | bogus
    fail_bootstrap: bool = False
    fail_compact: bool = False
    owns_compaction: bool = False
    reported_id: str = "reference"
    accepted: tuple[str, ...] | None = None
    seen: list[Any] = attrs.field(factory=list)

    @property
    def info(self) -> ContextEngineInfo:
        return attrs.evolve(
            self.inner.info,
            id=self.reported_id,
            owns_compaction=self.owns_compaction,
            accepted_host_params=self.accepted,
        )

    async def ingest(self, params: IngestParams) -> IngestResult:
        self.seen.append(params)
        return await self.inner.ingest(params)

    async def bootstrap(self, params: BootstrapParams) -> None:
        if self.fail_bootstrap:
            raise RuntimeError("bootstrap bug")
        await self.inner.bootstrap(params)

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        return await self.inner.assemble(params)

    async def compact(self, params: CompactParams) -> CompactResult:
        self.seen.append(params)
        if self.fail_compact:
            raise RuntimeError("compact bug")
        return await self.inner.compact(params)

    async def commit_turn(self, params: CommitTurnParams) -> Any:
        self.seen.append(params)
        if self.commit == "raise":
            raise RuntimeError("commit bug")
        if self.commit == "none":
            return None
        if self.commit == "bogus":
            return CommitTurnResult(status="bogus")  # type: ignore[arg-type]
        return await self.inner.commit_turn(params)


@pytest.fixture
def flaky(tmp_path: Path) -> FlakyEngine:
    return FlakyEngine(ReferenceContextEngine(tmp_path / "engine.sqlite3"))


@pytest.fixture
async def env(host_config: claw.HostConfig, flaky: FlakyEngine) -> AsyncIterator[Env]:
    model = ScriptedModel([], context_window=100_000)
    config = with_engine(make_config(host_config), "reference")
    async with _env(config, model, [engine_plugin(flaky)]) as env:
        await env.host.sessions.create("dm:bob", agent_id="main", chat_type="direct")
        yield env


async def _run(env: Env, key: str, text: str) -> Any:
    env.model.extend([f"reply to {text}"])
    return await env.host.run_turn(key, UserMessage(text), sender_is_owner=True)


@pytest.mark.parametrize("mode", ["raise", "none", "bogus"])
async def test_a_failed_commit_is_queued_not_recorded_and_blocks_only_its_session(
    env: Env, flaky: FlakyEngine, mode: str
) -> None:
    flaky.commit = mode
    first = await _run(env, "dm:alice", "one")
    assert (first.path, first.commit) == ("durable", "failed")
    turn = await env.host.transcripts.get_turn(first.turn_id)
    assert turn.status is TurnStatus.TERMINAL and turn.needs_commit  # never "success"
    (failed,) = env.host.events.events("turn.commit_failed")
    assert failed.data["turn_id"] == first.turn_id and failed.data["engine_id"] == "reference"
    assert not env.host.turns.slot.quarantined  # no quarantine for everyone

    second = await _run(env, "dm:alice", "two")  # the queue is still blocked
    assert (second.path, second.commit, second.engine_id) == ("legacy", "legacy", "reference")
    (legacy,) = env.host.events.events("turn.legacy_path")
    assert first.turn_id in legacy.data["reason"]

    flaky.commit = "ok"
    other = await _run(env, "dm:bob", "hello")  # another session: durable as ever
    assert (other.path, other.commit) == ("durable", "committed")

    third = await _run(env, "dm:alice", "three")  # the retry drains the queue first
    assert (third.path, third.commit) == ("durable", "committed")
    committed = [t for _, t, _ in flaky.inner.advancements()]
    assert committed == [other.turn_id, first.turn_id, third.turn_id]
    assert (await env.host.transcripts.get_turn(first.turn_id)).status is TurnStatus.COMMITTED


async def test_a_failed_commit_is_retried_at_the_next_start(
    host_config: claw.HostConfig, flaky: FlakyEngine
) -> None:
    config = with_engine(make_config(host_config), "reference")
    flaky.commit = "raise"
    async with _env(config, ScriptedModel(["a"]), [engine_plugin(flaky)]) as env:
        first = await _run(env, "dm:alice", "one")
        assert first.commit == "failed"
    flaky.commit = "ok"
    async with claw.open_host(config, plugins=[engine_plugin(flaky)]) as host:
        turn = await host.transcripts.get_turn(first.turn_id)
        assert (turn.status, turn.commit_outcome) == (TurnStatus.COMMITTED, "committed")
    assert [t for _, t, _ in flaky.inner.advancements()] == [first.turn_id]


@pytest.mark.parametrize("keep_session_id", [True, False])
async def test_an_admission_from_before_a_reset_is_closed_as_stale_not_committed(
    env: Env, flaky: FlakyEngine, keep_session_id: bool
) -> None:
    flaky.commit = "raise"
    first = await _run(env, "dm:alice", "before the reset")
    await env.host.sessions.reset("dm:alice", keep_session_id=keep_session_id)
    flaky.commit = "ok"
    after = await _run(env, "dm:alice", "after the reset")
    assert (after.path, after.commit) == ("durable", "committed")
    turn = await env.host.transcripts.get_turn(first.turn_id)
    assert turn.status is TurnStatus.STALE and not turn.needs_commit
    assert turn.close_reason is not None and "reset" in turn.close_reason
    assert [e.data["turn_id"] for e in env.host.events.events("turn.stale")] == [first.turn_id]
    assert [t for _, t, _ in flaky.inner.advancements()] == [after.turn_id]


async def test_a_stale_admission_found_at_start_is_closed_not_committed(
    host_config: claw.HostConfig, flaky: FlakyEngine
) -> None:
    config = with_engine(make_config(host_config), "reference")
    flaky.commit = "raise"
    async with _env(config, ScriptedModel(["a"]), [engine_plugin(flaky)]) as env:
        first = await _run(env, "dm:alice", "one")
        await env.host.sessions.reset("dm:alice", keep_session_id=False)
    flaky.commit = "ok"
    async with claw.open_host(config, plugins=[engine_plugin(flaky)]) as host:
        assert (await host.transcripts.get_turn(first.turn_id)).status is TurnStatus.STALE
    assert flaky.inner.advancements() == []


async def test_a_failed_bootstrap_means_the_engine_does_not_assemble_that_turn(
    env: Env, flaky: FlakyEngine
) -> None:
    flaky.fail_bootstrap = True
    result = await _run(env, "dm:alice", "one")
    assert result.engine_id == "legacy"
    assert "assemble" not in flaky.inner.calls
    (record,) = env.host.turns.slot.quarantined.values()
    assert (record.operation, record.plugin_id) == ("bootstrap", "reference-plugin")


async def test_a_failed_compact_of_an_engine_that_owns_compaction_is_reported(
    env: Env, flaky: FlakyEngine
) -> None:
    flaky.owns_compaction = True
    flaky.fail_compact = True
    await _run(env, "dm:alice", "one")
    result = await env.host.compact("dm:alice")
    assert (result.ok, result.compacted) == (False, False)
    assert result.reason is not None and "compact bug" in result.reason
    (event,) = env.host.events.events("compaction.failed")
    assert event.data["engine_id"] == "reference" and "compact bug" in event.data["error"]
    stats = await env.host.transcripts.stats((await env.host.sessions.get("dm:alice")).session_id)  # type: ignore[union-attr]
    assert stats.compaction_count == 0  # the runtime did not compact in its place
    assert "compaction.completed" not in env.host.events.kinds()


async def test_session_id_reaches_the_engine_whatever_it_accepts(
    env: Env, flaky: FlakyEngine
) -> None:
    flaky.accepted = ("session_key",)
    result = await _run(env, "dm:alice", "one")
    await env.host.compact("dm:alice")
    commits = [p for p in flaky.seen if isinstance(p, CommitTurnParams)]
    compacts = [p for p in flaky.seen if isinstance(p, CompactParams)]
    assert [p.session_id for p in commits] == [result.session_id]
    assert [p.session_id for p in compacts] == [result.session_id]
    assert flaky.inner.assembled[-1].session_id == result.session_id
    assert flaky.inner.assembled[-1].agent_id is None  # optional fields stay filtered


async def test_an_info_id_that_differs_from_the_registered_id_warns_only(
    env: Env, flaky: FlakyEngine, caplog: pytest.LogCaptureFixture
) -> None:
    flaky.reported_id = "reference-v2"
    with caplog.at_level(logging.WARNING, logger="claw.context"):
        result = await _run(env, "dm:alice", "one")
    assert (result.engine_id, result.commit) == ("reference", "committed")
    assert not env.host.turns.slot.quarantined
    assert 'reports info.id "reference-v2"' in caplog.text


@attrs.define
class EpochEngine(FlakyEngine):
    """Returns the projection epoch it is told to (untrimmed, empty, ...)."""

    epoch: Any = "e1"

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        result = await self.inner.assemble(params)
        projection = ContextProjection(mode="thread_bootstrap", epoch="x")
        object.__setattr__(projection, "epoch", self.epoch)  # as a careless engine might
        return attrs.evolve(result, context_projection=projection)


async def test_a_thread_bootstrap_epoch_is_trimmed_and_an_empty_one_projects_per_turn(
    host_config: claw.HostConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = EpochEngine(ReferenceContextEngine(tmp_path / "e.sqlite3"))
    config = with_engine(make_config(host_config), "reference")
    async with _env(config, ScriptedModel([]), [engine_plugin(engine)]) as env:
        engine.epoch = "e1"
        assert (await _run(env, "dm:alice", "one")).projection == "bootstrapped"
        engine.epoch = " e1 \n"
        assert (await _run(env, "dm:alice", "two")).projection == "reused"
        engine.epoch = "   "
        with caplog.at_level(logging.WARNING, logger="claw.turns"):
            empty = await _run(env, "dm:alice", "three")
        assert empty.projection == "per-turn"
        assert "empty" in caplog.text
        assert env.host.events.events("turn.projection_invalid")
        assert env.host.turns.thread_projection(empty.session_id) is None
    assert ContextProjection(mode="thread_bootstrap", epoch=" e2 ").epoch == "e2"


async def test_a_changed_tool_set_re_projects_the_thread(
    host_config: claw.HostConfig, tmp_path: Path
) -> None:
    from .test_runner import tool_plugin

    engine = EpochEngine(ReferenceContextEngine(tmp_path / "e.sqlite3"))
    config = with_engine(make_config(host_config), "reference")
    async with _env(config, ScriptedModel([]), [engine_plugin(engine), tool_plugin()]) as env:
        assert (await _run(env, "dm:alice", "one")).projection == "bootstrapped"
        assert (await _run(env, "dm:alice", "two")).projection == "reused"
        env.model.extend(["no tools now"])
        fewer = await env.host.run_turn(
            "dm:alice",
            UserMessage("three"),
            sender_is_owner=True,
            tool_policy=claw.ToolPolicy(deny={"echo"}),
        )
        assert fewer.projection == "bootstrapped"
