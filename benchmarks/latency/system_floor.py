"""The fair floor: tantivy and numpy called directly, given what claw gets.

claw's own schema and analysers (stemming, query stop words) and term queries built per
search, the matrix product split over two threads where claw splits it (one thread
below claw's threshold, where claw ranks on its event loop), concurrent searches sharing
one product, claw's candidate count and claw's merge (every candidate, lexical-only ones
included, gets its exact cosine). Above claw's row threshold it scans the same sign-bit
sketch as claw ("floor"), with the full product beside it ("floor exact"). It also
scores every row (exhaustive fusion, what the candidate cut is measured against) and
times the bare tantivy call of a lexical search (as deep as claw's lexical search asks, and
as deep as its merge).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks._common import peak_rss_mb, percentile

from ._shared import (
    FLOOR_THREADS,
    RESULTS,
    TEXT_WEIGHT,
    VECTOR_WEIGHT,
    _dir_bytes,
    _load,
    claw_candidates,
    claw_lexical_candidates,
)
from ._worker import send, serve_commands


def _fused_top(
    text_rows: npt.NDArray[np.int64],
    bm25: npt.NDArray[np.float32],
    sims: npt.NDArray[np.float32] | Callable[[npt.NDArray[np.intp]], npt.NDArray[np.float32]],
    vec_rows: npt.NDArray[np.intp],
) -> list[int]:
    """claw's merge over the candidates ``text_rows`` (BM25 ``bm25``) and ``vec_rows``.

    Every candidate gets its exact cosine (``sims`` holds every row's, or computes
    those of the rows it is given: the approximate vector stage) and its BM25
    relative to the best; the weighted sum ranks them, ties by row, and rows scoring
    zero are dropped (claw's ``min_score`` 0 does the same).
    """
    # Every row a vector candidate (exhaustive fusion): the rows are already the union.
    every = not callable(sims) and vec_rows.shape[0] == sims.shape[0]
    rows = vec_rows if every else np.union1d(text_rows, vec_rows)
    t = np.zeros(rows.shape[0], dtype=np.float64)
    best = float(bm25.max()) if bm25.shape[0] else 0.0
    if best > 0:
        t[np.searchsorted(rows, text_rows)] = bm25 / best
    cos = sims(rows) if callable(sims) else sims[rows]
    v = np.maximum(cos.astype(np.float64), 0.0)
    scores = VECTOR_WEIGHT * v + TEXT_WEIGHT * t
    keep = scores > 0.0
    rows, scores = rows[keep], scores[keep]
    order = np.lexsort((rows, -scores))[:RESULTS]
    return [int(r) for r in rows[order]]


class SplitProduct:
    """Cosines of every row to query vectors: the product split by rows over two threads.

    Concurrent callers share one product (a caller arriving while one runs waits and
    then leads the next, taking every query queued by then), as claw's ranking batches
    do. The leading thread computes one slice itself while a pool thread computes the
    other.
    """

    def __init__(self, matrix: npt.NDArray[np.float32], threads: int = FLOOR_THREADS) -> None:
        self._matrix = matrix
        bounds = np.linspace(0, matrix.shape[0], threads + 1).astype(int).tolist()
        self._slices = list(itertools.pairwise(bounds))
        self._pool = ThreadPoolExecutor(max(1, threads - 1))
        self._cv = threading.Condition()
        self._pending: list[list[Any]] = []
        self._busy = False

    def close(self) -> None:
        self._pool.shutdown()

    def _product(self, queries: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        m = self._matrix
        out = np.empty((m.shape[0], queries.shape[0]), dtype=np.float32)
        (a, b), *rest = self._slices
        futures = [
            self._pool.submit(np.matmul, m[lo:hi], queries.T, out=out[lo:hi]) for lo, hi in rest
        ]
        np.matmul(m[a:b], queries.T, out=out[a:b])
        for f in futures:
            f.result()
        return out

    def sims(self, query: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        slot: list[Any] = [query, None]
        with self._cv:
            self._pending.append(slot)
            while self._busy and slot[1] is None:
                self._cv.wait()
            if slot[1] is not None:
                result: npt.NDArray[np.float32] = slot[1]
                return result
            self._busy = True
            batch, self._pending = self._pending, []
        out = None
        try:
            out = self._product(np.stack([s[0] for s in batch]))
        finally:
            with self._cv:
                for column, s in enumerate(batch):
                    s[1] = np.ascontiguousarray(out[:, column]) if out is not None else None
                self._busy = False
                self._cv.notify_all()
        result = slot[1]
        return result


def _fill(index: Any, texts: Sequence[str], key: str) -> Any:
    """Add one document per text (its row in the fast field ``key``); a searcher over them."""
    import tantivy

    writer = index.writer(heap_size=128_000_000, num_threads=1)
    for i, text in enumerate(texts):
        doc = tantivy.Document(text=text)
        doc.add_unsigned(key, i)
        writer.add_document(doc)
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    return index.searcher()


def run_floor(root: Path, work: Path) -> None:
    """The fair floor; also exhaustive fusion and the bare lexical call (see the module)."""
    import tantivy

    from claw_memory._generation import SignSketch
    from claw_memory._lexical import _ANALYZER, _analyzer, _query_analyzer, _schema
    from claw_memory._ranking import (
        APPROXIMATE_ROWS,
        SKETCH_RESCORE_FACTOR,
        SKETCH_RESCORE_MIN,
        top_k,
    )
    from claw_memory._schedule import _PARALLEL_PRODUCT_WORK

    texts, qs, vecs, qvecs = _load(root)
    candidates = claw_candidates(len(texts))
    t0 = time.perf_counter()
    schema = _schema()
    index = tantivy.Index(schema, path=str(work))
    index.register_tokenizer(_ANALYZER, _analyzer())
    searcher = _fill(index, texts, "key")
    matrix = np.ascontiguousarray(vecs, dtype=np.float32)
    # The threads claw uses: it splits a product this large over two workers and ranks
    # a smaller generation on its event loop (where the hand-off to a thread costs more
    # than the second core gains).
    threads = FLOOR_THREADS if matrix.size >= _PARALLEL_PRODUCT_WORK else 1
    product = SplitProduct(matrix, threads)
    build = time.perf_counter() - t0
    analyzer = _query_analyzer()

    def lexical(i: int, limit: int | None) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """BM25 candidates of query ``i`` (``limit=None``: every matching row)."""
        terms = list(dict.fromkeys(analyzer.analyze(qs[i])))
        if not terms:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        query = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(schema, "text", t)) for t in terms]
        )
        if limit is None:
            limit = max(1, searcher.search(query, limit=1, count=True).count or 1)
        hits = searcher.search(query, limit=limit, count=False).hits
        keys = searcher.fast_field_values("key", [a for _, a in hits]) if hits else []
        return (
            np.array(keys, dtype=np.int64),
            np.array([s for s, _ in hits], dtype=np.float32),
        )

    def exact_search(i: int) -> list[int]:
        text_rows, bm25 = lexical(i, candidates)
        sims = product.sims(qvecs[i])
        return _fused_top(text_rows, bm25, sims, top_k(sims, candidates))

    # Where claw's vector stage scans a sign-bit sketch and scores only the rows it
    # ranks nearest, so does the floor (the same sketch, the same number of rows);
    # "floor exact" keeps the full product beside it.
    approximate = matrix.shape[0] >= APPROXIMATE_ROWS
    sketch = SignSketch.of(matrix) if approximate else None
    rescore = max(SKETCH_RESCORE_FACTOR * candidates, SKETCH_RESCORE_MIN)

    def vector_stage(q: npt.NDArray[np.float32]) -> npt.NDArray[np.intp]:
        assert sketch is not None
        pool = sketch.nearest(q, rescore)
        found: npt.NDArray[np.intp] = pool[top_k(matrix[pool] @ q, candidates)]
        return found

    def approximate_search(i: int) -> list[int]:
        text_rows, bm25 = lexical(i, candidates)
        q = qvecs[i]
        return _fused_top(text_rows, bm25, lambda rows: matrix[rows] @ q, vector_stage(q))

    searches = {"floor": approximate_search, "floor exact": exact_search}
    if not approximate:
        searches = {"floor": exact_search}
    try:
        results = serve_commands(
            searches,
            len(qs),
            {"build_s": build, "candidates": candidates, "threads": threads},
        )
        exhaustive = []
        recall = []
        everything = np.arange(matrix.shape[0])
        for i in range(len(qs)):
            text_rows, bm25 = lexical(i, None)
            sims = matrix @ qvecs[i]
            exhaustive.append(_fused_top(text_rows, bm25, sims, everything))
            if approximate:
                # The vector stage's own recall: the exact top 10 (and top of the
                # candidate count) that it finds.
                want = top_k(sims, candidates)
                got = set(vector_stage(qvecs[i]).tolist())
                recall.append(
                    (
                        len(got & set(want[:RESULTS].tolist())) / RESULTS,
                        len(got & set(want.tolist())) / len(want),
                    )
                )
        # The bare tantivy call of a lexical search: as deep as claw's lexical search
        # asks (the head of its ranking and one more row), and as deep as its merge
        # (what claw's lexical search asked before it stopped at the head).
        head = claw_lexical_candidates(len(texts))
        bare, bare_full = [], []
        for i in range(len(qs)):
            t = time.perf_counter()
            lexical(i, head)
            bare.append((time.perf_counter() - t) * 1000.0)
            t = time.perf_counter()
            lexical(i, candidates)
            bare_full.append((time.perf_counter() - t) * 1000.0)
    finally:
        product.close()
    size = _dir_bytes(work) + matrix.nbytes
    floor = {
        "index_mb": size / 2**20,
        "rss_mb": peak_rss_mb(),
        "top": results.get("floor", []),
        "exhaustive": exhaustive,
        "bare_lexical_p50_ms": percentile(bare, 50),
        "bare_lexical_candidates": head,
        "bare_lexical_full_p50_ms": percentile(bare_full, 50),
        "approximate": approximate,
        "rescored_rows": rescore if approximate else matrix.shape[0],
        "vector_recall_at10": float(np.mean([r for r, _ in recall])) if recall else 1.0,
        "vector_recall_at_candidates": float(np.mean([r for _, r in recall])) if recall else 1.0,
    }
    extra = {"floor": floor}
    if approximate:
        # The same process, index and matrix as the fair floor.
        extra["floor exact"] = {
            "top": results.get("floor exact", []),
            "index_mb": floor["index_mb"],
            "rss_mb": floor["rss_mb"],
        }
    send({"extra": extra})
