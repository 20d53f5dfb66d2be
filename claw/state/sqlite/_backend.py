"""The embedded state backend: the session store and the transcript database in SQLite.

``<state_dir>/sessions.sqlite3`` holds the session rows; ``<state_dir>/transcripts.sqlite3``
holds the transcripts and the turn ledger. Nothing outside :mod:`claw.state` issues SQL
on them. Any number of processes open them at once (WAL, busy timeouts, one short
transaction per call); each open host is an owner (:mod:`._owners`) so that only a dead
process's turns are closed by another. Turns of one session run one at a time across
processes under an ``flock`` per session key (:class:`._session_locks.SessionLockFiles`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Final

import attrs
import trio

from ..._storage import naming_storage_failures
from ..._workers import WorkerPool
from .._seam import SessionLister, StateStores
from ._owners import OwnerLease
from ._session_locks import SessionLockFiles
from ._session_reader import SessionRowReader
from ._sessions import SessionStore
from ._transcripts import open_transcript_store

SESSIONS_FILE: Final[str] = "sessions.sqlite3"
TRANSCRIPTS_FILE: Final[str] = "transcripts.sqlite3"


@attrs.frozen
class SQLiteStateBackend:
    """The default :class:`~claw.state.StateBackend`: two SQLite files in ``state_dir``."""

    state_dir: Path = attrs.field(converter=Path)

    @property
    def name(self) -> str:
        return "sqlite"

    def session_lister(self, workers: WorkerPool) -> SessionLister:
        return SessionRowReader(self.state_dir / SESSIONS_FILE, workers)

    def open(
        self, *, workers: WorkerPool, clock: Callable[[], float]
    ) -> AbstractAsyncContextManager[StateStores]:
        return self._open(workers, clock)

    @asynccontextmanager
    async def _open(
        self, workers: WorkerPool, clock: Callable[[], float]
    ) -> AsyncIterator[StateStores]:
        with naming_storage_failures(self.state_dir / "owners", what="the owner lock directory"):
            owner = await workers.run_sync(OwnerLease.acquire, self.state_dir)
        try:
            sessions = await SessionStore.open(
                self.state_dir / SESSIONS_FILE, workers=workers, clock=clock
            )
            try:
                async with open_transcript_store(
                    self.state_dir / TRANSCRIPTS_FILE,
                    workers=workers,
                    clock=clock,
                    owner_id=owner.owner_id,
                    is_alive=owner.is_alive,
                ) as transcripts:
                    yield StateStores(
                        sessions=sessions,
                        transcripts=transcripts,
                        session_locks=SessionLockFiles(self.state_dir).locks(workers),
                    )
            finally:
                with trio.CancelScope(shield=True):
                    await sessions.aclose()
        finally:
            # Last: the turns this process owned are closed (or left for the next
            # process to close) before it stops counting as alive.
            owner.release()
