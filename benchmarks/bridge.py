"""How asyncio and synchronous code should reach claw's Trio core: two bridges measured.

Candidates, given the same work:

* ``thread``: claw's bridge (``claw.aio``; ``claw.blocking`` from plain code): Trio in a
  thread of its own, calls handed over with ``TrioToken.run_sync_soon`` and results
  handed back with ``loop.call_soon_threadsafe``.
* ``guest``: Trio in guest mode on the asyncio loop (``trio.lowlevel.start_guest_run``):
  Trio's tasks run on the asyncio thread between asyncio callbacks, its I/O wait in a
  helper thread. Implemented here, with the same cancellation rule as ``thread`` (the
  awaiting task sees ``CancelledError`` only once the Trio side has unwound).
* ``trio``: the same calls awaited inside Trio, with no bridge (the floor).

Figures: the latency of one call (an empty Trio checkpoint, and a Memory Core search of
the bundled sample workspace), the throughput of 16 concurrent callers, the time from
``task.cancel()`` to the awaiting task seeing ``CancelledError`` (the Trio side unwound),
the time to close with a host open and a call in flight, and the longest stall of an
asyncio ticker (1 ms sleeps) while 40 searches run through the bridge.

    python -m benchmarks.bridge [--calls N] [--searches N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import trio

import claw
import claw.aio
import claw.blocking
from claw._demo import SAMPLE_QUERIES, copy_sample_workspace

from ._common import emit_json, load, machine, percentile, table

T = TypeVar("T")


# -- the guest-mode candidate --------------------------------------------------------


class GuestBridge:
    """Trio as a guest of the running asyncio loop, with one nursery for calls."""

    def __init__(self) -> None:
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop = trio.Event()
        self._done: asyncio.Future[Any] | None = None

    @classmethod
    async def start(cls) -> GuestBridge:
        bridge = cls()
        loop = asyncio.get_running_loop()
        started: asyncio.Future[None] = loop.create_future()
        bridge._done = loop.create_future()

        async def trio_main() -> None:
            async with trio.open_nursery() as nursery:
                bridge._nursery = nursery
                bridge._token = trio.lowlevel.current_trio_token()
                started.set_result(None)  # guest tasks run on the loop's own thread
                await bridge._stop.wait()
                nursery.cancel_scope.cancel()

        def done(outcome: Any) -> None:
            assert bridge._done is not None
            if not bridge._done.done():
                bridge._done.set_result(outcome)

        trio.lowlevel.start_guest_run(
            trio_main,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=loop.call_soon,
            done_callback=done,
            host_uses_signal_set_wakeup_fd=True,
        )
        await started
        return bridge

    async def call(self, async_fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        result: asyncio.Future[T] = loop.create_future()
        finished: asyncio.Future[None] = loop.create_future()
        scope = trio.CancelScope()

        async def run() -> None:
            try:
                with scope:
                    value = await async_fn(*args)
                    if not result.done():
                        result.set_result(value)
            except BaseException as exc:
                if not result.done():
                    result.set_exception(exc)
                raise
            finally:
                finished.set_result(None)

        def spawn() -> None:
            assert self._nursery is not None
            self._nursery.start_soon(run)

        assert self._token is not None
        self._token.run_sync_soon(spawn)
        try:
            await asyncio.shield(finished)
        except asyncio.CancelledError:
            self._token.run_sync_soon(scope.cancel)
            await finished
            raise
        return await result

    async def aclose(self) -> None:
        assert self._token is not None and self._done is not None
        self._token.run_sync_soon(self._stop.set)
        (await self._done).unwrap()


# -- measurements ----------------------------------------------------------------------


def micros(values: list[float]) -> dict[str, float]:
    return {
        "p50_us": percentile(values, 50) * 1e6,
        "p99_us": percentile(values, 99) * 1e6,
        "mean_us": statistics.fmean(values) * 1e6,
    }


async def checkpoint() -> None:
    await trio.lowlevel.checkpoint()


async def timed_calls(
    call: Callable[..., Awaitable[Any]],
    fn: Callable[..., Awaitable[Any]],
    n: int,
    queries: tuple[str, ...] = (),
) -> list[float]:
    """Seconds per ``await call(fn)`` (or ``call(fn, query)``, cycling ``queries``)."""

    def args(i: int) -> tuple[str, ...]:
        return (queries[i % len(queries)],) if queries else ()

    for i in range(min(n, 50)):  # warm
        await call(fn, *args(i))
    out = []
    for i in range(n):
        start = time.perf_counter()
        await call(fn, *args(i))
        out.append(time.perf_counter() - start)
    return out


async def concurrent_rate(call: Callable[..., Awaitable[Any]], n: int, tasks: int = 16) -> float:
    async def worker() -> None:
        for _ in range(n // tasks):
            await call(checkpoint)

    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(tasks):
            group.create_task(worker())
    return (n // tasks) * tasks / (time.perf_counter() - start)


async def cancel_latency(call: Callable[..., Awaitable[Any]], n: int) -> tuple[list[float], int]:
    """Time from ``task.cancel()`` to the awaiting task ending; how many Trio sides unwound."""
    loop = asyncio.get_running_loop()
    unwound = 0
    out = []
    for _ in range(n):
        started = asyncio.Event()

        async def parked(started: asyncio.Event = started) -> None:
            nonlocal unwound
            loop.call_soon_threadsafe(started.set)
            try:
                await trio.sleep_forever()
            finally:
                unwound += 1

        task = asyncio.create_task(call(parked))
        await started.wait()
        start = time.perf_counter()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        out.append(time.perf_counter() - start)
    return out, unwound


async def loop_stall(call: Callable[..., Awaitable[Any]], search: Any, searches: int) -> float:
    """The longest a 1 ms asyncio ticker overslept while ``searches`` ran (ms)."""
    worst = 0.0
    stop = False

    async def ticker() -> None:
        nonlocal worst
        while not stop:
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - start - 0.001)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    async with asyncio.TaskGroup() as group:
        for i in range(searches):
            group.create_task(call(search, SAMPLE_QUERIES[i % len(SAMPLE_QUERIES)]))
    stop = True
    await tick
    return worst * 1e3


async def measure_thread(workspace: Path, calls: int, searches: int) -> dict[str, Any]:
    mem = await claw.aio.open_memory(workspace)
    try:
        queries = tuple(SAMPLE_QUERIES)
        row: dict[str, Any] = {
            "checkpoint": micros(await timed_calls(mem.call, checkpoint, calls)),
            "search": micros(await timed_calls(mem.call, mem.local.search, searches, queries)),
            "concurrent_calls_per_s": await concurrent_rate(mem.call, calls),
        }
        cancels, unwound = await cancel_latency(mem.call, min(calls, 200))
        row["cancel"] = micros(cancels)
        row["cancel_unwound"] = f"{unwound}/{len(cancels)}"
        row["loop_stall_ms"] = await loop_stall(mem.call, mem.local.search, 40)
    finally:
        # Shutdown with the host open and one call in flight.
        loop = asyncio.get_running_loop()
        started = asyncio.Event()

        async def parked() -> None:
            loop.call_soon_threadsafe(started.set)
            await trio.sleep_forever()

        inflight = asyncio.create_task(mem.call(parked))
        await started.wait()
        start = time.perf_counter()
        await mem.aclose()
        row["close_ms"] = (time.perf_counter() - start) * 1e3
        with contextlib.suppress(claw.HostClosedError):
            await inflight
    return row


async def measure_guest(workspace: Path, calls: int, searches: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    bridge = await GuestBridge.start()
    opened: asyncio.Future[claw.LocalMemory] = loop.create_future()

    async def hold() -> None:  # claw.open_memory, held open by a task of the guest run
        async with claw.open_memory(workspace) as mem:
            opened.set_result(mem)
            await trio.sleep_forever()

    holder = asyncio.ensure_future(bridge.call(hold))
    mem = await opened
    row: dict[str, Any] = {
        "checkpoint": micros(await timed_calls(bridge.call, checkpoint, calls)),
        "search": micros(
            await timed_calls(bridge.call, mem.search, searches, tuple(SAMPLE_QUERIES))
        ),
        "concurrent_calls_per_s": await concurrent_rate(bridge.call, calls),
    }
    cancels, unwound = await cancel_latency(bridge.call, min(calls, 200))
    row["cancel"] = micros(cancels)
    row["cancel_unwound"] = f"{unwound}/{len(cancels)}"
    row["loop_stall_ms"] = await loop_stall(bridge.call, mem.search, 40)
    # Shutdown with the host open and one call in flight.
    started = asyncio.Event()

    async def parked() -> None:
        loop.call_soon_threadsafe(started.set)
        await trio.sleep_forever()

    inflight = asyncio.ensure_future(bridge.call(parked))
    await started.wait()
    start = time.perf_counter()
    await bridge.aclose()
    row["close_ms"] = (time.perf_counter() - start) * 1e3
    for task in (holder, inflight):
        with contextlib.suppress(BaseException):
            await task
    return row


def measure_blocking(workspace: Path, calls: int, searches: int) -> dict[str, Any]:
    with claw.blocking.open_memory(workspace) as mem:
        for _ in range(50):
            mem.call(checkpoint)
        cp = []
        for _ in range(calls):
            start = time.perf_counter()
            mem.call(checkpoint)
            cp.append(time.perf_counter() - start)
        for q in SAMPLE_QUERIES:
            mem.search(q)
        found = []
        for i in range(searches):
            start = time.perf_counter()
            mem.search(SAMPLE_QUERIES[i % len(SAMPLE_QUERIES)])
            found.append(time.perf_counter() - start)
        start = time.perf_counter()
    return {
        "checkpoint": micros(cp),
        "search": micros(found),
        "close_ms": (time.perf_counter() - start) * 1e3,
    }


async def measure_trio(workspace: Path, calls: int, searches: int) -> dict[str, Any]:
    async with claw.open_memory(workspace) as mem:

        async def direct(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
            return await fn(*args)

        return {
            "checkpoint": micros(await timed_calls(direct, checkpoint, calls)),
            "search": micros(
                await timed_calls(direct, mem.search, searches, tuple(SAMPLE_QUERIES))
            ),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per latency figure")
    parser.add_argument("--searches", type=int, default=300, help="searches per latency figure")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="claw-bridge-") as tmp:
        workspace = copy_sample_workspace(Path(tmp) / "ws")
        load_before = load()
        rows = {
            "trio": trio.run(measure_trio, workspace, args.calls, args.searches),
            "thread": asyncio.run(measure_thread(workspace, args.calls, args.searches)),
            "guest": asyncio.run(measure_guest(workspace, args.calls, args.searches)),
            "blocking": measure_blocking(workspace, args.calls, args.searches),
        }
        load_after = load()
    headers = [
        "bridge",
        "call p50 us",
        "call p99 us",
        "search p50 us",
        "search p99 us",
        "16 callers/s",
        "cancel p50 us",
        "cancel p99 us",
        "unwound",
        "loop stall ms",
        "close ms",
    ]

    def get(row: dict[str, Any], *path: str) -> object:
        value: Any = row
        for key in path:
            if not isinstance(value, dict) or key not in value:
                return "-"
            value = value[key]
        return value

    body = [
        [
            name,
            get(row, "checkpoint", "p50_us"),
            get(row, "checkpoint", "p99_us"),
            get(row, "search", "p50_us"),
            get(row, "search", "p99_us"),
            get(row, "concurrent_calls_per_s"),
            get(row, "cancel", "p50_us"),
            get(row, "cancel", "p99_us"),
            get(row, "cancel_unwound"),
            get(row, "loop_stall_ms"),
            get(row, "close_ms"),
        ]
        for name, row in rows.items()
    ]
    print(f"load average {load_before:.2f} before, {load_after:.2f} after")
    print(table(headers, body))
    if args.json:
        emit_json(
            {
                "machine": machine(),
                "load_before": load_before,
                "load_after": load_after,
                "runs": rows,
            }
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
