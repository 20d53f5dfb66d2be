"""Forget that cannot destroy more than was meant, can be undone, and says who wrote what."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import claw
import claw_memory
from claw._demo import copy_sample_workspace
from claw.memory import MemoryReference, MemorySearchRequest
from claw.models import UserMessage
from claw.plugin_sdk import ForgetScopeError
from claw_testing import ScriptedModel, ScriptedReply

from .test_plugin import _config


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[claw.Host]:
    async with claw.open_host(_config(tmp_path), plugins=[claw_memory.plugin]) as h:
        await h.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        await h.sessions.create("grp:1", agent_id="main", chat_type="group")
        yield h


@pytest.fixture
async def sample(tmp_path: Path) -> AsyncIterator[claw.Host]:
    """The workspace ``claw init`` creates: a 14-line MEMORY.md of eleven entries."""
    workspace = copy_sample_workspace(tmp_path / "ws")
    config = claw.HostConfig(
        workspace_dir=workspace,
        state_dir=workspace / ".claw",
        plugins=claw.PluginsConfig(discover=False),
        workers=claw.WorkersConfig(inline=True),
    )
    async with claw.open_host(config, plugins=[claw_memory.plugin]) as h:
        yield h


async def _operator(host: claw.Host, fn: Any, scopes: tuple[str, ...] = ("operator.write",)) -> Any:
    async with host.open_scope("op") as scope:
        ctx = scope.mint_caller_context(scope.mint_operator_authority(set(scopes)))
        return await fn(ctx)


async def _search(host: claw.Host, query: str) -> Any:
    async def run(ctx: claw.MemoryCallerContext) -> Any:
        async with host.memory.open(ctx) as handle:
            return await handle.search(MemorySearchRequest(query=query, min_score=0.0))

    return await _operator(host, run, ("operator.read",))


async def test_the_newcomers_forget_of_a_search_chunk_no_longer_empties_memory_md(
    sample: claw.Host,
) -> None:
    """Issue 24: ``search "deploy window"`` cites the whole 14-line chunk; forgetting that
    citation used to remove all 14 lines. Now it is refused naming the entries, removes
    nothing, and removing the range must be asked for; even then it is restorable."""
    memory = sample.config.workspace_dir / "MEMORY.md"
    before = memory.read_text(encoding="utf-8")
    hit = (await _search(sample, "deploy window")).hits[0]
    # Search cites one entry now (entries are indexed one at a time); the whole chunk it
    # cited before is still a citation a caller may hold.
    assert (hit.reference.id, hit.reference.fragment) == ("MEMORY.md", "L9-L9")
    hit = attrs.evolve(hit, reference=attrs.evolve(hit.reference, fragment="L1-L14", revision=None))
    with pytest.raises(ForgetScopeError, match=r"covers 11 entries .*L1-L1 '# Memory'"):
        await _operator(sample, lambda ctx: sample.memory.forget(ctx, hit.reference))
    assert memory.read_text(encoding="utf-8") == before
    gone = await _operator(
        sample, lambda ctx: sample.memory.forget(ctx, hit.reference, whole_range=True)
    )
    assert (gone.start_line, gone.end_line, gone.entries) == (1, 14, 11)
    assert memory.read_text(encoding="utf-8") == ""
    back = await _operator(sample, lambda ctx: sample.memory.restore(ctx, gone.removal_id))
    assert back.mode == "in-place" and memory.read_text(encoding="utf-8") == before
    assert any("deploy window" in h.excerpt for h in (await _search(sample, "deploy window")).hits)


async def test_one_entry_of_a_hit_is_forgotten_by_citing_its_own_line(sample: claw.Host) -> None:
    memory = sample.config.workspace_dir / "MEMORY.md"
    before = memory.read_text(encoding="utf-8").splitlines(keepends=True)
    ref = MemoryReference(provider_id="memory-core", id="MEMORY.md", fragment="L9-L9")
    gone = await _operator(sample, lambda ctx: sample.memory.forget(ctx, ref))
    assert gone.entries == 1 and "deploy window" in (gone.removed_text or "")
    assert memory.read_text(encoding="utf-8") == "".join(before[:8] + before[9:])


async def test_restore_has_the_same_authority_rules_as_forget(host: claw.Host) -> None:
    added = await _operator(host, lambda ctx: host.memory.add(ctx, "The shed key is blue."))
    gone = await _operator(host, lambda ctx: host.memory.forget(ctx, added.reference))
    with pytest.raises(claw.CapabilityDeniedError, match="operator.write"):
        await _operator(
            host, lambda ctx: host.memory.restore(ctx, gone.removal_id), ("operator.read",)
        )
    with pytest.raises(claw.CapabilityDeniedError, match="operator.write"):
        await _operator(host, host.memory.removals, ("operator.read",))
    listed = await _operator(host, host.memory.removals)
    assert [(r.id, r.status) for r in listed] == [(gone.removal_id, "forgotten")]
    assert listed[0].by is not None and listed[0].by.kind == "operator"
    assert [p.kind for p in listed[0].provenance] == ["operator"]
    back = await _operator(host, lambda ctx: host.memory.restore(ctx, gone.removal_id))
    assert back.reference.fragment == added.reference.fragment
    listed = await _operator(host, host.memory.removals)
    assert listed[0].status == "restored"
    with pytest.raises(claw.ClawError, match="no removal"):
        await _operator(host, lambda ctx: host.memory.restore(ctx, "0123456789ab"))


async def test_search_hits_and_get_say_who_wrote_each_entry(host: claw.Host) -> None:
    await _operator(
        host, lambda ctx: host.memory.add(ctx, "The gate code is 4417.", path="memory/codes.md")
    )
    model = ScriptedModel(
        [
            ScriptedReply(
                tool_calls=[
                    ("memory_add", {"text": "The alarm code is 9021.", "path": "memory/codes.md"})
                ]
            ),
            "Noted.",
        ]
    )
    host.models.register_provider("scripted", lambda name: model)
    await host.run_turn("dm:alice", UserMessage("remember the alarm code"), sender_is_owner=True)
    (workspace := host.config.workspace_dir / "memory" / "codes.md").write_text(
        workspace.read_text(encoding="utf-8") + "- typed by hand: the bin day is Tuesday.\n",
        encoding="utf-8",
    )
    hits = [h for h in (await _search(host, "code")).hits if h.reference.id == "memory/codes.md"]
    by_line = {p.start_line: p for h in hits for p in h.provenance}
    whole = attrs.evolve(hits[0].reference, fragment="L1-L3", revision=None)
    hit = attrs.evolve(hits[0], reference=whole)
    operator, run = by_line[1], by_line[2]
    assert (operator.kind, operator.connection_id, operator.tool) == ("operator", None, None)
    assert (run.kind, run.tool, run.plugin_id, run.owner) == (
        "run",
        "memory_add",
        "memory-core",
        True,
    )
    row = host.sessions.get_nowait("dm:alice")
    assert row is not None
    assert (run.session_key, run.session_id, run.lifecycle_revision) == (
        "dm:alice",
        row.session_id,
        row.lifecycle_revision,
    )
    assert 3 not in by_line  # written by hand: nobody claims it

    async def get(ctx: claw.MemoryCallerContext) -> Any:
        async with host.memory.open(ctx) as handle:
            return await handle.get(claw.memory.MemoryGetRequest(reference=hit.reference))

    got = await _operator(host, get, ("operator.read",))
    assert [(p.kind, p.start_line) for p in got.provenance] == [("operator", 1), ("run", 2)]
