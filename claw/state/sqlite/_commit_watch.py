"""Noticing other processes' commits to SQLite databases, off the event loop.

SQLite's ``PRAGMA data_version`` answers, on one connection, a number that changes
whenever *another* connection committed to the database since the last time that
connection asked. Each :class:`CommitWatcher` keeps a connection of its own to its
database; one :class:`CommitPoller` thread per process asks every watched connection in
turn every :data:`POLL_INTERVAL` seconds (one read of the WAL index in shared memory, no
lock taken) and, for each whose number moved, wakes that watcher's event loop once.

Why one thread for all: a host watches two databases (sessions, transcripts) and a
thread waking up costs the process far more than the ``PRAGMA`` it runs (the wake-up
takes the GIL from the event loop), so one wake-up a period for every database instead
of one per database halves that fixed cost for a host and keeps it flat when more
databases are watched. The event loop is never polled: between commits, each watching
task sleeps on an event (polling there would also turn every test under
``MockClock(autojump_threshold=0)`` into a busy loop). The thread runs only while
something is watched; the last watcher to stop ends it and waits for it.

A watcher's connection sees this process's own commits too (they come from another
connection); the store's refresh tells them apart with its own connection's
``data_version``, which only other connections' commits move.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Awaitable, Callable
from typing import Final

import attrs
import trio

#: Seconds between two checks of the watched databases. This bounds how long another
#: process's change takes to reach the mirror (plus the refresh itself); it is never
#: what a guarantee rests on (see the release check in docs/architecture.md).
POLL_INTERVAL: Final[float] = 0.05

#: The poller thread's name, so a reader of a thread dump knows what it is.
THREAD_NAME: Final[str] = "claw-commit-poller"


@attrs.frozen
class CommitPollerStatistics:
    """What a :class:`CommitPoller` is doing: for tests and diagnostics.

    ``watched`` counts the watchers registered now, ``running`` says whether the thread
    is alive, ``threads_started`` counts the threads started since the poller was made
    (one per stretch of time with something to watch), ``passes`` the rounds of checks
    the threads made.
    """

    watched: int
    running: bool
    threads_started: int
    passes: int


class _Watch:
    """One watched database: its connection (opened by the poller thread) and its waker.

    ``busy`` is held while the poller checks this watch and while its owner closes it,
    so the connection is never closed under a ``PRAGMA`` and never used after close.
    """

    def __init__(self, path: str, token: trio.lowlevel.TrioToken, notify: Callable[[], None]):
        self.path = path
        self.token = token
        self.notify = notify
        self.busy = threading.Lock()
        self.closed = False
        self.failed = False  # the database could not be opened: nothing more to do
        self.conn: sqlite3.Connection | None = None
        self.last: int | None = None

    def check(self) -> None:
        """On the poller thread: ask ``data_version`` once; wake the loop if it moved."""
        with self.busy:
            if self.closed or self.failed:
                return
            if self.conn is None:
                try:
                    self.conn = sqlite3.connect(
                        self.path, isolation_level=None, check_same_thread=False
                    )
                except sqlite3.Error:
                    self.failed = True
                    return
            try:
                (version,) = self.conn.execute("PRAGMA data_version").fetchone()
            except sqlite3.Error:
                return  # a transient failure: ask again next time
            # The first answer is a change too: a commit may have landed between the
            # store's load and this connection's first look.
            if version != self.last:
                try:
                    self.token.run_sync_soon(self.notify)
                except trio.RunFinishedError:
                    self.failed = True  # nobody left to tell
                    return
                self.last = version

    def close(self) -> None:
        """On the owner's thread: no check runs after this returns."""
        with self.busy:
            self.closed = True
            if self.conn is not None:
                self.conn.close()
                self.conn = None


class _Run:
    """One stretch of the poller thread's life: its stop flag and its wake-up."""

    def __init__(self) -> None:
        self.stopped = False
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None


class CommitPoller:
    """One thread checking every registered :class:`CommitWatcher`'s database in turn.

    Most code uses the process's poller (:func:`shared_poller`); a test makes its own to
    count what it does.
    """

    def __init__(self, *, interval: float = POLL_INTERVAL) -> None:
        self._interval = interval
        self._lock = threading.Lock()
        self._watches: dict[_Watch, None] = {}  # ordered, checked in registration order
        self._run: _Run | None = None
        self._threads_started = 0
        self._passes = 0

    def statistics(self) -> CommitPollerStatistics:
        """The poller's current state (see :class:`CommitPollerStatistics`)."""
        with self._lock:
            run = self._run
            return CommitPollerStatistics(
                watched=len(self._watches),
                running=run is not None and run.thread is not None and run.thread.is_alive(),
                threads_started=self._threads_started,
                passes=self._passes,
            )

    def _add(self, watch: _Watch) -> None:
        with self._lock:
            self._watches[watch] = None
            run = self._run
            if run is None:
                run = self._run = _Run()
                run.thread = threading.Thread(
                    target=self._poll, args=(run,), name=THREAD_NAME, daemon=True
                )
                self._threads_started += 1
                run.thread.start()
        # A first look at once, not a period later, as a thread of its own would.
        run.wake.set()

    def _remove(self, watch: _Watch) -> None:
        ending: _Run | None = None
        with self._lock:
            self._watches.pop(watch, None)
            if not self._watches and self._run is not None:
                ending, self._run = self._run, None
                ending.stopped = True
        watch.close()
        if ending is not None:
            # The thread wakes from its wait at once; at most one PRAGMA is in progress.
            # A watcher added meanwhile has started a thread of its own stretch.
            ending.wake.set()
            assert ending.thread is not None
            ending.thread.join()

    def _poll(self, run: _Run) -> None:  # the poller thread
        while True:
            run.wake.clear()
            with self._lock:
                if run.stopped:
                    return
                watches = list(self._watches)
                self._passes += 1
            for watch in watches:
                watch.check()
            run.wake.wait(self._interval)


_shared = CommitPoller()


def shared_poller() -> CommitPoller:
    """The process's poller: every watcher uses it unless given another."""
    return _shared


class CommitWatcher:
    """Calls ``on_change()`` on the event loop after commits to ``path`` by other connections."""

    def __init__(self, path: str, *, poller: CommitPoller | None = None) -> None:
        self._path = path
        self._poller = _shared if poller is None else poller

    async def run(
        self,
        on_change: Callable[[], Awaitable[None]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Watch until cancelled; ``on_change`` runs in this task, never concurrently."""
        state = {"wake": trio.Event()}

        def notify() -> None:  # on the event loop thread
            state["wake"].set()

        watch = _Watch(self._path, trio.lowlevel.current_trio_token(), notify)
        self._poller._add(watch)
        try:
            task_status.started()
            while True:
                await state["wake"].wait()
                state["wake"] = trio.Event()
                await on_change()
        finally:
            self._poller._remove(watch)
