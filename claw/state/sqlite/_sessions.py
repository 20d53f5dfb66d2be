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
from typing import Any, ClassVar, TypeVar

import attrs
import trio

from ..._errors import StorageError
from ..._storage import enter_wal, naming_storage_failures
from ..._workers import WorkerPool
from ...sessions._changes import notify_listeners
from ...sessions._errors import SessionSchemaError, SessionStorageError
from ...sessions._mirror import ChangeOp, MirroredSessionStore, SessionChange, SessionOps
from ...sessions._rows import SessionRow, SessionSnapshot
from .. import _sessions_sql as sessions_sql
from ._commit_watch import CommitWatcher
from ._session_schema import SQLITE, ensure_schema

logger = logging.getLogger("claw.sessions")

T = TypeVar("T")
_WHAT = "the session database"

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
            rows, marks = sessions_sql.load_all(conn, SQLITE)
        finally:
            conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise SessionStorageError(f"session store SQLite error: {exc}") from exc
    return version, rows, marks


def _op_load(
    conn: sqlite3.Connection, *, where: str
) -> tuple[dict[str, SessionRow], dict[str, int]]:
    ensure_schema(conn, where)
    return sessions_sql.load_all(conn, SQLITE)


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


def _read(conn: sqlite3.Connection, fn: Callable[..., T], *args: Any) -> T:
    """``fn(conn, SQLITE, *args)``, naming a SQLite failure as the store's."""
    try:
        return fn(conn, SQLITE, *args)
    except sqlite3.Error as exc:
        raise SessionStorageError(f"session store SQLite error: {exc}") from exc


def _read_committed(conn: sqlite3.Connection, keys: tuple[str, ...]) -> SessionSnapshot:
    """One read transaction: the rows and watermarks of ``keys`` as committed now."""
    try:
        conn.execute("BEGIN")
        try:
            return sessions_sql.read_keys(conn, SQLITE, keys)
        finally:
            conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise SessionStorageError(f"session store SQLite error: {exc}") from exc


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
        enter_wal(conn)
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
class SessionStore(MirroredSessionStore):
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

    _ops: ClassVar[SessionOps] = SQLITE.ops()

    _conn: sqlite3.Connection = attrs.field(kw_only=True)
    _workers: WorkerPool = attrs.field(kw_only=True)
    _where: str = attrs.field(kw_only=True)
    #: This connection's ``data_version`` when the mirror last matched the database:
    #: only other connections' commits move it.
    _data_version: int = attrs.field(kw_only=True)

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
        with naming_storage_failures(where, what=_WHAT):
            conn = await workers.run_sync(_connect, where)
            try:
                return await cls._from_connection(
                    conn, workers=workers, where=where, clock=clock
                )
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
        return cls(
            clock, rows, marks, conn=conn, workers=workers, where=where, data_version=version
        )

    async def aclose(self) -> None:
        """Close the connection; later calls raise :class:`claw.HostClosedError`."""
        if self._closed:
            return
        async with self._lock:
            self._closed = True
            await self._workers.run_sync(self._conn.close)

    # ---- reads -------------------------------------------------------------------------

    async def read_committed(self, keys: Iterable[str]) -> SessionSnapshot:
        """The committed rows and deleted-key watermarks of ``keys``, read from SQLite now."""
        wanted = tuple(dict.fromkeys(keys))
        self._check_open()
        async with self._lock:
            self._check_open()
            with naming_storage_failures(self._where, what=_WHAT):
                return await self._workers.run_sync(_read_committed, self._conn, wanted)

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the mirror current with other processes' commits until cancelled.

        A :class:`~claw.state.sqlite._commit_watch.CommitWatcher` thread notices commits; each time,
        :meth:`refresh` brings them into the mirror and calls the listeners.
        """
        if self._where == ":memory:":  # no other connection can reach it
            task_status.started()
            await trio.sleep_forever()
        await CommitWatcher(self._where).run(self._refresh_quietly, task_status=task_status)

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh()
        except (SessionStorageError, StorageError):
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
            with naming_storage_failures(self._where, what=_WHAT):
                found = await self._workers.run_sync(
                    _op_refresh, self._conn, self._data_version
                )
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
        return await self._read(sessions_sql.fetch, key)

    async def list(self, agent_id: str | None = None) -> builtins.list[SessionRow]:
        """All rows (of ``agent_id`` when given), ordered by session key."""
        return await self._read(functools.partial(sessions_sql.select_rows, agent_id=agent_id))

    async def has_agent(self, agent_id: str) -> bool:
        """Whether ``agent_id`` has at least one session (one indexed row read)."""
        return await self._read(sessions_sql.has_agent, agent_id)

    # ---- machinery ---------------------------------------------------------------------

    def _place(self) -> str:
        return f"at {self._where}"

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        self._check_open()
        async with self._lock:
            self._check_open()
            with naming_storage_failures(self._where, what=_WHAT):
                return await self._workers.run_sync(_read, self._conn, fn, *args)

    async def _commit(self, op: ChangeOp, box: builtins.list[SessionChange]) -> None:
        # A full disk or a read-only directory is a StorageError naming the database.
        with naming_storage_failures(self._where, what=_WHAT):
            await self._workers.run_sync(_run_transaction, self._conn, box, op)

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
