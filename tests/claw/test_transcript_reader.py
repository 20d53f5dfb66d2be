"""The plugins' read-only transcript facet: sessions, turns and the message cursor."""

from __future__ import annotations

from pathlib import Path

from claw import UserMessage
from claw._transcript_reader import TranscriptReader
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
        reader = TranscriptReader(host)
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
