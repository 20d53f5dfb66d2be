"""The session store's SQL, written once for every backend: the incarnation changes and the reads.

What each change makes of a row is :mod:`claw.sessions._changes`; how it is written is
here, over a :class:`SessionSql` that names a backend's tables and placeholder, the row
locks a change takes and how it announces itself. SQLite (``?``, no row locks: its
``BEGIN IMMEDIATE`` holds the database's write lock) and PostgreSQL (``%s``,
``FOR UPDATE`` / ``FOR SHARE`` on the rows a change reads, ``NOTIFY`` in the same
transaction) then run the same statements in the same order. Every function runs inside
a transaction its caller opened; a backend keeps only its transactions and how other
writers' commits reach its mirror.

The rules both keep: a change reads the row it replaces (locked), and writes the new
one only over exactly that row; a create continues the key's revision sequence from
its watermark (the last revision of a deleted key), so a key's lifecycle revision never
decreases, even across delete and re-create; a delete records that watermark.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import attrs

from ..sessions._changes import child_row, reassigned_row, reset_row
from ..sessions._errors import SessionExistsError, SessionNotFoundError, SessionStorageError
from ..sessions._mirror import SessionChange, SessionOps
from ..sessions._rows import SessionRow, SessionSnapshot, validate_row

#: The session columns, in the order :func:`row_from_values` reads them.
COLUMNS: Final[str] = (
    "agent_id, session_key, session_id, lifecycle_revision, chat_type, peer_is_owner, "
    "parent_key, parent_session_id, parent_revision, created_at, updated_at, spawned_by_owner"
)


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> Any: ...


class Connection(Protocol):
    """What the functions here use of a backend's connection (sqlite3 and psycopg alike)."""

    def execute(self, sql: Any, params: Any = ..., /) -> Cursor: ...


def _no_notification(conn: Any, key: str) -> None:
    return None


@attrs.frozen
class SessionSql:
    """How one backend names the session tables, spells a query, locks and notifies.

    Queries here are written with ``?`` placeholders and ``{sessions}``,
    ``{watermarks}`` and ``{greatest}`` for the table names and the two-argument
    maximum; :meth:`q` renders them for the backend.
    """

    sessions: str
    watermarks: str
    placeholder: str
    greatest: str
    #: Appended to a read of a row the change then writes (``" FOR UPDATE"``).
    lock: str = ""
    #: Appended to the read of a parent a spawn records (``" FOR SHARE"``).
    share: str = ""
    #: Called in the transaction after each change, with the changed key.
    notify: Callable[[Any, str], None] = _no_notification

    def q(self, sql: str) -> str:
        rendered = sql.format(
            sessions=self.sessions, watermarks=self.watermarks, greatest=self.greatest
        )
        return rendered.replace("?", self.placeholder)

    def ops(self) -> SessionOps:
        """The five incarnation changes of this backend, as its store runs them."""
        return SessionOps(
            create=functools.partial(create, sql=self),
            reset=functools.partial(reset, sql=self),
            reassign=functools.partial(reassign, sql=self),
            spawn_child=functools.partial(spawn_child, sql=self),
            delete=functools.partial(delete, sql=self),
        )


def row_from_values(values: Sequence[Any]) -> SessionRow:
    """The :class:`SessionRow` of a ``SELECT {COLUMNS}`` row."""
    (agent_id, key, session_id, revision, chat_type, peer, pkey, psid, prev, cat, uat, spawned) = (
        values
    )
    return SessionRow(
        agent_id=agent_id,
        session_key=key,
        session_id=session_id,
        lifecycle_revision=int(revision),
        chat_type=chat_type,
        peer_is_owner=bool(peer),
        parent_key=pkey,
        parent_session_id=psid,
        parent_revision=None if prev is None else int(prev),
        created_at=float(cat),
        updated_at=float(uat),
        spawned_by_owner=None if spawned is None else bool(spawned),
    )


def row_values(row: SessionRow) -> tuple[object, ...]:
    """The ``{COLUMNS}`` values of ``row``, for an INSERT (flags as booleans: SQLite
    stores them as 1 and 0)."""
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


def fetch(conn: Connection, sql: SessionSql, key: str, *, suffix: str = "") -> SessionRow | None:
    """The row of ``key``, or ``None`` (``suffix``: the backend's lock clause, if any)."""
    found = conn.execute(
        sql.q(f"SELECT {COLUMNS} FROM {{sessions}} WHERE session_key = ?") + suffix, (key,)
    ).fetchone()
    return None if found is None else row_from_values(tuple(found))


def watermark(conn: Connection, sql: SessionSql, key: str, *, suffix: str = "") -> int:
    """The last revision of ``key`` when it was deleted (0: never deleted, or re-created)."""
    found = conn.execute(
        sql.q("SELECT last_revision FROM {watermarks} WHERE session_key = ?") + suffix, (key,)
    ).fetchone()
    return 0 if found is None else int(found[0])


def _require(conn: Connection, sql: SessionSql, key: str, *, suffix: str) -> SessionRow:
    row = fetch(conn, sql, key, suffix=suffix)
    if row is None:
        raise SessionNotFoundError(f"no session with key {key!r}")
    return row


def _replace(conn: Connection, sql: SessionSql, old: SessionRow, new: SessionRow) -> SessionChange:
    """Write ``new`` over ``old``, checking that the row really was ``old``."""
    validate_row(new)
    cursor = conn.execute(
        sql.q(
            "UPDATE {sessions} SET agent_id = ?, session_id = ?, lifecycle_revision = ?, "
            "chat_type = ?, peer_is_owner = ?, created_at = ?, updated_at = ? "
            "WHERE session_key = ? AND session_id = ? AND lifecycle_revision = ?"
        ),
        (
            new.agent_id,
            new.session_id,
            new.lifecycle_revision,
            new.chat_type,
            new.peer_is_owner,
            new.created_at,
            new.updated_at,
            old.session_key,
            old.session_id,
            old.lifecycle_revision,
        ),
    )
    if cursor.rowcount != 1:  # pragma: no cover - the transaction holds the row's lock
        raise SessionStorageError(f"session {old.session_key!r} changed under its transaction")
    sql.notify(conn, new.session_key)
    return SessionChange(new.session_key, new, new.lifecycle_revision)


def create(conn: Connection, *, sql: SessionSql, row: SessionRow) -> SessionChange:
    """Insert a row for a key with no row, continuing the key's revision sequence."""
    key = row.session_key
    if fetch(conn, sql, key) is not None:
        raise SessionExistsError(
            f"a session with key {key!r} already exists; reset or delete it first"
        )
    # The watermark is locked (where the backend locks rows) so a concurrent re-create
    # elsewhere cannot reuse a revision; a concurrent create of the same key waits on the
    # key's unique index and then inserts nothing.
    row = attrs.evolve(row, lifecycle_revision=watermark(conn, sql, key, suffix=sql.lock) + 1)
    validate_row(row)
    inserted = conn.execute(
        sql.q(
            f"INSERT INTO {{sessions}} ({COLUMNS}) VALUES ({', '.join('?' * 12)}) "
            "ON CONFLICT (session_key) DO NOTHING"
        ),
        row_values(row),
    ).rowcount
    if inserted != 1:
        raise SessionExistsError(
            f"a session with key {key!r} already exists; reset or delete it first"
        )
    conn.execute(sql.q("DELETE FROM {watermarks} WHERE session_key = ?"), (key,))
    sql.notify(conn, key)
    return SessionChange(key, row, row.lifecycle_revision)


def reset(
    conn: Connection, *, sql: SessionSql, key: str, keep_session_id: bool, now: float
) -> SessionChange:
    old = _require(conn, sql, key, suffix=sql.lock)
    return _replace(conn, sql, old, reset_row(old, keep_session_id=keep_session_id, now=now))


def reassign(
    conn: Connection,
    *,
    sql: SessionSql,
    key: str,
    agent_id: str | None,
    chat_type: str | None,
    peer_is_owner: bool | None,
    now: float,
) -> SessionChange:
    old = _require(conn, sql, key, suffix=sql.lock)
    new = reassigned_row(
        old, agent_id=agent_id, chat_type=chat_type, peer_is_owner=peer_is_owner, now=now
    )
    return _replace(conn, sql, old, new)


def spawn_child(
    conn: Connection,
    *,
    sql: SessionSql,
    parent_key: str,
    child_key: str,
    chat_type: str | None,
    session_id: str,
    sender_is_owner: bool,
    now: float,
) -> SessionChange:
    # Shared: the parent may not change incarnation until the child recorded it.
    child = child_row(
        _require(conn, sql, parent_key, suffix=sql.share),
        child_key=child_key,
        chat_type=chat_type,
        session_id=session_id,
        sender_is_owner=sender_is_owner,
        now=now,
    )
    return create(conn, sql=sql, row=child)


def delete(conn: Connection, *, sql: SessionSql, key: str) -> SessionChange:
    old = _require(conn, sql, key, suffix=sql.lock)
    conn.execute(sql.q("DELETE FROM {sessions} WHERE session_key = ?"), (key,))
    conn.execute(
        sql.q(
            "INSERT INTO {watermarks} (session_key, last_revision) VALUES (?, ?) "
            "ON CONFLICT (session_key) DO UPDATE SET "
            "last_revision = {greatest}({watermarks}.last_revision, excluded.last_revision)"
        ),
        (key, old.lifecycle_revision),
    )
    sql.notify(conn, key)
    return SessionChange(key, None, old.lifecycle_revision)


def load_all(conn: Connection, sql: SessionSql) -> tuple[dict[str, SessionRow], dict[str, int]]:
    """Every row and every deleted key's watermark (one transaction: one moment)."""
    rows = {
        row.session_key: row
        for row in (
            row_from_values(tuple(v))
            for v in conn.execute(sql.q(f"SELECT {COLUMNS} FROM {{sessions}}")).fetchall()
        )
    }
    marks = {
        str(k): int(r)
        for k, r in conn.execute(
            sql.q("SELECT session_key, last_revision FROM {watermarks}")
        ).fetchall()
    }
    return rows, marks


def read_keys(conn: Connection, sql: SessionSql, keys: Sequence[str]) -> SessionSnapshot:
    """The rows and deleted-key watermarks of ``keys`` (inside one read transaction)."""
    rows: dict[str, SessionRow] = {}
    marks: dict[str, int] = {}
    for key in keys:
        row = fetch(conn, sql, key)
        if row is not None:
            rows[key] = row
        else:
            mark = watermark(conn, sql, key)
            if mark:
                marks[key] = mark
    return SessionSnapshot(rows, marks)


def select_rows(
    conn: Connection, sql: SessionSql, *, agent_id: str | None = None
) -> builtins.list[SessionRow]:
    """Every row (of ``agent_id`` when given), ordered by session key."""
    query = f"SELECT {COLUMNS} FROM {{sessions}}"
    params: tuple[object, ...] = ()
    if agent_id is not None:
        query += " WHERE agent_id = ?"
        params = (agent_id,)
    rows = conn.execute(sql.q(query + " ORDER BY session_key"), params).fetchall()
    return [row_from_values(tuple(v)) for v in rows]


def has_agent(conn: Connection, sql: SessionSql, agent_id: str) -> bool:
    """Whether ``agent_id`` has at least one session (one indexed row read)."""
    found = conn.execute(
        sql.q("SELECT 1 FROM {sessions} WHERE agent_id = ? LIMIT 1"), (agent_id,)
    ).fetchone()
    return found is not None
