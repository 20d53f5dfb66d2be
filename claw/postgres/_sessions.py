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
from typing import Any, Final

import attrs
import psycopg
import trio

from .._errors import HostClosedError
from ..sessions._changes import (
    SessionListener,
    check_reassign,
    check_spawn,
    child_row,
    notify_listeners,
    reassigned_row,
    reset_row,
    root_row,
)
from ..sessions._errors import SessionExistsError, SessionNotFoundError
from ..sessions._rows import (
    ChatType,
    SessionRow,
    SessionSnapshot,
    validate_flag,
    validate_row,
)
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


@attrs.frozen
class _Change:
    """A key's committed state: its row (``None`` once deleted) and its watermark."""

    key: str
    row: SessionRow | None
    watermark: int

    @property
    def order(self) -> tuple[int, int]:
        """Later changes of one key sort higher (a delete after the row it deleted)."""
        return (self.watermark, 1 if self.row is None else 0)


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


def _replace(conn: Connection, old: SessionRow, new: SessionRow) -> _Change:
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
    return _Change(new.session_key, new, new.lifecycle_revision)


def _insert_new(conn: Connection, row: SessionRow) -> _Change:
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
    return _Change(key, row, row.lifecycle_revision)


def _op_create(conn: Connection, row: SessionRow) -> _Change:
    return _insert_new(conn, row)


def _op_reset(conn: Connection, key: str, keep_session_id: bool, now: float) -> _Change:
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
) -> _Change:
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
) -> _Change:
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
    return _insert_new(conn, child)


def _op_delete(conn: Connection, key: str) -> _Change:
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
    return _Change(key, None, old.lifecycle_revision)


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


def _read_change(conn: Connection, key: str) -> _Change:
    snap = read_committed_sessions(conn, (key,))
    row = snap.rows.get(key)
    return _Change(key, row, row.lifecycle_revision if row else snap.watermarks.get(key, 0))


def _select(conn: Connection, sql: str, params: tuple[object, ...]) -> builtins.list[SessionRow]:
    return [_row(v) for v in conn.execute(sql, params).fetchall()]


@attrs.define(eq=False)
class PostgresSessionStore:
    """Sessions in PostgreSQL with this host's synchronous mirror of the committed rows.

    Implements :class:`claw._state.SessionStorage`; open with :meth:`open`.
    """

    _db: Database
    _clock: Callable[[], float]
    _rows: dict[str, SessionRow]
    _watermarks: dict[str, int]
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _listeners: builtins.list[SessionListener] = attrs.field(factory=builtins.list, init=False)
    _closed: bool = attrs.field(default=False, init=False)
    _pending: dict[str, int] = attrs.field(factory=dict, init=False)
    _write_done: trio.Event = attrs.field(factory=trio.Event, init=False)
    _watching: bool = attrs.field(default=False, init=False)
    #: Changes brought in by :meth:`watch` (another host's, or a reload's).
    remote_changes: int = attrs.field(default=0, init=False)

    @classmethod
    async def open(cls, db: Database, *, clock: Callable[[], float]) -> PostgresSessionStore:
        """Load the mirror from ``db`` (whose schema the backend already migrated)."""
        rows, marks = await db.transaction(_load_all)
        return cls(db, clock, rows, marks)

    async def aclose(self) -> None:
        """Stop answering; the backend closes the pool. Later calls raise HostClosedError."""
        self._closed = True
        await trio.lowlevel.checkpoint()

    # ---- the synchronous mirror -------------------------------------------------------

    def get_nowait(self, key: str) -> SessionRow | None:
        return self._rows.get(key)

    def last_revision_nowait(self, key: str) -> int:
        row = self._rows.get(key)
        if row is not None:
            return row.lifecycle_revision
        return self._watermarks.get(key, 0)

    def snapshot(self) -> SessionSnapshot:
        return SessionSnapshot(dict(self._rows), dict(self._watermarks))

    def pending_nowait(self, keys: Iterable[str]) -> bool:
        pending = self._pending
        return bool(pending) and any(k in pending for k in keys)

    async def wait_for_writes(self) -> None:
        await trio.lowlevel.checkpoint()
        while self._pending:
            await self._write_done.wait()

    def add_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: SessionListener) -> None:
        self._listeners.remove(listener)

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
                        self._apply(await self._db.run(_read_change, event.payload), remote=True)
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

    # ---- incarnation changes ----------------------------------------------------------

    async def create(
        self,
        key: str,
        *,
        agent_id: str,
        chat_type: ChatType,
        session_id: str | None = None,
        peer_is_owner: bool = False,
    ) -> SessionRow:
        row = root_row(
            key,
            agent_id=agent_id,
            chat_type=chat_type,
            session_id=session_id,
            peer_is_owner=peer_is_owner,
            now=self._clock(),
        )
        return await self._change_row(key, _op_create, row)

    async def spawn_child(
        self,
        parent_key: str,
        child_key: str,
        *,
        sender_is_owner: bool,
        chat_type: ChatType | None = None,
        session_id: str | None = None,
    ) -> SessionRow:
        sid = check_spawn(
            parent_key,
            child_key,
            sender_is_owner=sender_is_owner,
            chat_type=chat_type,
            session_id=session_id,
        )
        return await self._change_row(
            child_key,
            functools.partial(
                _op_spawn_child,
                parent_key=parent_key,
                child_key=child_key,
                chat_type=chat_type,
                session_id=sid,
                sender_is_owner=sender_is_owner,
                now=self._clock(),
            ),
        )

    async def reset(self, key: str, *, keep_session_id: bool = True) -> SessionRow:
        validate_flag("keep_session_id", keep_session_id)
        return await self._change_row(key, _op_reset, key, keep_session_id, self._clock())

    async def reassign(
        self,
        key: str,
        *,
        agent_id: str | None = None,
        chat_type: ChatType | None = None,
        peer_is_owner: bool | None = None,
    ) -> SessionRow:
        check_reassign(agent_id=agent_id, chat_type=chat_type, peer_is_owner=peer_is_owner)
        return await self._change_row(
            key,
            functools.partial(
                _op_reassign,
                key=key,
                agent_id=agent_id,
                chat_type=chat_type,
                peer_is_owner=peer_is_owner,
                now=self._clock(),
            ),
        )

    async def delete(self, key: str) -> None:
        await self._change(key, _op_delete, key)

    # ---- machinery ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise HostClosedError(f"the session store on {self._db.name} is closed")

    async def _change(self, key: str, op: Callable[..., _Change], *args: object) -> _Change:
        self._check_open()
        async with self._lock:
            self._check_open()
            # Pending from before the transaction starts until the mirror and the
            # listeners saw its outcome (see the SQLite store for why).
            self._pending[key] = self._pending.get(key, 0) + 1
            done = self._write_done = trio.Event()
            try:
                change = await self._db.transaction(op, *args)
                self._apply(change, remote=False)
            finally:
                left = self._pending[key] - 1
                if left:
                    self._pending[key] = left
                else:
                    del self._pending[key]
                done.set()
        return change

    async def _change_row(self, key: str, op: Callable[..., _Change], *args: object) -> SessionRow:
        row = (await self._change(key, op, *args)).row
        if row is None:  # pragma: no cover - only delete commits without a row
            raise AssertionError(f"{op!r} committed no row")
        return row

    def _current(self, key: str) -> _Change:
        row = self._rows.get(key)
        return _Change(key, row, row.lifecycle_revision if row else self._watermarks.get(key, 0))

    def _reload(self, rows: dict[str, SessionRow], marks: dict[str, int]) -> None:
        for key in set(self._rows) | set(self._watermarks) | set(rows) | set(marks):
            row = rows.get(key)
            self._apply(
                _Change(key, row, row.lifecycle_revision if row else marks.get(key, 0)),
                remote=True,
            )

    def _apply(self, change: _Change, *, remote: bool) -> None:
        current = self._current(change.key)
        if remote:
            # A notification is re-read after the fact, so it may be older than what
            # this host already applied (its own later write): never go back.
            if change.order <= current.order:
                return
            self.remote_changes += 1
        if change.row is None:
            self._rows.pop(change.key, None)
            if change.watermark:
                self._watermarks[change.key] = max(
                    change.watermark, self._watermarks.get(change.key, 0)
                )
        else:
            self._rows[change.key] = change.row
            self._watermarks.pop(change.key, None)
        notify_listeners(self._listeners, (change.key,))
