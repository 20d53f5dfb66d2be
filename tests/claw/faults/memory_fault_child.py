"""Child process of the memory-file fault suite: one writer, in a loop, until killed.

Usage: ``python memory_fault_child.py MODE WORKSPACE STATE_DIR SEED``. Modes:

* ``flush``: the flush file arm's ``write`` tool appends ``- flush note <m>``;
* ``section``: ``host.memory.add(..., section="S")``, inside the file (a rewrite);
* ``add``: a plain ``host.memory.add`` (an append);
* ``forget``: adds its own entry, forgets it by the add's reference, and restores about
  every other one it forgot;
* ``editor``: no claw at all: appends ``- editor line <m>`` with a plain ``open("a")``
  (``echo >>``), as a person's script or editor plugin would, without claw's lock.

Every marker is ``<mode>-s<seed>-<n>``. Lines on stdout: ``READY``; ``BEGIN <op> <m>``
before an operation and ``ACK <op> <m> [<removal id>]`` once it was acknowledged
(``op``: ``add``, ``forget``, ``restore``); ``FAIL <op> <m> <error>`` when claw refused
it (the file kept changing under an editor: nothing was written).
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any

import trio

import claw
import claw_memory
from claw.flush._file_arm import append_only_write_tool

TARGET = "memory/notes.md"


class _ToolContext:
    def __init__(self, caller: claw.MemoryCallerContext) -> None:
        self.caller = caller


def say(*words: object) -> None:
    print(*words, flush=True)


def config(workspace: Path, state_dir: Path) -> claw.HostConfig:
    return claw.HostConfig(
        workspace_dir=workspace, state_dir=state_dir, plugins=claw.PluginsConfig(discover=False)
    )


def editor(workspace: Path, seed: int) -> None:
    """Append whole lines without claw, forever (a line is one small write)."""
    rng = random.Random(seed)
    say("READY")
    n = 0
    while True:
        n += 1
        marker = f"editor-s{seed}-{n}"
        say("BEGIN", "add", marker)
        with (workspace / TARGET).open("a", encoding="utf-8") as f:
            f.write(f"- editor line {marker}\n")
        say("ACK", "add", marker)
        time.sleep(rng.uniform(0.002, 0.02))


async def main(mode: str, workspace: Path, state_dir: Path, seed: int) -> None:
    rng = random.Random(seed)
    async with (
        claw.open_host(config(workspace, state_dir), plugins=[claw_memory.plugin]) as host,
        host.open_scope("writer") as scope,
    ):
        caller = scope.mint_caller_context(
            scope.mint_operator_authority({"operator.write"}, connection_id=f"{mode}-{seed}")
        )
        tool = append_only_write_tool(
            workspace, workspace / TARGET, TARGET, host.memory_files, f"flush-s{seed}"
        )
        say("READY")
        n = 0
        while True:
            n += 1
            marker = f"{mode}-s{seed}-{n}"
            say("BEGIN", "add", marker)
            try:
                if mode == "flush":
                    args: dict[str, Any] = {"path": TARGET, "content": f"- flush note {marker}"}
                    await tool.tool.handler(_ToolContext(caller), args)
                elif mode == "section":
                    await host.memory.add(
                        caller, f"section entry {marker}", path=TARGET, section="S"
                    )
                else:
                    added = await host.memory.add(caller, f"plain entry {marker}", path=TARGET)
            except claw.ClawError as exc:
                say("FAIL", "add", marker, type(exc).__name__)
                continue
            say("ACK", "add", marker)
            if mode != "forget":
                continue
            say("BEGIN", "forget", marker)
            try:
                gone = await host.memory.forget(caller, added.reference)
            except claw.ClawError as exc:
                say("FAIL", "forget", marker, type(exc).__name__)
                continue
            say("ACK", "forget", marker, gone.removal_id)
            if rng.random() < 0.5:
                assert gone.removal_id is not None
                say("BEGIN", "restore", marker)
                try:
                    await host.memory.restore(caller, gone.removal_id)
                except claw.ClawError as exc:
                    say("FAIL", "restore", marker, type(exc).__name__)
                    continue
                say("ACK", "restore", marker)


if __name__ == "__main__":
    _mode, _ws, _state, _seed = sys.argv[1:5]
    if _mode == "editor":
        editor(Path(_ws).resolve(), int(_seed))
    else:
        trio.run(main, _mode, Path(_ws).resolve(), Path(_state), int(_seed))
