"""Fixtures for the claw kernel tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import claw


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
