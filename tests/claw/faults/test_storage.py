"""Storage failures with real mechanisms: read-only directories and full disks.

A directory is made read-only by a read-only bind mount (as root; ``chmod`` otherwise),
and a disk is full because a small ``tmpfs`` is (``tests/_storage.py``). Each failure
must be a claw error that says what is wrong and where, and nothing acknowledged before
it may be lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import claw
import claw_memory
from claw.memory import MemorySearchRequest

from ..._storage import read_only


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
