"""Who wrote each entry: the journal is read by a worker only when it changed.

Every search that finds a memory file asks ``writers`` for its hits' provenance;
``writers_nowait`` answers with one ``stat`` while the journal is as last read, and
says ``None`` once anything (this process, another process, a purge's rewrite) changed
it, so that the next ``writers`` reads what was added.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import attrs
import pytest

import claw
from claw._workers import InlineWorkerPool
from claw.memory._writes import describe_writer
from claw.memory_files import MemoryFiles

T = TypeVar("T")


@attrs.define
class CountingPool(InlineWorkerPool):
    """An inline pool that counts the calls handed to it."""

    calls: int = attrs.field(default=0, init=False)

    async def run_sync(self, fn: Callable[..., T], *args: object) -> T:
        self.calls += 1
        return await super().run_sync(fn, *args)


def _files(workspace: Path, pool: InlineWorkerPool) -> MemoryFiles:
    clock = lambda: 1_000.0  # noqa: E731
    return MemoryFiles.create(
        workspace,
        workers=pool,
        describe=functools.partial(describe_writer, clock=clock),
        now=clock,
    )


@pytest.fixture
async def caller() -> AsyncIterator[claw.MemoryCallerContext]:
    async with claw.open_host(claw.HostConfig(plugins=claw.PluginsConfig(discover=False))) as h:
        async with h.open_scope("op") as scope:
            yield scope.mint_caller_context(scope.mint_operator_authority({"operator.write"}))


async def test_writers_are_read_again_only_after_the_journal_changed(
    tmp_path: Path, caller: claw.MemoryCallerContext
) -> None:
    pool = CountingPool()
    files = _files(tmp_path, pool)
    assert files.writers_nowait() == {}  # no journal yet: nobody wrote anything
    await files.append(caller, "memory/a.md", "- The shed key is blue.")
    assert files.writers_nowait() is None  # written since the journal was last read
    first = dict(await files.writers())
    assert len(first) == 1
    before = pool.calls
    assert files.writers_nowait() == first
    assert files.writers_nowait() == first
    assert pool.calls == before  # answered by a stat, no worker

    # Another writer of the workspace (another process, another state directory).
    other = _files(tmp_path, InlineWorkerPool())
    await other.append(caller, "memory/a.md", "- The gate code is 4417.")
    assert files.writers_nowait() is None
    second = dict(await files.writers())
    assert set(first) < set(second) and len(second) == 2
    assert files.writers_nowait() == second


async def test_a_purge_rewriting_the_journal_is_noticed(
    tmp_path: Path, caller: claw.MemoryCallerContext
) -> None:
    files = _files(tmp_path, InlineWorkerPool())
    await files.append(caller, "memory/a.md", "- The shed key is blue.")
    await files.append(caller, "memory/a.md", "- The gate code is 4417.")
    gone = await files.remove(caller, "memory/a.md", 2, 2)
    kept = dict(await files.writers())
    journal = files.home / "journal.jsonl"
    inode = journal.stat().st_ino
    # Another state directory purges the forget's undo copy: the journal is rewritten.
    other = _files(tmp_path, InlineWorkerPool())
    await other.purge(caller, ["memory/a.md"], removal_id=gone.removal_id)
    assert journal.stat().st_ino != inode
    assert files.writers_nowait() is None
    again = dict(await files.writers())
    assert set(again) <= set(kept) and again
    assert files.writers_nowait() == again
