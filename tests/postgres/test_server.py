"""The test server itself: it runs, as an unprivileged user, reachable only locally."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests import _postgres


def test_fresh_database_is_empty_and_reachable_over_the_socket(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
        assert tables == (0,)


def test_server_listens_on_loopback_only(postgres_server: _postgres.PostgresServer) -> None:
    with psycopg.connect(postgres_server.dsn) as conn:
        row = conn.execute("SHOW listen_addresses").fetchone()
    assert row == ("127.0.0.1",)


def test_server_does_not_run_as_root(postgres_server: _postgres.PostgresServer) -> None:
    pid = int((postgres_server.data_dir / "postmaster.pid").read_text().split()[0])
    assert Path(f"/proc/{pid}").stat().st_uid != 0


def test_tcp_requires_the_password(postgres_server: _postgres.PostgresServer) -> None:
    good = postgres_server.tcp_dsn_for("postgres")
    with psycopg.connect(good) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    bad = good.replace(postgres_server.password, "wrong")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(bad)


def test_every_server_test_carries_the_postgres_marker(request: pytest.FixtureRequest) -> None:
    """The top-level conftest marks by fixture, so `pytest -m postgres` selects this test."""
    assert request.node.get_closest_marker("postgres") is not None


@pytest.fixture(autouse=True)
def _uses_server(postgres_server: _postgres.PostgresServer) -> None:
    """Every test here needs the server (and so is marked)."""
