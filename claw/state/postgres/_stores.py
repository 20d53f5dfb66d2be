"""Opening the PostgreSQL state of one host process: schema, owner lock, stores, watchers.

:func:`open_state` migrates (or refuses) the state schema in one transaction, takes
this process's owner lock (the advisory lock that tells other hosts its unfinished
turns are not orphans), loads the session mirror, and runs the two LISTEN watchers
(session changes into the mirror and the listeners; transcript writes into
``version``) in its own nursery until the block ends. The session locks (one turn of
a session at a time across hosts) are held on a connection of their own.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import psycopg
import trio

from ..._workers import WorkerPool
from .._session_locks import PolledSessionLocks
from ._database import Database, open_database
from ._migrations import migrate
from ._schema import COMPONENT, OWNER_LOCK_CLASS, STATE_MIGRATIONS
from ._session_locks import AdvisorySessionLocks
from ._sessions import PostgresSessionStore
from ._transcripts import PostgresTranscriptStore
from ._translate import chainable, translate


@attrs.frozen
class PostgresState:
    """The open state of one host process (what :func:`open_state` yields)."""

    database: Database
    sessions: PostgresSessionStore
    transcripts: PostgresTranscriptStore
    session_locks: PolledSessionLocks[Any]


def _migrate(conn: psycopg.Connection[Any], where: str) -> tuple[str, ...]:
    return migrate(conn, COMPONENT, STATE_MIGRATIONS, where=where)


def owner_application_name(owner_id: str) -> str:
    """The ``application_name`` of the connection holding ``owner_id``'s lock (it shows in
    ``pg_stat_activity``, so an operator can see which hosts are alive)."""
    return f"claw owner {owner_id}"


def _hold_owner_lock(dsn: str, owner_id: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(
        dsn,
        autocommit=True,
        connect_timeout=10,
        application_name=owner_application_name(owner_id),
    )
    try:
        conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (OWNER_LOCK_CLASS, owner_id))
    except BaseException:
        conn.close()
        raise
    return conn


def _release_owner_lock(conn: psycopg.Connection[Any], owner_id: str) -> None:
    # Unlock before closing: the server ends a closed connection's backend (and drops
    # its locks) a moment after the client is gone, and a clean exit should not leave
    # a window in which this host still looks alive.
    try:
        conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (OWNER_LOCK_CLASS, owner_id))
    except psycopg.Error:
        pass  # the connection is already gone, and the lock with it
    finally:
        conn.close()


@asynccontextmanager
async def open_state(
    dsn: str,
    *,
    workers: WorkerPool,
    clock: Callable[[], float] = time.time,
    pool_min: int = 1,
    pool_max: int = 8,
    pool_timeout: float = 30.0,
    dsn_key: str = "state.dsn",
) -> AsyncIterator[PostgresState]:
    """Open this host's PostgreSQL state; every store closes when the block ends.

    The pool keeps ``pool_min`` connections open and opens at most ``pool_max``; a query
    waits ``pool_timeout`` seconds for one (``[state] pool_min``, ``pool_max``,
    ``pool_timeout``). The LISTEN watchers and the owner lock have connections of their own.

    Raises :class:`~claw.SchemaVersionError` when the database's state schema is
    unknown to this build, :class:`~claw.DatabaseUnavailableError` when the server
    cannot be reached, :class:`~claw.ConfigError` for a malformed DSN.
    """
    async with open_database(
        dsn, workers=workers, min_size=pool_min, max_size=pool_max,
        acquire_timeout=pool_timeout, dsn_key=dsn_key, name="claw-state",
    ) as db:
        await db.transaction(functools.partial(_migrate, where=db.name))
        transcripts = PostgresTranscriptStore(db, clock)
        try:
            owner = await trio.to_thread.run_sync(_hold_owner_lock, dsn, transcripts.owner_id)
        except psycopg.Error as exc:
            raise translate(exc, what="owner lock", dsn=dsn) from chainable(exc, dsn)
        session_locks = AdvisorySessionLocks(dsn, transcripts.owner_id)
        try:
            sessions = await PostgresSessionStore.open(db, clock=clock)
            async with trio.open_nursery() as nursery:
                await nursery.start(sessions.watch)
                await nursery.start(transcripts.watch)
                try:
                    yield PostgresState(
                        database=db,
                        sessions=sessions,
                        transcripts=transcripts,
                        session_locks=session_locks.locks(workers),
                    )
                finally:
                    nursery.cancel_scope.cancel()
                    await sessions.aclose()
                    await transcripts.aclose()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(session_locks.close)
                await trio.to_thread.run_sync(_release_owner_lock, owner, transcripts.owner_id)
