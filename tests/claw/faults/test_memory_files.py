"""Memory files written by several real processes at once: no acknowledged write is lost.

Regression tests of issue 24's first two defects: a flush note appended while
``claw memory add --section`` rewrote the same file was lost although its flush
completed, and two processes on one workspace with different state directories did not
exclude each other, so their rewrites lost acknowledged adds.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import attrs

CHILD = Path(__file__).with_name("memory_writer_child.py")
TARGET = "memory/notes.md"
# Section adds go inside the file (a rewrite), not at its end: "S" is followed by another.
START = "# Notes\n\n## S\n\n- first\n\n## Tail\n\n- last\n"


@attrs.define
class Writers:
    """What the children acknowledged (``ACK <marker>``) and began (``BEGIN <marker>``)."""

    acked: set[str] = attrs.field(factory=set)
    begun: set[str] = attrs.field(factory=set)

    def feed(self, out: str) -> None:
        for line in out.splitlines():
            parts = line.split()
            if parts[:1] == ["ACK"]:
                self.acked.add(parts[1])
            elif parts[:1] == ["BEGIN"]:
                self.begun.add(parts[1])


def _run(children: list[tuple[str, Path, int]], workspace: Path, count: int) -> Writers:
    writers = Writers()
    procs = [
        subprocess.Popen(
            [sys.executable, str(CHILD), mode, str(workspace), str(state), str(seed), str(count)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for mode, state, seed in children
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        writers.feed(out)
    return writers


def _markers(text: str) -> Counter[str]:
    found: Counter[str] = Counter()
    for line in text.splitlines():
        for word in line.split():
            if word.count("-s") == 1 and word.split("-s")[0] in ("flush", "section", "add"):
                found[word] += 1
    return found


def test_a_flush_note_is_never_lost_to_a_concurrent_section_add(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    (workspace / TARGET).write_text(START, encoding="utf-8")
    state = tmp_path / "state"
    writers = _run(
        [("flush", state, 1), ("flush", state, 2), ("section", state, 3)], workspace, 120
    )
    found = _markers((workspace / TARGET).read_text(encoding="utf-8"))
    lost = sorted(m for m in writers.acked if found[m] == 0)
    doubled = sorted(m for m in writers.acked if found[m] > 1)
    assert (lost, doubled) == ([], []), f"{len(lost)} of {len(writers.acked)} writes lost"


def test_two_state_dirs_on_one_workspace_lose_no_add(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    (workspace / TARGET).write_text(START, encoding="utf-8")
    writers = _run(
        [("section", tmp_path / "state-a", 1), ("section", tmp_path / "state-b", 2)],
        workspace,
        120,
    )
    found = _markers((workspace / TARGET).read_text(encoding="utf-8"))
    lost = sorted(m for m in writers.acked if found[m] == 0)
    doubled = sorted(m for m in writers.acked if found[m] > 1)
    assert (lost, doubled) == ([], []), f"{len(lost)} of {len(writers.acked)} writes lost"
