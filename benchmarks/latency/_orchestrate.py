"""The orchestrator: a fresh worker process per system, their passes interleaved.

The workers build one after the other (each build alone), then take their sequential
passes and their QPS runs in turns (so that a burst of load from other processes falls
on every system alike), then their remaining measurements one after the other.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._shared import OPTIONS, _prepared, _summary, prepare
from ._worker import _MARK


def _baseline_tree(checkout: Path, into: Path) -> Path:
    """A directory whose packages are ``checkout``'s, except this benchmark's own code.

    The baseline worker runs there (its current directory comes first on its import
    path), so it imports the claw, Memory Core and SDK of the earlier commit but
    measures them with this benchmark (same corpus, timing and conversions).
    """
    if into.is_dir():
        # Left by an earlier run over the same --corpus: links only, made afresh.
        shutil.rmtree(into)
    into.mkdir()
    for entry in checkout.iterdir():
        if (entry / "__init__.py").is_file() and entry.name != "benchmarks":
            (into / entry.name).symlink_to(entry.resolve())
    if not (into / "claw").exists():
        raise SystemExit(f"--baseline {checkout}: no claw package there")
    (into / "benchmarks").symlink_to(Path(__file__).resolve().parents[1])
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
