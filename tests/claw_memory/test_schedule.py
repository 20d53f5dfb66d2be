"""The ranking schedule on its own: where a search is ranked, and with whom.

A RankScheduler needs only a worker pool and the current lexical reader; the ranking
itself (``rank_batch``) is replaced here by a recorder, so what is checked is the
schedule: who shares a batch, what runs on the loop and what on the workers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import pytest
import trio
import trio.testing

from claw.plugin_sdk import InlineWorkerPool, WorkerPoolStatistics
from claw_memory import _schedule
from claw_memory._generation import Generation
from claw_memory._schedule import BatchItem, Ranked, RankScheduler

T = TypeVar("T")
LEXICAL: Any = object()  # the recorder never reads it


class RecordingPool:
    """An inline pool that records the names of the functions it runs."""

    def __init__(self) -> None:
        self.inner = InlineWorkerPool()
        self.calls: list[str] = []

    async def run_sync(self, fn: Callable[..., T], *args: object) -> T:
        self.calls.append(getattr(fn, "__name__", ""))
        return await self.inner.run_sync(fn, *args)

    def statistics(self) -> WorkerPoolStatistics:
        return self.inner.statistics()


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The queries of each ranking batch; each item is answered with its own query."""
    seen: list[list[str]] = []

    def recorder(items: Sequence[BatchItem], lexical: object) -> list[Ranked | None]:
        assert lexical is LEXICAL
        seen.append([it.query for it in items])
        return [([], it.query == "more") for it in items]

    monkeypatch.setattr(_schedule, "rank_batch", recorder)
    return seen


def _item(query: str, *, dims: int = 4, check: Callable[[], bool] | None = None) -> BatchItem:
    return BatchItem(
        gen=Generation.empty(1, 0, dims),
        query=query,
        query_vector=np.ones(dims, dtype=np.float32),
        params=None,  # type: ignore[arg-type]  # read by the ranking, not the schedule
        tombstones=frozenset(),
        check=check,
    )


async def test_searches_ready_together_share_one_batch_on_the_event_loop(
    batches: list[list[str]],
) -> None:
    pool = RecordingPool()
    scheduler = RankScheduler(pool, lambda: LEXICAL)
    answers: dict[str, Ranked | None] = {}

    async def search(query: str) -> None:
        answers[query] = await scheduler.rank(_item(query))

    async with trio.open_nursery() as nursery:
        for query in ("one", "more", "three"):
            nursery.start_soon(search, query)
    assert sorted(map(sorted, batches)) == [["more", "one", "three"]]
    assert answers == {"one": ([], False), "more": ([], True), "three": ([], False)}
    assert pool.calls == []  # a small generation never goes to a worker


async def test_a_search_with_a_stat_check_due_is_ranked_on_a_worker(
    batches: list[list[str]],
) -> None:
    pool = RecordingPool()
    scheduler = RankScheduler(pool, lambda: LEXICAL)
    assert await scheduler.rank(_item("more", check=lambda: False)) == ([], True)
    assert pool.calls == ["recorder"]
    assert batches == [["more"]]


async def test_a_lexical_search_is_ranked_alone_on_a_worker(
    batches: list[list[str]],
) -> None:
    pool = RecordingPool()
    scheduler = RankScheduler(pool, lambda: LEXICAL)
    item = _item("one", check=lambda: False)
    item.query_vector = None
    assert await scheduler.rank(item) == ([], False)
    assert pool.calls == ["_rank_one"]


async def test_a_lexical_search_too_large_to_rank_vectors_inline_is_ranked_on_the_loop(
    batches: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lexical search reads no matrix: a generation whose vector product would go to
    # a worker still ranks its BM25 search on the event loop, sparing the hand-off.
    monkeypatch.setattr(_schedule, "_INLINE_RANK_ROWS", -1)
    pool = RecordingPool()
    scheduler = RankScheduler(pool, lambda: LEXICAL)
    item = _item("one")
    item.query_vector = None
    assert await scheduler.rank(item) == ([], False)
    assert pool.calls == []
    assert await scheduler.rank(_item("more")) == ([], True)  # a vector search is not
    assert pool.calls == ["recorder"]
    monkeypatch.setattr(_schedule, "_INLINE_LEXICAL_ROWS", -1)
    lexical = _item("three")
    lexical.query_vector = None
    assert await scheduler.rank(lexical) == ([], False)
    assert pool.calls == ["recorder", "_rank_one"]
    assert batches == [["one"], ["more"], ["three"]]


class ParkingPool(RecordingPool):
    """Parks every call until :attr:`release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = trio.Event()

    async def run_sync(self, fn: Callable[..., T], *args: object) -> T:
        await self.release.wait()
        return await super().run_sync(fn, *args)


async def test_a_search_cancelled_in_the_queue_leaves_it_and_the_next_batch_serves_the_rest(
    batches: list[list[str]],
) -> None:
    pool = ParkingPool()
    scheduler = RankScheduler(pool, lambda: LEXICAL)
    answers: dict[str, Ranked | None] = {}

    async def search(query: str) -> None:
        answers[query] = await scheduler.rank(_item(query, check=lambda: False))

    async with trio.open_nursery() as nursery:
        # Two leaders (at least two run at once) park in their workers...
        nursery.start_soon(search, "a")
        nursery.start_soon(search, "b")
        await trio.testing.wait_all_tasks_blocked()
        # ...so these two queue behind them.
        queued = trio.CancelScope()

        async def cancellable() -> None:
            with queued:
                await search("gone")

        nursery.start_soon(cancellable)
        nursery.start_soon(search, "d")
        await trio.testing.wait_all_tasks_blocked()
        queued.cancel()
        pool.release.set()
    assert sorted(map(sorted, batches)) == [["a"], ["b"], ["d"]]
    assert set(answers) == {"a", "b", "d"}
