"""Index maintenance (reindex; forget a path, session or source) through the guard's
write route: ``host.memory.reindex`` / ``forget_indexed``, what ``claw memory index``
and ``claw memory forget --path/--session/--source`` use (issue 24's residual, issue
27 section 2: every route that reads or writes memory goes through the same guard)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import claw
import claw_memory

from .test_plugin import _config

Route = Callable[[claw.MemoryCallerContext], Awaitable[Any]]


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[claw.Host]:
    async with claw.open_host(_config(tmp_path), plugins=[claw_memory.plugin]) as h:
        await h.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        yield h


async def _as_operator(host: claw.Host, scopes: set[str], fn: Route) -> Any:
    async with host.open_scope("op") as scope:
        return await fn(scope.mint_caller_context(scope.mint_operator_authority(scopes)))


async def _hidden(host: claw.Host) -> list[list[str]]:
    async def run(ctx: claw.MemoryCallerContext) -> list[list[str]]:
        return [list(f["paths"]) for f in await host.memory.forgotten(ctx)]

    found: list[list[str]] = await _as_operator(host, {"operator.write"}, run)
    return found


def _routes(host: claw.Host, agent_id: str | None = None) -> dict[str, Route]:
    return {
        "reindex": lambda ctx: host.memory.reindex(ctx, force=True, agent_id=agent_id),
        "forget_indexed": lambda ctx: host.memory.forget_indexed(
            ctx, path="MEMORY.md", agent_id=agent_id
        ),
    }


def _reads(host: claw.Host, agent_id: str | None = None) -> dict[str, Route]:
    """``claw doctor``'s description and the CLI's warm-up before a search."""
    return {
        "describe": lambda ctx: host.memory.describe(ctx, agent_id=agent_id),
        "warm": lambda ctx: host.memory.warm(ctx, agent_id=agent_id),
    }


async def test_an_operator_with_write_reindexes_and_forgets_a_path_with_progress(
    host: claw.Host,
) -> None:
    stages: list[str] = []

    def progress(stage: str, done: int, total: int) -> None:
        stages.append(stage)

    write = {"operator.write"}
    report = await _as_operator(
        host, write, lambda ctx: host.memory.reindex(ctx, force=True, progress=progress)
    )
    assert "MEMORY.md" in report["indexed"] and report["forgotten"] == 0
    assert "publish" in stages
    dry = await _as_operator(
        host, write, lambda ctx: host.memory.forget_indexed(ctx, path="MEMORY.md", dry_run=True)
    )
    assert dry["dryRun"] is True and dry["paths"] == ["MEMORY.md"] and "forgetId" not in dry
    assert await _hidden(host) == []
    done = await _as_operator(
        host, write, lambda ctx: host.memory.forget_indexed(ctx, path="MEMORY.md")
    )
    assert done["chunks"] > 0 and done["forgetId"]
    assert await _hidden(host) == [["MEMORY.md"]]
    # A forced reindex through the same route keeps the forget in effect.
    again = await _as_operator(host, write, lambda ctx: host.memory.reindex(ctx, force=True))
    assert again["forgotten"] == 1 and await _hidden(host) == [["MEMORY.md"]]


@pytest.mark.parametrize(
    ("routes_of", "other_scope", "needed", "refusal"),
    [
        (_routes, "operator.read", "operator.write", "index maintenance"),
        (_reads, "operator.write", "operator.read", "warming a memory index"),
    ],
    ids=["reindex-and-forget", "describe-and-warm"],
)
async def test_callers_without_the_scope_are_refused_before_the_provider(
    host: claw.Host,
    routes_of: Callable[..., dict[str, Route]],
    other_scope: str,
    needed: str,
    refusal: str,
) -> None:
    """The provider's own check admits any operator: the guard asks for operator.write to
    maintain the index (operator.read to describe or warm it), and no run (not even the
    owner's, who may add and forget entries) does either."""
    for name, route in routes_of(host).items():
        with pytest.raises(claw.CapabilityDeniedError, match=needed):
            await _as_operator(host, {other_scope}, route)
        async with host.open_run("dm:alice", sender_is_owner=True) as run:
            with pytest.raises(claw.CapabilityDeniedError, match=refusal):
                await route(run.caller)
        async with host.open_scope("status") as scope:
            ctx = scope.mint_caller_context(scope.mint_host_authority("status"))
            with pytest.raises(claw.CapabilityDeniedError, match=refusal):
                await route(ctx)
        # Memory Core opened no index: every call stopped at the guard.
        assert not (host.config.resolved_state_dir / "memory").exists(), name


@pytest.mark.parametrize(
    ("routes_of", "scope_name"),
    [(_routes, "operator.write"), (_reads, "operator.read")],
    ids=["reindex-and-forget", "describe-and-warm"],
)
async def test_a_stale_caller_an_unknown_agent_and_a_closed_host_reach_no_provider(
    tmp_path: Path, routes_of: Callable[..., dict[str, Route]], scope_name: str
) -> None:
    async with claw.open_host(_config(tmp_path), plugins=[claw_memory.plugin]) as host:
        routes = routes_of(host)
        async with host.open_scope("op") as scope:
            stale = scope.mint_caller_context(scope.mint_operator_authority({scope_name}))
        for route in routes.values():
            with pytest.raises(claw.StaleCapabilityError):
                await route(stale)
        for agent in ("nobody", ".."):
            for unknown in routes_of(host, agent).values():
                with pytest.raises(claw.UnknownAgentError, match="agentId"):
                    await _as_operator(host, {scope_name}, unknown)
        # Memory Core opened no index at all: every call above stopped at the guard.
        assert not (host.config.resolved_state_dir / "memory").exists()
        async with host.open_scope("op") as scope:
            late = scope.mint_caller_context(scope.mint_operator_authority({scope_name}))
    for route in routes.values():
        with pytest.raises(claw.HostClosedError):
            await route(late)
    assert not (host.config.resolved_state_dir / "memory").exists()


async def test_an_index_level_forget_needs_something_to_forget(host: claw.Host) -> None:
    with pytest.raises(claw.ContractError, match="path, a session_id or a source"):
        await _as_operator(host, {"operator.write"}, host.memory.forget_indexed)


async def test_an_operator_with_read_describes_and_warms_the_index_with_progress(
    host: claw.Host,
) -> None:
    stages: list[str] = []

    def progress(stage: str, done: int, total: int) -> None:
        stages.append(stage)

    read = {"operator.read"}
    assert host.memory.offers("describe") and host.memory.offers("warm")
    await _as_operator(host, read, lambda ctx: host.memory.warm(ctx, progress=progress))
    assert "publish" in stages  # the first search's index, done up front
    described = await _as_operator(host, read, host.memory.describe)
    assert described["chunks"] > 0 and described["generation"] >= 1
    assert described["identity"]["embedder"]
