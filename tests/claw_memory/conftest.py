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


@pytest.fixture
def worker_ranking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank even tiny indexes on the worker pool, as large ones are (small generations
    are otherwise ranked on the event loop, where no worker call can be parked)."""
    from claw_memory import _schedule

    monkeypatch.setattr(_schedule, "_INLINE_RANK_WORK", -1)
    monkeypatch.setattr(_schedule, "_INLINE_LEXICAL_ROWS", -1)
