"""claw.open_memory: the one-call local path to a workspace's memory."""

from __future__ import annotations

from pathlib import Path

import pytest

import claw
from claw._demo import copy_sample_workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return copy_sample_workspace(tmp_path / "ws")


async def test_open_memory_searches_adds_and_forgets_in_one_block(workspace: Path) -> None:
    async with claw.open_memory(workspace) as mem:
        found = await mem.search("release manager apollo")
        assert found.hits[0].citation is not None
        assert found.hits[0].citation.path == "MEMORY.md"
        added = await mem.add("The apollo retro is on Monday.")
        again = await mem.search("apollo retro monday")
        assert again.hits[0].reference.id == added.reference.id
        got = await mem.get(
            f"{added.citation.path}#L{added.citation.start_line}-L{added.citation.end_line}"
        )
        assert got.status == "ok" and got.text is not None and "retro is on Monday" in got.text
        await mem.forget(added.reference)
        after = await mem.search("apollo retro monday")
        assert all("retro is on Monday" not in h.excerpt for h in after.hits)
        assert (await mem.status()).status == "ready"
    assert (workspace / ".claw").is_dir()


async def test_a_read_only_local_handle_cannot_write(workspace: Path) -> None:
    async with claw.open_memory(workspace, scopes=("operator.read",)) as mem:
        with pytest.raises(claw.CapabilityDeniedError, match="operator.write"):
            await mem.add("x")


def test_workspace_config_names_a_broken_toml_file(workspace: Path) -> None:
    (workspace / "claw.toml").write_text("[plugins\n", encoding="utf-8")
    with pytest.raises(claw.ConfigError, match=r"claw\.toml: invalid TOML: Expected ']'"):
        claw.load_workspace_config(workspace)


def test_workspace_config_refuses_a_missing_directory_and_a_missing_named_file(
    tmp_path: Path,
) -> None:
    with pytest.raises(claw.ConfigError, match="is not a directory"):
        claw.load_workspace_config(tmp_path / "nope")
    with pytest.raises(claw.ConfigError, match="config file not found"):
        claw.load_workspace_config(tmp_path, tmp_path / "nope.toml")


async def test_open_memory_restores_lists_and_purges_with_the_admin_scope(workspace: Path) -> None:
    async with claw.open_memory(workspace) as mem:
        added = await mem.add("The gate code is zq9local")
        gone = await mem.forget(added.reference)
        assert [r.id for r in await mem.removals()] == [gone.removal_id]
        back = await mem.restore(gone.removal_id or "")
        assert back.mode == "in-place"
        with pytest.raises(claw.CapabilityDeniedError, match="operator.admin"):
            await mem.purge(text="zq9local")
    scopes = ("operator.read", "operator.write", "operator.admin")
    async with claw.open_memory(workspace, scopes=scopes) as mem:
        done = await mem.purge(text="zq9local")
        assert done.entries == 1
        assert not any("zq9local" in h.excerpt for h in (await mem.search("gate code")).hits)
