"""Issue 24's newcomer, at the command line: a citation copied from search cannot empty a file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    found = claw("memory", "search", "deploy window", "--workspace", str(workspace))
    assert "MEMORY.md#L1-L14" in found.stdout, found.stdout
    gone = claw("memory", "forget", "MEMORY.md#L1-L14", "--workspace", str(workspace))
    assert gone.returncode != 0
    assert "covers 11 entries" in gone.stderr and "nothing was removed" in gone.stderr
    assert memory.read_text(encoding="utf-8") == before
