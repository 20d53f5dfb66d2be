"""Where and with whom a search is ranked: the event loop or the worker pool, in batches.

Small generations (up to :data:`_INLINE_RANK_WORK` vector cells) are ranked on the event
loop, in batches of the searches ready to run together: a worker hand-off costs more
than the work. Larger ones are ranked on the worker pool, concurrent searches sharing
one matrix product per batch (the product is memory-bound, so a batch costs about what
one query did), and from :data:`_PARALLEL_PRODUCT_WORK` cells the product is split into
row slices computed by concurrent worker calls. Lexical-only searches are ranked on the
event loop up to :data:`_INLINE_LEXICAL_ROWS` rows (their cost is tantivy's, which grows
with the postings, not with a matrix), on workers beyond, alone: they gain nothing from
a shared product. :func:`rank_batch` ranks one batch; the ranking itself is
:func:`claw_memory._ranking.rank`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import attrs
import numpy as np
import numpy.typing as npt
import trio

from claw.plugin_sdk import WorkerPool

from ._generation import Generation
from ._lexical import LexicalIndex
from ._ranking import RankedRow, RankParams, approximate, rank, scores_every_row

Ranked = tuple[list[RankedRow], bool]
"""A search's ranked rows of the page it asked for, and whether more follow."""

# A generation this small (rows times vector dimensions) is ranked on the event loop:
# its matrix product and BM25 search take a fraction of a millisecond, less than
# handing the batch to a thread costs (two wake-ups, and GIL hand-offs during which the
# loop's own system calls stall). Larger ones go to the worker pool.
_INLINE_RANK_WORK = 4_000_000
_INLINE_RANK_ROWS = 20_000
# A lexical-only search over a generation up to this many rows is ranked on the event
# loop too: it reads no matrix, and its BM25 search and ranking (about 0.15 ms at 100k
# rows on the benchmark machine) cost little more than the hand-off to a worker thread
# and back (about 0.1 ms of CPU alone, 0.2 ms of latency at 100k rows), which the
# worker path adds to every search. Beyond, the postings grow long enough that the
# loop would stall for longer than a vector search up to _INLINE_RANK_WORK stalls it.
_INLINE_LEXICAL_ROWS = 200_000
# How many more scheduling rounds an inline batch's leader waits while searches keep
# arriving (measured on claw serve with 32 clients: about 15% more requests per second
# than ranking after one round).
_GATHER_ROUNDS = 4
# Up to this many vector cells, a sparse query vector (at most a quarter of its
# dimensions non-zero) is scored through the generation's transposed matrix, reading
# only its non-zero dimensions' rows.
_SPARSE_PRODUCT_CELLS = 4_000_000
# A generation at least this large (rows times dimensions) has its matrix product split
# into row slices computed by concurrent workers: the product is bound by memory
# bandwidth, which one core does not saturate (two halve the time on two cores).
_PARALLEL_PRODUCT_WORK = 8_000_000


# A batch of at most this many query vectors has its product computed in row blocks
# of about _BLOCK_CELLS matrix cells times queries (see similarities()).
_BLOCKED_QUERIES = 8
_BLOCK_CELLS = 1 << 18


def similarities(
    matrix: npt.NDArray[np.float32],
    queries: npt.NDArray[np.float32],
    out: npt.NDArray[np.float32] | None = None,
) -> npt.NDArray[np.float32]:
    """``queries @ matrix.T`` (into ``out`` when given): each query's cosine to every
    row, one contiguous row a query. They only propose candidates
    (:func:`~._ranking.nearest_rows` scores its pool exactly), so how the product
    rounds changes no answer.

    A batch of two to :data:`_BLOCKED_QUERIES` queries is computed in row blocks of
    ``_BLOCK_CELLS / (queries x dims)`` rows. One GEMM over the whole matrix with so
    few queries costs OpenBLAS about two gemv passes (it packs the matrix first);
    blocks this small take its small-matrix path, which reads the matrix once
    unpacked (10k x 256 rows, one BLAS thread: 4 queries 0.42 against 0.73 ms, 2 queries
    0.49 against 0.66, 8 queries 0.62 against 0.78; 100k rows alike). One query is a
    gemv; more than eight, one GEMM is cheaper again (12 queries: 1.0 against 1.2 ms).
    """
    b, dims = queries.shape
    n = matrix.shape[0]
    if out is None:
        out = np.empty((b, n), dtype=np.float32)
    if b == 1:
        np.matmul(matrix, queries[0], out=out[0])
    elif b > _BLOCKED_QUERIES:
        out[...] = (matrix @ queries.T).T
    else:
        step = max(32, _BLOCK_CELLS // (b * dims) // 32 * 32)
        for start in range(0, n, step):
            stop = min(start + step, n)
            np.matmul(matrix[start:stop], queries.T, out=out[:, start:stop].T)
    return out


def similarities_slice(
    matrix: npt.NDArray[np.float32],
    queries: npt.NDArray[np.float32],
    out: npt.NDArray[np.float32],
    start: int,
    stop: int,
) -> None:
    """Columns ``start:stop`` of :func:`similarities` into ``out`` (one worker's share
    of a large product: it is bound by memory bandwidth, which one core does not
    saturate, so two workers take about half the time)."""
    similarities(matrix[start:stop], queries, out[:, start:stop])


def _rank_inline(gen: Generation, *, lexical_only: bool) -> bool:
    """Whether a search over ``gen`` is ranked on the event loop (see the constants)."""
    rows = len(gen.records)
    if lexical_only:
        return rows <= _INLINE_LEXICAL_ROWS
    dims = 0 if gen.matrix is None else gen.matrix.shape[1]
    return rows <= _INLINE_RANK_ROWS and rows * dims <= _INLINE_RANK_WORK


@attrs.define(eq=False)
class BatchItem:
    """One search waiting for (or in) a ranking batch."""

    gen: Generation
    query: str
    query_vector: npt.NDArray[np.float32] | None
    params: RankParams
    tombstones: frozenset[str]
    # The stat check of the memory files, when one is due (it rides the ranking call):
    # whether any moved since the last sync.
    check: Callable[[], bool] | None
    # Whether a search whose check finds the files moved is still ranked (it then syncs
    # in the background) rather than answered with None (it syncs inline and re-ranks).
    rank_stale: bool = False
    stale: bool = False
    done: trio.Event = attrs.field(factory=trio.Event)
    sims: npt.NDArray[np.float32] | None = None
    taken: bool = False
    promoted: bool = False
    result: Ranked | None = None
    error: Exception | None = None

    def outcome(self) -> Ranked | None:
        if self.error is not None:
            raise self.error
        return self.result


@attrs.define(eq=False)
class RankScheduler:
    """Ranks searches, batching those that can share the work (see the module docstring).

    ``lexical`` gives the lexical reader current when a batch runs (a rebuild may
    replace it between two batches).
    """

    workers: WorkerPool
    lexical: Callable[[], LexicalIndex]
    _queue: list[BatchItem] = attrs.field(factory=list, init=False)
    _inline_queue: list[BatchItem] = attrs.field(factory=list, init=False)
    _leaders: int = attrs.field(default=0, init=False)
    # At least two: a batch parked in a slow worker must not hold every search back.
    _max_leaders: int = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._max_leaders = max(2, self.workers.statistics().total_tokens)

    async def rank(self, item: BatchItem) -> Ranked | None:
        """Rank ``item`` where it costs least; ``None`` when its stat check found the
        files moved and it did not ask to be ranked anyway."""
        lexical_only = item.query_vector is None
        if item.check is None and _rank_inline(item.gen, lexical_only=lexical_only):
            return await self._inline_rank(item)
        if not lexical_only:
            return await self._batched_rank(item)
        # Lexical-only searches gain nothing from sharing a matrix product and would
        # only lose the parallelism of separate workers: they go alone.
        return await self.workers.run_sync(_rank_one, item, self.lexical())

    async def _batched_rank(self, item: BatchItem) -> Ranked | None:
        """Rank ``item``, together with the searches queued while batches were running.

        Concurrent searches share one worker call: a single matrix product serves every
        query vector of a generation (the product is memory-bound, so a batch costs about
        what one query did) and the stat check runs once. Up to ``_max_leaders`` batches
        run at once (one per worker); a search that finds them all busy queues, and the
        next batch to finish hands the lead to the oldest queued search, which takes
        everything queued by then. A leader cancelled before its batch ran gives the
        other items back, so no search is left waiting on work nobody will do.
        """
        self._queue.append(item)
        if self._leaders >= self._max_leaders:
            try:
                await item.done.wait()
            except BaseException:
                if not item.taken:
                    self._queue.remove(item)
                    if item.promoted:
                        # We were handed the lead but will not take it: pass it on.
                        self._hand_over_lead()
                raise
            if not item.promoted:
                return item.outcome()
        else:
            self._leaders += 1
        batch, self._queue = self._queue, []
        for it in batch:
            it.taken = True
        try:
            await self._parallel_products(batch)
            results = await self.workers.run_sync(rank_batch, batch, self.lexical())
        except BaseException as exc:
            others = [it for it in batch if it is not item]
            if isinstance(exc, Exception):
                for it in others:
                    it.error = exc
                    it.done.set()
            else:
                for it in others:
                    it.taken = False
                self._queue[:0] = others
            self._hand_over_lead()
            raise
        for it, result in zip(batch, results, strict=True):
            it.result = result
            if it is not item:
                it.done.set()
        self._hand_over_lead()
        return results[batch.index(item)]

    async def _parallel_products(self, batch: Sequence[BatchItem]) -> None:
        """Give the items over a large generation their similarities, computed by
        concurrent workers over row slices (one product per generation for the batch)."""
        workers = self.workers.statistics()
        if workers.inline or workers.total_tokens < 2:
            return
        by_gen: dict[int, list[BatchItem]] = {}
        for it in batch:
            m = it.gen.matrix
            if (
                it.query_vector is not None
                and m is not None
                and m.shape[0] == len(it.gen.records)
                and m.shape[0] * m.shape[1] >= _PARALLEL_PRODUCT_WORK
                and not approximate(it.gen, it.params.approximate_rows)  # it scans a sketch
                and scores_every_row(it.gen, it.params)  # else it reads its rows only
            ):
                by_gen.setdefault(id(it.gen), []).append(it)
        for items in by_gen.values():
            matrix = items[0].gen.matrix
            assert matrix is not None
            queries = np.stack([it.query_vector for it in items])  # type: ignore[misc]
            out = np.empty((len(items), matrix.shape[0]), dtype=np.float32)
            parts = min(workers.total_tokens, 4)
            bounds = np.linspace(0, matrix.shape[0], parts + 1).astype(int).tolist()
            async with trio.open_nursery() as nursery:
                for start, stop in itertools.pairwise(bounds):
                    nursery.start_soon(
                        self.workers.run_sync, similarities_slice, matrix, queries, out, start, stop
                    )
            for row, it in zip(out, items, strict=True):
                it.sims = row

    async def _inline_rank(self, item: BatchItem) -> Ranked | None:
        """Rank ``item`` on the event loop, batched with the searches ready to run.

        The first search to arrive leads: it yields (uncancellably, so that the searches
        queued behind it are always served) for one scheduling round, and a few more
        while the queue keeps growing, which lets the tasks that are ready to run queue
        their own searches; then it ranks them all in one call.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._inline_queue.append(item)
        if len(self._inline_queue) > 1:
            try:
                await item.done.wait()
            except BaseException:
                if not item.taken:
                    self._inline_queue.remove(item)
                raise
            return item.outcome()
        await trio.lowlevel.cancel_shielded_checkpoint()
        # Searches still on their way (a few scheduling rounds behind) join too: keep
        # yielding while the queue grows, a bounded number of rounds. (Trio runs a
        # round's tasks in an order of its choosing: the leader may run before the
        # searches it would batch, so one round bringing none does not mean none come.)
        for _ in range(_GATHER_ROUNDS):
            queued = len(self._inline_queue)
            await trio.lowlevel.cancel_shielded_checkpoint()
            if len(self._inline_queue) == queued:
                break
        batch, self._inline_queue = self._inline_queue, []
        for it in batch:
            it.taken = True
        try:
            results = rank_batch(batch, self.lexical())
        except Exception as exc:
            for it in batch[1:]:
                it.error = exc
                it.done.set()
            raise
        for it, result in zip(batch[1:], results[1:], strict=True):
            it.result = result
            it.done.set()
        return results[0]

    def _hand_over_lead(self) -> None:
        self._leaders -= 1
        if self._queue and self._leaders < self._max_leaders:
            nxt = self._queue[0]
            nxt.promoted = True
            self._leaders += 1
            nxt.done.set()


def _rank_one(item: BatchItem, lexical: LexicalIndex) -> Ranked | None:
    return rank_batch([item], lexical)[0]


def rank_batch(items: Sequence[BatchItem], lexical: LexicalIndex) -> list[Ranked | None]:
    """Rank a batch of searches: one matrix product per generation, one stat check.

    An item that asked for the freshness check gets ``None`` when the memory files moved
    (its search syncs and ranks again), unless it asked to be ranked anyway
    (``rank_stale``: it is marked ``stale``); the others are ranked as usual.
    """
    stale = False
    checks = [it.check for it in items if it.check is not None]
    if checks:
        stale = checks[0]()
    by_gen: dict[int, list[int]] = {}
    for i, it in enumerate(items):
        if (
            it.query_vector is not None
            and it.gen.matrix is not None
            and it.sims is None
            and scores_every_row(it.gen, it.params)  # else it reads its rows only
        ):
            by_gen.setdefault(id(it.gen), []).append(i)
    sims: dict[int, npt.NDArray[np.float32]] = {}
    for group in by_gen.values():
        gen = items[group[0]].gen
        assert gen.matrix is not None
        if gen.matrix.shape[0] != len(gen.records) or any(
            approximate(gen, items[i].params.approximate_rows) for i in group
        ):
            continue  # (an approximate vector stage scans the sketch in rank())
        dense = group
        if gen.matrix.size <= _SPARSE_PRODUCT_CELLS:
            dense = []
            for i in group:
                q = items[i].query_vector
                assert q is not None
                # (Counting first: a dense vector, every semantic embedder's, is told
                # in a fraction of what listing its non-zero dimensions costs.)
                if np.count_nonzero(q) * 4 <= q.shape[0]:
                    # The transposed matrix is made only for a sparse query: a dense
                    # embedder's generation never needs it (it cost a 5,000-row
                    # generation 10 ms and a copy of its matrix, after every sync).
                    cols = gen.columns()
                    assert cols is not None
                    nz = q.nonzero()[0]
                    sims[i] = q[nz] @ cols[nz]
                else:
                    dense.append(i)
        if not dense:
            continue
        queries = np.stack([items[i].query_vector for i in dense])  # type: ignore[misc]
        for i, row in zip(dense, similarities(gen.matrix, queries), strict=True):
            sims[i] = row
    out: list[Ranked | None] = []
    for i, it in enumerate(items):
        if stale and it.check is not None:
            if not it.rank_stale:
                out.append(None)
                continue
            it.stale = True
        out.append(
            rank(
                it.gen,
                lexical,
                query=it.query,
                query_vector=it.query_vector,
                params=it.params,
                tombstones=it.tombstones,
                sims=it.sims if it.sims is not None else sims.get(i),
            )
        )
    return out
