"""Purge reaches every copy: after it, not one byte under the workspace or the state
directory holds the purged text (issue 24, section 3, Memory Core)."""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import claw
import claw_memory
from claw.memory import MemoryReference, MemorySearchRequest

from .test_plugin import _config


def scanned(roots: list[Path]) -> tuple[int, int]:
    """How many files, and bytes, :func:`occurrences` reads under ``roots``."""
    files = [p for r in roots for p in r.rglob("*") if p.is_file() and not p.is_symlink()]
    return len(files), sum(p.stat().st_size for p in files)


def report(provider: str, before: dict[str, int], roots: list[Path], after: dict[str, int]) -> str:
    """One line for the record: where the marker was, and what the scan after found."""
    files, size = scanned(roots)
    return (
        f"purge marker scan ({provider}): before {sum(before.values())} occurrence(s) in "
        f"{len(before)} file(s); after {sum(after.values())} in {files} files ({size} bytes)"
    )


def occurrences(roots: list[Path], marker: bytes) -> dict[str, int]:
    """Every file under ``roots`` whose bytes hold ``marker``, and how often."""
    found: dict[str, int] = {}
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                n = path.read_bytes().count(marker)
                if n:
                    found[str(path.relative_to(root.parent))] = n
    return found


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[claw.Host]:
    async with claw.open_host(_config(tmp_path), plugins=[claw_memory.plugin]) as h:
        yield h


async def _as(host: claw.Host, scopes: set[str], fn: Any) -> Any:
    async with host.open_scope("op") as scope:
        return await fn(scope.mint_caller_context(scope.mint_operator_authority(scopes)))


async def _hits(host: claw.Host, query: str) -> list[str]:
    async def run(ctx: claw.MemoryCallerContext) -> list[str]:
        async with host.memory.open(ctx) as handle:
            result = await handle.search(MemorySearchRequest(query=query, min_score=0.0))
        return [h.excerpt for h in result.hits]

    found: list[str] = await _as(host, {"operator.read"}, run)
    return found


async def test_a_purged_text_is_in_no_byte_of_the_workspace_or_the_state_directory(
    host: claw.Host,
) -> None:
    marker = f"zq9purge{uuid.uuid4().hex[:12]}"
    workspace = host.config.workspace_dir
    state = host.config.resolved_state_dir
    admin = {"operator.read", "operator.write", "operator.admin"}

    async def write(ctx: claw.MemoryCallerContext) -> None:
        a = await host.memory.add(ctx, f"The vault code is {marker}.", path="MEMORY.md")
        await host.memory.add(ctx, f"Copied: the vault code is {marker}.", path="memory/x.md")
        await host.memory.add(ctx, f"Filed: {marker} again", path="MEMORY.md", section="People")
        gone = await host.memory.forget(ctx, a.reference)  # the journal keeps a copy...
        await host.memory.restore(ctx, gone.removal_id)  # ...and the file has it back
        b = await host.memory.add(ctx, f"Short-lived: {marker}", path="memory/y.md")
        await host.memory.forget(ctx, b.reference)  # a copy only the journal holds
        await host.memory.add(ctx, "The boiler is serviced in March.", path="memory/y.md")

    await _as(host, admin, write)
    assert any(marker in hit for hit in await _hits(host, marker))
    index_db = state / "memory" / "main" / "index.sqlite3"
    with sqlite3.connect(index_db) as db:
        went = {r[0] for r in db.execute("SELECT hash FROM chunks WHERE instr(text, ?)", (marker,))}
    assert went
    before = occurrences([workspace, state], marker.encode())
    assert any("journal" in p for p in before) and any("sqlite3" in p for p in before)
    assert any("published" in p for p in before)

    with pytest.raises(claw.CapabilityDeniedError, match="operator.admin"):
        await _as(host, {"operator.write"}, lambda ctx: host.memory.purge(ctx, text=marker))
    dry = await _as(host, admin, lambda ctx: host.memory.purge(ctx, text=marker, dry_run=True))
    assert (dry.dry_run, dry.entries, len(dry.removals)) == (True, 3, 2)
    assert occurrences([workspace, state], marker.encode()) == before

    began = time.time_ns() - 5_000_000  # file times come from a coarser clock
    done = await _as(host, admin, lambda ctx: host.memory.purge(ctx, text=marker))
    assert (done.paths, done.entries, done.warning) == (("MEMORY.md", "memory/x.md"), 3, None)
    after = occurrences([workspace, state], marker.encode())
    print("\n" + report("Memory Core", before, [workspace, state], after))
    assert after == {}
    # tantivy compresses what it stores, so bytes alone prove little there: every file of
    # the lexical directory was written by the purge (rebuilt from SQLite), none deletes.
    lexical = [p for p in (state / "memory" / "main" / "lexical").rglob("*") if p.is_file()]
    assert lexical and all(p.stat().st_mtime_ns >= began for p in lexical)
    assert not [p for p in lexical if p.suffix == ".del"]
    assert not any(marker in hit for hit in await _hits(host, marker))
    assert any("boiler" in hit for hit in await _hits(host, "boiler serviced"))
    with sqlite3.connect(index_db) as db:
        cached = {r[0] for r in db.execute("SELECT text_hash FROM embedding_cache")}
    assert cached and not (went & cached)
    removals = await _as(host, admin, host.memory.removals)
    assert [r.status for r in removals] == ["purged", "purged"]
    assert all(r.text is None for r in removals)


async def test_a_purge_by_reference_takes_the_entry_and_every_copy_and_says_what_it_missed(
    host: claw.Host,
) -> None:
    marker = f"zq9ref{uuid.uuid4().hex[:12]}"
    admin = {"operator.read", "operator.write", "operator.admin"}

    async def run(ctx: claw.MemoryCallerContext) -> Any:
        a = await host.memory.add(ctx, f"Locker {marker}", path="memory/a.md")
        entry = (host.config.workspace_dir / "memory" / "a.md").read_text(encoding="utf-8")
        (host.config.workspace_dir / "memory" / "b.md").write_text(
            entry + "- keep me\n", encoding="utf-8"
        )
        return await host.memory.purge(ctx, reference=a.reference)

    done = await _as(host, admin, run)
    assert (done.paths, done.entries) == (("memory/a.md", "memory/b.md"), 2)
    workspace = host.config.workspace_dir
    assert marker not in (workspace / "memory" / "a.md").read_text(encoding="utf-8")
    assert (workspace / "memory" / "b.md").read_text(encoding="utf-8") == "- keep me\n"
    ref = MemoryReference(provider_id="memory-core", id="MEMORY.md")
    with pytest.raises(claw.ClawError, match="names lines"):
        await _as(host, admin, lambda ctx: host.memory.purge(ctx, reference=ref))


async def test_a_purge_reaches_the_index_of_another_state_directory_on_its_next_use(
    tmp_path: Path,
) -> None:
    marker = f"zq9two{uuid.uuid4().hex[:12]}"
    admin = {"operator.read", "operator.write", "operator.admin"}
    config = _config(tmp_path)
    other = attrs.evolve(config, state_dir=tmp_path / "state-b")
    async with (
        claw.open_host(config, plugins=[claw_memory.plugin]) as a,
        claw.open_host(other, plugins=[claw_memory.plugin]) as b,
    ):
        await _as(a, admin, lambda ctx: a.memory.add(ctx, f"Pin {marker}", path="memory/p.md"))
        assert any(marker in hit for hit in await _hits(b, marker))
        assert occurrences([tmp_path / "state-b"], marker.encode())
        await _as(a, admin, lambda ctx: a.memory.purge(ctx, text=marker))
        assert occurrences([tmp_path / "ws", tmp_path / "state"], marker.encode()) == {}
        assert not any(marker in hit for hit in await _hits(b, marker))
        assert occurrences([tmp_path / "state-b"], marker.encode()) == {}
