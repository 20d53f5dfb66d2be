"""Issue 24's newcomer, at the command line: a citation copied from search cannot empty a file."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .._processes import reap

pytestmark = pytest.mark.slow


def claw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "claw", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=120,
        check=False,
    )


def test_forget_of_the_chunk_search_prints_leaves_memory_md_whole(tmp_path: Path) -> None:
    workspace = tmp_path / "w"
    assert claw("init", str(workspace)).returncode == 0
    memory = workspace / "MEMORY.md"
    before = memory.read_text(encoding="utf-8")
    # Search now cites the one entry it found (entry-at-a-time indexing); the 14-line
    # citation it printed before is still what a newcomer may copy or type.
    found = claw("memory", "search", "deploy window", "--workspace", str(workspace))
    assert "MEMORY.md#L9-L9" in found.stdout, found.stdout
    gone = claw("memory", "forget", "MEMORY.md#L1-L14", "--workspace", str(workspace))
    assert gone.returncode != 0
    assert "covers 11 entries" in gone.stderr and "nothing was removed" in gone.stderr
    assert memory.read_text(encoding="utf-8") == before


def test_with_yes_the_range_goes_and_restore_puts_it_back(tmp_path: Path) -> None:
    workspace = tmp_path / "w"
    assert claw("init", str(workspace)).returncode == 0
    memory = workspace / "MEMORY.md"
    before = memory.read_text(encoding="utf-8")
    ws = ("--workspace", str(workspace))
    gone = claw("memory", "forget", "MEMORY.md#L1-L14", "--yes", "--json", *ws)
    assert gone.returncode == 0, gone.stderr
    removal = json.loads(gone.stdout)
    assert (removal["entries"], removal["startLine"], removal["endLine"]) == (11, 1, 14)
    assert memory.read_text(encoding="utf-8") == ""
    listed = json.loads(claw("memory", "forgotten", "--json", *ws).stdout)["removals"]
    assert [(r["id"], r["status"]) for r in listed] == [(removal["removalId"], "forgotten")]
    assert listed[0]["by"] == {
        "kind": "operator",
        "connectionId": "cli",
        "at": listed[0]["by"]["at"],
    }
    back = claw("memory", "restore", removal["removalId"][:6], *ws)
    assert back.returncode == 0, back.stderr
    assert "in place" in back.stdout
    assert memory.read_text(encoding="utf-8") == before
    again = json.loads(claw("memory", "restore", removal["removalId"], "--json", *ws).stdout)
    assert again["already"] is True and memory.read_text(encoding="utf-8") == before
    unknown = claw("memory", "restore", "0123456789ab", *ws)
    assert unknown.returncode == 2 and "no removal" in unknown.stderr


def test_one_entry_goes_without_asking_and_says_how_to_undo(tmp_path: Path) -> None:
    workspace = tmp_path / "w"
    assert claw("init", str(workspace)).returncode == 0
    gone = claw("memory", "forget", "MEMORY.md#L9-L9", "--workspace", str(workspace))
    assert gone.returncode == 0, gone.stderr
    assert re.match(
        r"forgot MEMORY.md#L9-L9 \(undo: claw memory restore [0-9a-f]{12}\):", gone.stdout
    )
    assert "deploy window" in gone.stdout
    assert "deploy window" not in (workspace / "MEMORY.md").read_text(encoding="utf-8")


def test_on_a_terminal_forget_shows_the_lines_and_asks(tmp_path: Path) -> None:
    workspace = tmp_path / "w"
    assert claw("init", str(workspace)).returncode == 0
    memory = workspace / "MEMORY.md"
    before = memory.read_text(encoding="utf-8")

    def on_a_terminal(answer: bytes) -> tuple[int, str]:
        leader, follower = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "claw", "memory", "forget", "MEMORY.md#L8-L10"],
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workspace,
            env={**os.environ, "NO_COLOR": "1"},
        )
        os.close(follower)
        try:
            os.write(leader, answer)
            out, err = proc.communicate(timeout=120)
        finally:
            reap(proc)
            os.close(leader)
        return proc.returncode, err.decode() + out.decode()

    code, text = on_a_terminal(b"n\n")
    assert code == 2 and "Forget all 3 lines (3 entries)? [y/N]" in text
    assert "## Decisions" in text and "nothing was forgotten" in text
    assert memory.read_text(encoding="utf-8") == before
    code, text = on_a_terminal(b"y\n")
    assert code == 0, text
    assert "## Decisions" not in memory.read_text(encoding="utf-8")


def test_purge_asks_for_yes_and_then_leaves_no_byte_of_the_text(tmp_path: Path) -> None:
    workspace = tmp_path / "w"
    assert claw("init", str(workspace)).returncode == 0
    ws = ("--workspace", str(workspace))
    assert claw("memory", "add", "The safe code is zq9clipurge", *ws).returncode == 0
    assert "zq9clipurge" in claw("memory", "search", "safe code", *ws).stdout
    refused = claw("memory", "purge", "--text", "zq9clipurge", *ws)
    assert refused.returncode == 2 and "pass --yes" in refused.stderr
    assert "would purge 1 entry" in refused.stderr
    done = claw("memory", "purge", "--text", "zq9clipurge", "--yes", "--json", *ws)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["entries"] == 1
    holding = [p for p in workspace.rglob("*") if p.is_file() and b"zq9clipurge" in p.read_bytes()]
    assert holding == []


def test_a_forgotten_path_is_listed_survives_a_forced_index_and_comes_back(
    tmp_path: Path,
) -> None:
    """Issue 24: forgetting a path hid the file for good, even from index --force, and
    nothing listed it or brought it back."""
    workspace = tmp_path / "w"
    assert claw("init", str(workspace)).returncode == 0
    ws = ("--workspace", str(workspace))
    gone = claw("memory", "forget", "memory/2026-11-28.md", *ws)
    assert gone.returncode == 0, gone.stderr
    forced = claw("memory", "index", "--force", *ws)
    assert "1 forget(s) keep hiding" in forced.stdout
    assert "2026-11-28" not in claw("memory", "search", "rollback plan", *ws).stdout
    listed = json.loads(claw("memory", "forgotten", "--json", *ws).stdout)
    (hidden,) = listed["hidden"]
    assert hidden["paths"] == ["memory/2026-11-28.md"]
    assert hidden["by"]["kind"] == "operator" and hidden["by"]["connectionId"] == "cli"
    back = claw("memory", "unforget", hidden["id"], *ws)
    assert back.returncode == 0, back.stderr
    assert "2026-11-28" in claw("memory", "search", "rollback plan", *ws).stdout
    assert json.loads(claw("memory", "forgotten", "--json", *ws).stdout)["hidden"] == []
    unknown = claw("memory", "unforget", "0123456789ab", *ws)
    assert unknown.returncode == 2 and "no forget" in unknown.stderr
