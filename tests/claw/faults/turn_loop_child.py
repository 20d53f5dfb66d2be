"""Child process of the kill -9 loop: runs turns through a commit_turn engine and
changes sessions, forever, printing what it is about to do and what was acknowledged.

Usage: ``python turn_loop_child.py STATE_DIR ENGINE_DB SEED``. Lines on stdout:
``BEGIN <op> <key> <text>`` before an operation, ``ACK <op> <key> <session_id> <text>``
once it returned. The parent SIGKILLs this process at random moments.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import trio

import claw
from claw.context import CommitTurnParams, CommitTurnResult
from claw.models import AssistantMessage, Message, ToolSpec, UserMessage
from claw_testing import ReferenceContextEngine

KEYS = ("dm:a", "dm:b", "group:c")


class SlowCommitEngine(ReferenceContextEngine):
    """A reference engine that lingers after its commit, so kills land in that window."""

    async def commit_turn(self, params: CommitTurnParams) -> CommitTurnResult:
        result = await super().commit_turn(params)
        _linger()
        return result


def _linger() -> None:
    time.sleep(random.uniform(0, 0.003))  # blocking on purpose: the loop cannot run


class EchoModel:
    """Answers ``reply to <text>`` after a short real delay (kills land in the call)."""

    context_window = 1_000_000

    async def complete(
        self, *, messages: Sequence[Message], system_prompt: str, tools: Sequence[ToolSpec]
    ) -> AssistantMessage:
        await trio.sleep(random.uniform(0, 0.004))
        last = next(m for m in reversed(messages) if isinstance(m, UserMessage))
        return AssistantMessage(f"reply to {last.text}")


def config(state: Path) -> claw.HostConfig:
    return claw.HostConfig(
        workspace_dir=state,
        state_dir=state / "state",
        plugins=claw.PluginsConfig(
            discover=False, slots=claw.SlotsConfig(context_engine="reference")
        ),
        agents=claw.AgentsConfig(defaults=claw.AgentDefaultsConfig(model="echo/main")),
        workers=claw.WorkersConfig(inline=True),
    )


def plugin(engine: ReferenceContextEngine) -> claw.Plugin:
    return claw.Plugin(
        id="reference-plugin",
        register=lambda api: api.register_context_engine("reference", lambda ctx: engine),
    )


def say(*parts: object) -> None:
    """One line in one write, so a kill cannot leave half of it on the pipe."""
    sys.stdout.write(" ".join(map(str, parts)) + "\n")
    sys.stdout.flush()


async def main(state: Path, engine_db: Path, seed: int) -> None:
    random.seed(seed)
    engine = SlowCommitEngine(engine_db)
    async with claw.open_host(config(state), plugins=[plugin(engine)]) as host:
        host.models.register_provider("echo", lambda name: EchoModel())
        for key in KEYS:
            if host.sessions.get_nowait(key) is None:
                chat = "group" if key.startswith("group") else "direct"
                say("BEGIN", "create", key, "-")
                row = await host.sessions.create(key, agent_id="main", chat_type=chat)
                say("ACK", "create", key, row.session_id, "-")
        say("READY")
        for n in range(1_000_000):
            key = random.choice(KEYS)
            if random.random() < 0.15:
                say("BEGIN", "reset", key, "-")
                row = await host.sessions.reset(key, keep_session_id=random.random() < 0.5)
                say("ACK", "reset", key, row.session_id, "-")
                continue
            text = f"s{seed}n{n}"
            say("BEGIN", "turn", key, text)
            result = await host.run_turn(key, UserMessage(text), sender_is_owner=True)
            say("ACK", "turn", key, result.session_id, text)


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
