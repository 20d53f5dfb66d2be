"""Helpers for tests against the real server."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import trio


async def until(predicate: Callable[[], bool], *, guard: float = 30.0) -> None:
    """Wait until ``predicate()`` holds, checking every few milliseconds.

    Polling is the point here: the change comes from a real server (another
    connection, another thread). ``guard`` only keeps a broken test from hanging; no
    test asserts on how long this takes.
    """
    with trio.fail_after(guard):
        while True:
            if predicate():
                return
            await trio.sleep(0.005)


def pool_connections(dsn: str, application_name: str) -> int:
    """How many connections the server has open to ``dsn``'s database under
    ``application_name`` (what a pool names its connections)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            (application_name,),
        ).fetchone()
    assert row is not None
    return int(row[0])
