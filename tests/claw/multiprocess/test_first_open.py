"""Opening a new store while another process holds its write lock waits, not fails.

`claw serve --workers 2` starts its workers at once, and both open the same new
session store, transcript store and Memory Core index. The first to switch a new
database to WAL holds its write lock for a moment; SQLite answers the other's switch
``SQLITE_BUSY`` at once, without its busy handler, so ``busy_timeout`` does not cover
it and a worker died with "cannot open the session store ...: database is locked"
(seen in CI). Here a real second process holds the write lock of a new database for
half a second while this one opens each store there: each open must wait and succeed.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from claw import InlineWorkerPool
from claw.sessions import open_session_store
from claw.turns import open_transcript_store
from claw_memory._store import Store
from claw_testing import ReferenceContextEngine

from ..._processes import reap

# Takes the write lock (BEGIN IMMEDIATE) of a new database, says so, holds it for
# half a second, then lets go without writing anything.
_HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(0.5)
conn.execute("ROLLBACK")
conn.close()
"""


@contextmanager
def write_lock_held_elsewhere(path: Path) -> Iterator[None]:
    """The write lock of ``path`` held by another process from the block's start for
    half a second: an open in the block succeeds only by waiting for it (the old code
    failed at once with "database is locked"). Whether it waited is not asserted by
    the holder's exit: the lock is let go just before the holder exits, so an open
    may finish in between."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "held\n"
        yield
        assert proc.wait(timeout=30) == 0
    finally:
        reap(proc)


@pytest.mark.trio
async def test_the_session_store_opens_while_another_process_holds_its_write_lock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.sqlite3"
    with write_lock_held_elsewhere(path):
        async with open_session_store(path, workers=InlineWorkerPool()) as store:
            row = await store.create("dm:a", agent_id="main", chat_type="direct")
            assert store.get_nowait(row.session_key) == row


@pytest.mark.trio
async def test_the_transcript_store_opens_while_another_process_holds_its_write_lock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "transcripts.sqlite3"
    with write_lock_held_elsewhere(path):
        async with open_transcript_store(path, workers=InlineWorkerPool()) as store:
            assert await store.turns() == ()


def test_the_memory_index_opens_while_another_process_holds_its_write_lock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "index.sqlite3"
    with write_lock_held_elsewhere(path):
        store = Store(path)
        try:
            assert store.path == path
        finally:
            store.close()


def test_the_reference_engine_opens_while_another_process_holds_its_write_lock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "engine.sqlite3"
    with write_lock_held_elsewhere(path):
        engine = ReferenceContextEngine(path)
        try:
            assert engine.info.id == "reference"
        finally:
            engine.close()
