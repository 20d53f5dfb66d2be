"""A read-only view of the session store's committed rows over its own connection.

Plugins list sessions (Memory Core indexes their transcripts) through
``api.transcripts``; that facet must not hold the :class:`~claw.sessions.SessionStore`,
whose listeners lead to the host's capability registry and whose methods change
incarnations. :class:`SessionRowReader` opens the store's file read-only
(``mode=ro``), so nothing reachable from it can write a row or reach the host.
"""

from __future__ import annotations

import builtins
import sqlite3
import urllib.parse

import attrs
import trio

from ..._errors import HostClosedError
from ..._workers import WorkerPool
from ...sessions._errors import SessionStorageError
from ...sessions._rows import SessionRow
from .._sessions_sql import select_rows
from ._session_schema import SQLITE


def _connect_read_only(path: str) -> sqlite3.Connection:
    uri = f"file:{urllib.parse.quote(path)}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 5000")
    except sqlite3.Error as exc:
        raise SessionStorageError(
            f"cannot open the session store at {path} for reading: {exc}"
        ) from exc
    return conn


def _list(conn: sqlite3.Connection, agent_id: str | None) -> builtins.list[SessionRow]:
    try:
        return select_rows(conn, SQLITE, agent_id=agent_id)
    except sqlite3.Error as exc:
        raise SessionStorageError(f"session store SQLite error: {exc}") from exc


@attrs.define(eq=False)
class SessionRowReader:
    """Lists committed session rows from the store's file, read-only; opened on first use."""

    _path: str = attrs.field(converter=str)
    _workers: WorkerPool
    _conn: sqlite3.Connection | None = attrs.field(default=None, init=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    async def list(self, agent_id: str | None = None) -> builtins.list[SessionRow]:
        """All committed rows (of ``agent_id`` when given), ordered by session key."""
        async with self._lock:
            if self._closed:
                raise HostClosedError(f"the session store at {self._path} is closed")
            if self._conn is None:
                self._conn = await self._workers.run_sync(_connect_read_only, self._path)
            return await self._workers.run_sync(_list, self._conn, agent_id)

    async def aclose(self) -> None:
        """Close the connection; later calls raise :class:`claw.HostClosedError`."""
        with trio.CancelScope(shield=True):
            async with self._lock:
                self._closed = True
                conn, self._conn = self._conn, None
                if conn is not None:
                    await self._workers.run_sync(conn.close)
