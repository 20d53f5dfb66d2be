"""The plugins' read-only transcript facet: sessions, turns and the message cursor."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from claw import UserMessage, _transcript_reader
from claw._transcript_reader import TranscriptReader
from claw.models import AssistantMessage, ToolCall, ToolResult
from claw.turns import TranscriptStore, TurnStatus
from claw_testing import (
    MemoryWorkspace,
    ScriptedModel,
    SessionBuilder,
    harness_config,
    open_harness_host,
)


async def test_plugins_read_sessions_turns_and_message_deltas(tmp_path: Path) -> None:
    workspace = MemoryWorkspace(tmp_path / "ws")
    model = ScriptedModel(["First answer.", "Second answer."])
    async with open_harness_host(
        harness_config(workspace.root, tmp_path / "state"), model=model
    ) as host:
        row = await SessionBuilder(host).owner_direct("dm:alice")
        await host.run_turn("dm:alice", UserMessage("hello"), sender_is_owner=True)
        reader = host._new_transcript_reader()
        (info,) = await reader.list_sessions(agent_id=row.agent_id)
        assert (info.session_key, info.session_id) == ("dm:alice", row.session_id)
        assert await reader.list_sessions(agent_id="someone-else") == []

        first = await reader.read_visible_message_delta(row.session_id)
        assert first.rebuilt
        assert [m.text for m in first.messages] == ["hello", "First answer."]

        await host.run_turn("dm:alice", UserMessage("again"), sender_is_owner=True)
        (changed,) = await reader.list_sessions(agent_id=row.agent_id)
        assert changed.change_token != info.change_token
        later = await reader.read_visible_message_delta(row.session_id, first.cursor)
        assert not later.rebuilt
        assert [m.text for m in later.messages] == ["again", "Second answer."]


async def test_a_failed_turn_does_not_hide_later_turns_from_memory(tmp_path: Path) -> None:
    """The reader skips a turn that is still open instead of stopping at it."""
    from claw.models import ModelError
    from claw_testing import ScriptedFailure

    workspace = MemoryWorkspace(tmp_path / "ws")
    model = ScriptedModel(["First answer.", ScriptedFailure(ModelError("down")), "Third answer."])
    async with open_harness_host(
        harness_config(workspace.root, tmp_path / "state"), model=model
    ) as host:
        row = await SessionBuilder(host).owner_direct("dm:alice")
        reader = host._new_transcript_reader()
        await host.run_turn("dm:alice", UserMessage("one"), sender_is_owner=True)
        before = (await reader.list_sessions(agent_id=row.agent_id))[0].change_token
        try:
            await host.run_turn("dm:alice", UserMessage("two"), sender_is_owner=True)
        except Exception:
            pass
        else:  # pragma: no cover - the script fails this turn
            raise AssertionError("the second turn should have failed")
        failed = (await reader.list_sessions(agent_id=row.agent_id))[0].change_token
        assert failed != before  # closing the turn changed what readers see
        await host.run_turn("dm:alice", UserMessage("three"), sender_is_owner=True)
        texts = [t.text for t in await reader.read_turns(row.session_id)]
        assert texts == ["one", "First answer.", "two", "three", "Third answer."]


async def test_a_turn_left_open_by_a_dead_process_is_aborted_at_the_next_open(
    tmp_path: Path,
) -> None:
    from claw.turns import TurnStatus
    from claw.turns._runner import advancement_key_for

    workspace = MemoryWorkspace(tmp_path / "ws")
    config = harness_config(workspace.root, tmp_path / "state")
    async with open_harness_host(config, model=ScriptedModel(["A."])) as host:
        row = await SessionBuilder(host).owner_direct("dm:alice")
        await host.run_turn("dm:alice", UserMessage("one"), sender_is_owner=True)
        # What a process killed during the model call leaves behind: an admitted turn.
        await host.transcripts.record_admitted(
            "dm:alice",
            row.session_id,
            UserMessage("interrupted"),
            turn_id="open-turn",
            advancement_key=advancement_key_for(row.session_id, 3),
        )
        reader = host._new_transcript_reader()
        assert [t.text for t in await reader.read_turns(row.session_id)] == ["one", "A."]
    async with open_harness_host(config, model=ScriptedModel(["B."])) as host:
        turn = await host.transcripts.get_turn("open-turn")
        assert turn.status is TurnStatus.ABORTED
        assert turn.close_reason is not None
        assert [e.data["turn_id"] for e in host.events.events("turn.aborted")] == ["open-turn"]
        await host.run_turn("dm:alice", UserMessage("two"), sender_is_owner=True)
        texts = [t.text for t in await host._new_transcript_reader().read_turns(row.session_id)]
        assert texts == ["one", "A.", "interrupted", "two", "B."]


async def test_listing_many_sessions_reads_the_transcript_store_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory provider lists its sessions after every transcript write: two reads per
    session (on PostgreSQL, round trips) made that listing cost in proportion to every
    session, whatever changed."""
    from claw import AssistantMessage

    workspace = MemoryWorkspace(tmp_path / "ws")
    async with open_harness_host(
        harness_config(workspace.root, tmp_path / "state"), model=ScriptedModel([])
    ) as host:
        builder = SessionBuilder(host)
        for i in range(30):
            row = await builder.owner_direct(f"dm:u{i}", agent_id=f"agent-{i % 3}")
            await host.transcripts.append(
                row.session_key, row.session_id, [UserMessage(f"q{i}"), AssistantMessage("a")]
            )
        store = host.transcripts
        reads = 0
        read = store._read  # type: ignore[attr-defined]

        async def counted(*args: object, **kwargs: object) -> object:
            nonlocal reads
            reads += 1
            return await read(*args, **kwargs)

        monkeypatch.setattr(store, "_read", counted)
        reader = host._new_transcript_reader()
        listed = await reader.list_sessions()
        assert (len(listed), reads) == (30, 1)
        await host.transcripts.append(row.session_key, row.session_id, [UserMessage("more")])
        mine = await reader.list_sessions(agent_id="agent-2")
        assert (len(mine), reads) == (10, 2)
        assert {s.session_key for s in mine} == {f"dm:u{i}" for i in range(2, 30, 3)}
        changed = {s.session_key: s.change_token for s in mine}
        assert changed[row.session_key] == "3:3:" + changed[row.session_key].split(":")[2] + ":"


class _NoSessions:
    """A session lister with no rows (these tests read turns only)."""

    async def list(self, agent_id: str | None = None) -> list[Any]:
        return []

    async def aclose(self) -> None:
        return None


@pytest.fixture
def ledger(ledger_store: TranscriptStore) -> TranscriptStore:
    return ledger_store


def _reader(store: TranscriptStore) -> TranscriptReader:
    reader = TranscriptReader(_NoSessions())
    reader._attach(store)
    return reader


async def test_a_reader_reads_again_only_past_the_turns_it_kept(
    ledger: TranscriptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turns in flight, failed, with tool calls, across sessions: a reader that kept
    what it read answers as a new reader does, and reads only the entries after the
    first one in flight."""
    rng = random.Random(5)
    asked: list[int] = []
    read_entries = ledger.read_entries

    async def counting(session_id: str, **kwargs: Any) -> Any:
        asked.append(kwargs.get("after_seq", 0))
        return await read_entries(session_id, **kwargs)

    monkeypatch.setattr(ledger, "read_entries", counting)
    kept = _reader(ledger)
    open_turns: dict[str, str] = {}
    # Per session: the last entry when it was last read, if no turn was in flight then.
    settled_at: dict[str, int] = {}
    incremental = 0
    for step in range(60):
        sid = rng.choice(["s1", "s2"])
        key = f"agent:main:{sid}"
        roll = rng.random()
        if sid in open_turns and roll < 0.5:  # the turn in flight ends, or fails
            turn_id = open_turns.pop(sid)
            if rng.random() < 0.7:
                await ledger.append(
                    key, sid, [AssistantMessage(f"answer {step}")], turn_id=turn_id, terminal=True
                )
            else:
                await ledger.close_turn(turn_id, TurnStatus.FAILED, "ModelError: down")
        elif sid in open_turns:  # the turn in flight calls a tool
            call = ToolCall(id=f"c{step}", name="lookup")
            await ledger.append(
                key,
                sid,
                [
                    AssistantMessage(f"calling {step}", tool_calls=(call,)),
                    call,
                    ToolResult(call_id=f"c{step}", name="lookup", content="ok"),
                ],
                turn_id=open_turns[sid],
            )
        elif roll < 0.8:  # a turn is admitted
            open_turns[sid] = f"t{step}"
            await ledger.record_admitted(
                key,
                sid,
                UserMessage(f"question {step}"),
                turn_id=f"t{step}",
                advancement_key=f"a{step}",
            )
        else:  # an entry of no turn
            await ledger.append(key, sid, [UserMessage(f"note {step}")])
        for s in ("s1", "s2"):
            asked.clear()
            got = await kept.read_turns(s)
            assert got == await _reader(ledger).read_turns(s), f"step {step}"
            if s in settled_at:
                assert asked[0] == settled_at[s], f"step {step}"
                incremental += 1
            settled_at.pop(s, None)
            if s not in open_turns:
                settled_at[s] = (await ledger.stats(s)).last_seq
    assert incremental >= 30


async def test_a_reopened_turn_hides_its_entries_again_from_a_reader_that_kept_them(
    ledger: TranscriptStore,
) -> None:
    reader = _reader(ledger)
    await ledger.record_admitted(
        "agent:main:chat", "s1", UserMessage("first"), turn_id="t1", advancement_key="a1"
    )
    assert await reader.read_turns("s1") == []
    await ledger.close_turn("t1", TurnStatus.FAILED, "ModelError: down")
    assert [t.text for t in await reader.read_turns("s1")] == ["first"]
    await ledger.reopen_turn("t1")  # retried: in flight again
    assert await reader.read_turns("s1") == []
    await ledger.append(
        "agent:main:chat", "s1", [AssistantMessage("done")], turn_id="t1", terminal=True
    )
    assert [t.text for t in await reader.read_turns("s1")] == ["first", "done"]


async def test_a_reader_keeps_at_most_its_budget_of_turns(
    ledger: TranscriptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_transcript_reader, "_CACHED_TURNS", 5)
    reader = _reader(ledger)
    for sid, n in (("s1", 3), ("s2", 2), ("s3", 6), ("s4", 2)):
        turns = [UserMessage(f"{sid} {i}") for i in range(n)]
        await ledger.append(f"agent:main:{sid}", sid, turns)
    counts = [len(await reader.read_turns(sid)) for sid in ("s1", "s2", "s3", "s4")]
    assert counts == [3, 2, 6, 2]
    # s3 (6 turns) was never kept; s1 (3) made room for s4 (2) beside s2 (2).
    assert reader._turns.sizes() == {"s2": 2, "s4": 2}
