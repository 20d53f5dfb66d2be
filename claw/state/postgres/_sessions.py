"""The session store in PostgreSQL, shared by every host, with each host's mirror.

Same contracts as the SQLite store (:class:`claw.sessions.SessionStore`): one
transaction per incarnation change; a key's lifecycle revision never decreases, even
across delete and re-create; a change this host makes is *pending* from before its
transaction starts until the mirror and the listeners have seen it.

What several hosts add:

* Each change locks the key's row (``SELECT ... FOR UPDATE``), so two hosts resetting
  one key both succeed, one after the other, with two revisions.
* Each change sends ``NOTIFY claw_session_changes, <key>`` in its own transaction
  (delivered at commit). :meth:`watch` LISTENs on a dedicated thread, re-reads the
  key and updates the mirror and the listeners (which revoke capabilities): that is
  promptness only. After (re)connecting it reloads every row, because notifications
  sent while it was away are lost.
* Safety does not rest on it: :meth:`read_committed` reads the committed rows in one
  statement, and the host's release check calls it before a provider result is
  handed out (fail closed).
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Final

import attrs
import psycopg
import trio

from ...sessions._mirror import ChangeOp, MirroredSessionStore, SessionChange, SessionOps
from ...sessions._rows import SessionRow, SessionSnapshot
from .. import _sessions_sql as sessions_sql
from .._sessions_sql import SessionSql
from ._database import Database
from ._listen import ListenerConnected, Notification
from ._schema import SESSION_CHANNEL

Connection = psycopg.Connection[Any]

#: A NOTIFY payload must stay under 8000 bytes; a longer key is sent as "" (reload all).
_MAX_PAYLOAD: Final[int] = 7000


def _notify(conn: Connection, key: str) -> None:
    payload = key if len(key.encode()) <= _MAX_PAYLOAD else ""
    conn.execute("SELECT pg_notify(%s, %s)", (SESSION_CHANNEL, payload))


POSTGRES: Final = SessionSql(
    sessions="claw_sessions",
    watermarks="claw_session_key_watermarks",
    placeholder="%s",
    greatest="GREATEST",
    lock=" FOR UPDATE",
    share=" FOR SHARE",
    notify=_notify,
)
"""The PostgreSQL spelling of the session tables: each change locks the rows it reads
(so two hosts changing one key both succeed, one after the other) and sends
``NOTIFY claw_session_changes, <key>`` in its transaction."""


def _load_all(conn: Connection) -> tuple[dict[str, SessionRow], dict[str, int]]:
    # One REPEATABLE READ transaction: rows and watermarks of the same moment.
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    return sessions_sql.load_all(conn, POSTGRES)


_READ_KEYS: Final[str] = (
    "SELECT k.key, s.agent_id, s.session_key, s.session_id, s.lifecycle_revision, s.chat_type, "
    "s.peer_is_owner, s.parent_key, s.parent_session_id, s.parent_revision, s.created_at, "
    "s.updated_at, s.spawned_by_owner, w.last_revision "
    "FROM unnest(%s::text[]) AS k(key) "
    "LEFT JOIN claw_sessions s ON s.session_key = k.key "
    "LEFT JOIN claw_session_key_watermarks w ON w.session_key = k.key"
)


def read_committed_sessions(conn: Connection, keys: tuple[str, ...]) -> SessionSnapshot:
    """The committed rows and watermarks of ``keys``, in one statement (one snapshot).

    A function of a connection, so a caller guarding data in the same database (the
    record provider) can run it in the transaction that reads the data it releases.
    """
    rows: dict[str, SessionRow] = {}
    marks: dict[str, int] = {}
    for values in conn.execute(_READ_KEYS, (list(keys),)).fetchall():
        key, row_values, mark = values[0], values[1:13], values[13]
        if row_values[1] is not None:
            rows[key] = sessions_sql.row_from_values(tuple(row_values))
        elif mark:
            marks[key] = int(mark)
    return SessionSnapshot(rows, marks)


def _read_change(conn: Connection, key: str) -> SessionChange:
    snap = read_committed_sessions(conn, (key,))
    row = snap.rows.get(key)
    return SessionChange(key, row, row.lifecycle_revision if row else snap.watermarks.get(key, 0))


@attrs.define(eq=False)
class PostgresSessionStore(MirroredSessionStore):
    """Sessions in PostgreSQL with this host's synchronous mirror of the committed rows.

    Implements :class:`claw.state.SessionStorage`; open with :meth:`open`.
    """

    _ops: ClassVar[SessionOps] = POSTGRES.ops()

    _db: Database = attrs.field(kw_only=True)
    _watching: bool = attrs.field(default=False, init=False)
    #: Changes brought in by :meth:`watch` (another host's, or a reload's).
    remote_changes: int = attrs.field(default=0, init=False)

    @classmethod
    async def open(cls, db: Database, *, clock: Callable[[], float]) -> PostgresSessionStore:
        """Load the mirror from ``db`` (whose schema the backend already migrated)."""
        rows, marks = await db.transaction(_load_all)
        return cls(clock, rows, marks, db=db)

    async def aclose(self) -> None:
        """Stop answering; the backend closes the pool. Later calls raise HostClosedError."""
        self._closed = True
        await trio.lowlevel.checkpoint()

    # ---- the database -----------------------------------------------------------------

    async def read_committed(self, keys: Iterable[str]) -> SessionSnapshot:
        """The committed rows and watermarks of ``keys``, read from PostgreSQL now."""
        self._check_open()
        return await self._db.run(read_committed_sessions, tuple(dict.fromkeys(keys)))

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Bring other hosts' commits into the mirror (and the listeners) until cancelled.

        The backend runs one watcher per store; a second call (the host starting it too)
        only waits, so the mirror is fed once.
        """
        if self._watching:
            task_status.started()
            await trio.sleep_forever()
        self._watching = True
        try:
            await self._watch(task_status)
        finally:
            self._watching = False

    async def _watch(self, task_status: trio.TaskStatus[None]) -> None:
        async with self._db.listen(SESSION_CHANNEL) as events:
            started = False
            async for event in events:
                if isinstance(event, ListenerConnected):
                    # Anything sent while we were not listening is lost: reload it all.
                    rows, marks = await self._db.transaction(_load_all)
                    self._reload(rows, marks)
                    if not started:
                        started = True
                        task_status.started()
                elif isinstance(event, Notification):
                    if event.payload:
                        self._apply_remote(await self._db.run(_read_change, event.payload))
                    else:
                        rows, marks = await self._db.transaction(_load_all)
                        self._reload(rows, marks)

    async def refresh(self) -> int:
        """Bring other hosts' committed changes into the mirror now; returns how many.

        The host calls it before each run and turn. NOTIFY is the prompt path; this is a
        full re-read (correct, but it costs a read of every row: a change sequence would
        make it cheap).
        """
        self._check_open()
        before = self.remote_changes
        rows, marks = await self._db.transaction(_load_all)
        self._reload(rows, marks)
        return self.remote_changes - before

    async def get(self, key: str) -> SessionRow | None:
        self._check_open()
        return await self._db.run(sessions_sql.fetch, POSTGRES, key)

    async def list(self, agent_id: str | None = None) -> builtins.list[SessionRow]:
        self._check_open()
        return await self._db.run(
            functools.partial(sessions_sql.select_rows, agent_id=agent_id), POSTGRES
        )

    async def has_agent(self, agent_id: str) -> bool:
        self._check_open()
        return await self._db.run(sessions_sql.has_agent, POSTGRES, agent_id)

    # ---- machinery ----------------------------------------------------------------------

    def _place(self) -> str:
        return f"on {self._db.name}"

    async def _commit(self, op: ChangeOp, box: builtins.list[SessionChange]) -> None:
        box.append(await self._db.transaction(op))

    def _reload(self, rows: dict[str, SessionRow], marks: dict[str, int]) -> None:
        for key in set(self._rows) | set(self._watermarks) | set(rows) | set(marks):
            row = rows.get(key)
            watermark = row.lifecycle_revision if row else marks.get(key, 0)
            self._apply_remote(SessionChange(key, row, watermark))

    def _apply_remote(self, change: SessionChange) -> None:
        """Apply a change read back from the database after another host's NOTIFY.

        It is re-read after the fact, so it may be older than what this host already
        applied (its own later write): the mirror never goes back.
        """
        if change.order <= self._current(change.key).order:
            return
        self.remote_changes += 1
        self._apply(change)
