"""Kill -9 loops: real child processes killed at random moments, then reopened and checked.

Each loop reuses one state directory across its kills, so damage would accumulate. After
every kill the parent reopens the state and checks that no acknowledged work was lost or
doubled, that memory (the transcript reader Memory Core uses) sees every acknowledged
turn, and that no database is corrupt. The number of kills is bounded to keep the suite's
time modest; the moments are random (seeded per kill), as real crashes are.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from claw.turns import TurnStatus
from claw_testing import ReferenceContextEngine

from . import flush_loop_child as flush_child
from . import turn_loop_child as turn_child

KILLS = 20


@attrs.define
class Oracle:
    """What the children acknowledged, and what was in flight when one was killed."""

    turns: dict[str, tuple[str, str]] = attrs.field(factory=dict)  # text -> (key, session id)
    begun: set[str] = attrs.field(factory=set)
    sessions: dict[str, str] = attrs.field(factory=dict)  # key -> acked session id
    in_flight: tuple[str, str, str] | None = None  # (op, key, text) begun, not acked
    kills: int = 0
    in_flight_ops: Counter[str] = attrs.field(factory=Counter)
    notes: set[str] = attrs.field(factory=set)  # notes the model asked to write
    acked_notes: set[str] = attrs.field(factory=set)  # notes of completed flushes
    flush_ids: Counter[str] = attrs.field(factory=Counter)  # completions per flush id

    def feed(self, line: str) -> None:
        parts = line.split()
        if parts[:1] == ["NOTE"]:
            self.notes.add(parts[1])
            return
        if parts[:2] == ["ACK", "flush"]:
            _, _, _key, flush_id, note = parts
            self.acked_notes.add(note)
            self.flush_ids[flush_id] += 1
            return
        if not parts or parts[0] not in ("BEGIN", "ACK"):
            return
        if parts[0] == "BEGIN":
            _, op, key, text = parts
            self.in_flight = (op, key, text)
            if op == "turn":
                self.begun.add(text)
            return
        _, op, key, session_id, text = parts
        self.in_flight = None
        if op == "turn":
            self.turns[text] = (key, session_id)
        else:
            self.sessions[key] = session_id


def _kill_at_random(args: list[str], rng: random.Random, oracle: Oracle) -> None:
    """Start the child, let it run a random number of steps, SIGKILL it mid-flight."""
    oracle.in_flight = None
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            steps = rng.randint(2, 40)
            seen = 0
            ready = False
            while seen < steps:
                line = proc.stdout.readline()
                if not line.endswith("\n"):
                    pytest.fail(f"child exited early: {proc.stderr.read()}")
                oracle.feed(line)
                ready = ready or line.startswith("READY")
                seen += ready
            time.sleep(rng.uniform(0, 0.01))  # real processes: land anywhere in the next step
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        # Lines the child wrote before it died are facts too; a last line without its
        # newline was torn by the kill and says nothing (a torn ACK leaves the op in flight).
        for line in proc.stdout.read().splitlines(keepends=True):
            if line.endswith("\n"):
                oracle.feed(line)
    oracle.kills += 1
    if oracle.in_flight is not None:
        oracle.in_flight_ops[oracle.in_flight[0]] += 1


def _quick_check(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)], path


async def _check_turns(state: Path, engine_db: Path, oracle: Oracle) -> None:
    _quick_check(engine_db)
    engine = ReferenceContextEngine(engine_db)
    try:
        # Opening runs recovery (and quick_check on the host's own databases).
        async with turn_child_host(state, engine) as host:
            ledger = await host.transcripts.turns()
            assert [t.turn_id for t in ledger if t.open] == []  # aborted at open
            assert await host.transcripts.pending_commits() == ()  # committed at open
            committed = {t.advancement_key for t in ledger if t.status is TurnStatus.COMMITTED}
            keys = [k for k, _, _ in engine.advancements()]
            assert len(keys) == len(set(keys))
            assert set(keys) == committed  # the engine and the ledger agree

            await _check_memory(host, oracle)

            for key, session_id in oracle.sessions.items():
                row = host.sessions.get_nowait(key)
                assert row is not None
                if oracle.in_flight is not None and oracle.in_flight[1] == key:
                    # The killed operation may or may not have committed; what the store
                    # holds now is the fact later checks compare against.
                    oracle.sessions[key] = row.session_id
                    continue
                assert row.session_id == session_id, key
    finally:
        engine.close()


async def _check_memory(host: Any, oracle: Oracle) -> None:
    """Every acknowledged turn is visible to memory exactly once, and nothing is doubled."""
    reader = host._new_transcript_reader()
    said: Counter[str] = Counter()
    where: dict[str, str] = {}
    for info in await reader.list_sessions(agent_id="main"):
        for turn in await reader.read_turns(info.session_id):
            text = turn.text.split()[0] if turn.role == "user" else turn.text
            said[text] += 1
            where[text] = info.session_id
    doubled = [text for text, count in said.items() if count > 1]
    assert doubled == []
    for text, (_key, session_id) in oracle.turns.items():
        assert said[text] == 1, f"acknowledged turn {text} is not visible to memory"
        assert said[f"reply to {text}"] == 1, f"the reply of {text} is lost"
        assert where[text] == session_id
    unknown = {t for t in said if not t.startswith("reply to ")} - oracle.begun
    assert unknown == set()


def turn_child_host(state: Path, engine: ReferenceContextEngine):  # type: ignore[no-untyped-def]
    import claw

    return claw.open_host(turn_child.config(state), plugins=[turn_child.plugin(engine)])


@pytest.mark.slow
def test_kill_loop_over_turns_with_a_commit_turn_engine_and_session_changes(
    tmp_path: Path,
) -> None:
    rng = random.Random(14)
    oracle = Oracle()
    engine_db = tmp_path / "engine.sqlite3"
    child = Path(turn_child.__file__)
    for kill in range(KILLS):
        _kill_at_random(
            [sys.executable, str(child), str(tmp_path), str(engine_db), str(kill)], rng, oracle
        )
        trio.run(_check_turns, tmp_path, engine_db, oracle)
    print(
        f"\nturn kill loop: {oracle.kills} kills, {len(oracle.turns)} acknowledged turns, "
        f"{len(oracle.begun)} begun; killed mid-operation: {dict(oracle.in_flight_ops)}"
    )
    assert len(oracle.turns) > KILLS  # the loop did real work between kills


async def _check_flush(state: Path, oracle: Oracle) -> None:
    import claw

    async with claw.open_host(flush_child.config(state), plugins=[flush_child.plugin()]) as host:
        ledger = await host.transcripts.turns()
        assert [t.turn_id for t in ledger if t.open] == []
        await _check_memory(host, oracle)
        target = host.config.workspace_dir / flush_child.TARGET
        lines = target.read_text().splitlines() if target.exists() else []
        written = Counter(line for line in lines if line)
        assert set(written) <= oracle.notes, "a torn or unknown line in the flush target"
        assert [n for n, count in written.items() if count > 1] == []
        lost = oracle.acked_notes - set(written)
        assert lost == set(), f"notes of completed flushes lost: {sorted(lost)}"
        again = [f for f, count in oracle.flush_ids.items() if count > 1]
        assert again == [], f"flush ids completed more than once: {again}"


@pytest.mark.slow
def test_kill_loop_over_the_pre_compaction_flush(tmp_path: Path) -> None:
    rng = random.Random(15)
    oracle = Oracle()
    child = Path(flush_child.__file__)
    for kill in range(KILLS):
        _kill_at_random([sys.executable, str(child), str(tmp_path), str(kill)], rng, oracle)
        trio.run(_check_flush, tmp_path, oracle)
    print(
        f"\nflush kill loop: {oracle.kills} kills, {len(oracle.turns)} acknowledged turns, "
        f"{len(oracle.acked_notes)} notes of completed flushes, {len(oracle.notes)} asked for"
    )
    assert oracle.acked_notes  # flushes really ran between kills
