"""Noticing other processes' commits to a SQLite database, off the event loop.

SQLite's ``PRAGMA data_version`` answers, on one connection, a number that changes
whenever *another* connection committed to the database since the last time that
connection asked. :class:`CommitWatcher` keeps a connection of its own in a thread of
its own and asks it every :data:`POLL_INTERVAL` seconds (one read of the WAL index in
shared memory, no lock taken); when the number moves it wakes the event loop once.
The event loop is never polled: between commits, the watching task sleeps on an event.

The watcher's connection sees this process's own commits too (they come from another
connection); the store's refresh tells them apart with its own connection's
``data_version``, which only other connections' commits move.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Awaitable, Callable
from typing import Final

import trio

#: Seconds between two checks of the watched database. This bounds how long another
#: process's change takes to reach the mirror (plus the refresh itself); it is never
#: what a guarantee rests on (see the release check in docs/architecture.md).
POLL_INTERVAL: Final[float] = 0.05


class CommitWatcher:
    """Calls ``on_change()`` on the event loop after commits to ``path`` by other connections."""

    def __init__(self, path: str, *, interval: float = POLL_INTERVAL) -> None:
        self._path = path
        self._interval = interval

    async def run(
        self,
        on_change: Callable[[], Awaitable[None]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Watch until cancelled; ``on_change`` runs in this task, never concurrently."""
        token = trio.lowlevel.current_trio_token()
        stop = threading.Event()
        wake = trio.Event()
        state = {"wake": wake}

        def notify() -> None:  # on the event loop thread
            state["wake"].set()

        def poll() -> None:  # on the watcher thread
            try:
                conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            except sqlite3.Error:
                return
            try:
                last = None
                while not stop.is_set():
                    try:
                        (version,) = conn.execute("PRAGMA data_version").fetchone()
                    except sqlite3.Error:
                        version = None  # a transient failure: ask again next time
                    # The first answer is a change too: a commit may have landed between
                    # the store's load and this connection's first look.
                    if version is not None and version != last:
                        try:
                            token.run_sync_soon(notify)
                        except trio.RunFinishedError:
                            return
                        last = version
                    stop.wait(self._interval)
            finally:
                conn.close()

        thread = threading.Thread(
            target=poll, name=f"claw-commit-watcher:{self._path}", daemon=True
        )
        thread.start()
        try:
            task_status.started()
            while True:
                await state["wake"].wait()
                state["wake"] = trio.Event()
                await on_change()
        finally:
            stop.set()
            # The thread wakes from stop.wait at once; at most one PRAGMA is in progress.
            thread.join()
