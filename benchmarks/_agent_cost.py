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
"""

from __future__ import annotations

import argparse
import json
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
    from claw_memory._index import open_memory_index
    from claw_memory._settings import MemoryCoreSettings
    from claw_memory._transcripts import InMemoryTranscriptSource
    from claw_memory._types import SearchFilter

    p = argparse.ArgumentParser(prog="python -m benchmarks._agent_cost")
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--index-dir", type=Path, required=True)
    p.add_argument("--questions", type=int, default=None)
    p.add_argument("--every", type=int, default=1)
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
        root = args.index_dir / config.key
        (root / "workspace").mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        async with open_memory_index(
            workspace_dir=root / "workspace",
            index_dir=root / "index",
            workers=workers,
            settings=MemoryCoreSettings(sources=("sessions",)),
            embedder=embedder,
            transcripts=source,
        ) as index:
            say({"chunks": index.status().chunks, "open_s": time.perf_counter() - t0})
            # One BLAS thread, as the quality run and the gateway's workers search.
            with threadpool_limits(limits=1, user_api="blas"):
                while line := await trio.to_thread.run_sync(sys.stdin.readline):
                    q = questions[int(line)]
                    f = SearchFilter(agent_ids=frozenset([q.question_id]))
                    c, t = time.process_time(), time.perf_counter()
                    await index.search(
                        q.text,
                        mode=config.mode,  # type: ignore[arg-type]
                        max_results=SEARCH_RESULTS,
                        min_score=0.0,
                        filter=f,
                    )
                    wall = (time.perf_counter() - t) * 1000.0
                    say({"ms": wall, "cpu_ms": (time.process_time() - c) * 1000.0})

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
) -> list[dict[str, Any]]:
    """Per configuration (and its baseline), every question's filtered search timed
    in a worker; a row of figures each: ``config``, ``system`` (``this`` or
    ``baseline``), ``chunks``, ``p50_ms``, ``p95_ms``, ``cpu_p50_ms``, the load."""
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
            # One after the other: the first opens (and if need be builds) the index,
            # the baseline then opens what it published.
            for system, cwd in trees:
                worker = _Worker(argv, cwd, Path(tmp) / f"{name}-{system}.log")
                workers.append((system, worker, worker.receive()))
            times: dict[str, list[dict[str, Any]]] = {system: [] for system, _, _ in workers}
            before = machine_load()
            for q in range(questions):
                # Alternate who goes first: neither side always finds the caches warm.
                for system, worker, _ in workers if q % 2 == 0 else workers[::-1]:
                    times[system].append(worker.ask(q))
            after = machine_load()
            for system, worker, ready in workers:
                worker.close()
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
    return rows


if __name__ == "__main__":
    _serve(sys.argv[1:])
