"""The memory-file fault suite: real writers on one file, killed with SIGKILL at random.

Several real processes write one memory file at once for a bounded time: flush notes
(the flush's file arm ``write``), section adds (rewrites inside the file), plain adds,
forgets and restores, and an outside writer that appends lines without claw (as a
script or an editor plugin does). Every fraction of a second one of them is killed
with SIGKILL, wherever it is, and a fresh one takes its place. The same runs again with
two state directories on the one workspace.

After each run (and the next writer's recovery) the file and the journal must say:
every acknowledged write is present exactly once (or absent exactly when its forget was
acknowledged and not restored since), nothing unacknowledged is doubled, no line is
torn, every flush note is there, the journal holds every forget that took effect and
knows who wrote every claw entry in the file, and every forget is restorable: after
restoring each one still forgotten, every acknowledged write is present exactly once.

The runs last a few seconds each in the test command; ``CLAW_MEMORY_FAULT_SECONDS`` makes
them longer (``benchmarks/memory_faults.py`` runs them for the record).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO

import attrs
import pytest

from claw.memory_files import MemoryFileWriter, entry_spans, lines_revision
from claw.memory_files._writer import live, provenance_map

from ..._processes import reap

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("memory_fault_child.py")
TARGET = "memory/notes.md"
START = "# Notes\n\n## S\n\n- first\n\n## Tail\n\n- last\n"
WRITERS = ("flush", "flush", "section", "add", "forget", "editor")
SECONDS = float(os.environ.get("CLAW_MEMORY_FAULT_SECONDS", "5"))

_MARKER = r"(?:flush|section|add|forget|editor)-s\d+-\d+"
_STAMP = r"- \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\] "
LINE = re.compile(
    rf"^(?:# Notes|## S|## Tail|- first|- last"
    rf"|- flush note (?P<f>{_MARKER})"
    rf"|{_STAMP}(?:section|plain) entry (?P<c>{_MARKER})"
    rf"|- editor line (?P<e>{_MARKER})"
    rf"|## Restored by claw \(forgotten [^)]*\))$"
)


@attrs.define
class Oracle:
    """What the children acknowledged, per marker, and what was in flight at each kill."""

    state: dict[str, str] = attrs.field(factory=dict)  # present / forgotten / maybe
    removal: dict[str, str] = attrs.field(factory=dict)
    begun: set[str] = attrs.field(factory=set)
    counts: Counter[str] = attrs.field(factory=Counter)

    def feed(self, lines: list[str]) -> None:
        """One child's whole output (its last, torn line says nothing)."""
        in_flight: tuple[str, str] | None = None
        for line in lines:
            if not line.endswith("\n"):
                break
            parts = line.split()
            if len(parts) < 3:
                continue
            what, op, marker = parts[:3]
            if what == "BEGIN":
                in_flight = (op, marker)
                if op == "add":
                    self.begun.add(marker)
            elif what == "FAIL":
                in_flight = None
                self.counts[f"refused {op} ({parts[3] if len(parts) > 3 else '?'})"] += 1
            elif what == "ACK":
                in_flight = None
                self.counts[f"{op} {marker.split('-s')[0]}" if op == "add" else op] += 1
                if op == "forget":
                    self.state[marker] = "forgotten"
                    self.removal[marker] = parts[3]
                else:
                    self.state[marker] = "present"
        if in_flight is not None:
            op, marker = in_flight
            self.counts[f"killed in {op}"] += 1
            if op != "add":
                self.state[marker] = "maybe"


@attrs.define
class Child:
    proc: subprocess.Popen[str]
    mode: str
    lines: list[str] = attrs.field(factory=list)
    reader: threading.Thread | None = None

    @classmethod
    def start(cls, mode: str, workspace: Path, state: Path, seed: int) -> Child:
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), mode, str(workspace), str(state), str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        child = cls(proc=proc, mode=mode)
        stream: IO[str] | None = proc.stdout
        assert stream is not None
        child.reader = threading.Thread(target=child._read, args=(stream,), daemon=True)
        child.reader.start()
        return child

    def _read(self, stream: IO[str]) -> None:
        for line in stream:  # line by line: the parent watches them arrive
            self.lines.append(line)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        assert self.reader is not None
        self.reader.join(timeout=30)
        reap(self.proc)


def _run(workspace: Path, states: list[Path], seconds: float, rng: random.Random) -> Oracle:
    oracle = Oracle()
    seeds = iter(range(1, 1_000_000))
    children = [
        Child.start(mode, workspace, states[i % len(states)], next(seeds))
        for i, mode in enumerate(WRITERS)
    ]
    oracle.counts["processes"] = len(children)
    try:
        # The clock starts once every writer is writing (opening a host takes a while).
        started = time.monotonic()
        while not all(c.lines for c in children):
            assert time.monotonic() - started < 120, "the writers did not start"
            time.sleep(0.05)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.05, 0.4))  # real processes: kills land anywhere
            # Only writers that started writing (a host takes a second or two to open).
            ready = [i for i, c in enumerate(children) if len(c.lines) > 1]
            if not ready:
                continue
            i = rng.choice(ready)
            victim = children[i]
            victim.kill()
            oracle.counts["kills"] += 1
            oracle.feed(victim.lines)
            children[i] = Child.start(victim.mode, workspace, states[i % len(states)], next(seeds))
            oracle.counts["processes"] += 1
    finally:
        for child in children:
            child.kill()
            oracle.counts["kills"] += 1
            oracle.feed(child.lines)
    return oracle


def _markers(text: str) -> tuple[Counter[str], list[str]]:
    found: Counter[str] = Counter()
    torn = []
    for line in text.splitlines():
        if not line.strip():
            continue
        match = LINE.match(line)
        if match is None:
            torn.append(line)
            continue
        marker = match.group("f") or match.group("c") or match.group("e")
        if marker:
            found[marker] += 1
    return found, torn


def _check(workspace: Path, oracle: Oracle) -> dict[str, int]:
    writer = MemoryFileWriter(workspace)
    writer.recover()  # what the next writer would do first
    text = (workspace / TARGET).read_text(encoding="utf-8")
    found, torn = _markers(text)
    assert torn == []
    doubled = [m for m, n in found.items() if n > 1]
    assert doubled == []
    records = live(writer.journal.records())
    forgotten = {r["id"]: r for r in records if r.get("op") == "forget"}
    restored = {r.get("of") for r in records if r.get("op") == "restore"}
    lost = []
    for marker, state in oracle.state.items():
        if state == "present" and found[marker] != 1:
            lost.append(marker)
        if state == "forgotten":
            assert found[marker] == 0, marker
            assert oracle.removal[marker] in forgotten, marker  # the journal has it
    assert lost == []
    # Every forget that took effect is in the journal with its text, and not in the file.
    for rid, record in forgotten.items():
        marker = re.search(_MARKER, record["text"])
        assert marker is not None
        if rid not in restored:
            assert found[marker.group()] == 0, marker.group()
    # The journal knows who wrote every claw entry in the file (not the editor's lines).
    writers = provenance_map(records)
    lines = text.splitlines()
    unknown = []
    for a, b in entry_spans(lines):
        match = LINE.match(lines[a - 1])
        by_claw = match is not None and (match.group("f") or match.group("c"))
        if by_claw and lines_revision(lines[a - 1 : b]) not in writers:
            unknown.append(lines[a - 1])
    assert unknown == []
    flush_writers = {w["flushId"] for w in writers.values() if "flushId" in w}
    assert flush_writers and all(f.startswith("flush-s") for f in flush_writers)
    # Every forget is restorable; afterwards every acknowledged write is there once.
    undone = 0
    for rid in forgotten:
        if rid not in restored:
            writer.restore(rid, by={"kind": "host"})
            undone += 1
    after, torn = _markers((workspace / TARGET).read_text(encoding="utf-8"))
    assert torn == []
    assert [m for m, n in after.items() if n > 1] == []
    assert [m for m, s in oracle.state.items() if s != "maybe" and after[m] != 1] == []
    assert [m for m in oracle.begun if after[m] > 1] == []
    return {"entries in file": sum(found.values()), "restored by the check": undone}


def _report(name: str, oracle: Oracle, checked: dict[str, int], seconds: float) -> None:
    counts = dict(sorted(oracle.counts.items()))
    writes = sum(n for k, n in counts.items() if k.startswith("add "))
    print(
        f"\nmemory faults ({name}): {SECONDS:.0f} s of kills ({seconds:.1f} s in all), "
        f"{counts.get('processes', 0)} processes ({len(WRITERS)} at a time), "
        f"{writes} acknowledged writes, {counts.get('forget', 0)} forgets, "
        f"{counts.get('restore', 0)} restores, {counts.get('kills', 0)} kills; {counts}; "
        f"{checked}; lost 0, doubled 0, torn 0"
    )


@pytest.mark.parametrize("state_dirs", [1, 2], ids=["one state dir", "two state dirs"])
def test_writers_killed_at_random_lose_tear_and_double_nothing(
    tmp_path: Path, state_dirs: int
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    (workspace / TARGET).write_text(START, encoding="utf-8")
    states = [tmp_path / f"state-{i}" for i in range(state_dirs)]
    rng = random.Random(24 + state_dirs)
    began = time.monotonic()
    oracle = _run(workspace, states, SECONDS, rng)
    checked = _check(workspace, oracle)
    _report(f"{state_dirs} state dir(s)", oracle, checked, time.monotonic() - began)
    assert oracle.counts["kills"] >= 6
    assert sum(n for k, n in oracle.counts.items() if k.startswith("add flush")) > 0
