"""Fixtures for the claw kernel tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import claw
from claw import InlineWorkerPool
from claw.turns import TranscriptStore, open_transcript_store


@pytest.fixture
def host_config(tmp_path: Path) -> claw.HostConfig:
    """A config on a fresh workspace that loads no discovered plugins."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return claw.HostConfig(
        workspace_dir=workspace,
        state_dir=tmp_path / "state",
        plugins=claw.PluginsConfig(discover=False),
        workers=claw.WorkersConfig(inline=True),
    )


@pytest.fixture
async def host(host_config: claw.HostConfig) -> AsyncIterator[claw.Host]:
    async with claw.open_host(host_config) as h:
        yield h


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def ledger_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[TranscriptStore]:
    """A transcript store with its ledger, on each backend (PostgreSQL: the test server)."""
    if request.param == "postgresql":
        from claw.state.postgres._stores import open_state

        dsn = request.getfixturevalue("postgres_dsn")
        async with open_state(dsn, workers=InlineWorkerPool()) as state:
            yield state.transcripts
        return
    async with open_transcript_store(tmp_path / "t.db", workers=InlineWorkerPool()) as opened:
        yield opened
