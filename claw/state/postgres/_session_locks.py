"""Per-session locks across hosts: session-level advisory locks on one dedicated connection.

A host holds the lock of a session it runs a turn of as
``pg_try_advisory_lock(SESSION_LOCK_CLASS, hashtext(session_key))`` on a connection of
its own (not the pool's: a pooled connection held for a whole turn would starve the
turn's own queries). The lock is the lease with an expiry: the server drops it when
that connection ends, so a host that dies, or loses the server, loses every session
it held, and another host's next turn of them goes ahead. Tries are polled, never
blocking (see :mod:`claw.state._session_locks`), so one connection serves every session of
the host and a cancelled wait leaves nothing behind.

If the connection broke while locks were held, those locks are already gone on the
server; the next try reconnects, and releases of the old connection's locks are
no-ops (each handle remembers its connection).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Final

import attrs
import psycopg

from ..._workers import WorkerPool
from .._session_locks import PolledSessionLocks
from ._dsn import redact_dsn
from ._schema import SESSION_LOCK_CLASS
from ._translate import chainable, translate

logger = logging.getLogger("claw.postgres")

_TRY: Final[str] = "SELECT pg_try_advisory_lock(%s, hashtext(%s))"
_UNLOCK: Final[str] = "SELECT pg_advisory_unlock(%s, hashtext(%s))"


def session_locks_application_name(owner_id: str) -> str:
    """The ``application_name`` of the connection holding ``owner_id``'s session locks."""
    return f"claw session locks {owner_id}"


@attrs.frozen
class _Held:
    session_key: str
    conn: psycopg.Connection[Any]


@attrs.define(eq=False)
class AdvisorySessionLocks:
    """The connection that holds this host's session locks; see the module docstring."""

    _dsn: str = attrs.field(repr=redact_dsn)
    _owner_id: str
    _conn: psycopg.Connection[Any] | None = None
    _held: int = 0
    _lock: threading.Lock = attrs.field(factory=threading.Lock)
    _closed: bool = False

    def _connection(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is not None and not conn.broken and not conn.closed:
            return conn
        if conn is not None:
            if self._held:
                logger.warning(
                    "the connection holding %d session lock(s) of this host broke; the server "
                    "dropped them, so another host may run those sessions now",
                    self._held,
                )
            conn.close()
            self._held = 0
        self._conn = psycopg.connect(
            self._dsn,
            autocommit=True,
            connect_timeout=10,
            application_name=session_locks_application_name(self._owner_id),
        )
        return self._conn

    def try_acquire(self, session_key: str) -> _Held | None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the session lock connection is closed")
            try:
                conn = self._connection()
                row = conn.execute(_TRY, (SESSION_LOCK_CLASS, session_key)).fetchone()
            except psycopg.Error as exc:
                raise translate(exc, what="session lock", dsn=self._dsn) from chainable(
                    exc, self._dsn
                )
            if not row or not row[0]:
                return None
            self._held += 1
            return _Held(session_key, conn)

    def release(self, held: _Held) -> None:
        with self._lock:
            if held.conn is not self._conn or held.conn.broken or held.conn.closed:
                return  # its connection ended, and the lock with it
            self._held -= 1
            try:
                held.conn.execute(_UNLOCK, (SESSION_LOCK_CLASS, held.session_key))
            except psycopg.Error:
                logger.warning("could not release the session lock of %s", held.session_key)

    def close(self) -> None:
        """Close the connection (which drops any lock still held)."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def locks(self, workers: WorkerPool) -> PolledSessionLocks[Any]:
        """The :class:`~claw.state.SessionLocks` these advisory locks serve."""
        return PolledSessionLocks(workers, self.try_acquire, self.release)
