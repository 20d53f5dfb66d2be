"""The driver layer against the real server: cancellation, LISTEN/NOTIFY, errors."""

from __future__ import annotations

import traceback
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import trio

import claw
from claw._workers import ThreadWorkerPool
from claw.state.postgres import Database, ListenerConnected, Notification, open_database
from tests import _postgres


@pytest.fixture
async def db(postgres_dsn: str) -> AsyncIterator[Database]:
    async with open_database(postgres_dsn, workers=ThreadWorkerPool(max_workers=4)) as database:
        yield database


def _activity(conn: psycopg.Connection[Any], pattern: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT pid, state, query FROM pg_stat_activity"
        " WHERE query LIKE %s AND pid <> pg_backend_pid()",
        (pattern,),
    ).fetchall()


async def _wait_until_running(db: Database, pattern: str) -> None:
    """Poll the server (a real one: polling is the point) until a statement shows."""
    with trio.fail_after(60):
        while True:
            if [r for r in await db.run(_activity, pattern) if r[1] == "active"]:
                return
            await trio.sleep(0.01)


async def test_cancelling_a_scope_stops_the_query_on_the_server(db: Database) -> None:
    def sleep(conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT pg_sleep(30) /* claw-cancel-probe */")

    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def sleeper() -> None:
            with scope:
                await db.run(sleep)

        nursery.start_soon(sleeper)
        await _wait_until_running(db, "%claw-cancel-probe%")
        scope.cancel()
    assert scope.cancelled_caught
    # The call returned only once the statement had stopped: nothing left to wait for.
    assert [r for r in await db.run(_activity, "%claw-cancel-probe%") if r[1] == "active"] == []


async def test_a_cancelled_transaction_is_rolled_back(db: Database) -> None:
    await db.run(lambda c: c.execute("CREATE TABLE t (x int)"))

    def write_then_sleep(conn: psycopg.Connection[Any]) -> None:
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("SELECT pg_sleep(30) /* claw-rollback-probe */")

    with trio.move_on_after(60):
        async with trio.open_nursery() as nursery:
            scope = trio.CancelScope()

            async def writer() -> None:
                with scope:
                    await db.transaction(write_then_sleep)

            nursery.start_soon(writer)
            await _wait_until_running(db, "%claw-rollback-probe%")
            scope.cancel()
    assert scope.cancelled_caught
    assert await db.run(lambda c: c.execute("SELECT count(*) FROM t").fetchone()) == (0,)


async def test_a_transaction_commits_what_fn_wrote_and_returns_its_result(db: Database) -> None:
    def write(conn: psycopg.Connection[Any], n: int) -> int:
        conn.execute("CREATE TABLE u (x int)")
        conn.execute("INSERT INTO u SELECT generate_series(1, %s)", (n,))
        return n

    assert await db.transaction(write, 3) == 3
    assert await db.run(lambda c: c.execute("SELECT count(*) FROM u").fetchone()) == (3,)


async def test_a_failing_transaction_writes_nothing(db: Database) -> None:
    await db.run(lambda c: c.execute("CREATE TABLE v (x int PRIMARY KEY)"))

    def twice(conn: psycopg.Connection[Any]) -> None:
        conn.execute("INSERT INTO v VALUES (1)")
        conn.execute("INSERT INTO v VALUES (1)")

    with pytest.raises(claw.DatabaseError) as info:
        await db.transaction(twice)
    assert info.value.sqlstate == "23505"
    assert isinstance(info.value, RuntimeError)
    assert "twice" in str(info.value) and "UniqueViolation" in str(info.value)
    assert await db.run(lambda c: c.execute("SELECT count(*) FROM v").fetchone()) == (0,)


async def test_a_notify_reaches_a_trio_task(db: Database) -> None:
    async with db.listen("claw_test") as events:
        assert await events.receive() == ListenerConnected(reconnects=0)
        await db.run(lambda c: c.execute("SELECT pg_notify('claw_test', 'hello')"))
        event = await events.receive()
    assert isinstance(event, Notification)
    assert (event.channel, event.payload) == ("claw_test", "hello")


async def test_a_dropped_listen_connection_reconnects_and_says_so(db: Database) -> None:
    async with db.listen("claw_test") as events:
        assert await events.receive() == ListenerConnected(reconnects=0)
        killed = await db.run(
            lambda c: c.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE query LIKE 'LISTEN%%' AND pid <> pg_backend_pid()"
            ).fetchall()
        )
        assert killed == [(True,)]
        # The consumer learns it may have missed notifications (so it catches up) ...
        assert await events.receive() == ListenerConnected(reconnects=1)
        # ... and notifications flow again on the new connection.
        await db.run(lambda c: c.execute("SELECT pg_notify('claw_test', 'again')"))
        event = await events.receive()
    assert isinstance(event, Notification) and event.payload == "again"


async def test_a_closed_database_refuses_calls(postgres_dsn: str) -> None:
    async with open_database(postgres_dsn, workers=ThreadWorkerPool()) as database:
        pass
    with pytest.raises(claw.HostClosedError, match="closed"):
        await database.run(lambda c: None)


async def test_a_wrong_password_fails_at_open_without_showing_it(
    postgres_server: _postgres.PostgresServer,
) -> None:
    dsn = postgres_server.tcp_dsn_for("postgres").replace(
        postgres_server.password, "not-the-secret-pw"
    )
    with pytest.raises(claw.DatabaseUnavailableError) as info:
        async with open_database(dsn, workers=ThreadWorkerPool()):
            pass
    assert isinstance(info.value, ConnectionError)
    assert "password authentication failed" in str(info.value)
    shown = "".join(traceback.format_exception(info.value))
    assert "not-the-secret-pw" not in shown


async def test_a_malformed_dsn_is_reported_without_its_password() -> None:
    # libpq quotes a malformed DSN verbatim in its error; claw must not.
    dsn = "postgresql://u:hunter2-secret@[h/db"
    with pytest.raises(claw.ConfigError) as info:
        async with open_database(dsn, workers=ThreadWorkerPool()):
            pass
    shown = "".join(traceback.format_exception(info.value))
    assert "hunter2-secret" not in shown
    assert "state.dsn" in str(info.value) and "IPv6" in str(info.value)


def test_redact_dsn_hides_passwords_in_every_form() -> None:
    from claw.state.postgres import redact_dsn

    assert redact_dsn("postgresql://u:s3cret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact_dsn("host=h password=s3cret dbname=d") == "host=h password=*** dbname=d"
    assert redact_dsn("host=h password='s 3\\'cret' x=1") == "host=h password=*** x=1"
    assert redact_dsn("postgresql:///db?password=s3cret&x=1") == "postgresql:///db?password=***&x=1"
