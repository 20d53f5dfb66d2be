"""The host-owned legacy adapter over a file-shaped runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

import claw
from claw.memory import LEGACY_CAPABILITIES, MemoryGetRequest, MemoryReference, MemorySearchRequest

from .conftest import FileManager


async def _operator(host: claw.Host, scope: claw.HostScope) -> claw.MemoryCallerContext:
    return scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))


async def test_legacy_adapter_declares_memory_and_sessions_without_pagination(
    legacy_host: claw.Host,
) -> None:
    assert LEGACY_CAPABILITIES.sources == ("memory", "sessions")
    assert LEGACY_CAPABILITIES.pagination is False
    assert LEGACY_CAPABILITIES.candidates == ()
    assert LEGACY_CAPABILITIES.project_filter is True
    async with legacy_host.open_scope("t") as scope:
        async with legacy_host.memory.open(await _operator(legacy_host, scope)) as handle:
            assert not handle.native
            assert handle.capabilities == LEGACY_CAPABILITIES
            with pytest.raises(claw.UnsupportedRequestError, match="pagination"):
                await handle.search(MemorySearchRequest(query="deploy", cursor="x"))


async def test_legacy_references_are_paths_with_line_fragments(
    legacy_host: claw.Host, legacy_manager: FileManager
) -> None:
    async with legacy_host.open_scope("t") as scope:
        async with legacy_host.memory.open(await _operator(legacy_host, scope)) as handle:
            result = await handle.search(MemorySearchRequest(query="deploy", sources=("memory",)))
            (hit,) = result.hits
            assert hit.reference == MemoryReference(
                provider_id="legacy-mem", id="MEMORY.md", fragment="L2-L2"
            )
            assert hit.citation is not None
            assert (hit.citation.path, hit.citation.start_line) == ("MEMORY.md", 2)
            assert hit.metadata["citation_label"] == "MEMORY.md#L2"
            got = await handle.get(MemoryGetRequest(reference=hit.reference))
            assert got.status == "ok"
            assert got.text == "The deploy happens on friday."
            bounded = await handle.get(
                MemoryGetRequest(
                    reference=MemoryReference(provider_id="legacy-mem", id="MEMORY.md"),
                    from_line=2,
                    lines=2,
                )
            )
            assert bounded.text == "The deploy happens on friday.\nCoffee is at nine."
            missing = await handle.get(
                MemoryGetRequest(reference=MemoryReference(provider_id="legacy-mem", id="NOPE.md"))
            )
            assert missing.status == "not_found"
    assert legacy_manager.calls[-1] == "close"


async def test_legacy_session_hits_are_withheld_without_an_authorize_hook(
    legacy_host: claw.Host,
) -> None:
    async with legacy_host.open_scope("t") as scope:
        async with legacy_host.memory.open(await _operator(legacy_host, scope)) as handle:
            result = await handle.search(MemorySearchRequest(query="deploy"))
    assert [h.source for h in result.hits] == ["memory"]


async def test_legacy_health_omits_host_paths(legacy_host: claw.Host) -> None:
    async with legacy_host.open_scope("status") as scope:
        ctx = scope.mint_caller_context(scope.mint_host_authority("status"))
        async with legacy_host.memory.open(ctx) as handle:
            health = await handle.health()
    assert health.status == "ready"
    assert health.details == {"files": 2, "model": "hash-384"}
    assert "/" not in repr(health.details)


async def test_legacy_health_drops_every_entry_derived_from_a_host_path(
    legacy_host: claw.Host, legacy_manager: FileManager
) -> None:
    legacy_manager.status_extra = {
        "index": Path("/var/lib/claw/index"),
        "store": "sqlite:////var/lib/claw/index.sqlite",
        "note": "index kept at /srv/claw/state",
        "dbPath": "index.sqlite",
        "workspaceDir": "ws",
        "/home/alice/workspace/MEMORY.md": 3,
        "windows": "C:\\Users\\alice\\claw",
        "nested": {"stateRoot": "x", "sizes": [1, "~/claw/db", {"cache_dir": "c", "k": "v"}]},
        "ratio": "1 / 2",
        "message": "cannot open /var/lib/claw/index.sqlite",
        "status": "degraded",
    }
    async with legacy_host.open_scope("status") as scope:
        ctx = scope.mint_caller_context(scope.mint_host_authority("status"))
        async with legacy_host.memory.open(ctx) as handle:
            health = await handle.health()
    assert health.status == "degraded"
    assert health.details == {
        "files": 2,
        "model": "hash-384",
        "nested": {"sizes": [1, {"k": "v"}]},
        "ratio": "1 / 2",
    }
    assert health.message == "cannot open <path>"
