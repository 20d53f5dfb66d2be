"""The commit watch: one poller thread per process, prompt notice of other processes' commits."""

from __future__ import annotations

import sqlite3
import sys
import threading
from pathlib import Path

import pytest
import trio

from claw._workers import InlineWorkerPool
from claw.sessions import open_session_store
from claw.state.sqlite._commit_watch import CommitPoller, CommitWatcher

#: A hang guard, never a timing assertion: the watch answers in ~50 ms when it works.
HANG = 30


def _commit_thread_names() -> list[str]:
    # Every thread the commit watch ever started was named "claw-commit-...".
    return [t.name for t in threading.enumerate() if t.name.startswith("claw-commit-")]


def _database(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
    conn.close()
    return str(path)


def _commit(path: str) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("INSERT INTO t VALUES (1)")
    conn.close()


class _Counted:
    """An ``on_change`` that counts its calls and lets a test wait for the n-th."""

    def __init__(self) -> None:
        self.calls = 0
        self._changed = trio.Event()

    async def __call__(self) -> None:
        self.calls += 1
        self._changed.set()
        self._changed = trio.Event()

    async def reach(self, calls: int) -> None:
        with trio.fail_after(HANG):
            while self.calls < calls:
                await self._changed.wait()


async def test_two_watched_databases_share_one_polling_thread(tmp_path: Path) -> None:
    """A host watches two databases; a thread each cost a wake-up each per period."""
    sessions, transcripts = _database(tmp_path / "s.sqlite3"), _database(tmp_path / "t.sqlite3")
    assert _commit_thread_names() == []
    seen_s, seen_t = _Counted(), _Counted()
    async with trio.open_nursery() as nursery:
        await nursery.start(CommitWatcher(sessions).run, seen_s)
        await nursery.start(CommitWatcher(transcripts).run, seen_t)
        await seen_s.reach(1)  # the first look is a change
        await seen_t.reach(1)
        assert _commit_thread_names() == ["claw-commit-poller"]
        _commit(transcripts)
        await seen_t.reach(2)
        _commit(sessions)
        await seen_s.reach(2)
        nursery.cancel_scope.cancel()
    assert _commit_thread_names() == []


async def test_a_watcher_hears_its_own_database_not_the_others(tmp_path: Path) -> None:
    poller = CommitPoller(interval=0.01)
    first, second = _database(tmp_path / "a.sqlite3"), _database(tmp_path / "b.sqlite3")
    seen_a, seen_b = _Counted(), _Counted()
    async with trio.open_nursery() as nursery:
        await nursery.start(CommitWatcher(first, poller=poller).run, seen_a)
        await nursery.start(CommitWatcher(second, poller=poller).run, seen_b)
        await seen_a.reach(1)
        await seen_b.reach(1)
        for n in range(2, 5):
            _commit(first)
            await seen_a.reach(n)
        # The poller checked the second database in every pass since: nothing moved it.
        assert seen_b.calls == 1
        _commit(second)
        await seen_b.reach(2)
        assert (seen_a.calls, seen_b.calls) == (4, 2)
        assert poller.statistics().threads_started == 1
        nursery.cancel_scope.cancel()


async def test_cancelled_watchers_close_and_the_last_one_ends_the_thread(tmp_path: Path) -> None:
    poller = CommitPoller(interval=0.01)
    first, second = _database(tmp_path / "a.sqlite3"), _database(tmp_path / "b.sqlite3")
    seen_a, seen_b = _Counted(), _Counted()
    async with trio.open_nursery() as outer:
        async with trio.open_nursery() as inner:
            await inner.start(CommitWatcher(first, poller=poller).run, seen_a)
            await outer.start(CommitWatcher(second, poller=poller).run, seen_b)
            await seen_a.reach(1)
            await seen_b.reach(1)
            inner.cancel_scope.cancel()
        stats = poller.statistics()
        assert (stats.watched, stats.running) == (1, True)
        _commit(first)  # nobody listens to it any more; the other still works
        _commit(second)
        await seen_b.reach(2)
        assert seen_a.calls == 1
        outer.cancel_scope.cancel()
    stats = poller.statistics()
    assert (stats.watched, stats.running, stats.threads_started) == (0, False, 1)
    assert _commit_thread_names() == []
    # Watching again starts a thread again.
    async with trio.open_nursery() as nursery:
        await nursery.start(CommitWatcher(first, poller=poller).run, seen_a)
        await seen_a.reach(2)
        assert poller.statistics().threads_started == 2
        nursery.cancel_scope.cancel()
    assert not poller.statistics().running


@pytest.mark.slow
async def test_another_processs_commit_reaches_the_mirror_through_the_shared_poller(
    tmp_path: Path,
) -> None:
    """Real processes: the mirror learns of a session another process created, unasked."""
    path = tmp_path / "sessions.sqlite3"
    workers = InlineWorkerPool()
    writer = (
        "import sys, trio\n"
        "from claw._workers import InlineWorkerPool\n"
        "from claw.sessions import open_session_store\n"
        "async def main():\n"
        "    async with open_session_store(sys.argv[1], workers=InlineWorkerPool()) as s:\n"
        "        await s.create('dm:elsewhere', agent_id='main', chat_type='direct')\n"
        "trio.run(main)\n"
    )
    async with open_session_store(path, workers=workers) as mine, trio.open_nursery() as nursery:
        arrived = trio.Event()
        mine.add_listener(lambda key: arrived.set() if key == "dm:elsewhere" else None)
        await nursery.start(mine.watch)
        await trio.run_process([sys.executable, "-c", writer, str(path)])
        with trio.fail_after(HANG):
            await arrived.wait()
        assert mine.get_nowait("dm:elsewhere") is not None
        assert _commit_thread_names() == ["claw-commit-poller"]
        nursery.cancel_scope.cancel()
