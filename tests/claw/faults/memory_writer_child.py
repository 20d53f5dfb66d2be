"""Child process of the memory-file write tests: one kind of writer, in a loop.

Usage: ``python memory_writer_child.py MODE WORKSPACE STATE_DIR SEED COUNT``. ``MODE`` is

* ``flush``: the pre-compaction flush's file arm ``write`` tool appending a note to
  ``memory/notes.md`` (the route a completed flush reports);
* ``section``: ``host.memory.add(..., section=...)`` into ``memory/notes.md`` (a rewrite
  inside the file, the ``claw memory add --section`` route);
* ``add``: a plain ``host.memory.add`` to ``memory/notes.md`` (an append).

Each write carries a unique marker ``<mode>-s<seed>-<n>``. Lines on stdout: ``READY``
once the host is open, ``BEGIN <marker>`` before a write and ``ACK <marker>`` once it
was acknowledged. ``COUNT`` writes are made (0: until killed).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import trio

import claw
import claw_memory
from claw.flush._file_arm import append_only_write_tool

TARGET = "memory/notes.md"


class _FlushContext:
    def __init__(self, caller: claw.MemoryCallerContext) -> None:
        self.caller = caller


def config(workspace: Path, state_dir: Path) -> claw.HostConfig:
    return claw.HostConfig(
        workspace_dir=workspace,
        state_dir=state_dir,
        plugins=claw.PluginsConfig(discover=False),
    )


async def main(mode: str, workspace: Path, state_dir: Path, seed: int, count: int) -> None:
    target = workspace / TARGET  # the workspace is resolved by the caller
    async with (
        claw.open_host(config(workspace, state_dir), plugins=[claw_memory.plugin]) as host,
        host.open_scope("writer") as scope,
    ):
        caller = scope.mint_caller_context(scope.mint_operator_authority({"operator.write"}))
        tool = append_only_write_tool(workspace, target, TARGET, host.memory_files, f"flush-{seed}")
        print("READY", flush=True)
        n = 0
        while count == 0 or n < count:
            n += 1
            marker = f"{mode}-s{seed}-{n}"
            print("BEGIN", marker, flush=True)
            if mode == "flush":
                args: dict[str, Any] = {"path": TARGET, "content": f"- flush note {marker}"}
                await tool.tool.handler(_FlushContext(caller), args)
            elif mode == "section":
                await host.memory.add(caller, f"section entry {marker}", path=TARGET, section="S")
            elif mode == "add":
                await host.memory.add(caller, f"plain entry {marker}", path=TARGET)
            else:
                raise SystemExit(f"unknown mode {mode!r}")
            print("ACK", marker, flush=True)


if __name__ == "__main__":
    _mode, _ws, _state, _seed, _count = sys.argv[1:6]
    trio.run(main, _mode, Path(_ws).resolve(), Path(_state), int(_seed), int(_count))
