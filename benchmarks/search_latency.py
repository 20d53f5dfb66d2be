"""Search latency and scale: claw against the raw floor and the SQLite FTS5 peers.

One seeded synthetic corpus (see :mod:`benchmarks._corpus`), the same queries, side by
side, each system in its own process (so build time, peak RSS and index size are its
own):

* ``claw``: Memory Core through the host's memory provider handle (``host.memory.open``
  then ``handle.search``; the full path a caller pays), hybrid and lexical only, with an
  embedding provider that serves the corpus vectors (so no system pays for a model);
* ``floor``: tantivy search plus a numpy matrix product, called directly;
* ``fts5+vec``: SQLite FTS5 BM25 plus sqlite-vec KNN (loaded through apsw, whose SQLite
  can load extensions), merged with the same weights;
* ``fts5+scan``: SQLite FTS5 plus a cosine scan in numpy over float32 blobs read from
  SQLite for every query (the fallback when no vector extension loads).

Reported per system: median and p95 ms per query (sequential), queries per second
with 8 concurrent searchers, build time, peak RSS and index size; for claw also the
median time from changing one file to the change being searchable.

    python -m benchmarks.search_latency --chunks N [--json] [--queries Q] [--seconds S]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks._common import emit_json, machine, peak_rss_mb, percentile, table
from benchmarks._corpus import CHUNK_TOKENS, DIMS, Corpus

CANDIDATES = 40
RESULTS = 10
VECTOR_WEIGHT = 0.7
TEXT_WEIGHT = 0.3
CHUNKS_PER_FILE = 100
CONCURRENCY = 8
SYSTEMS = ("claw", "floor", "fts5+vec", "fts5+scan")


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


def _measure(search: Callable[[int], object], nq: int, seconds: float) -> tuple[list[float], float]:
    """Sequential per-query latencies (ms), then QPS with ``CONCURRENCY`` threads."""
    for i in range(min(20, nq)):
        search(i)
    lat = []
    for i in range(nq):
        t = time.perf_counter()
        search(i)
        lat.append((time.perf_counter() - t) * 1000.0)
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
    return lat, sum(done) / (time.perf_counter() - t0)


def _summary(name: str, lat: list[float], qps: float, **extra: Any) -> dict[str, Any]:
    return {
        "system": name,
        "p50_ms": percentile(lat, 50),
        "p95_ms": percentile(lat, 95),
        "qps_8": qps,
        **extra,
    }


# -- floor ---------------------------------------------------------------------------
def run_floor(root: Path, work: Path, seconds: float) -> list[dict[str, Any]]:
    import tantivy

    texts, qs, vecs, qvecs = _load(root)
    t0 = time.perf_counter()
    sb = tantivy.SchemaBuilder()
    sb.add_unsigned_field("id", stored=False, indexed=False, fast=True)
    sb.add_text_field("text", stored=False)
    schema = sb.build()
    index = tantivy.Index(schema, path=str(work))
    writer = index.writer(heap_size=128_000_000, num_threads=1)
    for i, text in enumerate(texts):
        doc = tantivy.Document(text=text)
        doc.add_unsigned("id", i)
        writer.add_document(doc)
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()
    matrix = np.ascontiguousarray(vecs, dtype=np.float32)
    build = time.perf_counter() - t0
    parsed = [index.parse_query(q, ["text"]) for q in qs]

    def search(i: int) -> object:
        hits = searcher.search(parsed[i], limit=CANDIDATES).hits
        ids = searcher.fast_field_values("id", [a for _, a in hits]) if hits else []
        sims = matrix @ qvecs[i]
        top = _top(sims, CANDIDATES)
        return _merge(
            [(int(d), float(s)) for (s, _), d in zip(hits, ids, strict=True)],
            [(int(j), float(sims[j])) for j in top],
        )

    lat, qps = _measure(search, len(qs), seconds)
    size = _dir_bytes(work) + matrix.nbytes
    return [_summary("floor", lat, qps, build_s=build, index_mb=size / 2**20, rss_mb=peak_rss_mb())]


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


def run_sqlite(root: Path, work: Path, seconds: float, *, vec: bool) -> list[dict[str, Any]]:
    name = "fts5+vec" if vec else "fts5+scan"
    try:
        conn = _connect(work / "peer.db", extension=vec)
    except Exception as exc:  # the point is to report why the peer could not run
        return [{"system": name, "error": f"{type(exc).__name__}: {exc}"}]
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
                (_fts_match(qs[i]), CANDIDATES),
            )
        ]
        if vec:
            near = [
                (int(r), 1.0 - float(d) ** 2 / 2.0)  # L2 distance of unit vectors -> cosine
                for r, d in c.execute(
                    "SELECT rowid, distance FROM vec WHERE embedding MATCH ? AND k = ?",
                    (qvecs[i].tobytes(), CANDIDATES),
                )
            ]
        else:
            rows = list(c.execute("SELECT id, embedding FROM chunks"))
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            m = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(-1, DIMS)
            sims = m @ qvecs[i]
            near = [(int(ids[j]), float(sims[j])) for j in _top(sims, CANDIDATES)]
        return _merge(text, near)

    lat, qps = _measure(search, len(qs), seconds)
    return [_summary(name, lat, qps, build_s=build, index_mb=size / 2**20, rss_mb=peak_rss_mb())]


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
        seed = int.from_bytes(text.encode()[:64].ljust(8, b"\0")[:8], "little") ^ len(text)
        v = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
        return v / np.linalg.norm(v)

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import trio

        await trio.lowlevel.checkpoint()
        return np.stack([self.lookup(t) for t in texts]).astype(np.float32)


def _write_workspace(ws: Path, texts: Sequence[str]) -> list[Path]:
    files = []
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    for f, start in enumerate(range(0, len(texts), CHUNKS_PER_FILE)):
        path = ws / "memory" / f"notes-{f:05d}.md"
        path.write_text("\n".join(texts[start : start + CHUNKS_PER_FILE]) + "\n", encoding="utf-8")
        files.append(path)
    return files


def run_claw(root: Path, work: Path, seconds: float, *, reindex_runs: int) -> list[dict[str, Any]]:
    import trio

    import claw
    import claw_memory
    from claw.memory import MemorySearchRequest
    from claw.plugin_sdk import Plugin, PluginContracts

    texts, qs, vecs, qvecs = _load(root)
    vectors = CorpusVectors(texts + qs, np.concatenate([vecs, qvecs]))
    bench_plugin = Plugin(
        id="bench-vectors",
        name="benchmark vectors",
        version="0",
        register=lambda api: api.register_embedding_provider(vectors),
        contracts=PluginContracts(embedding_providers=("bench-vectors",)),
    )
    ws = work / "workspace"
    files = _write_workspace(ws, texts)
    config = claw.HostConfig(
        workspace_dir=ws,
        state_dir=work / "state",
        plugins=claw.PluginsConfig(
            discover=False,
            entries={
                "memory-core": claw.PluginEntryConfig(
                    config={
                        "embedder": "bench-vectors",
                        "sources": ["memory"],
                        "chunk_tokens": CHUNK_TOKENS,
                        "chunk_overlap": 0,
                        "vector_weight": VECTOR_WEIGHT,
                        "text_weight": TEXT_WEIGHT,
                    }
                )
            },
        ),
    )
    out: list[dict[str, Any]] = []

    async def main() -> None:
        plugins = [claw_memory.plugin, bench_plugin]
        async with claw.open_host(config, plugins=plugins) as host, host.open_scope("b") as scope:
            ctx = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
            if True:
                async with host.memory.open(ctx) as handle:
                    t0 = time.perf_counter()
                    first = await handle.search(MemorySearchRequest(query=qs[0], min_score=0.0))
                    build = time.perf_counter() - t0
                    assert first.hits, "claw found nothing for a corpus query"
                    health = await handle.health()
                    chunks = _chunk_count(health, len(texts))
                    for name, lexical in (("claw hybrid", False), ("claw lexical", True)):
                        lat, qps = await _measure_trio(handle, qs, lexical, seconds)
                        out.append(_summary(name, lat, qps, build_s=build, chunks=chunks))
                    if reindex_runs:
                        times = await _reindex(handle, files, reindex_runs)
                        out[0]["reindex_ms"] = percentile(times, 50)
        size = _dir_bytes(work / "state")
        for r in out:
            r["index_mb"] = size / 2**20
            r["rss_mb"] = peak_rss_mb()

    trio.run(main)
    return out


def _chunk_count(health: Any, default: int) -> int:
    """The chunk count a provider's health reports, if it reports one."""
    for source in (getattr(health, "details", None), getattr(health, "index", None)):
        if isinstance(source, dict) and isinstance(source.get("chunks"), int):
            return int(source["chunks"])
    return default


async def _measure_trio(
    handle: Any, qs: Sequence[str], lexical: bool, seconds: float
) -> tuple[list[float], float]:
    import trio

    from claw.memory import MemorySearchRequest

    requests = [
        MemorySearchRequest(query=q, max_results=RESULTS, min_score=0.0, lexical_only=lexical)
        for q in qs
    ]
    for r in requests[:20]:
        await handle.search(r)
    lat = []
    for r in requests:
        t = time.perf_counter()
        await handle.search(r)
        lat.append((time.perf_counter() - t) * 1000.0)
    done = [0]
    stop = time.perf_counter() + seconds

    async def loop(slot: int) -> None:
        i = slot
        while time.perf_counter() < stop:
            await handle.search(requests[i % len(requests)])
            done[0] += 1
            i += CONCURRENCY

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for s in range(CONCURRENCY):
            nursery.start_soon(loop, s)
    return lat, done[0] / (time.perf_counter() - t0)


async def _reindex(handle: Any, files: Sequence[Path], runs: int) -> list[float]:
    """Change one line of one file; time until a search finds the new word."""
    import trio

    from claw.memory import MemorySearchRequest

    times = []
    for run in range(runs):
        path = files[(run * 7919) % len(files)]
        lines = path.read_text(encoding="utf-8").splitlines()
        marker = f"zqxmarker{run}"
        lines[run % len(lines)] = lines[run % len(lines)] + " " + marker
        t0 = time.perf_counter()
        await trio.to_thread.run_sync(path.write_text, "\n".join(lines) + "\n", "utf-8")
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000 * (run + 1)))
        # Only a chunk holding the (unique) marker matches a lexical query for it.
        deadline = time.perf_counter() + 60.0
        while time.perf_counter() < deadline:
            res = await handle.search(
                MemorySearchRequest(query=marker, max_results=1, min_score=0.0, lexical_only=True)
            )
            if res.hits:
                break
        else:
            raise RuntimeError(f"the change to {path.name} never became searchable")
        times.append((time.perf_counter() - t0) * 1000.0)
    return times


# -- orchestration -------------------------------------------------------------------
def worker(system: str, root: Path, seconds: float, reindex_runs: int) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"claw-bench-{system.replace('+', '-')}-"))
    try:
        if system == "claw":
            rows = run_claw(root, work, seconds, reindex_runs=reindex_runs)
        elif system == "floor":
            (work / "tantivy").mkdir()
            rows = run_floor(root, work / "tantivy", seconds)
        elif system == "fts5+vec":
            rows = run_sqlite(root, work, seconds, vec=True)
        elif system == "fts5+scan":
            rows = run_sqlite(root, work, seconds, vec=False)
        else:
            raise SystemExit(f"unknown system {system!r}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(rows))


def run_all(
    chunks: int, queries: int, seconds: float, systems: Sequence[str], reindex_runs: int
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="claw-bench-corpus-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        prepare(root, chunks, queries)
        print(
            f"corpus: {chunks} chunks, {queries} queries in {time.perf_counter() - t0:.1f} s",
            file=sys.stderr,
        )
        for system in systems:
            env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0")
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.search_latency",
                    "--worker",
                    system,
                    "--root",
                    str(root),
                    "--seconds",
                    str(seconds),
                    "--reindex-runs",
                    str(reindex_runs),
                ],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            if proc.returncode != 0:
                rows.append({"system": system, "error": proc.stderr.strip().splitlines()[-1:]})
                print(proc.stderr, file=sys.stderr)
                continue
            rows.extend(json.loads(proc.stdout.strip().splitlines()[-1]))
    return rows


def summarise(rows: Sequence[dict[str, Any]], chunks: int) -> dict[str, Any]:
    by = {r["system"]: r for r in rows}
    hybrid = by.get("claw hybrid", {})
    floor = by.get("floor", {})
    peers = [by[p] for p in ("fts5+vec", "fts5+scan") if p in by and "p50_ms" in by[p]]
    peer = min(peers, key=lambda r: r["p50_ms"]) if peers else {}
    nan = float("nan")
    out = {
        "chunks": by.get("claw hybrid", {}).get("chunks", chunks),
        "claw_hybrid_p50_ms": hybrid.get("p50_ms", nan),
        "claw_hybrid_p95_ms": hybrid.get("p95_ms", nan),
        "claw_lexical_p50_ms": by.get("claw lexical", {}).get("p50_ms", nan),
        "floor_p50_ms": floor.get("p50_ms", nan),
        "peer_p50_ms": peer.get("p50_ms", nan),
        "peer": peer.get("system"),
        "reindex_ms": hybrid.get("reindex_ms", nan),
        "systems": list(rows),
        "machine": machine(),
    }
    out["claw_over_floor"] = out["claw_hybrid_p50_ms"] / out["floor_p50_ms"]
    out["peer_over_claw"] = out["peer_p50_ms"] / out["claw_hybrid_p50_ms"]
    return out


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.search_latency")
    p.add_argument("--chunks", type=int, default=10_000)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--seconds", type=float, default=5.0, help="duration of the 8-searcher run")
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--reindex-runs", type=int, default=7)
    p.add_argument("--json", action="store_true")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker, args.root, args.seconds, args.reindex_runs)
        return
    rows = run_all(
        args.chunks, args.queries, args.seconds, args.systems.split(","), args.reindex_runs
    )
    summary = summarise(rows, args.chunks)
    headers = ["system", "p50 ms", "p95 ms", "QPS x8", "build s", "RSS MiB", "index MiB"]
    body = []
    for r in rows:
        if "error" in r:
            body.append([r["system"], "error: " + str(r["error"]), "", "", "", "", ""])
            continue
        body.append(
            [
                r["system"],
                r["p50_ms"],
                r["p95_ms"],
                r["qps_8"],
                r["build_s"],
                r["rss_mb"],
                r["index_mb"],
            ]
        )
    print(f"search latency: {summary['chunks']} chunks, {args.queries} queries, top {RESULTS}")
    print(table(headers, body))
    print(
        f"claw_over_floor {summary['claw_over_floor']:.2f}  "
        f"peer_over_claw {summary['peer_over_claw']:.1f} ({summary['peer']})  "
        f"re-index one file: {summary['reindex_ms']:.1f} ms (median)"
    )
    if args.json:
        emit_json(summary)


if __name__ == "__main__":
    main()
