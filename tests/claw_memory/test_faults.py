"""Process-level faults: a sync killed at each step, and a second process opening the index."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from claw.plugin_sdk import InlineWorkerPool
from claw_memory._errors import IndexLockedError
from claw_memory._hash_embedder import HashEmbedder
from claw_memory._index import open_memory_index
from claw_memory._settings import MemoryCoreSettings

CHILD = Path(__file__).with_name("_child.py")
NO_SYNC = MemoryCoreSettings(min_score=0.0, sync_on_open=False, sync_on_search=False)


def _open(ws: Path, idx: Path, settings: MemoryCoreSettings) -> object:
    return open_memory_index(
        workspace_dir=ws,
        index_dir=idx,
        workers=InlineWorkerPool(),
        settings=settings,
        embedder=HashEmbedder(),
    )


async def _excerpts(index: object, query: str, mode: str) -> set[str]:
    result = await index.search(query, mode=mode, max_results=10)  # type: ignore[attr-defined]
    return {h.excerpt for h in result.hits}


@pytest.mark.parametrize(
    ("victim", "committed"),
    [
        ("apply_changes", False),  # before the SQLite commit
        ("replace", True),  # SQLite committed, tantivy not yet
        ("clear_pending", True),  # tantivy committed, journal not cleared
        ("derive_generation", True),  # everything durable, publication in memory only
    ],
)
async def test_a_sync_killed_midway_leaves_a_consistent_index_that_the_next_open_completes(
    workspace: Path, index_dir: Path, victim: str, committed: bool
) -> None:
    (workspace / "memory").mkdir()
    (workspace / "memory" / "a.md").write_text("alpha original")
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)):
        pass
    (workspace / "memory" / "a.md").write_text("alpha changed, longer")
    (workspace / "memory" / "b.md").write_text("bravo fresh")

    done = await trio.run_process(
        [sys.executable, str(CHILD), str(workspace), str(index_dir), "kill", victim],
        check=False,
        capture_stderr=True,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()

    # Without syncing, what the crashed process left is searchable and consistent:
    # lexical and vector retrieval agree on one state, old or new, never a mix.
    async with _open(workspace, index_dir, NO_SYNC) as index:
        expected = {"alpha changed, longer", "bravo fresh"} if committed else {"alpha original"}
        assert await _excerpts(index, "alpha bravo", "lexical") == expected
        assert await _excerpts(index, "alpha bravo", "vector") == expected
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)) as index:
        assert await _excerpts(index, "alpha bravo", "hybrid") == {
            "alpha changed, longer",
            "bravo fresh",
        }
        assert index.status().chunks == 2


async def test_a_second_process_gets_a_clear_lock_error(workspace: Path, index_dir: Path) -> None:
    (workspace / "MEMORY.md").write_text("held")
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), str(workspace), str(index_dir), "hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = b""
        while not line.endswith(b"\n"):
            chunk = await proc.stdout.receive_some(64)
            assert chunk, "child exited before opening the index"
            line += chunk
        assert line == b"OPEN\n"
        with pytest.raises(IndexLockedError, match="index is locked by another process"):
            async with _open(workspace, index_dir, MemoryCoreSettings()):
                pass
        await proc.stdin.aclose()
        assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    # Once the other process is gone the index opens normally.
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)) as index:
        assert await _excerpts(index, "held", "lexical") == {"held"}
