"""Memory Records against Memory Core: search latency on the same text, and propagation.

One seeded synthetic corpus (:mod:`benchmarks._corpus`, the one ``search_latency``
uses), its vectors served by the same corpus embedding provider to both systems (so no
system pays for a model), the same queries, both searched through the full caller path
(``host.memory.open`` then ``handle.search``, hybrid, top 10, first stage only: Memory
Core's coverage stage is off, as Memory Records has none):

* ``memory-core``: the corpus as memory files (one chunk a line), synced once;
* ``memory-records``: the corpus as records in PostgreSQL, bulk-loaded in one ``COPY``
  with their stored vectors, then indexed by the host the way any host starts: catching
  up from sequence 0 (timed: ``catch_up_s``).

Both hosts stay open while measured, and their passes take turns (core, records, core,
...), so a burst of load on a shared machine falls on both alike. Reported per system:
median and p95 ms over each query's fastest of ``--passes`` runs, and the ratio (the
target: Memory Records within 1.2x of Memory Core). Then the propagation delay: a second
host in another process polls its search while this one adds a record (``--probes``
times); p50 and p99 of the time from the add's return to the
other process's first hit.

    python -m benchmarks.records_latency [--records N] [--queries Q] [--dsn DSN] [--json]

Without ``--dsn`` it starts a private PostgreSQL the way the tests do (``tests/_postgres``).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import emit_json, machine, percentile, table
from benchmarks._corpus import Corpus
from benchmarks.latency._shared import RESULTS, VECTOR_WEIGHT, fastest
from benchmarks.latency._vectors import CorpusVectors
from benchmarks.latency.claw_config import _claw_config, _write_workspace

AGENT = "main"
PLUGIN = "memory-records"


def _records_config(root: Path, dsn: str) -> Any:
    import claw

    (root / "ws").mkdir(parents=True, exist_ok=True)
    return claw.HostConfig(
        workspace_dir=root / "ws",
        state_dir=root / "state",
        plugins=claw.PluginsConfig(
            discover=False,
            slots=claw.SlotsConfig(memory=PLUGIN),
            entries={
                PLUGIN: claw.PluginEntryConfig(
                    config={
                        "dsn": dsn,
                        "embedder": CorpusVectors.id,
                        "vector_weight": VECTOR_WEIGHT,
                        "min_score": 0.0,
                        "catch_up_interval": 3600.0,
                    }
                )
            },
        ),
    )


def _vector_plugin(vectors: Any) -> Any:
    from claw.plugin_sdk import Plugin, PluginContracts

    return Plugin(
        id="bench-vectors",
        register=lambda api: api.register_embedding_provider(vectors),
        contracts=PluginContracts(embedding_providers=(CorpusVectors.id,)),
    )


def bulk_load(dsn: str, texts: Sequence[str], vecs: np.ndarray) -> float:
    """Write ``texts`` as owner records with their vectors, as writers would have left them."""
    import psycopg

    from claw_records import _store

    identity = f"{CorpusVectors.id}/{CorpusVectors.model}/{CorpusVectors.dims}"
    start = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        _store.ensure_schema(conn, "the benchmark database")
        conn.execute(
            "INSERT INTO memory_record_heads (agent_id, seq) VALUES (%s, %s)", (AGENT, len(texts))
        )
        with conn.cursor().copy(
            "COPY memory_records (agent_id, ref, partition, text, metadata, created_at,"
            " updated_at, revision, seq, embedder, embedding) FROM STDIN"
        ) as copy:
            for i, text in enumerate(texts):
                copy.write_row(
                    (AGENT, f"rec_{i:032x}", "owner", text, "{}", 1.0, 1.0, 1, i + 1, identity,
                     np.ascontiguousarray(vecs[i], dtype=np.float32).tobytes())
                )
    return time.perf_counter() - start


@contextlib.asynccontextmanager
async def _operator(host: Any) -> AsyncIterator[Any]:
    async with host.open_scope("bench") as scope:
        yield scope.mint_caller_context(
            scope.mint_operator_authority(["operator.read", "operator.write"])
        )


async def _pass(handle: Any, queries: Sequence[str]) -> list[float]:
    """One run of every query through ``handle``, one after the other; ms each."""
    from claw.memory import MemorySearchRequest

    times = []
    for q in queries:
        t = time.perf_counter()
        await handle.search(MemorySearchRequest(query=q, max_results=RESULTS, min_score=0.0))
        times.append((time.perf_counter() - t) * 1000)
    return times


async def _interleaved(
    handles: Sequence[Any], queries: Sequence[str], passes: int
) -> list[list[float]]:
    """Each handle's fastest time per query over ``passes`` passes, the systems' passes
    taking turns (core, records, core, ...): on a shared machine a burst of load then
    falls on both systems alike instead of on whichever ran during it."""
    runs: list[list[list[float]]] = [[] for _ in handles]
    for _ in range(passes):
        for runs_of, handle in zip(runs, handles, strict=True):
            runs_of.append(await _pass(handle, queries))
    return [fastest(r) for r in runs]


def _summary(name: str, times: Sequence[float], **extra: Any) -> dict[str, Any]:
    return {
        "system": name,
        "p50_ms": percentile(times, 50),
        "p95_ms": percentile(times, 95),
        **extra,
    }


async def measure(work: Path, dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    import trio

    import claw
    import claw_memory
    import claw_records
    from claw.memory import MemorySearchRequest

    corpus = Corpus()
    records, passes, probes = args.records, args.passes, args.probes
    texts = corpus.chunk_texts(records)
    qs = corpus.queries(texts, args.queries)
    vecs = np.concatenate(
        [corpus.embed(texts[i : i + 20_000]) for i in range(0, len(texts), 20_000)]
    )
    vectors = CorpusVectors(texts + qs, np.concatenate([vecs, corpus.embed(qs)]))
    rows: list[dict[str, Any]] = []

    ws = work / "core" / "ws"
    _write_workspace(ws, texts)
    config = _claw_config(ws, work / "core" / "state", None)
    load_s = bulk_load(dsn, texts, vecs)
    async with contextlib.AsyncExitStack() as stack:
        t = time.perf_counter()
        core_host = await stack.enter_async_context(
            claw.open_host(config, plugins=[_vector_plugin(vectors), claw_memory.plugin])
        )
        core_handle = await stack.enter_async_context(
            core_host.memory.open(await stack.enter_async_context(_operator(core_host)))
        )
        await core_handle.search(MemorySearchRequest(query=qs[0]))
        build = time.perf_counter() - t
        host = await stack.enter_async_context(
            claw.open_host(
                _records_config(work / "records", dsn),
                plugins=[_vector_plugin(vectors), claw_records.plugin],
            )
        )
        op = await stack.enter_async_context(_operator(host))
        t = time.perf_counter()
        rec_handle = await stack.enter_async_context(host.memory.open(op))
        await rec_handle.search(MemorySearchRequest(query=qs[0]))
        catch_up = time.perf_counter() - t
        core_times, rec_times = await _interleaved((core_handle, rec_handle), qs, passes)
        rows.append(_summary("memory-core", core_times, build_s=build))
        rows.append(
            _summary("memory-records", rec_times, bulk_load_s=load_s, catch_up_s=catch_up)
        )
        delays = await _propagation(host, op, dsn, work / "child", probes)
    await trio.lowlevel.checkpoint()
    core, rec = rows
    return {
        "records": records,
        "queries": len(qs),
        "rows": rows,
        "ratio_p50": rec["p50_ms"] / core["p50_ms"],
        "ratio_p95": rec["p95_ms"] / core["p95_ms"],
        "propagation_ms": {
            "p50": percentile(delays, 50),
            "p99": percentile(delays, 99),
            "max": max(delays),
            "probes": len(delays),
        },
        "machine": machine(),
    }


def _spawn_child(dsn: str, root: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.records_latency", "--child", dsn, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


async def _propagation(host: Any, op: Any, dsn: str, root: Path, probes: int) -> list[float]:
    """Delays (ms) from an add returning here to another process's search finding it."""
    import trio

    proc = await trio.to_thread.run_sync(_spawn_child, dsn, root)
    assert proc.stdin is not None and proc.stdout is not None
    out, inp = proc.stdout, proc.stdin
    try:
        assert (await trio.to_thread.run_sync(out.readline)).strip() == "READY"
        delays = []
        for i in range(probes):
            word = f"beacon{i:04d}x"
            await host.memory.add(op, f"propagation probe {word} lantern")
            inp.write(f"GO {time.monotonic()!r} {word}\n")
            inp.flush()
            delays.append(float(await trio.to_thread.run_sync(out.readline)) * 1000)
        return delays
    finally:
        inp.close()
        proc.wait(timeout=60)
        out.close()


async def child(dsn: str, root: Path) -> None:
    """The other host: for each ``GO <t0> <word>``, search until found; print the delay."""
    import trio

    import claw
    import claw_records
    from claw.memory import MemorySearchRequest

    vectors = CorpusVectors([], np.zeros((0, CorpusVectors.dims), dtype=np.float32))
    async with claw.open_host(
        _records_config(root, dsn), plugins=[_vector_plugin(vectors), claw_records.plugin]
    ) as host, _operator(host) as op, host.memory.open(op) as handle:
        await handle.search(MemorySearchRequest(query="warm up"))
        print("READY", flush=True)
        while line := await trio.to_thread.run_sync(sys.stdin.readline):
            _, t0, word = line.split()
            while True:
                hits = (await handle.search(MemorySearchRequest(query=word, min_score=0.0))).hits
                if any(word in h.excerpt for h in hits):
                    break
                await trio.sleep(0.001)
            print(time.monotonic() - float(t0), flush=True)


@contextlib.contextmanager
def _server(dsn: str | None) -> Iterator[str]:
    if dsn is not None:
        yield dsn
        return
    from tests import _postgres

    with _postgres.running_server() as server:
        yield server.dsn_for(server.create_database())


def report(result: dict[str, Any]) -> None:
    rows = result["rows"]
    print(
        f"{result['records']} records, {result['queries']} queries, top {RESULTS}, hybrid"
        " (first stage), full caller path"
    )
    print(
        table(
            ["system", "p50 ms", "p95 ms", "build/catch-up s"],
            [
                [r["system"], f"{r['p50_ms']:.2f}", f"{r['p95_ms']:.2f}",
                 f"{r.get('build_s', r.get('catch_up_s', 0.0)):.1f}"]
                for r in rows
            ],
        )
    )
    verdict = "within" if result["ratio_p50"] <= 1.2 and result["ratio_p95"] <= 1.2 else "above"
    print(
        f"records / core: p50 {result['ratio_p50']:.2f}x, p95 {result['ratio_p95']:.2f}x"
        f" ({verdict} the 1.2x target)"
    )
    p = result["propagation_ms"]
    print(
        f"propagation to another host process: p50 {p['p50']:.1f} ms, p99 {p['p99']:.1f} ms,"
        f" max {p['max']:.1f} ms over {p['probes']} adds"
    )
    print(f"bulk load {rows[1]['bulk_load_s']:.1f} s; machine {result['machine']}")


def main(argv: Sequence[str] | None = None) -> None:
    import trio

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--probes", type=int, default=100)
    parser.add_argument("--dsn")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("DSN", "ROOT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        trio.run(child, args.child[0], Path(args.child[1]))
        return
    with _server(args.dsn) as dsn, tempfile.TemporaryDirectory(prefix="claw-records-") as tmp:
        result = trio.run(measure, Path(tmp), dsn, args)
    if args.json:
        emit_json(result)
    else:
        report(result)


if __name__ == "__main__":
    main()
