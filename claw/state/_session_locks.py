"""Per-session exclusive locks across processes and hosts: one turn of a session at a time.

A turn of a session, with the pre-compaction flush and the compaction it triggers, runs
while its process holds that session's lock (:class:`~claw.state.SessionLocks`).
:class:`PolledSessionLocks` is the shape both backends share:

1. an in-process :class:`trio.Lock` per session key is the first gate, so the tasks of
   one process queue on the event loop and never stack worker threads on one key;
2. the cross-process lock is then *tried* (never waited on) in a worker thread, and
   retried after a short, growing sleep while another process holds it.

Trying instead of blocking is what keeps the wait cancellable: a cancelled turn is
between two tries, in a Trio sleep, holding nothing and leaving no thread blocked. A
try that took the lock is released even when the caller was cancelled meanwhile.

The SQLite backend's lock is an exclusive ``flock`` on
``<state_dir>/session-locks/<digest>.lock`` (:mod:`claw.state.sqlite._session_locks`),
which the kernel drops however its holder ends (``SIGKILL`` included). PostgreSQL's is
a session-level advisory lock (:mod:`claw.state.postgres._session_locks`), which the
server drops with its connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Final, Generic, TypeVar

import attrs
import trio

from .._workers import WorkerPool

H = TypeVar("H")

#: The first and the longest sleep between two tries of a lock another process holds.
FIRST_RETRY: Final[float] = 0.002
LONGEST_RETRY: Final[float] = 0.05


@attrs.define(eq=False)
class PolledSessionLocks(Generic[H]):
    """:class:`~claw.state.SessionLocks` over a try-lock primitive (see the module docstring).

    ``try_acquire(key)`` returns a handle when it took ``key``'s lock and ``None`` when
    another holder has it; ``release(handle)`` gives it back. Both are blocking calls,
    run in ``workers``.
    """

    _workers: WorkerPool
    _try_acquire: Callable[[str], H | None]
    _release: Callable[[H], None]
    #: The first gate of each key in use, with how many tasks hold or wait on it; a
    #: key's entry goes with its last user, so the map grows with concurrent use, not
    #: with every session key this process ever served.
    _gates: dict[str, tuple[trio.Lock, int]] = attrs.field(factory=dict, init=False)

    def gates_in_use(self) -> int:
        """How many session keys have a task holding or waiting for their lock here."""
        return len(self._gates)

    @contextlib.contextmanager
    def _gate(self, session_key: str) -> Iterator[trio.Lock]:
        gate, users = self._gates.get(session_key, (None, 0))
        if gate is None:
            gate = trio.Lock()
        self._gates[session_key] = (gate, users + 1)
        try:
            yield gate
        finally:
            gate, users = self._gates[session_key]
            if users == 1:
                del self._gates[session_key]
            else:
                self._gates[session_key] = (gate, users - 1)

    @asynccontextmanager
    async def hold(self, session_key: str) -> AsyncIterator[None]:
        """Hold ``session_key``'s lock for the block, waiting (cancellably) for it."""
        with self._gate(session_key) as gate:
            async with gate, self._hold_across_processes(session_key):
                yield

    @asynccontextmanager
    async def _hold_across_processes(self, session_key: str) -> AsyncIterator[None]:
        handle: H | None = None
        try:
            delay = FIRST_RETRY
            while True:
                handle = await self._workers.run_sync(self._try_acquire, session_key)
                if handle is not None:
                    break
                await trio.sleep(delay)
                delay = min(delay * 2, LONGEST_RETRY)
            yield
        finally:
            if handle is not None:
                with trio.CancelScope(shield=True):
                    await self._workers.run_sync(self._release, handle)
