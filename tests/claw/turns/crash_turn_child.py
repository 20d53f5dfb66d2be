"""Child process for the crash test: ends a turn, then hangs inside commit_turn.

Usage: python crash_turn_child.py STATE_DIR ENGINE_DB. Prints TERMINAL once the turn's
terminal entry is durable and the engine's commit has begun, then blocks until killed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import trio

import claw
from claw.context import CommitTurnParams
from claw_testing import ReferenceContextEngine, ScriptedModel


def hang(params: CommitTurnParams) -> None:
    print("TERMINAL", params.advancement_key, flush=True)
    time.sleep(600)


async def main(state_dir: Path, engine_db: Path) -> None:
    engine = ReferenceContextEngine(engine_db, before_commit=hang)
    plugin = claw.Plugin(
        id="reference-plugin",
        register=lambda api: api.register_context_engine("reference", lambda ctx: engine),
    )
    config = claw.HostConfig(
        workspace_dir=state_dir,
        state_dir=state_dir / "state",
        plugins=claw.PluginsConfig(
            discover=False, slots=claw.SlotsConfig(context_engine="reference")
        ),
        agents=claw.AgentsConfig(defaults=claw.AgentDefaultsConfig(model="scripted/main")),
    )
    async with claw.open_host(config, plugins=[plugin]) as host:
        host.models.register_provider("scripted", lambda name: ScriptedModel(["the answer"]))
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        await host.run_turn("dm:alice", claw.UserMessage("question"), sender_is_owner=True)


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), Path(sys.argv[2]))
