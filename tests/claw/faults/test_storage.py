"""Storage failures with real mechanisms: read-only directories and full disks.

A directory is made read-only by a read-only bind mount (as root; ``chmod`` otherwise),
and a disk is full because a small ``tmpfs`` is (``tests/_storage.py``). Each failure
must be a claw error that says what is wrong and where, and nothing acknowledged before
it may be lost.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

import claw
import claw_memory
from claw.memory import MemorySearchRequest
from claw.models import AssistantMessage, UserMessage
from claw.turns import TurnStatus
from claw_testing import ScriptedModel

from ..._storage import grow, read_only, small_disk


def _config(tmp_path: Path) -> claw.HostConfig:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "MEMORY.md").write_text("- The deploy window is Friday.\n", encoding="utf-8")
    return claw.HostConfig(
        workspace_dir=workspace,
        state_dir=tmp_path / "state",
        plugins=claw.PluginsConfig(discover=False, slots=claw.SlotsConfig(memory="memory-core")),
        workers=claw.WorkersConfig(inline=True),
    )


async def _search(config: claw.HostConfig) -> int:
    async with claw.open_host(config, plugins=[claw_memory.plugin]) as host:
        async with host.open_scope("test") as scope:
            caller = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
            async with host.memory.open(caller) as handle:
                result = await handle.search(MemorySearchRequest(query="deploy window"))
    return len(result.hits)


@pytest.mark.parametrize("when", ["before the first index", "after an index exists"])
async def test_a_read_only_index_directory_is_named_as_read_only(
    tmp_path: Path, when: str
) -> None:
    config = _config(tmp_path)
    memory_dir = tmp_path / "state" / "memory"
    if when == "after an index exists":
        assert await _search(config) == 1
        # A change, so that the next search must write.
        (config.workspace_dir / "MEMORY.md").write_text("- The deploy is Monday.\n", "utf-8")
        blocked = memory_dir / "main"
    else:
        blocked = memory_dir
    with read_only(blocked), pytest.raises(claw.ProviderError) as info:
        await _search(config)
    message = str(info.value)
    assert str(blocked) in message
    assert "read-only file system" in message or "not writable" in message
    assert "unable to open database file" not in message.split("(SQLite:", maxsplit=1)[0]
    # Writable again, it recovers.
    assert await _search(config) >= 1


TURN_TEXT = "x" * 3000


@pytest.mark.slow
async def test_a_full_state_directory_is_named_and_loses_no_acknowledged_turn(
    tmp_path: Path,
) -> None:
    """Turns until the state directory's disk (a 1 MiB tmpfs) is full: the failing turn is a
    StorageFullError naming the database and the directory; every turn acknowledged before
    it is there, once, after the disk has room again, and the session goes on."""
    with small_disk(tmp_path / "state", "1m") as state:
        config = attrs.evolve(
            _config(tmp_path),
            state_dir=state,
            agents=claw.AgentsConfig(defaults=claw.AgentDefaultsConfig(model="scripted/main")),
            plugins=claw.PluginsConfig(discover=False),
        )
        model = ScriptedModel(["noted"] * 2000)
        acknowledged: list[str] = []
        async with claw.open_host(config) as host:
            host.models.register_provider("scripted", lambda name: model)
            await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
            with pytest.raises(claw.StorageFullError) as info:
                for i in range(2000):
                    text = f"turn {i} {TURN_TEXT}"
                    await host.run_turn(
                        "dm:alice", UserMessage(text, sender="alice"), sender_is_owner=True
                    )
                    acknowledged.append(text)
        message = str(info.value)
        assert str(state) in message and "is full" in message
        assert "database" in message and not message.startswith("database or disk is full")
        assert len(acknowledged) > 5
        grow(state, "16m")
        async with claw.open_host(config) as host:
            host.models.register_provider("scripted", lambda name: model)
            row = host.sessions.get_nowait("dm:alice")
            assert row is not None
            messages = await host.transcripts.visible_messages(row.session_id)
            said = [m.text for m in messages if isinstance(m, UserMessage)]
            for text in acknowledged:
                assert said.count(text) == 1, text[:12]
            turns = await host.transcripts.turns(row.session_id)
            finished = [t for t in turns if t.status in (TurnStatus.TERMINAL, TurnStatus.COMMITTED)]
            assert len(finished) == len(acknowledged)
            replies = [m for m in messages if isinstance(m, AssistantMessage)]
            assert len(replies) >= len(acknowledged)
            await host.run_turn(
                "dm:alice", UserMessage("after", sender="alice"), sender_is_owner=True
            )
        print(
            f"\nfull disk: {len(acknowledged)} turns acknowledged before the disk filled, "
            f"all {len(acknowledged)} there after it had room; failure: {message[:120]}"
        )
