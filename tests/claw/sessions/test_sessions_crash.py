"""Crash safety: a reset killed mid-transaction leaves the old row or the new, never half."""

from __future__ import annotations

import signal
import sqlite3
import sys
from pathlib import Path

import pytest
import trio

from claw import InlineWorkerPool
from claw.sessions import SessionRow, open_session_store, resolve_audience

CHILD = Path(__file__).with_name("crash_child.py")


async def seed(path: Path) -> tuple[SessionRow, SessionRow]:
    async with open_session_store(path, workers=InlineWorkerPool()) as store:
        root = await store.create("dm:alice", agent_id="main", chat_type="direct")
        kid = await store.spawn_child("dm:alice", "dm:alice/t", sender_is_owner=True)
        return root, kid


async def kill_reset_at(path: Path, where: str) -> None:
    """Start a reset of dm:alice in a subprocess, wait until it pauses at COMMIT, SIGKILL it."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), str(path), "dm:alice", where],
        stdin=-1,  # subprocess.PIPE: held open so the child blocks reading it
        stdout=-1,
        stderr=-1,
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        with trio.fail_after(120):  # a hang guard, not a timing assertion
            received = b""
            while b"paused\n" not in received:
                chunk = await process.stdout.receive_some()
                if not chunk:
                    err = await process.stderr.receive_some()
                    pytest.fail(f"child exited before pausing: {err.decode(errors='replace')}")
                received += chunk
            if where == "before-commit":
                # While the writer holds its uncommitted transaction, readers see the old row.
                with sqlite3.connect(path) as reader:
                    (rev,) = reader.execute(
                        "SELECT lifecycle_revision FROM sessions WHERE session_key = 'dm:alice'"
                    ).fetchone()
                assert rev == 1
            process.send_signal(signal.SIGKILL)
            assert await process.wait() == -signal.SIGKILL
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                await stream.aclose()


async def test_reset_killed_before_commit_leaves_the_old_row(tmp_path: Path) -> None:
    path = tmp_path / "sessions.sqlite"
    root, kid = await seed(path)
    await kill_reset_at(path, "before-commit")
    async with open_session_store(path, workers=InlineWorkerPool()) as store:
        assert await store.get("dm:alice") == root
        assert await store.get("dm:alice/t") == kid
        # The lineage recorded before the crash is still valid, and the store still writes.
        assert resolve_audience(store, "dm:alice/t", sender_is_owner=True) is not None
        after = await store.reset("dm:alice")
        assert after.lifecycle_revision == root.lifecycle_revision + 1


async def test_reset_killed_after_commit_leaves_the_whole_new_row(tmp_path: Path) -> None:
    path = tmp_path / "sessions.sqlite"
    root, kid = await seed(path)
    await kill_reset_at(path, "after-commit")
    async with open_session_store(path, workers=InlineWorkerPool()) as store:
        row = await store.get("dm:alice")
        assert row is not None
        assert row.session_id != root.session_id
        assert row.lifecycle_revision == root.lifecycle_revision + 1
        assert row.created_at == row.updated_at  # both written by the one reset
        assert await store.get("dm:alice/t") == kid
        assert resolve_audience(store, "dm:alice/t", sender_is_owner=True) is None
