"""A child process for the fault tests: opens an index, then dies or holds it.

``python _child.py <workspace> <index_dir> kill <function>``: sync with a worker pool
that SIGKILLs the process just before it would run ``<function>``.
``python _child.py <workspace> <index_dir> hold``: open, print ``OPEN``, keep the
index open until stdin closes.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import TypeVar

import trio

from claw.plugin_sdk import InlineWorkerPool, WorkerPoolStatistics
from claw_memory._hash_embedder import HashEmbedder
from claw_memory._index import open_memory_index
from claw_memory._settings import MemoryCoreSettings

T = TypeVar("T")


class KillingPool:
    def __init__(self, victim: str) -> None:
        self.victim = victim
        self.inner = InlineWorkerPool()

    async def run_sync(self, fn: Callable[..., T], *args: object) -> T:
        if getattr(getattr(fn, "func", fn), "__name__", "") == self.victim:
            os.kill(os.getpid(), signal.SIGKILL)
        return await self.inner.run_sync(fn, *args)

    def statistics(self) -> WorkerPoolStatistics:
        return self.inner.statistics()


async def main(workspace: str, index_dir: str, action: str, victim: str) -> None:
    pool = KillingPool(victim) if action == "kill" else InlineWorkerPool()
    async with open_memory_index(
        workspace_dir=workspace,
        index_dir=index_dir,
        workers=pool,
        settings=MemoryCoreSettings(min_score=0.0),
        embedder=HashEmbedder(),
    ):
        if action == "hold":
            print("OPEN", flush=True)
            await trio.to_thread.run_sync(sys.stdin.read)


if __name__ == "__main__":
    args = [*sys.argv[1:], ""]
    trio.run(main, args[0], args[1], args[2], args[3])
