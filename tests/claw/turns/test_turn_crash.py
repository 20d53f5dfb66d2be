"""A process killed between a turn's terminal entry and its commit advances exactly once."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import claw
from claw_testing import ReferenceContextEngine, ScriptedModel

CHILD = Path(__file__).with_name("crash_turn_child.py")


@pytest.mark.slow
def test_killed_between_terminal_entry_and_commit_commits_once_on_restart(
    tmp_path: Path,
) -> None:
    engine_db = tmp_path / "engine.sqlite3"
    with subprocess.Popen(
        [sys.executable, str(CHILD), str(tmp_path), str(engine_db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    assert line.startswith("TERMINAL"), line
    key = line.split()[1]

    trio.run(_restart_and_check, tmp_path, engine_db, key)


async def _restart_and_check(tmp_path: Path, engine_db: Path, key: str) -> None:
    engine = ReferenceContextEngine(engine_db)
    assert engine.advancements() == []  # the crash happened before the commit
    plugin = claw.Plugin(
        id="reference-plugin",
        register=lambda api: api.register_context_engine("reference", lambda ctx: engine),
    )
    config = claw.HostConfig(
        workspace_dir=tmp_path,
        state_dir=tmp_path / "state",
        plugins=claw.PluginsConfig(
            discover=False, slots=claw.SlotsConfig(context_engine="reference")
        ),
        agents=claw.AgentsConfig(defaults=claw.AgentDefaultsConfig(model="scripted/main")),
    )
    async with claw.open_host(config, plugins=[plugin]) as host:
        (turn,) = await host.transcripts.turns()
        assert turn.advancement_key == key
        assert turn.commit_outcome == "committed"
        host.models.register_provider("scripted", lambda name: ScriptedModel(["second"]))
        await host.run_turn("dm:alice", claw.UserMessage("again"), sender_is_owner=True)
    advancements = engine.advancements()
    engine.close()
    assert [a[0] for a in advancements].count(key) == 1
    assert len(advancements) == 2
    assert engine.calls.count("commit_turn") == 2
