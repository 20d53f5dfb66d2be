"""Turns of one session, with their flush and compaction, run one at a time across processes.

Each process is a real child (``_child.py turns``) on one shared state directory; its
model logs when it runs (``tests/_session_turns.py``), so an overlap of two turns would
show in the log, and the transcript tells whether a turn's entries stayed together.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import claw
from claw_testing import ScriptedModel
from tests._session_turns import check_once_per_cycle, check_serial

from .test_shared_state import _config, _create, child, expect, send

pytestmark = pytest.mark.slow

Child = subprocess.Popen[str]


def _report(proc: subprocess.Popen[str]) -> Any:
    return json.loads(expect(proc, "DONE").removeprefix("DONE "))


@contextmanager
def two_processes(tmp_path: Path) -> Iterator[tuple[Path, Child, Child]]:
    """``(state, a, b)``: two ``turns`` children, ready, on a state with ``dm:alice``."""
    state, log = tmp_path / "state", tmp_path / "model.log"
    trio.run(_create, state)
    with child("turns", state, log) as a, child("turns", state, log) as b:
        expect(a, "READY")
        expect(b, "READY")
        yield state, a, b


async def _transcript(state: Path) -> tuple[claw.SessionRow, list[Any], list[Any]]:
    async with claw.open_host(_config(state)) as host:
        row = host.sessions.get_nowait("dm:alice")
        assert row is not None
        turns = list(await host.transcripts.turns(row.session_id))
        entries = list(await host.transcripts.read_entries(row.session_id))
        return row, turns, entries


def test_two_processes_running_turns_of_one_session_at_once_take_turns(tmp_path: Path) -> None:
    with two_processes(tmp_path) as (state, a, b):
        send(a, "run 4")
        send(b, "run 4")
        _report(a)
        _report(b)
    # The model ran turns, flushes and compaction summaries, never two at once ...
    assert check_serial(tmp_path / "model.log") >= 8
    _, turns, entries = trio.run(_transcript, state)
    # ... and every turn's entries are one unbroken run of the transcript.
    assert len(turns) == 8
    by_seq = {e.seq: e for e in entries}
    for turn in turns:
        assert turn.terminal_seq is not None and not turn.open
        own = [by_seq[seq].turn_id for seq in range(turn.first_seq, turn.terminal_seq + 1)]
        assert set(own) == {turn.turn_id}, (turn, own)


def test_flush_and_compaction_run_once_per_cycle_across_processes(tmp_path: Path) -> None:
    with two_processes(tmp_path) as (state, a, b):
        send(a, "run 5")
        send(b, "run 5")
        reports = [_report(a), _report(b)]
    row, _, entries = trio.run(_transcript, state)
    compactions = sum(1 for e in entries if e.kind == "compaction")
    assert compactions >= 2
    check_once_per_cycle(
        reports, session_id=row.session_id, revision=row.lifecycle_revision, compactions=compactions
    )


def test_a_cycle_flushed_by_one_process_is_not_flushed_again_by_another(tmp_path: Path) -> None:
    """B has already run a turn when A flushes; B's next turn in that cycle does not flush."""
    with two_processes(tmp_path) as (state, a, b):
        send(b, "run 1")  # below every threshold
        assert _report(b) == {"flushed": [], "compactions": 0}
        send(a, "run 1")  # the second turn crosses the flush threshold: cycle 0 flushes
        first = _report(a)
        assert len(first["flushed"]) == 1 and first["compactions"] == 0
        send(b, "run 1")  # the third crosses the compaction threshold, in the same cycle
        second = _report(b)
        assert second == {"flushed": [], "compactions": 1}
    row, _, _ = trio.run(_transcript, state)
    check_once_per_cycle(
        [first, second], session_id=row.session_id, revision=row.lifecycle_revision, compactions=1
    )


def test_a_process_killed_while_holding_a_session_does_not_block_its_next_turn(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    trio.run(_create, state)

    async def blocked_then_free(hanging: subprocess.Popen[str]) -> None:
        async with claw.open_host(_config(state)) as host:
            model = ScriptedModel(["fine"])
            host.models.register_provider("scripted", lambda name: model)
            # While the other process lives, its turn holds the session: this turn
            # waits (admitting nothing) until the test gives up on it.
            with trio.move_on_after(1.0) as waiting:
                await host.run_turn("dm:alice", claw.UserMessage("me too"), sender_is_owner=True)
            assert waiting.cancelled_caught
            assert model.calls == ()
            assert len(await host.transcripts.turns()) == 1
            hanging.send_signal(signal.SIGKILL)
            assert await trio.to_thread.run_sync(hanging.wait) == -signal.SIGKILL
            # The kernel dropped the dead process's lock; the cancelled wait left none.
            result = await host.run_turn(
                "dm:alice", claw.UserMessage("still there?"), sender_is_owner=True
            )
            assert result.reply.text == "fine"

    with child("hang-turn", state) as hanging:
        expect(hanging, "IN_MODEL")
        trio.run(blocked_then_free, hanging)
