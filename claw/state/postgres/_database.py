"""A pool of PostgreSQL connections used from Trio: queries in the host's worker threads.

psycopg's asynchronous API is asyncio-only, and claw runs no second event loop, so claw
uses psycopg's synchronous API in the host's :class:`~claw._workers.WorkerPool` threads.
Each call takes a pooled connection for one callable ``fn(conn, *args)`` (one
transaction, or autocommit), and Trio cancellation reaches the server: a cancelled
caller sends the server a cancel request (``cancel_safe``) and waits for the statement
to stop, so when :class:`trio.Cancelled` propagates the query is gone from the server
and a transaction is rolled back.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import attrs
import psycopg
import psycopg.conninfo
import psycopg_pool
import trio

from ..._errors import HostClosedError
from ..._workers import WorkerPool
from ._dsn import check_dsn, describe, redact_dsn
from ._listen import ListenEvent, open_listener
from ._translate import chainable, translate

T = TypeVar("T")

Connection = psycopg.Connection[Any]


class _CancelRequested(Exception):
    """Raised in the worker thread to roll back a transaction whose caller was cancelled."""


@attrs.define
class _Query:
    """One call's connection, as seen by the thread running it and the task awaiting it."""

    _lock: threading.Lock = attrs.field(factory=threading.Lock)
    _conn: Connection | None = None
    cancelled: bool = False

    def attach(self, conn: Connection) -> None:
        with self._lock:
            if self.cancelled:
                raise _CancelRequested
            self._conn = conn

    def detach(self) -> None:
        with self._lock:
            self._conn = None

    def cancel(self, timeout: float) -> None:
        """Mark the call cancelled and ask the server to stop its running statement."""
        with self._lock:
            self.cancelled = True
            conn = self._conn
        if conn is None:
            return
        # On failure the statement ends anyway (the connection broke, or it finished
        # first); the worker thread reports how.
        with contextlib.suppress(psycopg.Error):
            conn.cancel_safe(timeout=timeout)


@attrs.frozen
class DatabaseStatistics:
    """A snapshot of a database pool's connections: ``pool_size`` open now (at least
    ``min_size``, at most ``max_size``), ``pool_available`` of them idle, and
    ``requests_waiting`` calls waiting for one."""

    pool_size: int
    pool_available: int
    requests_waiting: int
    min_size: int
    max_size: int


@attrs.define(eq=False)
class Database:
    """An open connection pool to one PostgreSQL database; see :func:`open_database`.

    ``transaction(fn, *args)`` runs ``fn(conn, *args)`` in one transaction (committed
    when ``fn`` returns, rolled back when it raises or its caller is cancelled);
    ``run(fn, *args)`` runs it on an autocommit connection. ``listen(*channels)``
    receives NOTIFYs. Errors are claw's (:class:`~claw.DatabaseError`,
    :class:`~claw.DatabaseUnavailableError`), never carrying the DSN's password.
    """

    _dsn: str
    _pool: psycopg_pool.ConnectionPool[Connection]
    _workers: WorkerPool
    _acquire_timeout: float
    _cancel_timeout: float
    _closed: bool = False

    def __repr__(self) -> str:
        return f"<claw.postgres.Database {redact_dsn(self._dsn)!r}>"

    @property
    def name(self) -> str:
        """The server and database this pool reaches, without secrets (for messages)."""
        return describe(self._dsn)

    async def transaction(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in one transaction in a worker thread; return its result."""
        return await self._call(fn, args, transaction=True)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` on an autocommit connection in a worker thread."""
        return await self._call(fn, args, transaction=False)

    @asynccontextmanager
    async def listen(self, *channels: str) -> AsyncIterator[trio.MemoryReceiveChannel[ListenEvent]]:
        """LISTEN on ``channels`` from a dedicated thread; see :func:`open_listener`."""
        self._check_open()
        async with open_listener(self._dsn, channels) as events:
            yield events

    def statistics(self) -> DatabaseStatistics:
        """The pool's current size, idle connections and waiting requests."""
        s = self._pool.get_stats()
        return DatabaseStatistics(
            pool_size=s.get("pool_size", 0),
            pool_available=s.get("pool_available", 0),
            requests_waiting=s.get("requests_waiting", 0),
            min_size=self._pool.min_size,
            max_size=self._pool.max_size,
        )

    def _check_open(self) -> None:
        if self._closed:
            raise HostClosedError(f"{self.name}: the connection pool is closed")

    def _execute(
        self, query: _Query, fn: Callable[..., T], args: tuple[Any, ...], transaction: bool
    ) -> T:
        """The worker-thread side of a call."""
        with self._pool.connection(timeout=self._acquire_timeout) as conn:
            query.attach(conn)
            try:
                if not transaction:
                    return fn(conn, *args)
                with conn.transaction():
                    result = fn(conn, *args)
                    if query.cancelled:
                        # The caller is gone: it will report Cancelled, so nothing may
                        # have happened (the cancel missed the statements, not the commit).
                        raise _CancelRequested
                    return result
            finally:
                query.detach()

    async def _call(self, fn: Callable[..., T], args: tuple[Any, ...], *, transaction: bool) -> T:
        self._check_open()
        query = _Query()
        done = trio.Event()
        result: list[T] = []
        failure: list[BaseException] = []

        async def work() -> None:
            with trio.CancelScope(shield=True):
                try:
                    result.append(
                        await self._workers.run_sync(self._execute, query, fn, args, transaction)
                    )
                except BaseException as exc:  # handed to the caller below
                    failure.append(exc)
                finally:
                    done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(work)
            try:
                await done.wait()
            except trio.Cancelled:
                if not done.is_set():
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(query.cancel, self._cancel_timeout)
                        await done.wait()
                    if failure:
                        # The statement stopped because we cancelled it (or the rollback
                        # we asked for happened): report the cancellation, not the error.
                        raise
                # Otherwise the work finished first: hand its result back, and the
                # caller's scope raises Cancelled at its next checkpoint.
        if failure:
            exc = failure[0]
            if isinstance(exc, psycopg.Error | psycopg_pool.PoolTimeout):
                what = getattr(getattr(fn, "func", fn), "__name__", "query")
                raise translate(exc, what=what, dsn=self._dsn) from chainable(exc, self._dsn)
            raise exc
        return result[0]

    async def _close(self) -> None:
        self._closed = True
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._pool.close, 10.0)


@asynccontextmanager
async def open_database(
    dsn: str,
    *,
    workers: WorkerPool,
    min_size: int = 1,
    max_size: int = 8,
    connect_timeout: float = 10.0,
    acquire_timeout: float = 30.0,
    cancel_timeout: float = 5.0,
    name: str = "claw",
    dsn_key: str = "state.dsn",
) -> AsyncIterator[Database]:
    """Open a connection pool to ``dsn``; close it (and its connections) on exit.

    Connects once first, so a wrong DSN, password or database fails here with the
    server's reason (:class:`~claw.DatabaseUnavailableError`), not later with a pool
    timeout. The pool keeps ``min_size`` connections open and opens at most ``max_size``;
    a call waits ``acquire_timeout`` seconds for a free one, then fails with
    :class:`~claw.DatabaseUnavailableError`. Its connections carry ``name`` as their
    ``application_name`` unless ``dsn`` sets one, so ``pg_stat_activity`` shows which
    pool each belongs to. Calls run in ``workers`` (the host's worker pool). A malformed
    ``dsn`` is a :class:`~claw.ConfigError` naming ``dsn_key``.
    """
    check_dsn(dsn, key=dsn_key)
    connect_kwargs: dict[str, Any] = {"autocommit": True}
    if not psycopg.conninfo.conninfo_to_dict(dsn).get("application_name"):
        connect_kwargs["application_name"] = name

    def probe() -> None:
        with psycopg.connect(dsn, connect_timeout=max(1, round(connect_timeout))):
            pass

    try:
        await trio.to_thread.run_sync(probe)
    except psycopg.Error as exc:
        raise translate(exc, what="connect", dsn=dsn) from chainable(exc, dsn)
    pool: psycopg_pool.ConnectionPool[Connection] = psycopg_pool.ConnectionPool(
        dsn,
        open=False,
        min_size=min_size,
        max_size=max_size,
        kwargs=connect_kwargs,
        check=psycopg_pool.ConnectionPool.check_connection,
        name=name,
        timeout=acquire_timeout,
    )
    try:
        await trio.to_thread.run_sync(lambda: pool.open(wait=True, timeout=connect_timeout))
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(pool.close, 1.0)
        raise translate(exc, what="open connection pool", dsn=dsn) from chainable(exc, dsn)
    db = Database(
        dsn=dsn,
        pool=pool,
        workers=workers,
        acquire_timeout=acquire_timeout,
        cancel_timeout=cancel_timeout,
    )
    try:
        yield db
    finally:
        await db._close()
