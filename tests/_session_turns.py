"""Turns of one session driven from several real processes (SQLite) or hosts (PostgreSQL).

Shared by ``tests/claw/multiprocess/_child.py`` and ``tests/postgres/host_child.py``:

* :class:`LoggingModel` answers every call deterministically from what it is asked (a
  flush turn says ``NO_REPLY``, anything else ``ok``), and appends ``ENTER pid`` and
  ``LEAVE pid`` lines to a log file shared by the processes around a short real sleep.
  Two turns of one session that overlap in time leave two ``ENTER`` lines in a row.
  A turn whose user message is :data:`HANG` never gets an answer (``hung`` is set once
  the model has it): its process holds the session until it is killed.
* :func:`flush_plugin` supplies a file-arm flush plan, so sessions driven past their
  thresholds flush and compact; :func:`flush_turns_config` sets the window arithmetic.
* :func:`check_serial` and :func:`check_once_per_cycle` are the assertions.

Window arithmetic: a 4000-token window with a 1000-token reserve floor and soft
threshold: a flush is due above 2000 estimated tokens, threshold compaction above 3000.
A user message of :data:`TURN_TOKENS` tokens makes the second turn of a cycle flush
(before it is assembled) and the third compact.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

import claw
from claw.flush._identity import derive_flush_id
from claw.memory import MemoryPluginCapability
from claw.models import AssistantMessage, Message, ToolSpec

WINDOW = 4000
TURN_TOKENS = 1100
FLUSH_SYSTEM = "Session nearing compaction. Store durable memories now."
FLUSH_TARGET = "memory/flush.md"
#: How long the model holds each call (real time: the window a second process needs).
HOLD = 0.02
HANG = "hang"


def log_line(log: Path, line: str) -> None:
    """Append one line to ``log`` in one ``write`` (O_APPEND: never torn across processes)."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


class LoggingModel:
    """See the module docstring."""

    context_window = WINDOW

    def __init__(self, log: Path) -> None:
        self.log = log
        self.hung = trio.Event()

    async def complete(
        self, *, messages: Sequence[Message], system_prompt: str, tools: Sequence[ToolSpec]
    ) -> AssistantMessage:
        if messages and getattr(messages[-1], "text", None) == HANG:
            self.hung.set()
            await trio.sleep_forever()
        log_line(self.log, f"ENTER {os.getpid()}")
        await trio.sleep(HOLD)  # real processes: a real sleep is the point
        log_line(self.log, f"LEAVE {os.getpid()}")
        return AssistantMessage("NO_REPLY" if system_prompt == FLUSH_SYSTEM else "ok")


def flush_plugin() -> claw.Plugin:
    """A memory plugin whose only part is a file-arm flush plan resolver."""

    def resolver(request: claw.MemoryFlushPlanRequest) -> claw.MemoryFlushPlan:
        return claw.MemoryFlushPlan.from_timing(
            request.timing,
            relative_path=FLUSH_TARGET,
            prompt="Save durable memories now; reply NO_REPLY if there is nothing to store.",
            system_prompt=FLUSH_SYSTEM,
        )

    return claw.Plugin(
        id="flusher",
        register=lambda api: api.register_memory_capability(
            MemoryPluginCapability(flush_plan_resolver=resolver)
        ),
    )


def flush_turns_compaction() -> claw.CompactionConfig:
    """The compaction settings of the window arithmetic in the module docstring."""
    return claw.CompactionConfig(
        memory_flush=claw.MemoryFlushConfig(soft_threshold_tokens=1000, reserve_tokens_floor=1000),
        keep_recent_tokens=500,
    )


def turn_text(index: int) -> str:
    """This process's ``index``-th user message: about :data:`TURN_TOKENS` tokens."""
    return f"turn {index} of {os.getpid()} " + "x" * (4 * (TURN_TOKENS - 8))


async def run_turns(host: claw.Host, key: str, count: int) -> dict[str, Any]:
    """Run ``count`` turns of ``key``; what this process saw of flushes and compactions."""
    for index in range(count):
        await host.run_turn(key, claw.UserMessage(turn_text(index)), sender_is_owner=True)
    return {
        "flushed": [e.data["flush_id"] for e in host.events.events("flush.completed")],
        "compactions": len(host.events.events("compaction.completed")),
    }


def check_serial(log: Path) -> int:
    """Assert that no two model calls overlapped in time; return how many there were."""
    lines = log.read_text().splitlines()
    assert len(lines) % 2 == 0, lines[-3:]
    for enter, leave in zip(lines[::2], lines[1::2], strict=True):
        pid = enter.removeprefix("ENTER ")
        assert enter.startswith("ENTER ") and leave == f"LEAVE {pid}", (enter, leave, lines)
    return len(lines) // 2


def check_once_per_cycle(
    reports: Sequence[Mapping[str, Any]], *, session_id: str, revision: int, compactions: int
) -> None:
    """Assert exactly one completed flush per compaction cycle across all processes.

    ``compactions`` is how many compaction entries the session's transcript holds:
    cycles ``0 .. compactions - 1`` each flushed once (before their compaction), the
    open cycle at most once, and no cycle twice.
    """
    flushed = [flush_id for report in reports for flush_id in report["flushed"]]
    assert len(flushed) == len(set(flushed)), f"a cycle flushed twice: {flushed}"
    assert sum(report["compactions"] for report in reports) == compactions
    closed = {derive_flush_id(session_id, revision, k) for k in range(compactions)}
    open_cycle = derive_flush_id(session_id, revision, compactions)
    assert closed <= set(flushed) <= closed | {open_cycle}, (flushed, compactions)
