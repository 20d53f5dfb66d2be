"""Shared test configuration."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import _postgres

# pytester runs user-style test files through the claw_testing plugin (tests/claw_testing).
pytest_plugins = ["pytester"]

#: Fixtures that start (or use) the real PostgreSQL server; tests using them get the marker.
POSTGRES_FIXTURES = frozenset({"postgres_server", "postgres_dsn"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the server ``postgres``, so ``-m postgres`` finds them all."""
    for item in items:
        if POSTGRES_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[_postgres.PostgresServer]:
    """A real PostgreSQL server for the whole test session (see ``tests/_postgres.py``).

    Skips with the reason when PostgreSQL is not installed, except under ``CI=true``,
    where that fails the tests: CI never passes by skipping them.
    """
    try:
        with _postgres.running_server() as server:
            yield server
    except _postgres.PostgresUnavailable as exc:
        if _postgres.in_ci():
            pytest.fail(f"CI=true but PostgreSQL cannot run: {exc}", pytrace=False)
        pytest.skip(str(exc))


@pytest.fixture
def postgres_dsn(postgres_server: _postgres.PostgresServer) -> Iterator[str]:
    """The DSN of a fresh, empty database on the test server, dropped after the test."""
    name = postgres_server.create_database()
    try:
        yield postgres_server.dsn_for(name)
    finally:
        postgres_server.drop_database(name)
