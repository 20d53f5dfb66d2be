"""What keeping a growing session's memory current costs, against the session's length.

A host's main conversation grows a turn at a time for as long as the assistant lives.
After every turn Memory Core syncs that session; what a sync costs should follow what
changed (one turn), not how long the session already is. This benchmark indexes one
session of N turns, then appends turns one at a time, syncing after each, and reports
per N the CPU and wall time of a one-turn sync and of the search right after it.

Turns are synthetic chat lines (words of the seeded Zipf corpus, 20-60 words each,
alternating user and assistant, one a minute; ``--reply-chars N``: every reply at
least N characters, so that a reply longer than a chunk is cut into pieces), in an
in-memory transcript source, so
the figures are Memory Core's alone (the host's transcript store is not read). Each N
gets a fresh index, the same embedder and the same worker pool; the first sync after
the build is a warm-up and not counted. Numpy's BLAS runs one thread, as in ``claw
serve``.

    python -m benchmarks.long_session [--turns 100,1000,5000] [--appends 12]
        [--config lexical|default] [--reply-chars N] [--json]
    python -m benchmarks.long_session --host [--turns 250,500,1000] [--appends 12] [--json]

JSON (last line): ``turns`` (the lengths), ``sync_cpu_p50_ms`` and ``sync_wall_p50_ms``
and ``search_cpu_p50_ms`` (lists, one figure per length), ``build_s``, and
``sync_growth`` = the one-turn sync's CPU at the longest session over that at the
shortest (1.0: the cost does not grow with the session; ``turns_ratio`` is the ratio of
the lengths, the growth of a cost in proportion to the session).

With ``--host`` it measures whole turns instead: one host (thread workers, Memory
Core's shipped settings) runs one session turn after turn with a scripted model (a
context window no session here fills, so nothing is compacted), and at each length
times the next turns: ``host.run_turn`` (reading the context, the model call, the
appends, the ledger, the flush and compaction checks) and a memory search through the
host right after it (``host.memory.open``, as a caller does), which starts the sync of
the grown session in the host's background nursery. A cycle's CPU is the process's,
every thread: all a turn costs, its search and (landing in the next cycle) its sync.
JSON: ``cycle_cpu_p50_ms``, ``turn_wall_p50_ms``, ``search_wall_p50_ms`` per length,
``turn_growth`` (cycle CPU, longest over shortest). ``--config`` does not apply.
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


def _turn_texts(count: int, reply_chars: int = 0) -> list[str]:
    """``count`` chat-like lines of 20-60 corpus words; with ``reply_chars``, every
    second line (the assistant's) runs on with the corpus's next words to at least
    that many characters, as a model's replies do."""
    corpus = Corpus(seed=5, vocab=20_000)
    texts = corpus.chunk_texts(count)
    out = []
    for i, text in enumerate(texts):
        words = text.split()
        line = " ".join(words[: 20 + (i * 7) % 41])
        k = i + 1
        while i % 2 and len(line) < reply_chars:
            line = f"{line} {texts[k % len(texts)]}"
            k += 1
        out.append(line)
    return out


async def _measure(
    turns: int, appends: int, config_name: str, reply_chars: int = 0
) -> dict[str, Any]:
    from benchmarks import _retrieval
    from claw.plugin_sdk import ThreadWorkerPool
    from claw_memory._index import open_memory_index
    from claw_memory._settings import MemoryCoreSettings
    from claw_memory._transcripts import InMemoryTranscriptSource, TranscriptTurn

    (config,) = _retrieval.configs_for([config_name])
    texts = _turn_texts(turns + appends + 1, reply_chars)
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


async def _measure_host(lengths: list[int], appends: int) -> list[dict[str, Any]]:
    """One host (thread workers, the shipped Memory Core settings) and one session run
    turn after turn with a scripted model; at each length, the next ``appends`` turns'
    ``run_turn`` CPU and wall time (the first not counted)."""
    import attrs

    import claw
    import claw_memory
    from claw.memory import MemorySearchRequest
    from claw_testing import ScriptedModel, harness_config
    from claw_testing._harness import SCRIPTED_PROVIDER

    total = lengths[-1] + (appends + 1)
    texts = _turn_texts(2 * total)
    # A context window no session here fills: what a turn costs before any compaction.
    model = ScriptedModel([texts[2 * i + 1] for i in range(total)], context_window=10**8)
    queries = [" ".join(t.split()[:4]) for t in texts[::7]]
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "ws").mkdir()
        config = harness_config(
            Path(tmp) / "ws",
            Path(tmp) / "state",
            plugin_config={"memory-core": {"embedder": "claw-static"}},
        )
        config = attrs.evolve(config, workers=claw.WorkersConfig())
        async with (
            claw.open_host(config, plugins=[claw_memory.plugin]) as host,
            host.open_scope("bench") as scope,
        ):
            host.models.register_provider(SCRIPTED_PROVIDER, lambda name: model)
            await host.sessions.create("dm:owner", agent_id="main", chat_type="direct")
            ctx = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
            done = 0

            async def turn() -> tuple[float, float, float]:
                # A cycle: the turn, then a search, whose sync of the grown session runs
                # in the host's background nursery and so lands in the next cycle's CPU
                # (a cycle's CPU is the process's, every thread: all a turn costs).
                nonlocal done
                cpu, wall = time.process_time(), time.perf_counter()
                message = claw.UserMessage(texts[2 * done])
                await host.run_turn("dm:owner", message, sender_is_owner=True)
                turn_wall = time.perf_counter() - wall
                searched = time.perf_counter()
                async with host.memory.open(ctx) as handle:
                    await handle.search(
                        MemorySearchRequest(query=queries[done % len(queries)], max_results=10)
                    )
                done += 1
                search_wall = time.perf_counter() - searched
                return (time.process_time() - cpu) * 1e3, turn_wall * 1e3, search_wall * 1e3

            for length in lengths:
                while done < length:
                    await turn()
                timed = [await turn() for _ in range(appends + 1)][1:]
                out.append(
                    {
                        "turns": length,
                        "cycle_cpu_p50_ms": percentile([t[0] for t in timed], 50),
                        "turn_wall_p50_ms": percentile([t[1] for t in timed], 50),
                        "search_wall_p50_ms": percentile([t[2] for t in timed], 50),
                    }
                )
    return out


def _host_main(lengths: list[int], appends: int, as_json: bool) -> None:
    load_before = load()
    with threadpool_limits(limits=1, user_api="blas"):
        rows = trio.run(_measure_host, lengths, appends)
    print(
        table(
            ["turns", "cycle cpu ms", "run_turn wall ms", "search wall ms"],
            [
                [r["turns"], r["cycle_cpu_p50_ms"], r["turn_wall_p50_ms"], r["search_wall_p50_ms"]]
                for r in rows
            ],
        )
    )
    growth = rows[-1]["cycle_cpu_p50_ms"] / rows[0]["cycle_cpu_p50_ms"]
    ratio = lengths[-1] / lengths[0]
    print(
        f"a turn's CPU (turn, search, background sync), longest over shortest session: "
        f"{growth:.1f}x (the sessions' lengths: {ratio:.0f}x); "
        f"load {load_before:.1f} -> {load():.1f}"
    )
    if as_json:
        emit_json(
            {
                "host": True,
                "turns": lengths,
                "cycle_cpu_p50_ms": [r["cycle_cpu_p50_ms"] for r in rows],
                "turn_wall_p50_ms": [r["turn_wall_p50_ms"] for r in rows],
                "search_wall_p50_ms": [r["search_wall_p50_ms"] for r in rows],
                "turn_growth": growth,
                "turns_ratio": ratio,
                "load_before": load_before,
                "load_after": load(),
                "machine": machine(),
            }
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.long_session", description=__doc__)
    p.add_argument("--turns", default="100,1000,5000", help="session lengths, comma-separated")
    p.add_argument("--appends", type=int, default=12, help="one-turn syncs measured per length")
    p.add_argument("--config", default="lexical", choices=("lexical", "default", "hash"))
    p.add_argument(
        "--reply-chars",
        type=int,
        default=0,
        help="assistant replies of at least this many characters (longer than a chunk"
        " from about 1,600: cut into pieces)",
    )
    p.add_argument(
        "--host",
        action="store_true",
        help="whole turns on a host (run_turn with a scripted model), one session growing",
    )
    p.add_argument("--json", action="store_true", help="print the JSON summary last")
    args = p.parse_args(argv)
    try:
        lengths = sorted({int(x) for x in args.turns.split(",") if x.strip()})
    except ValueError:
        p.error(f"--turns must be comma-separated whole numbers, got {args.turns!r}")
    if not lengths or lengths[0] < 1 or args.appends < 1:
        p.error("--turns needs lengths of at least 1 and --appends at least 1")
    if args.reply_chars < 0:
        p.error(f"--reply-chars must be at least 0, got {args.reply_chars}")
    if args.host:
        _host_main(lengths, args.appends, args.json)
        return
    load_before = load()
    # One BLAS thread, as `claw serve` and the CLI run: OpenBLAS's idle threads spin
    # for a while after every product, which counted as the sync's CPU (a 5,000-turn
    # default sync measured 101 ms of CPU in 59 ms of wall time, 44 ms with one).
    with threadpool_limits(limits=1, user_api="blas"):
        rows = [trio.run(_measure, n, args.appends, args.config, args.reply_chars) for n in lengths]
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
        f"(the sessions' lengths: {ratio:.0f}x); config {args.config}, replies of "
        f"{args.reply_chars or 'corpus'} characters, "
        f"load {load_before:.1f} -> {load():.1f}"
    )
    if args.json:
        emit_json(
            {
                "config": args.config,
                "reply_chars": args.reply_chars,
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
