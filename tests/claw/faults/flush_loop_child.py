"""Child process of the flush kill -9 loop: turns big enough to flush and compact, forever.

Usage: ``python flush_loop_child.py STATE_DIR SEED``. A memory plugin supplies a file-arm
plan (``memory/notes.md``); the model writes one uniquely marked note per flush run.
Lines on stdout: ``BEGIN turn <key> <marker>``, ``NOTE <note>`` when the model asks to
write a note, ``ACK turn <key> <session_id> <marker>`` once the turn returned and
``ACK flush <key> <flush_id> <note>`` for each note of a completed flush it carried.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

import claw
from claw.memory import MemoryPluginCapability
from claw.models import AssistantMessage, Message, ToolCall, ToolResult, ToolSpec, UserMessage

KEY = "dm:a"
TARGET = "memory/notes.md"
FLUSH_SYSTEM = "Session nearing compaction. Store durable memories now."
PAD = "x" * 2400  # about 600 tokens: a flush every few turns in a 4000-token window


class NotingModel:
    """Writes one marked note in a flush run, answers ``reply to <marker>`` otherwise."""

    context_window = 4000

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.count = 0
        self.notes: list[str] = []

    async def complete(
        self, *, messages: Sequence[Message], system_prompt: str, tools: Sequence[ToolSpec]
    ) -> AssistantMessage:
        await trio.sleep(random.uniform(0, 0.004))
        if any(t.name == "write" for t in tools):
            if isinstance(messages[-1], ToolResult):
                return AssistantMessage("NO_REPLY")
            self.count += 1
            note = f"note-s{self.seed}f{self.count}"
            self.notes.append(note)
            print("NOTE", note, flush=True)
            call = ToolCall(
                id=f"c{self.count}", name="write", arguments={"path": TARGET, "content": note}
            )
            return AssistantMessage("", tool_calls=(call,))
        last = next(m for m in reversed(messages) if isinstance(m, UserMessage))
        return AssistantMessage(f"reply to {last.text.split()[0]}")


def plugin() -> claw.Plugin:
    def resolver(request: claw.MemoryFlushPlanRequest) -> claw.MemoryFlushFilePlanDraft:
        return claw.MemoryFlushFilePlanDraft(
            relative_path=TARGET, prompt="Save durable memories now.", system_prompt=FLUSH_SYSTEM
        )

    def register(api: claw.PluginApi) -> None:
        api.register_memory_capability(
            MemoryPluginCapability(provider_flush_plan_resolver=resolver)
        )

    return claw.Plugin(id="notes", register=register)


def config(state: Path) -> claw.HostConfig:
    timing = claw.MemoryFlushConfig(soft_threshold_tokens=1000, reserve_tokens_floor=1000)
    compaction = claw.CompactionConfig(memory_flush=timing, keep_recent_tokens=500)
    return claw.HostConfig(
        workspace_dir=state / "workspace",
        state_dir=state / "state",
        plugins=claw.PluginsConfig(discover=False, slots=claw.SlotsConfig(memory="notes")),
        agents=claw.AgentsConfig(
            defaults=claw.AgentDefaultsConfig(model="noting/main", compaction=compaction)
        ),
        workers=claw.WorkersConfig(inline=True),
    )


def say(*parts: object) -> None:
    """One line in one write, so a kill cannot leave half of it on the pipe."""
    sys.stdout.write(" ".join(map(str, parts)) + "\n")
    sys.stdout.flush()


async def main(state: Path, seed: int) -> None:
    random.seed(seed)
    (state / "workspace").mkdir(parents=True, exist_ok=True)
    model = NotingModel(seed)
    async with claw.open_host(config(state), plugins=[plugin()]) as host:
        host.models.register_provider("noting", lambda name: model)
        if host.sessions.get_nowait(KEY) is None:
            await host.sessions.create(KEY, agent_id="main", chat_type="direct")
        say("READY")
        for n in range(1_000_000):
            marker = f"s{seed}n{n}"
            say("BEGIN", "turn", KEY, marker)
            before = len(model.notes)
            result = await host.run_turn(KEY, UserMessage(f"{marker} {PAD}"), sender_is_owner=True)
            if result.flush is not None and result.flush.status == "completed":
                for note in model.notes[before:]:
                    say("ACK", "flush", KEY, result.flush.flush_id, note)
            say("ACK", "turn", KEY, result.session_id, marker)


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]))
