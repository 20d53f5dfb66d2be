"""``[state] backend = "postgresql"``: configuration, and hosts opened on it."""

from __future__ import annotations

from pathlib import Path

import pytest

import claw
from claw.state.postgres._backend import DSN_ENV, PostgresStateBackend, resolve_dsn, state_backend


def _config(tmp_path: Path, dsn: str | None) -> claw.HostConfig:
    workspace = tmp_path / "ws"
    workspace.mkdir(parents=True, exist_ok=True)
    return claw.HostConfig(
        workspace_dir=workspace,
        state_dir=tmp_path / "state",
        plugins=claw.PluginsConfig(discover=False),
        workers=claw.WorkersConfig(inline=True),
        state=claw.StateConfig(backend="postgresql", dsn=dsn),
    )


def test_a_missing_dsn_names_the_key_and_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)
    with pytest.raises(claw.ConfigError, match="state.dsn") as info:
        state_backend(_config(tmp_path, None))
    assert DSN_ENV in str(info.value)


def test_the_dsn_comes_from_the_environment_when_the_config_has_none(tmp_path: Path) -> None:
    config = _config(tmp_path, None)
    assert resolve_dsn(config, {DSN_ENV: "host=db dbname=claw"}) == (
        "host=db dbname=claw", DSN_ENV,
    )
    assert resolve_dsn(_config(tmp_path, "host=x"), {DSN_ENV: "host=db"}) == (
        "host=x", "state.dsn",
    )


def test_a_malformed_dsn_is_a_config_error_naming_its_key_without_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DSN_ENV, "postgresql://u:hunter2-secret@[h/db")
    with pytest.raises(claw.ConfigError, match=DSN_ENV) as info:
        state_backend(_config(tmp_path, None))
    assert "hunter2-secret" not in str(info.value)


def test_the_backend_repr_hides_the_password() -> None:
    backend = PostgresStateBackend("postgresql://claw:s3cret@db/claw")
    assert "s3cret" not in repr(backend) and "***" in repr(backend)
    assert backend.name == "postgresql"


async def test_hosts_on_one_database_share_their_sessions(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with claw.open_host(_config(tmp_path / "a", postgres_dsn)) as a:
        row = await a.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        async with claw.open_host(_config(tmp_path / "b", postgres_dsn)) as b:
            assert await b.sessions.get("dm:alice") == row
            assert b.sessions.get_nowait("dm:alice") == row  # loaded at open
            assert [r.session_key for r in await b.sessions.list()] == ["dm:alice"]


async def test_the_backend_is_found_by_name_through_its_entry_point(
    tmp_path: Path, postgres_dsn: str
) -> None:
    from claw._host import state_backend as host_state_backend

    backend = host_state_backend(_config(tmp_path, postgres_dsn))
    assert isinstance(backend, PostgresStateBackend)
