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
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Final

import attrs
import psycopg
import trio

from ...sessions._changes import child_row, reassigned_row, reset_row
from ...sessions._errors import SessionExistsError, SessionNotFoundError
from ...sessions._mirror import ChangeOp, MirroredSessionStore, SessionChange, SessionOps
from ...sessions._rows import SessionRow, SessionSnapshot, validate_row
from ._database import Database
from ._listen import ListenerConnected, Notification
from ._schema import SESSION_CHANNEL

Connection = psycopg.Connection[Any]

_COLUMNS: Final[str] = (
    "agent_id, session_key, session_id, lifecycle_revision, chat_type, peer_is_owner, "
    "parent_key, parent_session_id, parent_revision, created_at, updated_at, spawned_by_owner"
)
_PLACEHOLDERS: Final[str] = ", ".join(["%s"] * 12)
#: A NOTIFY payload must stay under 8000 bytes; a longer key is sent as "" (reload all).
_MAX_PAYLOAD: Final[int] = 7000


def _row(values: tuple[Any, ...]) -> SessionRow:
    (agent_id, key, sid, rev, chat, peer, pkey, psid, prev, cat, uat, spawned) = values
    return SessionRow(
        agent_id=agent_id,
        session_key=key,
        session_id=sid,
        lifecycle_revision=int(rev),
        chat_type=chat,
        peer_is_owner=bool(peer),
        parent_key=pkey,
        parent_session_id=psid,
        parent_revision=None if prev is None else int(prev),
        created_at=float(cat),
        updated_at=float(uat),
        spawned_by_owner=spawned,
    )


def _values(row: SessionRow) -> tuple[object, ...]:
    return (
        row.agent_id,
        row.session_key,
        row.session_id,
        row.lifecycle_revision,
        row.chat_type,
        row.peer_is_owner,
        row.parent_key,
        row.parent_session_id,
        row.parent_revision,
        row.created_at,
        row.updated_at,
        row.spawned_by_owner,
    )


def _fetch(conn: Connection, key: str, *, lock: bool = False) -> SessionRow | None:
    sql = f"SELECT {_COLUMNS} FROM claw_sessions WHERE session_key = %s"
    found = conn.execute(sql + (" FOR UPDATE" if lock else ""), (key,)).fetchone()
    return None if found is None else _row(found)


def _require(conn: Connection, key: str) -> SessionRow:
    row = _fetch(conn, key, lock=True)
    if row is None:
        raise SessionNotFoundError(f"no session with key {key!r}")
    return row


def _notify(conn: Connection, key: str) -> None:
    payload = key if len(key.encode()) <= _MAX_PAYLOAD else ""
    conn.execute("SELECT pg_notify(%s, %s)", (SESSION_CHANNEL, payload))


def _replace(conn: Connection, old: SessionRow, new: SessionRow) -> SessionChange:
    validate_row(new)
    conn.execute(
        "UPDATE claw_sessions SET agent_id = %s, session_id = %s, lifecycle_revision = %s, "
        "chat_type = %s, peer_is_owner = %s, created_at = %s, updated_at = %s "
        "WHERE session_key = %s",
        (
            new.agent_id,
            new.session_id,
            new.lifecycle_revision,
            new.chat_type,
            new.peer_is_owner,
            new.created_at,
            new.updated_at,
            old.session_key,
        ),
    )
    _notify(conn, new.session_key)
    return SessionChange(new.session_key, new, new.lifecycle_revision)


def _op_create(conn: Connection, row: SessionRow) -> SessionChange:
    """Insert a row for a key with no row, continuing the key's revision sequence."""
    key = row.session_key
    # Lock the key's watermark (or its absence, through the row lock below) so a
    # concurrent re-create on another host cannot reuse a revision.
    found = conn.execute(
        "SELECT last_revision FROM claw_session_key_watermarks WHERE session_key = %s FOR UPDATE",
        (key,),
    ).fetchone()
    mark = 0 if found is None else int(found[0])
    row = attrs.evolve(row, lifecycle_revision=mark + 1)
    validate_row(row)
    inserted = conn.execute(
        f"INSERT INTO claw_sessions ({_COLUMNS}) VALUES ({_PLACEHOLDERS}) "
        "ON CONFLICT (session_key) DO NOTHING",
        _values(row),
    ).rowcount
    if inserted != 1:
        raise SessionExistsError(
            f"a session with key {key!r} already exists; reset or delete it first"
        )
    conn.execute("DELETE FROM claw_session_key_watermarks WHERE session_key = %s", (key,))
    _notify(conn, key)
    return SessionChange(key, row, row.lifecycle_revision)


def _op_reset(conn: Connection, key: str, keep_session_id: bool, now: float) -> SessionChange:
    old = _require(conn, key)
    return _replace(conn, old, reset_row(old, keep_session_id=keep_session_id, now=now))


def _op_reassign(
    conn: Connection,
    *,
    key: str,
    agent_id: str | None,
    chat_type: str | None,
    peer_is_owner: bool | None,
    now: float,
) -> SessionChange:
    old = _require(conn, key)
    new = reassigned_row(
        old, agent_id=agent_id, chat_type=chat_type, peer_is_owner=peer_is_owner, now=now
    )
    return _replace(conn, old, new)


def _op_spawn_child(
    conn: Connection,
    *,
    parent_key: str,
    child_key: str,
    chat_type: str | None,
    session_id: str,
    sender_is_owner: bool,
    now: float,
) -> SessionChange:
    # FOR SHARE: the parent may not change incarnation until the child recorded it.
    found = conn.execute(
        f"SELECT {_COLUMNS} FROM claw_sessions WHERE session_key = %s FOR SHARE", (parent_key,)
    ).fetchone()
    if found is None:
        raise SessionNotFoundError(f"no session with key {parent_key!r}")
    child = child_row(
        _row(found),
        child_key=child_key,
        chat_type=chat_type,
        session_id=session_id,
        sender_is_owner=sender_is_owner,
        now=now,
    )
    return _op_create(conn, child)


def _op_delete(conn: Connection, key: str) -> SessionChange:
    old = _require(conn, key)
    conn.execute("DELETE FROM claw_sessions WHERE session_key = %s", (key,))
    conn.execute(
        "INSERT INTO claw_session_key_watermarks (session_key, last_revision) VALUES (%s, %s) "
        "ON CONFLICT (session_key) DO UPDATE SET "
        "last_revision = GREATEST(claw_session_key_watermarks.last_revision, "
        "excluded.last_revision)",
        (key, old.lifecycle_revision),
    )
    _notify(conn, key)
    return SessionChange(key, None, old.lifecycle_revision)


def _load_all(conn: Connection) -> tuple[dict[str, SessionRow], dict[str, int]]:
    # One REPEATABLE READ transaction: rows and watermarks of the same moment.
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    rows = {
        r.session_key: r
        for r in map(_row, conn.execute(f"SELECT {_COLUMNS} FROM claw_sessions").fetchall())
    }
    marks = {
        str(k): int(v)
        for k, v in conn.execute(
            "SELECT session_key, last_revision FROM claw_session_key_watermarks"
        ).fetchall()
    }
    return rows, marks


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
            rows[key] = _row(tuple(row_values))
        elif mark:
            marks[key] = int(mark)
    return SessionSnapshot(rows, marks)


def _read_change(conn: Connection, key: str) -> SessionChange:
    snap = read_committed_sessions(conn, (key,))
    row = snap.rows.get(key)
    return SessionChange(key, row, row.lifecycle_revision if row else snap.watermarks.get(key, 0))


def _select(conn: Connection, sql: str, params: tuple[object, ...]) -> builtins.list[SessionRow]:
    return [_row(v) for v in conn.execute(sql, params).fetchall()]


@attrs.define(eq=False)
class PostgresSessionStore(MirroredSessionStore):
    """Sessions in PostgreSQL with this host's synchronous mirror of the committed rows.

    Implements :class:`claw.state.SessionStorage`; open with :meth:`open`.
    """

    _ops: ClassVar[SessionOps] = SessionOps(
        create=_op_create,
        reset=_op_reset,
        reassign=_op_reassign,
        spawn_child=_op_spawn_child,
        delete=_op_delete,
    )

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
        return await self._db.run(_fetch, key)

    async def list(self, agent_id: str | None = None) -> builtins.list[SessionRow]:
        self._check_open()
        if agent_id is None:
            return await self._db.run(
                _select, f"SELECT {_COLUMNS} FROM claw_sessions ORDER BY session_key", ()
            )
        return await self._db.run(
            _select,
            f"SELECT {_COLUMNS} FROM claw_sessions WHERE agent_id = %s ORDER BY session_key",
            (agent_id,),
        )

    async def has_agent(self, agent_id: str) -> bool:
        self._check_open()
        rows = await self._db.run(
            _select,
            f"SELECT {_COLUMNS} FROM claw_sessions WHERE agent_id = %s LIMIT 1",
            (agent_id,),
        )
        return bool(rows)

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
