"""What a search restricted to one agent costs in an index holding many (issue 26 §2).

``python -m benchmarks.longmemeval --agent-cost`` indexes every question's haystack in
one index (one agent per question, about 640 chunks each, 153k for the whole tuning
file) and searches each question restricted to its own agent, as the quality run
does, timing only the searches: p50 and p95 per filtered search for each claw
configuration, beside SQLite FTS5 on a table per question (which costs its question's
share by construction). A search that costs its agent's share stays near FTS5 however
many agents the index holds; one that walks the whole index does not.

Each configuration's searches run in a worker process of their own (this module run
as ``python -m benchmarks._agent_cost``); with ``--baseline DIR`` (a checkout of an
earlier commit) a second worker imports that checkout's claw and Memory Core and
searches the same index (same identity: nothing is rebuilt), the two asked question by
question in alternating order, so that load from other processes falls on both alike.

With ``--alone K``, every K-th question's agent is also indexed alone, each in an
index of its own, and those questions are asked of the agents' own indexes (a third
worker) and of the shared one, alternately, after one warm-up round each (same
configuration, same warmth): ``filtered_p50_ms`` against ``alone_p50_ms`` and their
ratio ``filtered_over_alone``. A search that costs its agent's share keeps the ratio
near 1 however many agents the shared index holds.

With ``--live``, each worker (this checkout, and the baseline's) works on a copy of
the shared index of its own and does what a live host does between two searches:
every second question, a turn is first appended to one session of one agent and the
index synced (``sync_cpu_p50_ms``), then the question's agent is searched on the
generation that sync derived; the other questions search an unchanged generation.
``after_append_p50_ms`` against ``unchanged_p50_ms`` (and their ratio) is what a
host whose transcripts grow pays for searching right after a write.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

_MARK = "@@agent-cost "


def _serve(argv: Sequence[str]) -> None:
    """The worker: open (building if needed) one configuration's index, answer
    ``<question number>`` lines with ``<wall ms> <cpu ms>`` of that question's search."""
    from threadpoolctl import threadpool_limits

    from benchmarks import _retrieval
    from benchmarks.longmemeval import SEARCH_RESULTS, load
    from claw.plugin_sdk import ThreadWorkerPool
    from claw_memory._index import MemoryIndex, open_memory_index
    from claw_memory._settings import MemoryCoreSettings
    from claw_memory._transcripts import InMemoryTranscriptSource, TranscriptTurn
    from claw_memory._types import SearchFilter

    p = argparse.ArgumentParser(prog="python -m benchmarks._agent_cost")
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--index-dir", type=Path, required=True)
    p.add_argument("--questions", type=int, default=None)
    p.add_argument("--every", type=int, default=1)
    p.add_argument(
        "--alone", type=int, default=0, help="index every K-th question's agent alone instead"
    )
    p.add_argument(
        "--live", action="store_true", help="append a turn and sync before every odd question"
    )
    args = p.parse_args(argv)
    agents, questions = load(args.data, args.questions, args.every)
    (config,) = _retrieval.configs_for([args.config])
    source = InMemoryTranscriptSource()
    for agent, sessions in agents.items():
        for session_key, session_id, turns in sessions:
            source.put(agent, session_key, session_id, turns)

    def say(message: dict[str, Any]) -> None:
        print(_MARK + json.dumps(message), flush=True)

    async def main() -> None:
        workers = ThreadWorkerPool(max_workers=2)
        embedder = _retrieval.make_embedder(config.embedder, workers)
        t0 = time.perf_counter()
        async with contextlib.AsyncExitStack() as stack:

            async def opened(root: Path, transcripts: InMemoryTranscriptSource) -> MemoryIndex:
                (root / "workspace").mkdir(parents=True, exist_ok=True)
                return await stack.enter_async_context(
                    open_memory_index(
                        workspace_dir=root / "workspace",
                        index_dir=root / "index",
                        workers=workers,
                        settings=MemoryCoreSettings(sources=("sessions",)),
                        embedder=embedder,
                        transcripts=transcripts,
                    )
                )

            # The shared index, or (--alone) one index per sampled agent, holding that
            # agent's chunks only.
            indexes: dict[str, MemoryIndex] = {}
            for q in questions[:: args.alone] if args.alone else ():
                alone = InMemoryTranscriptSource()
                for session_key, session_id, turns in agents[q.question_id]:
                    alone.put(q.question_id, session_key, session_id, turns)
                root = args.index_dir / f"alone-{config.key}" / q.question_id
                indexes[q.question_id] = await opened(root, alone)
            shared = None if indexes else await opened(args.index_dir / config.key, source)
            chunks = sum(i.status().chunks for i in (indexes.values() if indexes else [shared]))
            say({"chunks": chunks, "open_s": time.perf_counter() - t0})
            # --live: the session a turn is appended to (the first question's agent's
            # last session), and the turns it has so far.
            live_agent = questions[0].question_id
            live_key, live_id, live_turns = agents[live_agent][-1]
            grown = list(live_turns)
            # One BLAS thread, as the quality run and the gateway's workers search.
            with threadpool_limits(limits=1, user_api="blas"):
                while line := await trio.to_thread.run_sync(sys.stdin.readline):
                    number = int(line)
                    q = questions[number]
                    index = shared or indexes[q.question_id]
                    f = SearchFilter(agent_ids=frozenset([q.question_id]))
                    synced: dict[str, float] = {}
                    if args.live and number % 2 == 1:
                        grown.append(
                            TranscriptTurn(
                                f"live-{number}-{len(grown)}",
                                "user",
                                "user",
                                f"a note for later, number {len(grown)}: {q.text}",
                                grown[-1].timestamp,
                            )
                        )
                        source.put(live_agent, live_key, live_id, grown)
                        c = time.process_time()
                        await index.sync()
                        synced["sync_cpu_ms"] = (time.process_time() - c) * 1000.0
                    c, t = time.process_time(), time.perf_counter()
                    await index.search(
                        q.text,
                        mode=config.mode,  # type: ignore[arg-type]
                        max_results=SEARCH_RESULTS,
                        min_score=0.0,
                        filter=f,
                    )
                    wall = (time.perf_counter() - t) * 1000.0
                    say({"ms": wall, "cpu_ms": (time.process_time() - c) * 1000.0, **synced})

    trio.run(main)


class _Worker:
    """One worker process: this checkout's code, or a baseline tree's."""

    def __init__(self, argv: Sequence[str], cwd: Path, log: Path) -> None:
        self._log = log
        with log.open("w", encoding="utf-8") as err:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, cwd=cwd
            )

    def receive(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith(_MARK):
                message: dict[str, Any] = json.loads(line[len(_MARK) :])
                return message
        self._proc.wait()
        tail = self._log.read_text(encoding="utf-8").strip().splitlines()
        raise SystemExit("agent-cost worker failed:\n" + "\n".join(tail[-20:]))

    def ask(self, question: int) -> dict[str, Any]:
        assert self._proc.stdin is not None
        self._proc.stdin.write(f"{question}\n")
        self._proc.stdin.flush()
        return self.receive()

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=120)
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def measure(
    *,
    data: Path,
    configs: Sequence[str],
    questions: int,
    index_dir: Path,
    every: int = 1,
    limit: int | None = None,
    baseline: Path | None = None,
    alone: int = 0,
    live: bool = False,
) -> list[dict[str, Any]]:
    """Per configuration (and its baseline), every question's filtered search timed
    in a worker; a row of figures each: ``config``, ``system`` (``this`` or
    ``baseline``), ``chunks``, ``p50_ms``, ``p95_ms``, ``cpu_p50_ms``, the load. With
    ``alone`` (K > 0), one more row per configuration, ``system`` ``alone``: every K-th
    question in its agent's own index against the shared one (see the module
    docstring), with ``filtered_p50_ms``, ``alone_p50_ms`` and ``filtered_over_alone``.
    With ``live``, the rows are the live workers' (``mode`` ``live``): ``unchanged_p50_ms``,
    ``after_append_p50_ms``, ``after_append_over_unchanged``, ``sync_cpu_p50_ms`` and
    their CPU figures."""
    from benchmarks._common import load as machine_load
    from benchmarks._common import percentile
    from benchmarks.latency._orchestrate import _baseline_tree

    here = Path(__file__).resolve().parents[1]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="claw-agent-cost-") as tmp:
        trees = [("this", here)]
        if baseline is not None:
            trees.append(("baseline", _baseline_tree(baseline, Path(tmp) / "baseline")))
        for name in configs:
            argv = [sys.executable, "-m", "benchmarks._agent_cost", "--data", str(data)]
            argv += ["--config", name, "--index-dir", str(index_dir), "--every", str(every)]
            if limit is not None:
                argv += ["--questions", str(limit)]
            workers: list[tuple[str, _Worker, dict[str, Any]]] = []
            if live:
                # Built (if need be) by a worker that only opens it, then copied: each
                # live worker writes to an index of its own.
                opener = _Worker(argv, here, Path(tmp) / f"{name}-build.log")
                opener.receive()
                opener.close()
            # One after the other: the first opens (and if need be builds) the index,
            # the baseline then opens what it published.
            for system, cwd in trees:
                own = argv
                if live:
                    copy = Path(tmp) / f"live-{system}"
                    shutil.copytree(index_dir / _config_key(name), copy / _config_key(name))
                    own = [*argv, "--live"]
                    own[own.index("--index-dir") + 1] = str(copy)
                worker = _Worker(own, cwd, Path(tmp) / f"{name}-{system}.log")
                workers.append((system, worker, worker.receive()))
            times: dict[str, list[dict[str, Any]]] = {system: [] for system, _, _ in workers}
            before = machine_load()
            for q in range(questions):
                # Alternate who goes first: neither side always finds the caches warm.
                for system, worker, _ in workers if q % 2 == 0 else workers[::-1]:
                    times[system].append(worker.ask(q))
            after = machine_load()
            proportion = (
                _proportion(
                    name,
                    [*argv, "--alone", str(alone)],
                    cwd=here,
                    tmp=Path(tmp),
                    shared=workers[0][1],
                    sample=range(0, questions, alone),
                )
                if alone > 0
                else None
            )
            for system, worker, ready in workers:
                worker.close()
                if live:
                    rows.append(
                        _live_row(
                            name,
                            system,
                            ready=ready,
                            times=times[system],
                            before=before,
                            after=after,
                        )
                    )
                    continue
                wall = [t["ms"] for t in times[system]]
                cpu = [t["cpu_ms"] for t in times[system]]
                rows.append(
                    {
                        "config": name,
                        "system": system,
                        "chunks": ready["chunks"],
                        "searches": len(wall),
                        "p50_ms": percentile(wall, 50),
                        "p95_ms": percentile(wall, 95),
                        "cpu_p50_ms": percentile(cpu, 50),
                        "load_before": before,
                        "load_after": after,
                    }
                )
            if proportion is not None:
                rows.append(proportion)
    return rows


def _config_key(name: str) -> str:
    from benchmarks import _retrieval

    (config,) = _retrieval.configs_for([name])
    return config.key


def _live_row(
    name: str,
    system: str,
    *,
    ready: dict[str, Any],
    times: Sequence[dict[str, Any]],
    before: object,
    after: object,
) -> dict[str, Any]:
    """A live worker's figures: searches of an unchanged generation against searches
    right after an appended turn's sync, and the syncs."""
    from benchmarks._common import percentile

    fresh = [t for t in times if "sync_cpu_ms" in t]
    still = [t for t in times if "sync_cpu_ms" not in t]
    unchanged = percentile([t["ms"] for t in still], 50)
    appended = percentile([t["ms"] for t in fresh], 50)
    return {
        "config": name,
        "system": system,
        "mode": "live",
        "chunks": ready["chunks"],
        "searches": len(times),
        "unchanged_p50_ms": unchanged,
        "after_append_p50_ms": appended,
        "after_append_over_unchanged": appended / unchanged if unchanged else None,
        "unchanged_cpu_p50_ms": percentile([t["cpu_ms"] for t in still], 50),
        "after_append_cpu_p50_ms": percentile([t["cpu_ms"] for t in fresh], 50),
        "sync_cpu_p50_ms": percentile([t["sync_cpu_ms"] for t in fresh], 50),
        "load_before": before,
        "load_after": after,
    }


def _proportion(
    name: str, argv: list[str], *, cwd: Path, tmp: Path, shared: _Worker, sample: range
) -> dict[str, Any]:
    """The sampled questions asked of their agents' own indexes (a new worker) and of
    ``shared``, alternately: a warm-up round, then a timed one."""
    from benchmarks._common import load as machine_load
    from benchmarks._common import percentile

    worker = _Worker(argv, cwd, tmp / f"{name}-alone.log")
    ready = worker.receive()
    pair = [("filtered", shared), ("alone", worker)]
    times: dict[str, list[dict[str, Any]]] = {"filtered": [], "alone": []}
    before = machine_load()
    for timed in (False, True):
        for i, q in enumerate(sample):
            for side, w in pair if i % 2 == 0 else pair[::-1]:
                answer = w.ask(q)
                if timed:
                    times[side].append(answer)
    after = machine_load()
    worker.close()
    p50 = {side: percentile([t["ms"] for t in times[side]], 50) for side in times}
    cpu = {side: percentile([t["cpu_ms"] for t in times[side]], 50) for side in times}
    return {
        "config": name,
        "system": "alone",
        "chunks": ready["chunks"],
        "agents": len(sample),
        "searches": len(times["alone"]),
        "p50_ms": p50["alone"],
        "p95_ms": percentile([t["ms"] for t in times["alone"]], 95),
        "cpu_p50_ms": cpu["alone"],
        "filtered_p50_ms": p50["filtered"],
        "alone_p50_ms": p50["alone"],
        "filtered_over_alone": p50["filtered"] / p50["alone"] if p50["alone"] else None,
        "filtered_cpu_p50_ms": cpu["filtered"],
        "alone_cpu_p50_ms": cpu["alone"],
        "load_before": before,
        "load_after": after,
    }


if __name__ == "__main__":
    _serve(sys.argv[1:])
