"""Fixtures for the Memory Core tests: a workspace, an index directory, a worker pool."""

from __future__ import annotations

from pathlib import Path

import pytest

from claw.plugin_sdk import InlineWorkerPool


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "index"


@pytest.fixture
def workers() -> InlineWorkerPool:
    return InlineWorkerPool()
