"""Concurrent searches share ranking batches, and get the answers they would alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
import trio.testing

from claw.plugin_sdk import InlineWorkerPool, WorkerPoolStatistics
from claw.plugin_sdk.search import HashEmbedder, StaticEmbedder
from claw_memory import _schedule
from claw_memory._index import open_memory_index
from claw_memory._settings import MemoryCoreSettings

from .test_schedule import RecordingPool

T = TypeVar("T")
SETTINGS = MemoryCoreSettings(min_score=0.0)
WORDS = ["walrus", "otter", "heron", "badger", "lynx", "marten", "ibex", "okapi"]


class CountingPool:
    """An inline pool that parks the first ranking batch until released, and counts."""

    def __init__(self) -> None:
        self.inner = InlineWorkerPool()
        self.batches: list[int] = []
        self.release = trio.Event()
        self.parked = trio.Event()

    async def run_sync(self, fn: Callable[..., T], *args: object) -> T:
        if getattr(fn, "__name__", "") == "rank_batch":
            self.batches.append(len(args[0]))  # type: ignore[arg-type]
            if len(self.batches) <= 2:
                self.parked.set()
                await self.release.wait()
        return await self.inner.run_sync(fn, *args)

    def statistics(self) -> WorkerPoolStatistics:
        return self.inner.statistics()


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i, word in enumerate(WORDS):
        (ws / "memory" / f"{i}.md").write_text(f"notes about the {word} colony\n", "utf-8")
    return ws


def _open(ws: Path, tmp_path: Path, workers: Any) -> Any:
    return open_memory_index(
        workspace_dir=ws,
        index_dir=tmp_path / "idx",
        workers=workers,
        settings=SETTINGS,
        embedder=HashEmbedder(),
    )


async def _answers(index: Any, queries: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}

    async def one(q: str) -> None:
        out[q] = [h.path for h in (await index.search(q, max_results=3)).hits]

    async with trio.open_nursery() as nursery:
        for q in queries:
            nursery.start_soon(one, q)
    return out


async def test_searches_that_arrive_during_a_batch_share_the_next_one(
    tmp_path: Path, worker_ranking: None
) -> None:
    ws = _workspace(tmp_path)
    pool = CountingPool()
    async with _open(ws, tmp_path, pool) as index:
        alone = {}
        pool.release.set()
        for word in WORDS:
            alone[word] = [h.path for h in (await index.search(word, max_results=3)).hits]
        pool.batches.clear()
        pool.release = trio.Event()
        async with trio.open_nursery() as nursery:
            results: dict[str, list[str]] = {}

            async def run() -> None:
                results.update(await _answers(index, WORDS))

            nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            pool.release.set()
        assert results == alone  # batching changes no answer
        # Two leaders took one search each; everything queued behind them went in a
        # batch of its own instead of one worker call per search.
        assert pool.batches[:2] == [1, 1]
        assert sum(pool.batches) == len(WORDS)
        assert len(pool.batches) < len(WORDS)


async def test_a_cancelled_waiting_search_does_not_stall_the_others(
    tmp_path: Path, worker_ranking: None
) -> None:
    ws = _workspace(tmp_path)
    pool = CountingPool()
    async with _open(ws, tmp_path, pool) as index:
        pool.batches.clear()
        done: list[str] = []

        async def search(word: str) -> None:
            await index.search(word)
            done.append(word)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(search, "walrus")
            nursery.start_soon(search, "otter")
            await trio.testing.wait_all_tasks_blocked()  # two leaders parked
            nursery.start_soon(search, "heron")  # queued behind the leaders
            cancel_me = trio.CancelScope()

            async def cancelled_search() -> None:
                with cancel_me:
                    await index.search("badger")

            nursery.start_soon(cancelled_search)
            nursery.start_soon(search, "lynx")
            await trio.testing.wait_all_tasks_blocked()
            cancel_me.cancel()
            await trio.testing.wait_all_tasks_blocked()
            pool.release.set()
        assert sorted(done) == ["heron", "lynx", "otter", "walrus"]


async def test_small_indexes_rank_on_the_event_loop_in_shared_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = _workspace(tmp_path)
    pool = CountingPool()
    pool.release.set()
    inline_batches: list[int] = []
    real = _schedule.rank_batch

    def counting(items: Any, lexical: Any) -> Any:
        inline_batches.append(len(items))
        return real(items, lexical)

    monkeypatch.setattr(_schedule, "rank_batch", counting)
    async with _open(ws, tmp_path, pool) as index:
        alone = {}
        for word in WORDS:
            alone[word] = [h.path for h in (await index.search(word, max_results=3)).hits]
        assert inline_batches == [1] * len(WORDS)
        inline_batches.clear()
        assert await _answers(index, WORDS) == alone
        # Searches that were ready to run together were ranked in one call, and none
        # of them went through the worker pool.
        assert sum(inline_batches) == len(WORDS)
        assert len(inline_batches) < len(WORDS)
        assert pool.batches == []


async def test_a_search_cancelled_while_queued_for_an_inline_batch_stalls_nobody(
    tmp_path: Path,
) -> None:
    ws = _workspace(tmp_path)
    async with _open(ws, tmp_path, InlineWorkerPool()) as index:
        alone = {w: [h.path for h in (await index.search(w, max_results=3)).hits] for w in WORDS}
        got: dict[str, list[str]] = {}
        finished_cancelled: list[str] = []

        async def search(word: str, cancelled: bool) -> None:
            with trio.CancelScope() as scope:
                if cancelled:
                    scope.cancel()
                hits = (await index.search(word, max_results=3)).hits
                if cancelled:
                    finished_cancelled.append(word)
                    return
                got[word] = [h.path for h in hits]

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for i, word in enumerate(WORDS):
                    nursery.start_soon(search, word, i % 3 == 1)
        expected = {w: alone[w] for i, w in enumerate(WORDS) if i % 3 != 1}
        assert got == expected
        assert finished_cancelled == []


class TwoWorkerPool(RecordingPool):
    """Runs inline, but reports two thread workers (so products may be split)."""

    def statistics(self) -> WorkerPoolStatistics:
        return WorkerPoolStatistics(
            total_tokens=2, borrowed_tokens=0, tasks_waiting=0, inline=False
        )


async def test_large_products_are_split_across_workers_and_change_no_answer(
    tmp_path: Path, worker_ranking: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = _workspace(tmp_path)
    pool = TwoWorkerPool()
    async with _open(ws, tmp_path, pool) as index:
        whole = {}
        for word in WORDS:
            result = await index.search(word, max_results=5)
            whole[word] = [(h.path, h.score, h.vector_score) for h in result.hits]
        assert "similarities_slice" not in pool.calls
        monkeypatch.setattr(_schedule, "_PARALLEL_PRODUCT_WORK", 1)
        split = {}
        for word in WORDS:
            result = await index.search(word, max_results=5)
            split[word] = [(h.path, h.score, h.vector_score) for h in result.hits]
        assert pool.calls.count("similarities_slice") == 2 * len(WORDS)
        for word in WORDS:
            assert [p for p, _, _ in split[word]] == [p for p, _, _ in whole[word]]
            assert [s for _, s, _ in split[word]] == pytest.approx([s for _, s, _ in whole[word]])


async def test_sparse_query_vectors_score_like_the_full_product(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = _workspace(tmp_path)
    async with _open(ws, tmp_path, InlineWorkerPool()) as index:
        queries = [*WORDS, "notes about the colony", " ".join(WORDS)]
        sparse = {}
        for q in queries:
            sparse[q] = [(h.path, h.vector_score) for h in (await index.search(q)).hits]
        columns = index._view.generation.columns()
        assert columns is not None and columns is index._view.generation.columns()
        assert not columns.flags.writeable
        monkeypatch.setattr(_schedule, "_SPARSE_PRODUCT_CELLS", -1)
        for q in queries:
            full = [(h.path, h.vector_score) for h in (await index.search(q)).hits]
            assert [p for p, _ in full] == [p for p, _ in sparse[q]]
            assert [v for _, v in full] == pytest.approx([v for _, v in sparse[q]], abs=1e-6)


async def test_a_dense_query_vector_never_makes_the_transposed_matrix(tmp_path: Path) -> None:
    """Only a sparse query reads the transposed matrix: a dense embedder's generation
    (a new one after every sync) is never copied into one."""
    ws = _workspace(tmp_path)
    async with open_memory_index(
        workspace_dir=ws,
        index_dir=tmp_path / "idx",
        workers=InlineWorkerPool(),
        settings=SETTINGS,
        embedder=StaticEmbedder(),
    ) as index:
        for word in WORDS:
            assert (await index.search(word)).hits
        assert "columns" not in index._view.generation._memo
