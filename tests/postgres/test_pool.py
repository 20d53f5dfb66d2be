"""Sizing the connection pool: ``[state] pool_min``, ``pool_max``, ``pool_timeout``."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

import claw
from claw._workers import ThreadWorkerPool
from claw.state.postgres._backend import state_backend
from claw.state.postgres._stores import open_state
from tests.postgres._util import pool_connections, until


@pytest.mark.parametrize(
    ("state", "key"),
    [
        ({"pool_max": 0}, "state.pool_max"),
        ({"pool_max": 1001}, "state.pool_max"),
        ({"pool_max": 2.5}, "state.pool_max"),
        ({"pool_min": -1}, "state.pool_min"),
        ({"pool_min": True}, "state.pool_min"),
        ({"pool_min": 9, "pool_max": 4}, "state.pool_min"),
        ({"pool_min": 9}, "state.pool_min"),  # above the default pool_max of 8
        ({"pool_timeout": 0}, "state.pool_timeout"),
        ({"pool_timeout": -2.0}, "state.pool_timeout"),
        ({"pool_timeout": float("nan")}, "state.pool_timeout"),
        ({"pool_timeout": float("inf")}, "state.pool_timeout"),
        ({"pool_timeout": "30"}, "state.pool_timeout"),
        ({"pool_size": 4}, "state.pool_size"),
    ],
)
def test_a_bad_pool_key_is_a_config_error_naming_it(state: dict[str, Any], key: str) -> None:
    with pytest.raises(claw.ConfigError) as info:
        claw.HostConfig.from_mapping({"state": {"backend": "postgresql", **state}})
    assert info.value.key_path == key


def test_the_backend_takes_its_pool_from_the_state_table() -> None:
    config = claw.HostConfig.from_mapping(
        {"state": {"backend": "postgresql", "dsn": "dbname=x", "pool_min": 0,
                   "pool_max": 3, "pool_timeout": 2}}
    )
    backend = state_backend(config)
    assert (backend.pool_min, backend.pool_max, backend.pool_timeout) == (0, 3, 2.0)
    default = state_backend(claw.HostConfig.from_mapping({"state": {"dsn": "dbname=x"}}))
    assert (default.pool_min, default.pool_max, default.pool_timeout) == (1, 8, 30.0)


async def test_a_host_keeps_pool_min_connections_open_on_the_server(
    tmp_path: Path, postgres_dsn: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    config = claw.HostConfig.from_mapping(
        {
            "workspace_dir": str(workspace),
            "plugins": {"discover": False},
            "state": {"backend": "postgresql", "dsn": postgres_dsn, "pool_min": 3,
                      "pool_max": 5},
        }
    )
    async with claw.open_host(config):
        assert await trio.to_thread.run_sync(pool_connections, postgres_dsn, "claw-state") == 3


async def test_the_pool_opens_at_most_pool_max_and_a_query_waits_pool_timeout(
    postgres_dsn: str,
) -> None:
    release = threading.Event()

    def hold(conn: psycopg.Connection[Any]) -> int:
        conn.execute("SELECT 1")
        release.wait(60)
        return 1

    async with open_state(
        postgres_dsn, workers=ThreadWorkerPool(4), pool_min=1, pool_max=2, pool_timeout=0.2
    ) as state, trio.open_nursery() as nursery:
        db = state.database
        assert (db.statistics().min_size, db.statistics().max_size) == (1, 2)
        try:
            for _ in range(2):
                nursery.start_soon(db.transaction, hold)
            await until(lambda: db.statistics().pool_size == 2
                        and db.statistics().pool_available == 0)
            # Both connections are taken and the pool may open no third: the next query
            # waits pool_timeout for one, then fails as the database being unavailable.
            with pytest.raises(claw.DatabaseUnavailableError):
                await db.run(lambda conn: conn.execute("SELECT 1").fetchone())
            assert db.statistics().pool_size == 2
            assert await trio.to_thread.run_sync(
                pool_connections, postgres_dsn, "claw-state"
            ) == 2
        finally:
            release.set()
