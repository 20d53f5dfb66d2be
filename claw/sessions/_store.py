"""The durable session store: SQLite rows, one transaction per incarnation change.

The store owns one SQLite connection. Every call runs its whole transaction in
one :meth:`WorkerPool.run_sync` call under a :class:`trio.Lock`, so calls are
serialized and a transaction never spans an await. After a change commits,
and still holding the lock, the store updates an in-memory mirror of the
committed rows and calls its listeners on the event loop thread. The mirror
is what the synchronous :meth:`SessionStore.get_nowait` answers from, which
is how capability currency can be checked without blocking.

Other processes may write the same file. Their commits reach the mirror through
:meth:`SessionStore.watch` (a thread that notices them, then :meth:`SessionStore.refresh`,
which calls the listeners as for a change made here); that is for promptness only.
What keeps a stale capability from releasing data is the host's release check, which
reads the committed rows with :meth:`SessionStore.read_committed`.
"""

from __future__ import annotations

import builtins
import functools
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Final, TypeVar

import attrs
import trio

from .._commit_watch import CommitWatcher
from .._errors import HostClosedError
from .._workers import WorkerPool
from ._changes import (
    SessionListener,
    check_reassign,
    check_spawn,
    child_row,
    notify_listeners,
    reassigned_row,
    reset_row,
    root_row,
)
from ._errors import (
    SessionExistsError,
    SessionNotFoundError,
    SessionSchemaError,
    SessionStorageError,
)
from ._rows import (
    ChatType,
    SessionRow,
    SessionSnapshot,
    validate_flag,
    validate_row,
)
from ._schema import COLUMNS, PLACEHOLDERS, ensure_schema, row_from_sql, row_to_sql

logger = logging.getLogger("claw.sessions")

T = TypeVar("T")

#: Listener signature: called with the session key whose incarnation changed.

_INSERT: Final[str] = f"INSERT INTO sessions ({COLUMNS}) VALUES ({PLACEHOLDERS})"
_SELECT_ONE: Final[str] = f"SELECT {COLUMNS} FROM sessions WHERE session_key = ?"


@attrs.frozen
class _Change:
    """One committed change: the key, its new row (``None`` once deleted), its watermark."""

    key: str
    row: SessionRow | None
    watermark: int


def _fetch(conn: sqlite3.Connection, key: str) -> SessionRow | None:
    found = conn.execute(_SELECT_ONE, (key,)).fetchone()
    return None if found is None else row_from_sql(tuple(found))


def _require(conn: sqlite3.Connection, key: str) -> SessionRow:
    row = _fetch(conn, key)
    if row is None:
        raise SessionNotFoundError(f"no session with key {key!r}")
    return row


def _watermark(conn: sqlite3.Connection, key: str) -> int:
    found = conn.execute(
        "SELECT last_revision FROM session_key_watermarks WHERE session_key = ?", (key,)
    ).fetchone()
    return 0 if found is None else int(found[0])


def _replace(conn: sqlite3.Connection, old: SessionRow, new: SessionRow) -> _Change:
    """Write ``new`` over ``old``, checking that the row really was ``old``."""
    validate_row(new)
    cursor = conn.execute(
        "UPDATE sessions SET agent_id = ?, session_id = ?, lifecycle_revision = ?, "
        "chat_type = ?, peer_is_owner = ?, created_at = ?, updated_at = ? "
        "WHERE session_key = ? AND session_id = ? AND lifecycle_revision = ?",
        (
            new.agent_id,
            new.session_id,
            new.lifecycle_revision,
            new.chat_type,
            int(new.peer_is_owner),
            new.created_at,
            new.updated_at,
            old.session_key,
            old.session_id,
            old.lifecycle_revision,
        ),
    )
    if cursor.rowcount != 1:  # pragma: no cover - the transaction holds the write lock
        raise SessionStorageError(f"session {old.session_key!r} changed under its transaction")
    return _Change(new.session_key, new, new.lifecycle_revision)


def _insert_new(conn: sqlite3.Connection, *, row: SessionRow) -> _Change:
    """Insert a row for a key with no row, continuing the key's revision sequence."""
    if _fetch(conn, row.session_key) is not None:
        raise SessionExistsError(
            f"a session with key {row.session_key!r} already exists; reset or delete it first"
        )
    row = attrs.evolve(row, lifecycle_revision=_watermark(conn, row.session_key) + 1)
    validate_row(row)
    conn.execute(_INSERT, row_to_sql(row))
    conn.execute("DELETE FROM session_key_watermarks WHERE session_key = ?", (row.session_key,))
    return _Change(row.session_key, row, row.lifecycle_revision)


def _op_reset(conn: sqlite3.Connection, *, key: str, keep_session_id: bool, now: float) -> _Change:
    old = _require(conn, key)
    return _replace(conn, old, reset_row(old, keep_session_id=keep_session_id, now=now))


def _op_reassign(
    conn: sqlite3.Connection,
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
    conn: sqlite3.Connection,
    *,
    parent_key: str,
    child_key: str,
    chat_type: str | None,
    session_id: str,
    sender_is_owner: bool,
    now: float,
) -> _Change:
    child = child_row(
        _require(conn, parent_key),
        child_key=child_key,
        chat_type=chat_type,
        session_id=session_id,
        sender_is_owner=sender_is_owner,
        now=now,
    )
    return _insert_new(conn, row=child)


def _op_delete(conn: sqlite3.Connection, *, key: str) -> _Change:
    old = _require(conn, key)
    conn.execute("DELETE FROM sessions WHERE session_key = ?", (key,))
    conn.execute(
        "INSERT INTO session_key_watermarks (session_key, last_revision) VALUES (?, ?) "
        "ON CONFLICT (session_key) DO UPDATE SET "
        "last_revision = max(last_revision, excluded.last_revision)",
        (key, old.lifecycle_revision),
    )
    return _Change(key, None, old.lifecycle_revision)


def _data_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def _op_refresh(
    conn: sqlite3.Connection, last: int
) -> tuple[int, dict[str, SessionRow], dict[str, int]] | None:
    """The committed rows and watermarks, when another connection committed since ``last``."""
    try:
        if _data_version(conn) == last:
            return None
        conn.execute("BEGIN")
        try:
            version = _data_version(conn)
            rows, marks = _read_all(conn)
        finally:
            conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise SessionStorageError(f"session store SQLite error: {exc}") from exc
    return version, rows, marks


def _op_load(
    conn: sqlite3.Connection, *, where: str
) -> tuple[dict[str, SessionRow], dict[str, int]]:
    ensure_schema(conn, where)
    return _read_all(conn)


def _read_all(conn: sqlite3.Connection) -> tuple[dict[str, SessionRow], dict[str, int]]:
    rows = {
        row.session_key: row
        for row in (
            row_from_sql(tuple(v))
            for v in conn.execute(f"SELECT {COLUMNS} FROM sessions").fetchall()
        )
    }
    marks = {
        str(k): int(r)
        for k, r in conn.execute(
            "SELECT session_key, last_revision FROM session_key_watermarks"
        ).fetchall()
    }
    return rows, marks


def _run_transaction(
    conn: sqlite3.Connection, box: list[T], op: Callable[[sqlite3.Connection], T]
) -> None:
    """Run ``op(conn)`` in one ``BEGIN IMMEDIATE`` transaction.

    The result is put in ``box`` only once COMMIT has returned, so the caller
    knows whether the change is durable even if the worker pool raises after
    the work finished (a cancellation delivered on the way back).
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = op(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise SessionStorageError(f"session store SQLite error: {exc}") from exc
    box.append(result)


def _read(
    conn: sqlite3.Connection, sql: str, params: tuple[object, ...]
) -> builtins.list[SessionRow]:
    try:
        return [row_from_sql(tuple(v)) for v in conn.execute(sql, params).fetchall()]
    except sqlite3.Error as exc:
        raise SessionStorageError(f"session store SQLite error: {exc}") from exc


def _read_committed(conn: sqlite3.Connection, keys: tuple[str, ...]) -> SessionSnapshot:
    """One read transaction: the rows and watermarks of ``keys`` as committed now."""
    rows: dict[str, SessionRow] = {}
    marks: dict[str, int] = {}
    try:
        conn.execute("BEGIN")
        try:
            for key in keys:
                row = _fetch(conn, key)
                if row is not None:
                    rows[key] = row
                else:
                    mark = _watermark(conn, key)
                    if mark:
                        marks[key] = mark
        finally:
            conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise SessionStorageError(f"session store SQLite error: {exc}") from exc
    return SessionSnapshot(rows, marks)


def _connect(path: str) -> sqlite3.Connection:
    """Open the store's one connection: autocommit mode (we write BEGIN/COMMIT), WAL, FULL sync."""
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 5000")
        # Refuse a corrupt store now, naming it, not at some later read: quick_check
        # walks every page (the store is small; about half a second for 200 MB).
        problems = [str(row[0]) for row in conn.execute("PRAGMA quick_check(5)")]
        if problems != ["ok"]:
            conn.close()
            raise SessionStorageError(
                f"the session store at {path} is corrupt ({'; '.join(problems)[:400]}){_KEEP_IT}"
            )
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
    except sqlite3.DatabaseError as exc:
        if conn is not None:
            conn.close()
        code = getattr(exc, "sqlite_errorcode", None)
        if code == sqlite3.SQLITE_NOTADB:
            raise SessionSchemaError(
                f"cannot open the session store at {path}: {exc}; it is not a SQLite database"
            ) from exc
        if code == sqlite3.SQLITE_CORRUPT:
            raise SessionStorageError(
                f"the session store at {path} is corrupt ({exc}){_KEEP_IT}"
            ) from exc
        raise SessionStorageError(f"cannot open the session store at {path}: {exc}") from exc
    return conn


_KEEP_IT = (
    "; it is the system of record of the sessions, so claw leaves it in place: restore it "
    "from a backup, or move it aside to start with no sessions"
)


@attrs.define(eq=False)
class SessionStore:
    """Durable sessions in SQLite, with a synchronous view of committed rows.

    Open with :meth:`open` (or :func:`open_session_store`); close with
    :meth:`aclose`. Implements :class:`~claw.sessions.SessionView`, so it can
    be passed straight to :func:`~claw.sessions.resolve_audience` and
    :func:`~claw.sessions.is_lineage_current`.

    Every change of a key's incarnation (``create``, ``spawn_child`` for the
    child key, ``reset``, ``reassign``, ``delete``) is one SQLite transaction
    and raises the key's lifecycle revision, which never decreases for a key,
    even across delete and re-create. Listeners added with
    :meth:`add_listener` are called with the key after each such change
    commits, on the event loop thread, before the call returns.
    """

    _conn: sqlite3.Connection
    _workers: WorkerPool
    _where: str
    _clock: Callable[[], float]
    _rows: dict[str, SessionRow]
    _watermarks: dict[str, int]
    #: This connection's ``data_version`` when the mirror last matched the database:
    #: only other connections' commits move it.
    _data_version: int
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _listeners: builtins.list[SessionListener] = attrs.field(factory=builtins.list, init=False)
    _closed: bool = attrs.field(default=False, init=False)
    _pending: dict[str, int] = attrs.field(factory=dict, init=False)
    _write_done: trio.Event = attrs.field(factory=trio.Event, init=False)

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        workers: WorkerPool,
        clock: Callable[[], float] = time.time,
    ) -> SessionStore:
        """Open (creating or migrating as needed) the store at ``path``; ``":memory:"`` for tests.

        Raises :class:`SessionSchemaError` for a database written by a newer
        claw, for a foreign database, and for legacy rows that cannot be
        migrated faithfully.
        """
        where = os.fspath(path)
        conn = await workers.run_sync(_connect, where)
        try:
            return await cls._from_connection(conn, workers=workers, where=where, clock=clock)
        except BaseException:
            conn.close()
            raise

    @classmethod
    async def _from_connection(
        cls,
        conn: sqlite3.Connection,
        *,
        workers: WorkerPool,
        where: str,
        clock: Callable[[], float],
    ) -> SessionStore:
        box: list[tuple[dict[str, SessionRow], dict[str, int]]] = []
        await workers.run_sync(
            _run_transaction, conn, box, functools.partial(_op_load, where=where)
        )
        rows, marks = box[0]
        version = await workers.run_sync(_data_version, conn)
        return cls(conn, workers, where, clock, rows, marks, version)

    async def aclose(self) -> None:
        """Close the connection; later calls raise :class:`claw.HostClosedError`."""
        if self._closed:
            return
        async with self._lock:
            self._closed = True
            await self._workers.run_sync(self._conn.close)

    # ---- synchronous view of committed rows -------------------------------------------

    def get_nowait(self, key: str) -> SessionRow | None:
        """The committed row for ``key`` from the in-memory mirror, or ``None``."""
        return self._rows.get(key)

    def last_revision_nowait(self, key: str) -> int:
        """The highest lifecycle revision ``key`` ever had; 0 if it never had a row."""
        row = self._rows.get(key)
        if row is not None:
            return row.lifecycle_revision
        return self._watermarks.get(key, 0)

    def snapshot(self) -> SessionSnapshot:
        """An immutable copy of the committed rows and deleted-key watermarks."""
        return SessionSnapshot(dict(self._rows), dict(self._watermarks))

    # ---- listeners ---------------------------------------------------------------------

    def add_listener(self, listener: SessionListener) -> None:
        """Call ``listener(key)`` after every committed incarnation change of ``key``.

        Listeners run synchronously on the event loop thread, in the order
        added, after the mirror is updated. They must not block. If listeners
        raise, every listener still runs, and the errors then propagate from
        the call that made the (already committed) change.
        """
        self._listeners.append(listener)

    def remove_listener(self, listener: SessionListener) -> None:
        """Stop calling ``listener``; raises :class:`ValueError` if it was not added."""
        self._listeners.remove(listener)

    # ---- reads -------------------------------------------------------------------------

    async def read_committed(self, keys: Iterable[str]) -> SessionSnapshot:
        """The committed rows and deleted-key watermarks of ``keys``, read from SQLite now."""
        wanted = tuple(dict.fromkeys(keys))
        self._check_open()
        async with self._lock:
            self._check_open()
            return await self._workers.run_sync(_read_committed, self._conn, wanted)

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the mirror current with other processes' commits until cancelled.

        A :class:`~claw._commit_watch.CommitWatcher` thread notices commits; each time,
        :meth:`refresh` brings them into the mirror and calls the listeners.
        """
        if self._where == ":memory:":  # no other connection can reach it
            task_status.started()
            await trio.sleep_forever()
        await CommitWatcher(self._where).run(self._refresh_quietly, task_status=task_status)

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh()
        except SessionStorageError:
            # The next commit (or the next check) tries again; the release check, not
            # the watcher, is what keeps stale capabilities from releasing data.
            logger.warning("could not refresh the session mirror of %s", self._where, exc_info=True)

    async def refresh(self) -> int:
        """Bring other processes' committed changes into the mirror; returns how many keys.

        Listeners are called for every key whose row or watermark changed, as for a
        change made here. Cheap when nothing changed elsewhere: one ``data_version``
        read on the store's connection.
        """
        self._check_open()
        async with self._lock:
            self._check_open()
            found = await self._workers.run_sync(_op_refresh, self._conn, self._data_version)
            if found is None:
                return 0
            self._data_version, rows, marks = found
            old_rows, old_marks = self._rows, self._watermarks
            changed = [
                key
                for key in sorted(set(rows) | set(old_rows) | set(marks) | set(old_marks))
                if rows.get(key) != old_rows.get(key) or marks.get(key) != old_marks.get(key)
            ]
            self._rows, self._watermarks = rows, marks
            self._notify(changed)
            return len(changed)

    async def get(self, key: str) -> SessionRow | None:
        """The durable row for ``key``, read from SQLite, or ``None``."""
        rows = await self._read(_SELECT_ONE, (key,))
        return rows[0] if rows else None

    async def list(self, agent_id: str | None = None) -> builtins.list[SessionRow]:
        """All rows (of ``agent_id`` when given), ordered by session key."""
        if agent_id is None:
            return await self._read(f"SELECT {COLUMNS} FROM sessions ORDER BY session_key", ())
        return await self._read(
            f"SELECT {COLUMNS} FROM sessions WHERE agent_id = ? ORDER BY session_key",
            (agent_id,),
        )

    async def has_agent(self, agent_id: str) -> bool:
        """Whether ``agent_id`` has at least one session (one indexed row read)."""
        rows = await self._read(
            f"SELECT {COLUMNS} FROM sessions WHERE agent_id = ? LIMIT 1", (agent_id,)
        )
        return bool(rows)

    # ---- changes -----------------------------------------------------------------------

    async def create(
        self,
        key: str,
        *,
        agent_id: str,
        chat_type: ChatType,
        session_id: str | None = None,
        peer_is_owner: bool = False,
    ) -> SessionRow:
        """Create a root session; raises :class:`SessionExistsError` if ``key`` has a row."""
        row = root_row(
            key,
            agent_id=agent_id,
            chat_type=chat_type,
            session_id=session_id,
            peer_is_owner=peer_is_owner,
            now=self._clock(),
        )
        return await self._change_row(key, functools.partial(_insert_new, row=row))

    async def spawn_child(
        self,
        parent_key: str,
        child_key: str,
        *,
        sender_is_owner: bool,
        chat_type: ChatType | None = None,
        session_id: str | None = None,
    ) -> SessionRow:
        """Create ``child_key`` as a child of ``parent_key``'s current incarnation.

        The child records the parent's key, session id and lifecycle revision,
        takes the parent's agent id and owner flag, and by default its chat type.
        ``sender_is_owner`` is the spawn receipt: whether the sender of the turn
        that spawns the child is the agent's owner (the channel layer's trusted
        fact for that turn). It is stored with the child, and it, not the
        sender of any later run on the child, decides the child's audience.
        """
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
        """Start a new incarnation of ``key``: revision + 1, and a new session id unless kept."""
        validate_flag("keep_session_id", keep_session_id)
        return await self._change_row(
            key,
            functools.partial(
                _op_reset, key=key, keep_session_id=keep_session_id, now=self._clock()
            ),
        )

    async def reassign(
        self,
        key: str,
        *,
        agent_id: str | None = None,
        chat_type: ChatType | None = None,
        peer_is_owner: bool | None = None,
    ) -> SessionRow:
        """Change who or what ``key`` belongs to; always a new lifecycle revision."""
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
        """Delete ``key``'s row; its children then resolve to no audience."""
        await self._change(key, functools.partial(_op_delete, key=key))

    # ---- machinery ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise HostClosedError(f"the session store at {self._where} is closed")

    async def _read(self, sql: str, params: tuple[object, ...]) -> builtins.list[SessionRow]:
        self._check_open()
        async with self._lock:
            self._check_open()
            return await self._workers.run_sync(_read, self._conn, sql, params)

    async def _change(self, key: str, op: Callable[[sqlite3.Connection], _Change]) -> _Change:
        self._check_open()
        box: builtins.list[_Change] = []
        async with self._lock:
            self._check_open()
            # ``key`` is pending from before the worker thread starts the transaction
            # until the mirror and the listeners have seen its outcome: in between, the
            # database may already hold a new incarnation the mirror does not show, so
            # currency checks of lineages through ``key`` must not answer from it.
            self._pending[key] = self._pending.get(key, 0) + 1
            done = self._write_done = trio.Event()
            try:
                await self._workers.run_sync(_run_transaction, self._conn, box, op)
            finally:
                try:
                    # Runs even if the pool raised after the COMMIT (the box is only
                    # filled once COMMIT returned): the mirror and the listeners must
                    # never miss a durable change.
                    if box:
                        self._apply(box[0])
                finally:
                    left = self._pending[key] - 1
                    if left:
                        self._pending[key] = left
                    else:
                        del self._pending[key]
                    done.set()
        return box[0]

    def pending_nowait(self, keys: Iterable[str]) -> bool:
        """Whether a change of any of ``keys`` is in flight (started, outcome not yet seen)."""
        pending = self._pending
        return bool(pending) and any(k in pending for k in keys)

    async def wait_for_writes(self) -> None:
        """Wait until no change is in flight (returns at once, after a checkpoint, if none)."""
        await trio.lowlevel.checkpoint()
        while self._pending:
            await self._write_done.wait()

    async def _change_row(
        self, key: str, op: Callable[[sqlite3.Connection], _Change]
    ) -> SessionRow:
        row = (await self._change(key, op)).row
        if row is None:  # pragma: no cover - only delete commits without a row
            raise AssertionError(f"{op!r} committed no row")
        return row

    def _apply(self, change: _Change) -> None:
        if change.row is None:
            self._rows.pop(change.key, None)
            self._watermarks[change.key] = max(
                change.watermark, self._watermarks.get(change.key, 0)
            )
        else:
            self._rows[change.key] = change.row
            self._watermarks.pop(change.key, None)
        self._notify((change.key,))

    def _notify(self, keys: Iterable[str]) -> None:
        notify_listeners(self._listeners, keys)


@asynccontextmanager
async def open_session_store(
    path: str | os.PathLike[str], *, workers: WorkerPool, clock: Callable[[], float] = time.time
) -> AsyncIterator[SessionStore]:
    """Open the store at ``path`` for the duration of the block, then close it."""
    store = await SessionStore.open(path, workers=workers, clock=clock)
    try:
        yield store
    finally:
        await store.aclose()
