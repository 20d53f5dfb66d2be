"""A child process for the fault and multi-process tests: opens an index, then acts.

``python _child.py <workspace> <index_dir> kill <function> [<n>]``: sync with a worker
pool that SIGKILLs the process just before it would run ``<function>`` for the ``n``-th
time (default the first).
``python _child.py <workspace> <index_dir> hold``: open, print ``OPEN``, keep the
index open until stdin closes.
``python _child.py <workspace> <index_dir> churn``: open, then forever rewrite one of
five memory files and sync, printing ``SYNCED <i>`` after each publication (the parent
kills it at a moment of its choosing).
``python _child.py <workspace> <index_dir> publish <n>``: open, then ``n`` times
rewrite ``memory/note.md`` to ``plover round <i>`` and sync (one publication each).
``python _child.py <workspace> <index_dir> race <name>``: open without syncing, print
``READY``, wait for a line on stdin, then write ``memory/<name>.md`` and sync.
``python _child.py <workspace> <index_dir> lease``: take the writer lease, print
``HELD`` and hold it until stdin closes (or the process is killed).
``python _child.py <workspace> <index_dir> grow <function>``: open on a transcript of
``grown_turns(GROWN)`` (indexed before with ``grown_turns(GROWN - 3)``), so the open's
sync keeps that session's earlier chunks, and SIGKILL just before ``<function>``.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import attrs
import trio

from claw.plugin_sdk import InlineWorkerPool, WorkerPoolStatistics
from claw.plugin_sdk.search import HashEmbedder
from claw_memory._index import open_memory_index
from claw_memory._lease import LEASE_FILE, WriterLease
from claw_memory._settings import MemoryCoreSettings
from claw_memory._transcripts import InMemoryTranscriptSource, TranscriptTurn

T = TypeVar("T")

#: The length of the session the ``grow`` action syncs.
GROWN = 40


def grown_turns(n: int) -> list[TranscriptTurn]:
    """The first ``n`` turns of the session the ``grow`` action and its test share."""
    return [
        TranscriptTurn(f"e{i}", "user", "user", f"heron note {i} of the walrus log", 1.7e9 + i)
        for i in range(n)
    ]


def grown_source(n: int) -> InMemoryTranscriptSource:
    source = InMemoryTranscriptSource()
    source.put("main", "dm:owner", "s1", grown_turns(n))
    return source


class KillingPool:
    def __init__(self, victim: str, nth: int = 1) -> None:
        self.victim = victim
        self.left = nth
        self.inner = InlineWorkerPool()

    async def run_sync(self, fn: Callable[..., T], *args: object) -> T:
        if getattr(getattr(fn, "func", fn), "__name__", "") == self.victim:
            self.left -= 1
            if self.left <= 0:
                os.kill(os.getpid(), signal.SIGKILL)
        return await self.inner.run_sync(fn, *args)

    def statistics(self) -> WorkerPoolStatistics:
        return self.inner.statistics()


def churn_text(i: int) -> str:
    """What the churn writes in its ``i``-th round (one small chunk per file)."""
    return f"churn round {i} note {i * 7919 % 1000}"


def _rewrite(path: Path, text: str, round_: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    # A distinct mtime per round, so the cheap stat check always sees the change.
    os.utime(path, ns=(1_000_000_000 * (1000 + round_), 1_000_000_000 * (1000 + round_)))


async def main(workspace: str, index_dir: str, action: str, arg: str, nth: str) -> None:
    if action == "lease":
        lease = WriterLease(Path(index_dir) / LEASE_FILE)
        await trio.Path(index_dir).mkdir(parents=True, exist_ok=True)
        assert lease.try_acquire()
        print("HELD", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)
        return
    killing = action in ("kill", "grow")
    pool = KillingPool(arg, int(nth or 1)) if killing else InlineWorkerPool()
    settings = MemoryCoreSettings(min_score=0.0)
    if action == "grow":
        settings = attrs.evolve(settings, sources=("sessions",))
    if action in ("publish", "race"):
        settings = attrs.evolve(settings, sync_on_search=False, sync_on_open=action != "race")
    async with open_memory_index(
        workspace_dir=workspace,
        index_dir=index_dir,
        workers=pool,
        settings=settings,
        embedder=HashEmbedder(),
        transcripts=grown_source(GROWN) if action == "grow" else None,
    ) as index:
        if action == "grow":
            return  # the open's sync was to be killed: reaching here is a failure
        if action == "hold":
            print("OPEN", flush=True)
            await trio.to_thread.run_sync(sys.stdin.read)
        elif action in ("churn", "kill"):
            for i in itertools.count():
                path = Path(workspace) / "memory" / f"f{i % 5}.md"
                path.write_text(churn_text(i), encoding="utf-8")
                await index.sync()
                print(f"SYNCED {i}", flush=True)
                if action == "kill" and i >= 40:
                    return
        elif action == "publish":
            for i in range(int(arg)):
                _rewrite(Path(workspace) / "memory" / "note.md", f"plover round {i}", i)
                await index.sync()
        elif action == "race":
            print("READY", flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)
            _rewrite(Path(workspace) / "memory" / f"{arg}.md", f"raced note {arg}", 0)
            await index.sync()


if __name__ == "__main__":
    args = [*sys.argv[1:], "", ""]
    trio.run(main, args[0], args[1], args[2], args[3], args[4])
