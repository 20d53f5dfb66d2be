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

This module is the driver (the command line, and the dispatch a worker process starts
with); each system is a module of :mod:`benchmarks.latency` (``system_claw``,
``system_floor``, ``system_floor_old``, ``system_sqlite``), beside the orchestrator,
the workers' command protocol and the summary.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks._common import emit_json
from benchmarks.latency._orchestrate import run_all
from benchmarks.latency._shared import OPTIONS, SWEEP, SYSTEMS
from benchmarks.latency._summary import report, summarise
from benchmarks.latency.claw_second_reader import run_second_reader
from benchmarks.latency.system_claw import run_claw
from benchmarks.latency.system_floor import run_floor
from benchmarks.latency.system_floor_old import run_floor_old
from benchmarks.latency.system_sqlite import run_sqlite


def worker(system: str, root: Path, reindex_runs: int, sweep: Sequence[int]) -> None:
    """Run one system's worker (``--worker SYSTEM``) in a scratch directory of its own."""
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
