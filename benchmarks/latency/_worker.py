"""The worker side of interleaved measurement: a system's searches served on command.


-- the worker side of interleaved measurement ---------------------------------------
Each system runs in a worker process of its own: it builds its index, reports ready,
then answers the orchestrator's commands, one a line on stdin: "pass NAME" (one
sequential pass over every query), "qps NAME SECONDS" (``CONCURRENCY`` concurrent
searchers) and "end" (after which it takes its remaining measurements alone and
reports them). The orchestrator interleaves the passes of every system, so that a
burst of load from other processes falls on all of them alike and a ratio compares
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks._common import load

from ._shared import CONCURRENCY

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
