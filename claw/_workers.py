"""The host's shared worker pool: where blocking work (tantivy, numpy, hashing) runs.

The pool is owned by the host and handed to plugins through the SDK. The default
runs callables in threads under a :class:`trio.CapacityLimiter`; the inline pool
runs them on the calling task, which is what deterministic tests want (under
``MockClock(autojump_threshold=0)`` a worker thread would count as idle time and
jump the clock).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar, runtime_checkable

import attrs
import trio

T = TypeVar("T")


@attrs.frozen
class WorkerPoolStatistics:
    """A snapshot of a pool's load."""

    total_tokens: int
    borrowed_tokens: int
    tasks_waiting: int
    inline: bool


@runtime_checkable
class WorkerPool(Protocol):
    """Runs blocking callables off (or, inline, on) the event loop."""

    async def run_sync(self, fn: Callable[..., T], *args: object) -> T:
        """Run ``fn(*args)`` and return its result; always checkpoints."""
        ...

    def statistics(self) -> WorkerPoolStatistics:
        """The pool's current load."""
        ...


@attrs.define
class ThreadWorkerPool:
    """Runs callables in worker threads, at most ``max_workers`` at a time."""

    max_workers: int = 2
    _limiter: trio.CapacityLimiter = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        if self.max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {self.max_workers}")
        self._limiter = trio.CapacityLimiter(self.max_workers)

    async def run_sync(self, fn: Callable[..., T], *args: object) -> T:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    def statistics(self) -> WorkerPoolStatistics:
        s = self._limiter.statistics()
        return WorkerPoolStatistics(
            total_tokens=int(s.total_tokens),
            borrowed_tokens=s.borrowed_tokens,
            tasks_waiting=s.tasks_waiting,
            inline=False,
        )


@attrs.define
class InlineWorkerPool:
    """Runs callables on the calling task: deterministic, for tests and the harness."""

    _running: int = attrs.field(default=0, init=False)

    async def run_sync(self, fn: Callable[..., T], *args: object) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        self._running += 1
        try:
            result = fn(*args)
        finally:
            self._running -= 1
        await trio.lowlevel.cancel_shielded_checkpoint()
        return result

    def statistics(self) -> WorkerPoolStatistics:
        return WorkerPoolStatistics(
            total_tokens=1, borrowed_tokens=self._running, tasks_waiting=0, inline=True
        )
