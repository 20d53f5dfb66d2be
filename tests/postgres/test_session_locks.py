"""Session locks across hosts: session-level advisory locks, polled, on a connection of their own.

Two ``open_state`` blocks on one database stand for two hosts (each has its own lock
connection); tests/postgres/test_multihost.py runs real host processes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest
import trio

from claw._workers import ThreadWorkerPool
from claw.state.postgres._session_locks import session_locks_application_name
from claw.state.postgres._stores import PostgresState, open_state


@pytest.fixture
async def host_a(postgres_dsn: str) -> AsyncIterator[PostgresState]:
    async with open_state(postgres_dsn, workers=ThreadWorkerPool(4)) as state:
        yield state


@pytest.fixture
async def host_b(postgres_dsn: str, host_a: PostgresState) -> AsyncIterator[PostgresState]:
    async with open_state(postgres_dsn, workers=ThreadWorkerPool(4)) as state:
        yield state


async def test_a_session_held_on_one_host_waits_on_another_until_released(
    host_a: PostgresState, host_b: PostgresState
) -> None:
    order: list[str] = []
    release = trio.Event()

    async def hold_on_a(task_status: trio.TaskStatus[None]) -> None:
        async with host_a.session_locks.hold("dm:alice"):
            order.append("a")
            task_status.started()
            await release.wait()
            order.append("a released")

    async with trio.open_nursery() as nursery:
        await nursery.start(hold_on_a)
        # B's wait is cancelled: it admits nothing and leaves nothing held.
        with trio.move_on_after(0.3) as waited:
            async with host_b.session_locks.hold("dm:alice"):
                order.append("b too early")  # pragma: no cover
        assert waited.cancelled_caught
        async with host_b.session_locks.hold("dm:bob"):  # other sessions go ahead
            order.append("b bob")
        release.set()
    async with host_b.session_locks.hold("dm:alice"):
        order.append("b")
    assert order == ["a", "b bob", "a released", "b"]


async def test_a_host_whose_lock_connection_ends_loses_its_sessions_to_another(
    host_a: PostgresState, host_b: PostgresState, postgres_dsn: str
) -> None:
    """The lease's expiry: the server drops a dead connection's advisory locks."""
    name = session_locks_application_name(host_a.transcripts.owner_id)
    async with host_a.session_locks.hold("dm:alice"):
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (name,),
            )
        with trio.fail_after(30):  # a guard only: B gets it once the backend is gone
            async with host_b.session_locks.hold("dm:alice"):
                pass
    # A's release of a lock its dead connection held is a no-op, and A reconnects.
    async with host_a.session_locks.hold("dm:alice"):
        pass
