"""The plugins' read-only transcript facet: sessions, turns and the message cursor."""

from __future__ import annotations

from pathlib import Path

import pytest

from claw import UserMessage
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
