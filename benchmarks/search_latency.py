"""Search latency and scale: claw against a fair floor, the old floor and SQLite peers.

One seeded synthetic corpus (see :mod:`benchmarks._corpus`), the same queries, side by
side, each system in a fresh process of its own (so build time, peak RSS and index
size are its own):

* ``claw``: Memory Core through the host's memory provider handle (``host.memory.open``
  then ``handle.search``; the full path a caller pays), hybrid and lexical only, with an
  embedding provider that serves the corpus vectors (so no system pays for a model);
* ``floor``: the fair floor, tantivy and numpy called directly, given what claw gets:
  claw's own schema and analysers (stemming, query stop words) and term queries built
  per search, the matrix product split over two threads where claw splits it (one
  thread below claw's threshold, where claw ranks on its event loop), concurrent
  searches sharing one product, claw's candidate count and claw's merge (every
  candidate, lexical-only ones included, gets its exact cosine). It also scores every
  row (no candidate cut), the exhaustive fusion the candidate cut is measured against,
  and times the bare tantivy call of a lexical search;
* ``floor-old``: the floor of the earlier benchmark (one thread, queries parsed with
  the default tokenizer before timing, no cosine for lexical-only candidates), kept so
  that old and new ratios come from one run;
* ``fts5+vec``: SQLite FTS5 BM25 plus sqlite-vec KNN (loaded through apsw, whose SQLite
  can load extensions), merged with the same weights;
* ``fts5+scan``: SQLite FTS5 plus a cosine scan in numpy over float32 blobs read from
  SQLite for every query (the fallback when no vector extension loads).

Each worker builds alone; then the orchestrator asks every worker in turn for one
sequential pass over the queries (five rounds), then for a run of 8 concurrent
searchers, so that a burst of load from other processes falls on every system alike.
Reported per system: median and p95 ms over each query's fastest run (and the p95 of
the least disturbed pass, what a caller waited), queries per second with 8 concurrent
searchers (the best round), build time, peak RSS (``VmHWM`` of the worker's own
address space) and index size, and the machine's load average during the passes.
For claw also: the top-10 agreement with exhaustive fusion at several candidate
counts, and what a change to one file costs
(the search that notices it, searches arriving during its sync, the next search, and
the time until the change is searchable).

    python -m benchmarks.search_latency --chunks N [--json] [--queries Q] [--seconds S]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from benchmarks._common import emit_json, load, machine, peak_rss_mb, percentile, table
from benchmarks._corpus import CHUNK_TOKENS, DIMS, Corpus

OLD_CANDIDATES = 40
RESULTS = 10
VECTOR_WEIGHT = 0.7
TEXT_WEIGHT = 0.3
CHUNKS_PER_FILE = 100
CONCURRENCY = 8
FLOOR_THREADS = 2
SYSTEMS = ("claw", "claw-shipped", "floor", "floor-old", "fts5+vec", "fts5+scan")
SWEEP = (40, 160, 400)
# The pause between two searches arriving during a sync: a client searching now and
# then, not one saturating the event loop the sync needs too.
DURING_SYNC_GAP = 0.005
# Sequential passes over the queries per measurement (see fastest); set by --passes.
# approximate_rows: claw's row threshold of the approximate vector stage, when
# --approximate-rows sets it (0: claw's own), in every worker alike.
OPTIONS: dict[str, Any] = {"passes": 5, "approximate_rows": 0, "corpus": None}


def claw_candidates(rows: int) -> int:
    """How many candidates each retriever gives claw's merge by default (top ``RESULTS``)
    over an index of ``rows`` chunks (the depth grows with the index)."""
    from claw_memory import MemoryCoreSettings
    from claw_memory._ranking import candidate_count

    settings = MemoryCoreSettings()
    return candidate_count(RESULTS, settings.candidate_multiplier, settings.candidate_growth, rows)


# -- corpus on disk -------------------------------------------------------------------
def prepare(root: Path, chunks: int, queries: int) -> None:
    """Texts, vectors and queries for the workers (one line per chunk or query)."""
    corpus = Corpus()
    texts = corpus.chunk_texts(chunks)
    qs = corpus.queries(texts, queries)
    (root / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    (root / "queries.txt").write_text("\n".join(qs) + "\n", encoding="utf-8")
    vecs = np.concatenate(
        [corpus.embed(texts[i : i + 20_000]) for i in range(0, len(texts), 20_000)]
    )
    np.save(root / "vectors.npy", vecs)
    np.save(root / "qvectors.npy", corpus.embed(qs))


def _prepared(root: Path, chunks: int, queries: int) -> bool:
    """Whether ``root`` already holds the corpus :func:`prepare` makes for these sizes."""
    try:
        shape = np.load(root / "vectors.npy", mmap_mode="r").shape
        with (root / "queries.txt").open(encoding="utf-8") as f:
            asked = sum(1 for _ in f)
    except (OSError, ValueError):
        return False
    return bool(shape[0] == chunks and asked == queries and (root / "qvectors.npy").exists())


def _load(
    root: Path,
) -> tuple[list[str], list[str], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    texts = (root / "texts.txt").read_text(encoding="utf-8").splitlines()
    qs = (root / "queries.txt").read_text(encoding="utf-8").splitlines()
    return texts, qs, np.load(root / "vectors.npy"), np.load(root / "qvectors.npy")


def _dir_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _top(scores: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.intp]:
    k = min(k, scores.shape[0])
    idx = np.argpartition(-scores, k - 1)[:k]
    return idx[np.argsort(-scores[idx])]


def _merge(text: list[tuple[int, float]], vec: list[tuple[int, float]]) -> list[int]:
    """The weighted merge every system does: BM25 relative to the best, cosine as is."""
    best = max((s for _, s in text), default=0.0) or 1.0
    scores: dict[int, float] = {}
    for i, s in text:
        scores[i] = TEXT_WEIGHT * s / best
    for i, c in vec:
        scores[i] = scores.get(i, 0.0) + VECTOR_WEIGHT * max(c, 0.0)
    return sorted(scores, key=lambda i: -scores[i])[:RESULTS]


def best_pass(passes: Sequence[list[float]]) -> int:
    """The index of the pass with the lowest median latency."""
    return min(range(len(passes)), key=lambda k: percentile(passes[k], 50))


def fastest(passes: Sequence[list[float]]) -> list[float]:
    """Each query's fastest latency over the passes.

    On a shared machine other processes only ever add time, in bursts of a few
    milliseconds: the fastest of a few runs of the same search, spread over minutes and
    interleaved with the other systems', is the best estimate of what it costs.
    """
    return [min(times) for times in zip(*passes, strict=True)]


def _summary(name: str, passes: Sequence[list[float]], qps: float, **extra: Any) -> dict[str, Any]:
    """A system's row: p50/p95 over each query's fastest run, and the p95 of the least
    disturbed pass (what a caller waited, load included)."""
    lat = fastest(passes)
    best = passes[best_pass(passes)]
    return {
        "system": name,
        "p50_ms": percentile(lat, 50),
        "p95_ms": percentile(lat, 95),
        "p95_pass_ms": percentile(best, 95),
        "qps_8": qps,
        **extra,
    }


# -- the worker side of interleaved measurement ---------------------------------------
# Each system runs in a worker process of its own: it builds its index, reports ready,
# then answers the orchestrator's commands, one a line on stdin: "pass NAME" (one
# sequential pass over every query), "qps NAME SECONDS" (``CONCURRENCY`` concurrent
# searchers) and "end" (after which it takes its remaining measurements alone and
# reports them). The orchestrator interleaves the passes of every system, so that a
# burst of load from other processes falls on all of them alike and a ratio compares
# figures taken at the same time.
_MARK = "@@bench "


def send(obj: dict[str, Any]) -> None:
    """One message to the orchestrator (other output on stdout is ignored)."""
    sys.stdout.write(_MARK + json.dumps(obj) + "\n")
    sys.stdout.flush()


def _one_pass(search: Callable[[int], Any], nq: int) -> tuple[list[float], list[Any]]:
    lat, results = [], []
    for i in range(nq):
        t = time.perf_counter()
        results.append(search(i))
        lat.append((time.perf_counter() - t) * 1000.0)
    return lat, results


def _qps(search: Callable[[int], object], nq: int, seconds: float) -> float:
    done = [0] * CONCURRENCY
    stop = time.perf_counter() + seconds

    def loop(slot: int) -> None:
        i = slot
        while time.perf_counter() < stop:
            search(i % nq)
            done[slot] += 1
            i += CONCURRENCY

    threads = [threading.Thread(target=loop, args=(s,)) for s in range(CONCURRENCY)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sum(done) / (time.perf_counter() - t0)


def _parse_command(line: str) -> tuple[str, list[str]]:
    """``"pass NAME"`` / ``"qps NAME SECONDS"`` / ``"end"`` (names may hold spaces)."""
    cmd, _, rest = line.strip().partition(" ")
    if cmd == "qps":
        name, _, seconds = rest.rpartition(" ")
        return cmd, [name, seconds]
    return cmd, [rest]


def serve_commands(
    searches: dict[str, Callable[[int], Any]], nq: int, ready: dict[str, Any]
) -> dict[str, list[Any]]:
    """Warm up, report ready, answer commands until "end"; each search's last results."""
    for search in searches.values():
        for i in range(min(20, nq)):
            search(i)
    send({"ready": list(searches), **ready})
    results: dict[str, list[Any]] = {}
    for line in sys.stdin:
        cmd, args = _parse_command(line)
        if cmd == "pass":
            lat, results[args[0]] = _one_pass(searches[args[0]], nq)
            send({"lat": lat, "load": load()})
        elif cmd == "qps":
            send({"qps": _qps(searches[args[0]], nq, float(args[1])), "load": load()})
        elif cmd == "end":
            break
    return results


async def _qps_async(search: Callable[[int], Awaitable[Any]], nq: int, seconds: float) -> float:
    import trio

    done = [0]
    stop = time.perf_counter() + seconds

    async def loop(slot: int) -> None:
        i = slot
        while time.perf_counter() < stop:
            await search(i % nq)
            done[0] += 1
            i += CONCURRENCY

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for s in range(CONCURRENCY):
            nursery.start_soon(loop, s)
    return done[0] / (time.perf_counter() - t0)


async def serve_commands_async(
    searches: dict[str, Callable[[int], Awaitable[Any]]],
    nq: int,
    ready: dict[str, Any],
    convert: Callable[[Any], Any] = lambda result: result,
) -> dict[str, list[Any]]:
    """:func:`serve_commands` for searches that are awaited (on the worker's Trio loop).

    ``convert`` turns a search's result into what is compared (corpus rows) after the
    clock stops: the floor's searches return rows as they rank, and the benchmark's own
    mapping of a claw hit back to its corpus row is no part of claw's search.
    """
    import trio

    for search in searches.values():
        for i in range(min(20, nq)):
            await search(i)
    send({"ready": list(searches), **ready})
    results: dict[str, list[Any]] = {}
    while line := await trio.to_thread.run_sync(sys.stdin.readline):
        cmd, args = _parse_command(line)
        if cmd == "pass":
            lat, out = [], []
            for i in range(nq):
                t = time.perf_counter()
                out.append(await searches[args[0]](i))
                lat.append((time.perf_counter() - t) * 1000.0)
            results[args[0]] = [convert(r) for r in out]
            send({"lat": lat, "load": load()})
        elif cmd == "qps":
            rate = await _qps_async(searches[args[0]], nq, float(args[1]))
            send({"qps": rate, "load": load()})
        elif cmd == "end":
            break
    return results


# -- fair floor ----------------------------------------------------------------------
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
        bare = []
        for i in range(len(qs)):
            t = time.perf_counter()
            lexical(i, candidates)
            bare.append((time.perf_counter() - t) * 1000.0)
    finally:
        product.close()
    size = _dir_bytes(work) + matrix.nbytes
    floor = {
        "index_mb": size / 2**20,
        "rss_mb": peak_rss_mb(),
        "top": results.get("floor", []),
        "exhaustive": exhaustive,
        "bare_lexical_p50_ms": percentile(bare, 50),
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


# -- the floor of the earlier benchmark ------------------------------------------------
def run_floor_old(root: Path, work: Path) -> None:
    import tantivy

    texts, qs, vecs, qvecs = _load(root)
    t0 = time.perf_counter()
    sb = tantivy.SchemaBuilder()
    sb.add_unsigned_field("id", stored=False, indexed=False, fast=True)
    sb.add_text_field("text", stored=False)
    schema = sb.build()
    index = tantivy.Index(schema, path=str(work))
    searcher = _fill(index, texts, "id")
    matrix = np.ascontiguousarray(vecs, dtype=np.float32)
    build = time.perf_counter() - t0
    parsed = [index.parse_query(q, ["text"]) for q in qs]

    def search(i: int) -> object:
        hits = searcher.search(parsed[i], limit=OLD_CANDIDATES).hits
        ids = searcher.fast_field_values("id", [a for _, a in hits]) if hits else []
        sims = matrix @ qvecs[i]
        top = _top(sims, OLD_CANDIDATES)
        return _merge(
            [(int(d), float(s)) for (s, _), d in zip(hits, ids, strict=True)],
            [(int(j), float(sims[j])) for j in top],
        )

    serve_commands({"floor-old": search}, len(qs), {"build_s": build})
    size = _dir_bytes(work) + matrix.nbytes
    send({"extra": {"floor-old": {"index_mb": size / 2**20, "rss_mb": peak_rss_mb()}}})


# -- SQLite peers --------------------------------------------------------------------
def _fts_match(query: str) -> str:
    terms = ['"' + t.replace('"', '""') + '"' for t in query.split()]
    return " OR ".join(terms)


def _connect(path: Path, *, extension: bool) -> Any:
    import apsw

    conn = apsw.Connection(str(path))
    if extension:
        import sqlite_vec

        conn.enable_load_extension(True)
        conn.load_extension(sqlite_vec.loadable_path())
    return conn


def run_sqlite(root: Path, work: Path, *, vec: bool) -> None:
    name = "fts5+vec" if vec else "fts5+scan"
    try:
        conn = _connect(work / "peer.db", extension=vec)
    except Exception as exc:  # the point is to report why the peer could not run
        send({"error": f"{type(exc).__name__}: {exc}"})
        return
    texts, qs, vecs, qvecs = _load(root)
    t0 = time.perf_counter()
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE VIRTUAL TABLE fts USING fts5(text, tokenize='porter')")
    conn.execute("CREATE TABLE chunks(id INTEGER PRIMARY KEY, text TEXT, embedding BLOB)")
    if vec:
        conn.execute(f"CREATE VIRTUAL TABLE vec USING vec0(embedding float[{DIMS}])")
    with conn:
        for i, text in enumerate(texts):
            blob = vecs[i].tobytes()
            conn.execute("INSERT INTO fts(rowid, text) VALUES (?, ?)", (i, text))
            conn.execute("INSERT INTO chunks VALUES (?, ?, ?)", (i, text, blob))
            if vec:
                conn.execute("INSERT INTO vec(rowid, embedding) VALUES (?, ?)", (i, blob))
    build = time.perf_counter() - t0
    size = sum(_dir_bytes(p) for p in work.glob("peer.db*"))
    candidates = claw_candidates(len(texts))
    local = threading.local()

    def cursor() -> Any:
        c = getattr(local, "conn", None)
        if c is None:
            c = local.conn = _connect(work / "peer.db", extension=vec)
        return c

    def search(i: int) -> object:
        c = cursor()
        text = [
            (int(r), -float(s))
            for r, s in c.execute(
                "SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT ?",
                (_fts_match(qs[i]), candidates),
            )
        ]
        if vec:
            near = [
                (int(r), 1.0 - float(d) ** 2 / 2.0)  # L2 distance of unit vectors -> cosine
                for r, d in c.execute(
                    "SELECT rowid, distance FROM vec WHERE embedding MATCH ? AND k = ?",
                    (qvecs[i].tobytes(), candidates),
                )
            ]
        else:
            rows = list(c.execute("SELECT id, embedding FROM chunks"))
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            m = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(-1, DIMS)
            sims = m @ qvecs[i]
            near = [(int(ids[j]), float(sims[j])) for j in _top(sims, candidates)]
        return _merge(text, near)

    serve_commands({name: search}, len(qs), {"build_s": build})
    send({"extra": {name: {"index_mb": size / 2**20, "rss_mb": peak_rss_mb()}}})


# -- claw ----------------------------------------------------------------------------
class CorpusVectors:
    """An embedding provider serving the corpus vectors (unknown text: a seeded vector)."""

    id = "bench-vectors"
    model = "zipf-word-sum"
    dims = DIMS
    max_input_bytes = 64 * 1024

    def __init__(self, texts: Sequence[str], vecs: npt.NDArray[np.float32]) -> None:
        self._row = {t: i for i, t in enumerate(texts)}
        self._vecs = vecs

    def lookup(self, text: str) -> npt.NDArray[np.float32]:
        row = self._row.get(text)
        if row is not None:
            return self._vecs[row]
        return _unknown_vector(text)

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import trio

        await trio.lowlevel.checkpoint()
        return np.stack([self.lookup(t) for t in texts]).astype(np.float32)


def _unknown_vector(text: str) -> npt.NDArray[np.float32]:
    seed = int.from_bytes(text.encode()[:64].ljust(8, b"\0")[:8], "little") ^ len(text)
    v = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
    out: npt.NDArray[np.float32] = v / np.linalg.norm(v)
    return out


class StoredCorpusVectors(CorpusVectors):
    """:class:`CorpusVectors` that holds no copy of the corpus: a sorted array of the
    texts' hashes maps a text to its row, read from ``vectors.npy`` with ``pread`` (the
    page cache, not this process's memory), so claw's peak RSS is claw's own (at 1M
    chunks a list of the texts and an in-memory matrix added about 4 GiB to it).
    ``chunks=False``: the queries only."""

    def __init__(self, root: Path, *, chunks: bool = True) -> None:
        qs = (root / "queries.txt").read_text(encoding="utf-8").splitlines()
        super().__init__(qs, np.load(root / "qvectors.npy"))
        hashes = np.fromiter((hash(t) for t in _text_lines(root)) if chunks else (), dtype=np.int64)
        order = np.argsort(hashes, kind="stable")
        self._hashes, self._rows = hashes[order], order
        with (root / "vectors.npy").open("rb") as f:
            np.lib.format.read_magic(f)
            np.lib.format.read_array_header_1_0(f)
            self._offset = f.tell()
        self._fd = os.open(root / "vectors.npy", os.O_RDONLY)

    def lookup(self, text: str) -> npt.NDArray[np.float32]:
        row = self._row.get(text)
        if row is not None:
            return self._vecs[row]
        h = hash(text)
        i = int(np.searchsorted(self._hashes, h))
        if i < len(self._hashes) and int(self._hashes[i]) == h:
            row = int(self._rows[i])
            raw = os.pread(self._fd, DIMS * 4, self._offset + row * DIMS * 4)
            return np.frombuffer(raw, dtype=np.float32)
        return _unknown_vector(text)

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """:meth:`lookup` of every text, the hash search done for all at once (its
        per-text cost would be counted in claw's build CPU)."""
        import trio

        await trio.lowlevel.checkpoint()
        out = np.empty((len(texts), DIMS), dtype=np.float32)
        if not len(self._hashes):
            for i, text in enumerate(texts):
                out[i] = self.lookup(text)
            return out
        hashes = np.fromiter((hash(t) for t in texts), dtype=np.int64, count=len(texts))
        at = np.minimum(np.searchsorted(self._hashes, hashes), len(self._hashes) - 1)
        found = self._hashes[at] == hashes
        rows = self._rows[at]
        for i, text in enumerate(texts):
            query_row = self._row.get(text)
            if query_row is not None:
                out[i] = self._vecs[query_row]
            elif found[i]:
                raw = os.pread(self._fd, DIMS * 4, self._offset + int(rows[i]) * DIMS * 4)
                out[i] = np.frombuffer(raw, dtype=np.float32)
            else:
                out[i] = _unknown_vector(text)
        return out


def _text_lines(root: Path) -> Iterator[str]:
    """The corpus texts one at a time (``texts.txt`` is never read whole)."""
    with (root / "texts.txt").open(encoding="utf-8") as f:
        for line in f:
            yield line.rstrip("\n")


def _write_workspace(ws: Path, texts: Iterable[str]) -> list[Path]:
    files = []
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    it = iter(texts)
    for f in itertools.count():
        part = list(itertools.islice(it, CHUNKS_PER_FILE))
        if not part:
            break
        path = ws / "memory" / f"notes-{f:05d}.md"
        path.write_text("\n".join(part) + "\n", encoding="utf-8")
        files.append(path)
    return files


def _claw_config(ws: Path, state: Path, candidates: int | None, shipped: bool = False) -> Any:
    """claw's configuration: the first ranking stage alone (what the floor and the
    exhaustive reference compute), or with ``shipped`` every ranking default as shipped
    (the second, coverage stage included); ``candidates`` fixes the candidate count."""
    import claw

    return claw.HostConfig(
        workspace_dir=ws,
        state_dir=state,
        plugins=claw.PluginsConfig(
            discover=False,
            entries={
                "memory-core": claw.PluginEntryConfig(
                    config=_memory_core_config(candidates, shipped)
                )
            },
        ),
    )


def _memory_core_config(candidates: int | None, shipped: bool = False) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "embedder": "bench-vectors",
        "sources": ["memory"],
        "chunk_tokens": CHUNK_TOKENS,
        "chunk_overlap": 0,
        "vector_weight": VECTOR_WEIGHT,
        "text_weight": TEXT_WEIGHT,
    }
    if not shipped:
        # The second, coverage stage re-scores the head of the ranking.
        settings.update(coverage_weight=0.0, near_coverage_weight=0.0, far_coverage_weight=0.0)
    if OPTIONS["approximate_rows"]:
        settings["approximate_rows"] = OPTIONS["approximate_rows"]
    if candidates is not None:
        if candidates % RESULTS:
            raise SystemExit(f"--sweep: candidate counts must be multiples of {RESULTS}")
        settings["candidate_multiplier"] = candidates // RESULTS
        settings["candidate_growth"] = 0.0
    return settings


# How many queries the second reader searches (each once, hybrid).
SECOND_READER_QUERIES = 100


def _memory_status() -> dict[str, float]:
    """This process's memory now, MiB: ``VmRSS``/``VmHWM`` and their anonymous and
    file-backed parts, and from ``smaps_rollup`` the pages only this process maps
    (``private``) and those it shares with another (``shared``: the writer's matrix)."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) / 1024.0
    with contextlib.suppress(OSError):
        private = shared = 0
        for line in Path("/proc/self/smaps_rollup").read_text(encoding="ascii").splitlines():
            key, _, value = line.partition(":")
            if key in ("Private_Clean", "Private_Dirty"):
                private += int(value.split()[0])
            elif key in ("Shared_Clean", "Shared_Dirty"):
                shared += int(value.split()[0])
        out["private"], out["shared"] = private / 1024.0, shared / 1024.0
    return out


def run_second_reader(root: Path, index_dir: Path, workspace: Path) -> None:
    """A second process reading the index another process published and still holds:
    it opens it read-only (no sync, no writer lease) and searches; it reports its memory
    above its own baseline, taken after its imports and before the open."""
    import trio

    from claw.plugin_sdk import ThreadWorkerPool
    from claw_memory._index import open_memory_index
    from claw_memory._plugin import MemoryCoreConfig

    qs = (root / "queries.txt").read_text(encoding="utf-8").splitlines()
    vectors = StoredCorpusVectors(root, chunks=False)
    settings = attrs.evolve(
        MemoryCoreConfig.from_mapping(_memory_core_config(None)).settings,
        sync_on_open=False,
        sync_on_search=False,
    )

    async def main() -> dict[str, Any]:
        before = _memory_status()
        t = time.perf_counter()
        async with open_memory_index(
            workspace_dir=workspace,
            index_dir=index_dir,
            workers=ThreadWorkerPool(max_workers=2),
            settings=settings,
            embedder=vectors,
        ) as index:
            opened = time.perf_counter() - t
            lat = []
            for q in qs[:SECOND_READER_QUERIES]:
                t = time.perf_counter()
                res = await index.search(q, max_results=RESULTS, min_score=0.0)
                lat.append((time.perf_counter() - t) * 1000.0)
                assert res.hits, "the second reader found nothing for a corpus query"
            after = _memory_status()
            chunks = index.status().chunks
        return {
            "open_s": opened,
            "p50_ms": percentile(lat, 50),
            "chunks": chunks,
            "before": before,
            "after": after,
            "load": load(),
        }

    print(json.dumps(trio.run(main)), flush=True)


def _second_reader(root: Path, state: Path, workspace: Path) -> dict[str, Any]:
    """Run :func:`run_second_reader` in a fresh interpreter on the index under ``state``."""
    (pointer,) = list(state.glob("memory/*/CURRENT"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.search_latency",
            "--worker",
            "second-reader",
            "--root",
            str(root),
            "--index-dir",
            str(pointer.parent),
            "--workspace",
            str(workspace),
            "--approximate-rows",
            str(OPTIONS["approximate_rows"]),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
    )
    if done.returncode != 0:
        return {"second_reader_error": done.stderr.strip().splitlines()[-1:]}
    out = json.loads(done.stdout.strip().splitlines()[-1])
    before, after = out["before"], out["after"]
    return {
        # Memory the second process adds to the machine: pages only it maps (its
        # Python objects, columns, tantivy readers), above its own pre-open baseline.
        "second_reader_rss_mib": after["private"] - before["private"],
        # Its plain VmRSS growth, which also counts the pages of the writer's matrix
        # it maps (shared, one copy in the page cache).
        "second_reader_vmrss_mib": after["VmRSS"] - before["VmRSS"],
        "second_reader_shared_mib": after["shared"] - before["shared"],
        "second_reader_open_s": out["open_s"],
        "second_reader_p50_ms": out["p50_ms"],
        "second_reader_chunks": out["chunks"],
        "second_reader_load": out["load"],
    }


def _hit_row(hit: Any) -> int:
    """The corpus row of a claw hit: files hold ``CHUNKS_PER_FILE`` rows, one a line."""
    citation = hit.citation
    number = int(Path(citation.path).stem.rsplit("-", 1)[1])
    return number * CHUNKS_PER_FILE + citation.start_line - 1


def run_claw(
    root: Path,
    work: Path,
    *,
    reindex_runs: int,
    sweep: Sequence[int],
    shipped: bool = False,
    baseline: bool = False,
) -> None:
    """claw through the provider handle; ``shipped``: the shipped ranking defaults (its
    own index and process), hybrid only, without the sweep and the change runs;
    ``baseline``: the claw of ``--baseline`` (this process imports it), hybrid and
    lexical as for ``claw``, without the second reader, the sweep and the change runs."""
    import contextlib

    import trio

    import claw
    import claw_memory
    from claw.plugin_sdk import Plugin, PluginContracts

    qs = (root / "queries.txt").read_text(encoding="utf-8").splitlines()
    vectors = StoredCorpusVectors(root)
    bench_plugin = Plugin(
        id="bench-vectors",
        name="benchmark vectors",
        version="0",
        register=lambda api: api.register_embedding_provider(vectors),
        contracts=PluginContracts(embedding_providers=("bench-vectors",)),
    )
    ws = work / "workspace"
    files = _write_workspace(ws, _text_lines(root))
    total = len(files) and sum(1 for _ in _text_lines(root))
    default = claw_candidates(total)
    hybrid: dict[str, Any] = {"candidates": default}
    name = "claw hybrid shipped" if shipped else "claw hybrid"
    lexical = "claw lexical"
    if baseline:
        name, lexical = f"{name} {BASELINE_TAG}", f"{lexical} {BASELINE_TAG}"

    @contextlib.asynccontextmanager
    async def handle_of(candidates: int | None) -> Any:
        config = _claw_config(ws, work / "state", candidates, shipped)
        plugins = [claw_memory.plugin, bench_plugin]
        async with claw.open_host(config, plugins=plugins) as host, host.open_scope("b") as scope:
            ctx = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
            async with host.memory.open(ctx) as handle:
                yield handle

    async def main() -> None:
        async with handle_of(None) as handle:
            t0 = time.perf_counter()
            cpu0 = _cpu_s()
            first = await handle.search(_request(qs[0]))
            build = time.perf_counter() - t0
            hybrid["build_cpu_s"] = _cpu_s() - cpu0
            assert first.hits, "claw found nothing for a corpus query"
            chunks = _chunk_count(await handle.health(), total)
            requests = {name: [_request(q) for q in qs]}
            if not shipped:
                requests[lexical] = [_request(q, lexical=True) for q in qs]

            def searcher(kind: str) -> Callable[[int], Awaitable[Any]]:
                async def search(i: int) -> Any:
                    return await handle.search(requests[kind][i])

                return search

            results = await serve_commands_async(
                {kind: searcher(kind) for kind in requests},
                len(qs),
                {"build_s": build, "chunks": chunks},
                convert=lambda res: [_hit_row(h) for h in res.hits],
            )
            if not shipped and not baseline:
                # While this process holds the index open (its matrix mapped).
                hybrid.update(
                    await trio.to_thread.run_sync(_second_reader, root, work / "state", ws)
                )
        hybrid["top"] = results.get(name, [])
        if shipped or baseline:
            return
        hybrid["sweep"] = await _sweep(handle_of, qs, sweep)
        if reindex_runs:
            async with handle_of(None) as handle:
                hybrid.update(await _change_costs(handle, files, qs, reindex_runs))

    trio.run(main)
    common = {"index_mb": _dir_bytes(work / "state") / 2**20, "rss_mb": peak_rss_mb()}
    extra = {name: {**hybrid, **common}}
    if not shipped:
        extra[lexical] = common
    send({"extra": extra})


def _cpu_s() -> float:
    """CPU seconds this process used so far, every thread (on a loaded machine the
    build's wall time mostly measures waiting for a core or the disk)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _chunk_count(health: Any, default: int) -> int:
    """The chunk count a provider's health reports, if it reports one."""
    for source in (getattr(health, "details", None), getattr(health, "index", None)):
        if isinstance(source, dict) and isinstance(source.get("chunks"), int):
            return int(source["chunks"])
    return default


def _request(query: str, lexical: bool = False, results: int = RESULTS) -> Any:
    from claw.memory import MemorySearchRequest

    return MemorySearchRequest(
        query=query, max_results=results, min_score=0.0, lexical_only=lexical
    )


async def _sweep(
    handle_of: Callable[[int | None], Any], qs: Sequence[str], counts: Sequence[int]
) -> list[dict[str, Any]]:
    """claw's hybrid latency and top rows at each candidate count.

    Each count, the default too, gets a freshly opened index for each of
    ``OPTIONS["passes"]`` rounds, the counts interleaved, and reports its best pass.
    """
    requests = [_request(q) for q in qs]
    passes: dict[int, list[list[float]]] = {c: [] for c in counts}
    loads: dict[int, list[float]] = {c: [] for c in counts}
    tops: dict[int, list[list[int]]] = {}
    reopen: list[float] = []
    for _ in range(OPTIONS["passes"]):
        for c in counts:
            t = time.perf_counter()
            async with handle_of(c) as handle:
                await handle.search(requests[0])
                reopen.append(time.perf_counter() - t)
                for r in requests[:20]:
                    await handle.search(r)
                lat, top = [], []
                for r in requests:
                    t = time.perf_counter()
                    res = await handle.search(r)
                    lat.append((time.perf_counter() - t) * 1000.0)
                    top.append([_hit_row(h) for h in res.hits])
            passes[c].append(lat)
            loads[c].append(load())
            tops[c] = top
    out = []
    for c in counts:
        lat = fastest(passes[c])
        out.append(
            {
                "candidates": c,
                "p50_ms": percentile(lat, 50),
                "p95_ms": percentile(lat, 95),
                "load": max(loads[c]),
                "top": tops[c],
                "reopen_s": percentile(reopen, 50),
            }
        )
    return out


async def _change_costs(
    handle: Any, files: Sequence[Path], qs: Sequence[str], runs: int
) -> dict[str, Any]:
    """What one changed file costs the searches around it.

    Each run changes one line of one file, then issues a hybrid search (the one that
    notices the change; it starts the sync), then a hybrid search every
    ``DURING_SYNC_GAP`` (a client searching now and then). A search that carries the
    provider's warning answered from the generation before the change: it arrived
    during the sync. The first without one is the next search after the publication;
    a lexical search for the new word then finds it (the time from the write until
    then is when the change was searchable). With a sync that runs inline the noticing
    search carries no warning and the next search comes at once.
    """
    import trio

    for q in qs[:10]:
        await handle.search(_request(q))  # primes the freshness watch of this handle
    notice: list[float] = []
    warned: list[bool] = []
    during: list[float] = []
    after: list[float] = []
    searchable: list[float] = []
    for run in range(runs):
        path = files[(run * 7919) % len(files)]
        lines = path.read_text(encoding="utf-8").splitlines()
        marker = f"zqxmarker{run}"
        lines[run % len(lines)] = lines[run % len(lines)] + " " + marker
        t_write = time.perf_counter()
        await trio.to_thread.run_sync(path.write_text, "\n".join(lines) + "\n", "utf-8")
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000 * (run + 1)))
        t = time.perf_counter()
        res = await handle.search(_request(qs[(3 * run) % len(qs)]))
        notice.append((time.perf_counter() - t) * 1000.0)
        warned.append(res.warning is not None)
        behind = res.warning is not None
        i = 3 * run + 1
        deadline = time.perf_counter() + 120.0
        while behind:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"the change to {path.name} was never published")
            await trio.sleep(DURING_SYNC_GAP)
            t = time.perf_counter()
            res = await handle.search(_request(qs[i % len(qs)]))
            elapsed = (time.perf_counter() - t) * 1000.0
            i += 1
            behind = res.warning is not None
            if behind:
                during.append(elapsed)
            else:
                after.append(elapsed)
        if not warned[-1]:
            t = time.perf_counter()
            await handle.search(_request(qs[i % len(qs)]))
            after.append((time.perf_counter() - t) * 1000.0)
        found = await handle.search(_request(marker, lexical=True, results=1))
        if not found.hits:
            raise RuntimeError(f"the next search after the sync missed the change to {path.name}")
        searchable.append((time.perf_counter() - t_write) * 1000.0)
    return {
        "change_search_ms": percentile(notice, 50),
        "change_search_max_ms": max(notice),
        # Kept for the acceptance checks: every run now has searches during the sync.
        "change_search_with_traffic_ms": percentile(notice, 50),
        "change_search_warned": sum(warned) / len(warned),
        "during_sync_p50_ms": percentile(during, 50),
        "during_sync_max_ms": max(during, default=float("nan")),
        "during_sync_searches": len(during),
        "next_search_ms": percentile(after, 50),
        "next_search_max_ms": max(after, default=float("nan")),
        "reindex_ms": percentile(searchable, 50),
        "change_load": load(),
    }


# -- orchestration -------------------------------------------------------------------
def worker(system: str, root: Path, reindex_runs: int, sweep: Sequence[int]) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"claw-bench-{system.replace('+', '-')}-"))
    try:
        if system in ("claw", "claw-shipped", "claw-baseline"):
            run_claw(
                root,
                work,
                reindex_runs=reindex_runs,
                sweep=sweep,
                shipped=system == "claw-shipped",
                baseline=system == "claw-baseline",
            )
        elif system in ("floor", "floor-old"):
            (work / "tantivy").mkdir()
            run = run_floor if system == "floor" else run_floor_old
            run(root, work / "tantivy")
        elif system == "fts5+vec":
            run_sqlite(root, work, vec=True)
        elif system == "fts5+scan":
            run_sqlite(root, work, vec=False)
        else:
            raise SystemExit(f"unknown system {system!r}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


# The suffix of the baseline's rows ("claw hybrid (baseline)").
BASELINE_TAG = "(baseline)"


def _baseline_tree(checkout: Path, into: Path) -> Path:
    """A directory whose packages are ``checkout``'s, except this benchmark's own code.

    The baseline worker runs there (its current directory comes first on its import
    path), so it imports the claw, Memory Core and SDK of the earlier commit but
    measures them with this benchmark (same corpus, timing and conversions).
    """
    into.mkdir()
    for entry in checkout.iterdir():
        if (entry / "__init__.py").is_file() and entry.name != "benchmarks":
            (into / entry.name).symlink_to(entry.resolve())
    if not (into / "claw").exists():
        raise SystemExit(f"--baseline {checkout}: no claw package there")
    (into / "benchmarks").symlink_to(Path(__file__).resolve().parent)
    return into


class WorkerFailed(Exception):
    """A worker process exited or reported an error instead of answering."""


class _Worker:
    """One system's worker process and its command channel (see :func:`serve_commands`)."""

    def __init__(
        self,
        system: str,
        argv: Sequence[str],
        env: dict[str, str],
        log: Path,
        cwd: Path | None = None,
    ) -> None:
        self.system = system
        self._log = log
        with log.open("w", encoding="utf-8") as err:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env,
                cwd=cwd,
            )

    def receive(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith(_MARK):
                message: dict[str, Any] = json.loads(line[len(_MARK) :])
                if "error" in message:
                    raise WorkerFailed(message["error"])
                return message
        self._proc.wait()
        tail = self._log.read_text(encoding="utf-8").strip().splitlines()
        print("\n".join(tail), file=sys.stderr)
        raise WorkerFailed(tail[-1] if tail else f"exited with {self._proc.returncode}")

    def ask(self, command: str) -> dict[str, Any]:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            pass  # receive() reports why it exited
        return self.receive()

    def close(self) -> None:
        if self._proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def run_all(
    chunks: int,
    queries: int,
    seconds: float,
    systems: Sequence[str],
    *,
    reindex_runs: int,
    sweep: Sequence[int],
    baseline: Path | None = None,
) -> list[dict[str, Any]]:
    """Run every system in a fresh interpreter of its own (its RSS is its own).

    The workers build one after the other (each build alone), then take their
    sequential passes and their QPS runs in turns, then their remaining measurements
    one after the other. With ``baseline`` (a checkout of an earlier commit) the system
    ``claw-baseline`` measures that checkout's claw beside this one's.
    """
    rows: list[dict[str, Any]] = []
    passes = OPTIONS["passes"]
    with contextlib.ExitStack() as stack:
        corpus = OPTIONS.get("corpus")
        if corpus:
            # A corpus kept between runs (the 1M one takes minutes to make); it is
            # made there on the first run.
            root = Path(str(corpus))
            root.mkdir(parents=True, exist_ok=True)
        else:
            tmp = tempfile.TemporaryDirectory(prefix="claw-bench-corpus-")
            root = Path(stack.enter_context(tmp))
        t0 = time.perf_counter()
        if not _prepared(root, chunks, queries):
            prepare(root, chunks, queries)
        print(
            f"corpus: {chunks} chunks, {queries} queries in {time.perf_counter() - t0:.1f} s",
            file=sys.stderr,
        )
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0")
        workers: dict[str, tuple[_Worker, dict[str, Any]]] = {}
        failed: dict[str, str] = {}

        def attempt(system: str, step: Callable[[], None]) -> None:
            try:
                step()
            except WorkerFailed as exc:
                failed[system] = str(exc)
                workers.pop(system)[0].close()

        for system in systems:
            argv = [
                sys.executable,
                "-m",
                "benchmarks.search_latency",
                "--worker",
                system,
                "--root",
                str(root),
                "--reindex-runs",
                str(reindex_runs),
                "--sweep",
                ",".join(str(c) for c in sweep),
                "--passes",
                str(passes),
                "--approximate-rows",
                str(OPTIONS["approximate_rows"]),
            ]
            cwd = None
            worker_env = env
            if system == "claw-baseline":
                if baseline is None:
                    raise SystemExit("the claw-baseline system needs --baseline DIR")
                cwd = _baseline_tree(baseline, root / "baseline")
                worker_env = dict(env, PYTHONPATH=str(cwd))
            log = root / f"{system.replace('+', '-')}.log"
            w = _Worker(system, argv, worker_env, log, cwd=cwd)
            workers[system] = (w, {})
            attempt(system, lambda w=w, system=system: workers[system][1].update(w.receive()))
        lat: dict[str, list[list[float]]] = collections.defaultdict(list)
        loads: dict[str, list[float]] = collections.defaultdict(list)
        qps: dict[str, float] = {}

        def measure(system: str, name: str, command: str) -> None:
            if system not in workers:
                return  # it failed earlier in this round
            answer = workers[system][0].ask(command)
            if "lat" in answer:
                lat[name].append(answer["lat"])
                loads[name].append(answer["load"])
            else:
                qps[name] = max(qps.get(name, 0.0), answer["qps"])

        for command in ["pass"] * passes + ["qps"] * passes:
            for system in list(workers):
                for name in workers[system][1]["ready"]:
                    extra = f" {seconds / passes}" if command == "qps" else ""
                    attempt(
                        system,
                        lambda s=system, n=name, c=f"{command} {name}{extra}": measure(s, n, c),
                    )
        for system in list(workers):
            w, ready = workers[system]
            info = {k: v for k, v in ready.items() if k != "ready"}

            def finish(w: _Worker = w, ready: dict[str, Any] = ready, info: Any = info) -> None:
                extra = w.ask("end")["extra"]
                for name in ready["ready"]:
                    rows.append(
                        _summary(
                            name,
                            lat[name],
                            qps.get(name, float("nan")),
                            load=max(loads[name]),
                            **info,
                            **extra.get(name, {}),
                        )
                    )

            attempt(system, finish)
            if system in workers:
                workers.pop(system)[0].close()
        rows.extend({"system": s, "error": e} for s, e in failed.items())
    return rows


def overlap_at10(tops: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> float:
    """Mean share of each query's reference top 10 that ``tops`` also has in its top 10."""
    shares = []
    for got, want in zip(tops, reference, strict=True):
        ref = set(want[:RESULTS])
        if ref:
            shares.append(len(ref & set(got[:RESULTS])) / len(ref))
    return sum(shares) / len(shares) if shares else float("nan")


def summarise(rows: Sequence[dict[str, Any]], chunks: int) -> dict[str, Any]:
    by = {r["system"]: r for r in rows}
    hybrid = by.get("claw hybrid", {})
    shipped = by.get("claw hybrid shipped", {})
    base_hybrid = by.get(f"claw hybrid {BASELINE_TAG}", {})
    base_lexical = by.get(f"claw lexical {BASELINE_TAG}", {})
    lexical = by.get("claw lexical", {})
    floor = by.get("floor", {})
    exact_floor = by.get("floor exact", {})
    old = by.get("floor-old", {})
    peers = [by[p] for p in ("fts5+vec", "fts5+scan") if p in by and "p50_ms" in by[p]]
    peer = min(peers, key=lambda r: r["p50_ms"]) if peers else {}
    nan = float("nan")
    n = hybrid.get("chunks", chunks)
    exhaustive = floor.get("exhaustive")
    sweep = []
    points = hybrid.get("sweep", ())
    default_p50 = next(
        (p["p50_ms"] for p in points if p["candidates"] == hybrid.get("candidates")),
        hybrid.get("p50_ms", nan),
    )
    for point in hybrid.get("sweep", ()):
        sweep.append(
            {
                "candidates": point["candidates"],
                "p50_ms": point["p50_ms"],
                "overlap_exhaustive_at10": overlap_at10(point["top"], exhaustive)
                if exhaustive
                else nan,
                "p50_over_default": point["p50_ms"] / default_p50,
                "load": point.get("load", hybrid.get("load", nan)),
            }
        )
    out: dict[str, Any] = {
        "chunks": n,
        "claw_hybrid_p50_ms": hybrid.get("p50_ms", nan),
        # What a caller waited (the least disturbed pass, load included).
        "claw_hybrid_p95_ms": hybrid.get("p95_pass_ms", nan),
        "claw_hybrid_p95_fastest_ms": hybrid.get("p95_ms", nan),
        "claw_hybrid_qps": hybrid.get("qps_8", nan),
        "claw_lexical_p50_ms": lexical.get("p50_ms", nan),
        "claw_candidates": hybrid.get("candidates"),
        "floor_p50_ms": floor.get("p50_ms", nan),
        "floor_qps": floor.get("qps_8", nan),
        "floor_old_p50_ms": old.get("p50_ms", nan),
        "bare_lexical_p50_ms": floor.get("bare_lexical_p50_ms", nan),
        "peer_p50_ms": peer.get("p50_ms", nan),
        "peer": peer.get("system"),
        "reindex_ms": hybrid.get("reindex_ms", nan),
        "change_search_ms": hybrid.get("change_search_ms", nan),
        "change_search_max_ms": hybrid.get("change_search_max_ms", nan),
        "change_search_with_traffic_ms": hybrid.get("change_search_with_traffic_ms", nan),
        "during_sync_p50_ms": hybrid.get("during_sync_p50_ms", nan),
        "during_sync_max_ms": hybrid.get("during_sync_max_ms", nan),
        "during_sync_searches": hybrid.get("during_sync_searches", 0),
        "next_search_ms": hybrid.get("next_search_ms", nan),
        "next_search_max_ms": hybrid.get("next_search_max_ms", nan),
        "change_search_warned": hybrid.get("change_search_warned", nan),
        "claw_shipped_p50_ms": shipped.get("p50_ms", nan),
        "claw_shipped_p95_ms": shipped.get("p95_pass_ms", nan),
        "claw_shipped_qps": shipped.get("qps_8", nan),
        "claw_shipped_peak_rss_mib": shipped.get("rss_mb", nan),
        "claw_baseline_hybrid_p50_ms": base_hybrid.get("p50_ms", nan),
        "claw_baseline_hybrid_qps": base_hybrid.get("qps_8", nan),
        "claw_baseline_lexical_p50_ms": base_lexical.get("p50_ms", nan),
        "overlap_exhaustive_at10": overlap_at10(hybrid["top"], exhaustive)
        if exhaustive and "top" in hybrid
        else nan,
        "floor_overlap_exhaustive_at10": overlap_at10(floor["top"], exhaustive)
        if exhaustive
        else nan,
        # Above claw's row threshold the fair floor scans the same sketch as claw; the
        # exact floor (the full product) is then its own row.
        "vector_stage_approximate": floor.get("approximate", False),
        "rescored_rows": floor.get("rescored_rows", nan),
        "vector_recall_at10": floor.get("vector_recall_at10", nan),
        "vector_recall_at_candidates": floor.get("vector_recall_at_candidates", nan),
        "exact_floor_p50_ms": exact_floor.get("p50_ms", floor.get("p50_ms", nan)),
        "exact_floor_overlap_exhaustive_at10": overlap_at10(exact_floor["top"], exhaustive)
        if exhaustive and "top" in exact_floor
        else nan,
        "candidate_sweep": sweep,
        "claw_peak_rss_mib": hybrid.get("rss_mb", nan),
        "floor_peak_rss_mib": floor.get("rss_mb", nan),
        "build_us_per_chunk": hybrid.get("build_s", nan) * 1e6 / n,
        "index_bytes_per_chunk": hybrid.get("index_mb", nan) * 2**20 / n,
        "rss_bytes_per_chunk": hybrid.get("rss_mb", nan) * 2**20 / n,
        "claw_build_s": hybrid.get("build_s", nan),
        "claw_build_cpu_s": hybrid.get("build_cpu_s", nan),
        "second_reader_rss_mib": hybrid.get("second_reader_rss_mib", nan),
        "second_reader_vmrss_mib": hybrid.get("second_reader_vmrss_mib", nan),
        "second_reader_shared_mib": hybrid.get("second_reader_shared_mib", nan),
        "second_reader_open_s": hybrid.get("second_reader_open_s", nan),
        "second_reader_p50_ms": hybrid.get("second_reader_p50_ms", nan),
        "second_reader_load": hybrid.get("second_reader_load", nan),
        "hybrid_us_per_1k_chunks": hybrid.get("p50_ms", nan) * 1e6 / n,
        "load": {r["system"]: r.get("load", nan) for r in rows},
        "machine": machine(),
    }
    out["systems"] = [
        {k: v for k, v in r.items() if k not in ("top", "exhaustive", "sweep")} for r in rows
    ]
    out["claw_over_fair_floor"] = out["claw_hybrid_p50_ms"] / out["floor_p50_ms"]
    out["claw_over_exact_floor"] = out["claw_hybrid_p50_ms"] / out["exact_floor_p50_ms"]
    out["claw_shipped_over_fair_floor"] = out["claw_shipped_p50_ms"] / out["floor_p50_ms"]
    out["fair_floor_over_claw_shipped_qps"] = out["floor_qps"] / out["claw_shipped_qps"]
    out["fair_floor_over_claw_qps"] = out["floor_qps"] / out["claw_hybrid_qps"]
    out["claw_over_floor"] = out["claw_hybrid_p50_ms"] / out["floor_old_p50_ms"]
    out["peer_over_claw"] = out["peer_p50_ms"] / out["claw_hybrid_p50_ms"]
    out["claw_lexical_over_bare"] = out["claw_lexical_p50_ms"] / out["bare_lexical_p50_ms"]
    # This checkout against --baseline's, in the same run (below 1: this one is faster).
    out["claw_over_baseline"] = out["claw_hybrid_p50_ms"] / out["claw_baseline_hybrid_p50_ms"]
    out["claw_lexical_over_baseline"] = (
        out["claw_lexical_p50_ms"] / out["claw_baseline_lexical_p50_ms"]
    )
    out["baseline_over_claw_qps"] = out["claw_baseline_hybrid_qps"] / out["claw_hybrid_qps"]
    out["baseline_over_fair_floor"] = out["claw_baseline_hybrid_p50_ms"] / out["floor_p50_ms"]
    out["baseline_lexical_over_bare"] = (
        out["claw_baseline_lexical_p50_ms"] / out["bare_lexical_p50_ms"]
    )
    out["change_search_over_plain"] = out["change_search_ms"] / out["claw_hybrid_p50_ms"]
    return out


def _approximate_rows() -> int:
    from claw_memory._ranking import APPROXIMATE_ROWS

    return APPROXIMATE_ROWS


def _verdict(value: float, limit: float, *, at_least: bool = False) -> str:
    if math.isnan(value):
        return "not measured"
    ok = value >= limit if at_least else value <= limit
    return f"target {'>=' if at_least else '<='} {limit:g}: {'met' if ok else 'missed'}"


def _at_1m(summary: dict[str, Any], value: float, limit: float) -> str:
    """The verdict of a target of issue 16 that is set for an index of 1M chunks."""
    if summary["chunks"] < 1_000_000:
        return f"the 1M target is <= {limit:g}"
    return _verdict(value, limit)


def report(summary: dict[str, Any], rows: Sequence[dict[str, Any]], queries: int) -> None:
    """The human part of the output: the table, then one line per target."""
    s = summary
    headers = [
        "system",
        "p50 ms",
        "p95 ms",
        "p95 pass",
        "QPS x8",
        "build s",
        "RSS MiB",
        "index MiB",
        "load",
    ]
    body = []
    for r in rows:
        if "error" in r:
            body.append([r["system"], "error: " + str(r["error"]), *[""] * 7])
            continue
        body.append(
            [
                r["system"],
                r["p50_ms"],
                r["p95_ms"],
                r["p95_pass_ms"],
                r["qps_8"],
                r["build_s"],
                r["rss_mb"],
                r["index_mb"],
                r.get("load", float("nan")),
            ]
        )
    print(
        f"search latency: {s['chunks']} chunks, {queries} queries, top {RESULTS}, "
        f"claw's default {s['claw_candidates']} candidates "
        "(each system in a fresh process; p50/p95 of each query's fastest of "
        f"{OPTIONS['passes']} interleaved passes, p95 pass = p95 of the least disturbed pass; "
        "load = highest 1-minute load average seen during the passes)"
    )
    print(table(headers, body))
    print(
        f"fair floor: claw_over_fair_floor {s['claw_over_fair_floor']:.2f} (p50, "
        f"{_verdict(s['claw_over_fair_floor'], 1.1)}), fair_floor_over_claw_qps "
        f"{s['fair_floor_over_claw_qps']:.2f} ({_verdict(s['fair_floor_over_claw_qps'], 1.1)}); "
        f"old floor: claw_over_floor {s['claw_over_floor']:.2f}; "
        f"peer_over_claw {s['peer_over_claw']:.1f} ({s['peer']})"
    )
    print(
        "as shipped (the second, coverage stage on; not the floor's ranking function): "
        f"claw_shipped_over_fair_floor {s['claw_shipped_over_fair_floor']:.2f} (p50 "
        f"{s['claw_shipped_p50_ms']:.2f} ms), fair_floor_over_claw_shipped_qps "
        f"{s['fair_floor_over_claw_shipped_qps']:.2f}"
    )
    print(
        f"candidate cut: overlap_exhaustive_at10 {s['overlap_exhaustive_at10']:.3f} "
        f"({_verdict(s['overlap_exhaustive_at10'], 0.97, at_least=True)}); "
        f"the fair floor {s['floor_overlap_exhaustive_at10']:.3f}"
    )
    if s["vector_stage_approximate"]:
        print(
            f"vector stage (>= {_approximate_rows():,} rows): a sign-bit sketch scan, then the "
            f"exact cosine of its nearest {s['rescored_rows']} rows (claw and the fair floor "
            f"alike); its recall of the exact vector top {RESULTS}: "
            f"{s['vector_recall_at10']:.3f}, of the exact top {s['claw_candidates']}: "
            f"{s['vector_recall_at_candidates']:.3f}; the exact floor (full product) "
            f"p50 {s['exact_floor_p50_ms']:.2f} ms, overlap_exhaustive_at10 "
            f"{s['exact_floor_overlap_exhaustive_at10']:.3f}, claw_over_exact_floor "
            f"{s['claw_over_exact_floor']:.2f}"
        )
    if s["candidate_sweep"]:
        print(
            table(
                ["candidates", "p50 ms", "overlap@10", "p50 / default", "load"],
                [
                    [
                        p["candidates"],
                        p["p50_ms"],
                        p["overlap_exhaustive_at10"],
                        p["p50_over_default"],
                        p["load"],
                    ]
                    for p in s["candidate_sweep"]
                ],
            )
        )
    print(
        f"lexical: claw {s['claw_lexical_p50_ms']:.3f} ms, bare tantivy call "
        f"{s['bare_lexical_p50_ms']:.3f} ms, claw_lexical_over_bare "
        f"{s['claw_lexical_over_bare']:.1f} ({_verdict(s['claw_lexical_over_bare'], 3.0)})"
    )
    if not math.isnan(s["claw_baseline_hybrid_p50_ms"]):
        print(
            f"against --baseline in the same run: claw_over_baseline "
            f"{s['claw_over_baseline']:.3f} (hybrid p50 {s['claw_hybrid_p50_ms']:.3f} vs "
            f"{s['claw_baseline_hybrid_p50_ms']:.3f} ms), claw_lexical_over_baseline "
            f"{s['claw_lexical_over_baseline']:.3f} ({s['claw_lexical_p50_ms']:.3f} vs "
            f"{s['claw_baseline_lexical_p50_ms']:.3f} ms), baseline_over_claw_qps "
            f"{s['baseline_over_claw_qps']:.3f}; the baseline's baseline_over_fair_floor "
            f"{s['baseline_over_fair_floor']:.2f}, baseline_lexical_over_bare "
            f"{s['baseline_lexical_over_bare']:.1f}"
        )
    print(
        f"one changed file: the search that notices it {s['change_search_ms']:.1f} ms median "
        f"(max {s['change_search_max_ms']:.1f}), change_search_over_plain "
        f"{s['change_search_over_plain']:.1f} ({_verdict(s['change_search_over_plain'], 2.0)}); "
        f"{s['change_search_warned']:.0%} of them warned they answered from the current index; "
        f"{s['during_sync_searches']} searches during the sync: p50 "
        f"{s['during_sync_p50_ms']:.1f} ms, max {s['during_sync_max_ms']:.1f} ms; the next search "
        f"after the publication {s['next_search_ms']:.1f} ms (max {s['next_search_max_ms']:.1f}); "
        f"searchable {s['reindex_ms']:.1f} ms after the write "
        f"(load {s['load'].get('claw hybrid', float('nan')):.2f})"
    )
    print(
        f"peak RSS (fresh process each): claw {s['claw_peak_rss_mib']:.0f} MiB "
        f"({_at_1m(s, s['claw_peak_rss_mib'], 3072)}), fair floor "
        f"{s['floor_peak_rss_mib']:.0f} MiB; claw build {s['claw_build_s']:.1f} s "
        f"({_at_1m(s, s['claw_build_s'], 120)}; {s['claw_build_cpu_s']:.1f} s of CPU), "
        f"hybrid p50 {s['claw_hybrid_p50_ms']:.1f} ms ({_at_1m(s, s['claw_hybrid_p50_ms'], 60)})"
    )
    print(
        "a second reader (a fresh process opening the published index read-only while "
        f"the first holds it): second_reader_rss_mib {s['second_reader_rss_mib']:.0f} MiB "
        f"above its baseline, private pages ({_verdict(s['second_reader_rss_mib'], 300)}); "
        f"VmRSS +{s['second_reader_vmrss_mib']:.0f} MiB of which "
        f"{s['second_reader_shared_mib']:.0f} MiB shared with the first (the matrix, one copy "
        f"in the page cache); opened in {s['second_reader_open_s']:.1f} s, hybrid p50 "
        f"{s['second_reader_p50_ms']:.1f} ms (load {s['second_reader_load']:.2f})"
    )
    print(
        f"cost per chunk: build {s['build_us_per_chunk']:.0f} us, index "
        f"{s['index_bytes_per_chunk'] / 1024:.2f} KiB, RSS {s['rss_bytes_per_chunk'] / 1024:.2f} "
        f"KiB; per query: hybrid p50 {s['claw_hybrid_p50_ms']:.2f} ms = "
        f"{s['hybrid_us_per_1k_chunks']:.1f} us per 1k chunks"
    )


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.search_latency")
    p.add_argument("--chunks", type=int, default=10_000)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--seconds", type=float, default=5.0, help="duration of the 8-searcher run")
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--reindex-runs", type=int, default=8)
    p.add_argument(
        "--sweep",
        default=",".join(str(c) for c in SWEEP),
        help="candidate counts at which claw's top 10 is compared with exhaustive fusion",
    )
    p.add_argument(
        "--passes",
        type=int,
        default=OPTIONS["passes"],
        help="sequential passes over the queries; each query's fastest run is reported",
    )
    p.add_argument(
        "--approximate-rows",
        type=int,
        default=0,
        help="from this many rows up the vector stage scans a sketch (claw and the fair "
        "floor alike; default: claw's own threshold)",
    )
    p.add_argument(
        "--corpus",
        type=Path,
        help="keep the generated corpus in this directory and reuse it when it matches",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of an earlier commit (git worktree add --detach DIR COMMIT): its "
        "claw is measured as the system claw-baseline beside this one, passes interleaved, "
        "so that a before/after ratio comes from one run",
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--index-dir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--workspace", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sweep = [int(c) for c in args.sweep.split(",") if c.strip()]
    OPTIONS["passes"] = max(1, args.passes)
    if args.corpus is not None:
        OPTIONS["corpus"] = str(args.corpus)
    if args.approximate_rows > 0:
        from claw_memory import _ranking

        OPTIONS["approximate_rows"] = args.approximate_rows
        _ranking.APPROXIMATE_ROWS = args.approximate_rows
    if args.worker == "second-reader":
        run_second_reader(args.root, args.index_dir, args.workspace)
        return
    if args.worker:
        worker(args.worker, args.root, args.reindex_runs, sweep)
        return
    systems = args.systems.split(",")
    if args.baseline is not None and "claw-baseline" not in systems:
        systems.append("claw-baseline")
    rows = run_all(
        args.chunks,
        args.queries,
        args.seconds,
        systems,
        reindex_runs=args.reindex_runs,
        sweep=sweep,
        baseline=args.baseline,
    )
    summary = summarise(rows, args.chunks)
    report(summary, rows, args.queries)
    if args.json:
        emit_json(summary)


if __name__ == "__main__":
    main()
