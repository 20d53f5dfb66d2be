"""``[state] backend = "postgresql"``: the :class:`~claw.state.StateBackend` on PostgreSQL.

Registered in the ``claw.state_backends`` entry-point group as ``postgresql``; the host
calls :func:`state_backend` with its config. The DSN comes from ``[state] dsn`` or, when
that is unset, the ``CLAW_POSTGRES_DSN`` environment variable (so a password need not
sit in a config file).
"""

from __future__ import annotations

import builtins
import os
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final

import attrs
import psycopg
import trio

from ..._config import HostConfig
from ..._errors import ConfigError, HostClosedError
from ..._workers import WorkerPool
from ...sessions._rows import SessionRow
from .._seam import SessionLister, StateStores
from .._sessions_sql import select_rows
from ._dsn import check_dsn, redact_dsn
from ._sessions import POSTGRES
from ._stores import open_state
from ._translate import chainable, translate

BACKEND_NAME: Final[str] = "postgresql"
DSN_ENV: Final[str] = "CLAW_POSTGRES_DSN"


@attrs.define(eq=False)
class PostgresSessionLister:
    """The read-only session listing of one plugin facet: a read-only connection,
    opened on first use (facets are made before the host opens its state)."""

    _dsn: str
    _workers: WorkerPool
    _conn: psycopg.Connection[Any] | None = None
    _lock: threading.Lock = attrs.field(factory=threading.Lock)
    _closed: bool = False

    def __repr__(self) -> str:
        return f"<PostgresSessionLister {redact_dsn(self._dsn)!r}>"

    def _list(self, agent_id: str | None) -> builtins.list[SessionRow]:
        with self._lock:
            if self._closed:
                raise HostClosedError("the session listing is closed")
            if self._conn is None:
                conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=10)
                conn.read_only = True
                self._conn = conn
            return select_rows(self._conn, POSTGRES, agent_id=agent_id)

    async def list(self, agent_id: str | None = None) -> builtins.list[SessionRow]:
        try:
            return await self._workers.run_sync(self._list, agent_id)
        except psycopg.Error as exc:
            raise translate(exc, what="list sessions", dsn=self._dsn) from chainable(exc, self._dsn)

    def _close(self) -> None:
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self._workers.run_sync(self._close)


@attrs.frozen
class PostgresStateBackend:
    """Sessions, transcripts and the turn ledger in one PostgreSQL database.

    Every host configured with the same DSN shares them; see ``docs/postgres.md``.
    ``pool_min``/``pool_max``/``pool_timeout`` size each host's connection pool
    (``[state]`` keys of the same names).
    """

    dsn: str = attrs.field(repr=redact_dsn)
    pool_min: int = 1
    pool_max: int = 8
    pool_timeout: float = 30.0

    @property
    def name(self) -> str:
        return BACKEND_NAME

    def session_lister(self, workers: WorkerPool) -> SessionLister:
        return PostgresSessionLister(self.dsn, workers)

    def open(
        self, *, workers: WorkerPool, clock: Callable[[], float]
    ) -> AbstractAsyncContextManager[StateStores]:
        return self._open(workers, clock)

    @asynccontextmanager
    async def _open(
        self, workers: WorkerPool, clock: Callable[[], float]
    ) -> AsyncIterator[StateStores]:
        async with open_state(
            self.dsn, workers=workers, clock=clock, pool_min=self.pool_min,
            pool_max=self.pool_max, pool_timeout=self.pool_timeout,
        ) as state:
            yield StateStores(
                sessions=state.sessions,
                transcripts=state.transcripts,
                session_locks=state.session_locks,
            )


def resolve_dsn(config: HostConfig, environ: dict[str, str] | None = None) -> tuple[str, str]:
    """The DSN and where it came from (``state.dsn`` or ``CLAW_POSTGRES_DSN``)."""
    env = os.environ if environ is None else environ
    configured = config.state.dsn
    if configured:
        return configured, "state.dsn"
    from_env = env.get(DSN_ENV, "").strip()
    if from_env:
        return from_env, DSN_ENV
    raise ConfigError(
        "state.dsn",
        f'backend "{BACKEND_NAME}" needs a PostgreSQL DSN: set [state] dsn (e.g. '
        f'"postgresql://claw@db.internal/claw") or the {DSN_ENV} environment variable',
    )


def state_backend(config: HostConfig) -> PostgresStateBackend:
    """The entry point the host calls for ``[state] backend = "postgresql"``."""
    dsn, key = resolve_dsn(config)
    check_dsn(dsn, key=key)
    state = config.state
    return PostgresStateBackend(
        dsn, pool_min=state.pool_min, pool_max=state.pool_max, pool_timeout=state.pool_timeout
    )
