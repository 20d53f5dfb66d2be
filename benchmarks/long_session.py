"""What keeping a growing session's memory current costs, against the session's length.

A host's main conversation grows a turn at a time for as long as the assistant lives.
After every turn Memory Core syncs that session; what a sync costs should follow what
changed (one turn), not how long the session already is. This benchmark indexes one
session of N turns, then appends turns one at a time, syncing after each, and reports
per N the CPU and wall time of a one-turn sync and of the search right after it.

Turns are synthetic chat lines (words of the seeded Zipf corpus, 20-60 words each,
alternating user and assistant, one a minute), in an in-memory transcript source, so
the figures are Memory Core's alone (the host's transcript store is not read). Each N
gets a fresh index, the same embedder and the same worker pool; the first sync after
the build is a warm-up and not counted. Numpy's BLAS runs one thread, as in ``claw
serve``.

    python -m benchmarks.long_session [--turns 100,1000,5000] [--appends 12]
        [--config lexical|default] [--json]

JSON (last line): ``turns`` (the lengths), ``sync_cpu_p50_ms`` and ``sync_wall_p50_ms``
and ``search_cpu_p50_ms`` (lists, one figure per length), ``build_s``, and
``sync_growth`` = the one-turn sync's CPU at the longest session over that at the
shortest (1.0: the cost does not grow with the session; ``turns_ratio`` is the ratio of
the lengths, the growth of a cost in proportion to the session).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from threadpoolctl import threadpool_limits

from ._common import emit_json, load, machine, percentile, table
from ._corpus import Corpus

_START = 1.7e9  # epoch seconds of the first turn


def _turn_texts(count: int) -> list[str]:
    """``count`` chat-like lines of 20-60 corpus words."""
    corpus = Corpus(seed=5, vocab=20_000)
    out = []
    for i, text in enumerate(corpus.chunk_texts(count)):
        words = text.split()
        out.append(" ".join(words[: 20 + (i * 7) % 41]))
    return out


async def _measure(turns: int, appends: int, config_name: str) -> dict[str, Any]:
    from benchmarks import _retrieval
    from claw.plugin_sdk import ThreadWorkerPool
    from claw_memory._index import open_memory_index
    from claw_memory._settings import MemoryCoreSettings
    from claw_memory._transcripts import InMemoryTranscriptSource, TranscriptTurn

    (config,) = _retrieval.configs_for([config_name])
    texts = _turn_texts(turns + appends + 1)
    queries = [" ".join(t.split()[:4]) for t in texts[: turns : max(1, turns // appends)]]

    def turn(i: int) -> TranscriptTurn:
        role = "user" if i % 2 == 0 else "assistant"
        return TranscriptTurn(f"e{i}", role, role, texts[i], _START + 60.0 * i)

    grown = [turn(i) for i in range(turns)]
    source = InMemoryTranscriptSource()
    source.put("main", "dm:owner", "s1", grown)
    workers = ThreadWorkerPool(max_workers=2)
    embedder = _retrieval.make_embedder(config.embedder, workers)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "ws").mkdir()
        start = time.perf_counter()  # opening a new index builds it
        async with open_memory_index(
            workspace_dir=Path(tmp) / "ws",
            index_dir=Path(tmp) / "index",
            workers=workers,
            settings=MemoryCoreSettings(sources=("sessions",)),
            embedder=embedder,
            transcripts=source,
        ) as index:
            await index.sync()
            build_s = time.perf_counter() - start
            sync_cpu: list[float] = []
            sync_wall: list[float] = []
            search_cpu: list[float] = []
            for n in range(appends + 1):
                grown.append(turn(turns + n))
                source.put("main", "dm:owner", "s1", grown)
                cpu, wall = time.process_time(), time.perf_counter()
                await index.sync()
                synced = (time.process_time() - cpu, time.perf_counter() - wall)
                cpu = time.process_time()
                await index.search(
                    queries[n % len(queries)],
                    mode=config.mode,  # type: ignore[arg-type]
                    max_results=10,
                    min_score=0.0,
                )
                searched = time.process_time() - cpu
                if n == 0:
                    continue  # the warm-up
                sync_cpu.append(synced[0] * 1000.0)
                sync_wall.append(synced[1] * 1000.0)
                search_cpu.append(searched * 1000.0)
            chunks = index.status().chunks
    return {
        "turns": turns,
        "chunks": chunks,
        "build_s": build_s,
        "sync_cpu_p50_ms": percentile(sync_cpu, 50),
        "sync_wall_p50_ms": percentile(sync_wall, 50),
        "search_cpu_p50_ms": percentile(search_cpu, 50),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.long_session", description=__doc__)
    p.add_argument("--turns", default="100,1000,5000", help="session lengths, comma-separated")
    p.add_argument("--appends", type=int, default=12, help="one-turn syncs measured per length")
    p.add_argument("--config", default="lexical", choices=("lexical", "default", "hash"))
    p.add_argument("--json", action="store_true", help="print the JSON summary last")
    args = p.parse_args(argv)
    try:
        lengths = sorted({int(x) for x in args.turns.split(",") if x.strip()})
    except ValueError:
        p.error(f"--turns must be comma-separated whole numbers, got {args.turns!r}")
    if not lengths or lengths[0] < 1 or args.appends < 1:
        p.error("--turns needs lengths of at least 1 and --appends at least 1")
    load_before = load()
    # One BLAS thread, as `claw serve` and the CLI run: OpenBLAS's idle threads spin
    # for a while after every product, which counted as the sync's CPU (a 5,000-turn
    # default sync measured 101 ms of CPU in 59 ms of wall time, 44 ms with one).
    with threadpool_limits(limits=1, user_api="blas"):
        rows = [trio.run(_measure, n, args.appends, args.config) for n in lengths]
    print(
        table(
            ["turns", "chunks", "build s", "sync cpu ms", "sync wall ms", "search cpu ms"],
            [
                [
                    r["turns"],
                    r["chunks"],
                    r["build_s"],
                    r["sync_cpu_p50_ms"],
                    r["sync_wall_p50_ms"],
                    r["search_cpu_p50_ms"],
                ]
                for r in rows
            ],
        )
    )
    growth = rows[-1]["sync_cpu_p50_ms"] / rows[0]["sync_cpu_p50_ms"]
    ratio = lengths[-1] / lengths[0]
    print(
        f"one-turn sync CPU, longest over shortest session: {growth:.1f}x "
        f"(the sessions' lengths: {ratio:.0f}x); config {args.config}, "
        f"load {load_before:.1f} -> {load():.1f}"
    )
    if args.json:
        emit_json(
            {
                "config": args.config,
                "turns": lengths,
                "chunks": [r["chunks"] for r in rows],
                "build_s": [r["build_s"] for r in rows],
                "sync_cpu_p50_ms": [r["sync_cpu_p50_ms"] for r in rows],
                "sync_wall_p50_ms": [r["sync_wall_p50_ms"] for r in rows],
                "search_cpu_p50_ms": [r["search_cpu_p50_ms"] for r in rows],
                "sync_growth": growth,
                "turns_ratio": ratio,
                "load_before": load_before,
                "load_after": load(),
                "machine": machine(),
            }
        )


if __name__ == "__main__":
    main()
