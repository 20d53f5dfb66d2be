"""The provider-neutral runtime: enforcement before provider code, currency, references."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio

import claw
from claw._currency import Currency
from claw.memory import (
    AuthorizeSearchHitsRequest,
    MemoryCandidatesRequest,
    MemoryGetRequest,
    MemoryPluginCapability,
    MemoryProviderOpenResult,
    MemoryReference,
    MemorySearchRequest,
    ProviderCapabilities,
)
from claw_testing import RecordingMemoryProvider

from .conftest import memory_config


@asynccontextmanager
async def operator_context(host: claw.Host) -> AsyncIterator[claw.MemoryCallerContext]:
    async with host.open_scope("op") as scope:
        op = scope.mint_operator_authority({"operator.read"}, connection_id="c1")
        yield scope.mint_caller_context(op)


async def test_search_returns_provider_scoped_references(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    async with operator_context(native_host) as ctx, native_host.memory.open(ctx) as handle:
        result = await handle.search(MemorySearchRequest(query="friday deploy"))
    assert handle.native
    assert result.hits
    assert all(h.reference.provider_id == "recording-memory" for h in result.hits)
    assert provider.call_names()[-1] == "close"


@pytest.mark.parametrize(
    ("capabilities", "request_kwargs", "needle"),
    [
        (
            ProviderCapabilities(sources=("memory",)),
            {"sources": ("sessions",)},
            "search source 'sessions'",
        ),
        (ProviderCapabilities(sources=("memory",)), {"cursor": "10"}, "pagination"),
        (
            ProviderCapabilities(sources=("memory",)),
            {"active_project_keys": ("apollo",)},
            "project filtering",
        ),
    ],
    ids=["undeclared-source", "cursor-without-pagination", "projects-without-filter"],
)
async def test_undeclared_search_capabilities_are_rejected_before_provider_code(
    host_config: claw.HostConfig,
    capabilities: ProviderCapabilities,
    request_kwargs: dict[str, object],
    needle: str,
) -> None:
    provider = RecordingMemoryProvider(provider_id="rec", capabilities=capabilities)
    plugin = claw.Plugin(
        id="rec", register=lambda api: api.register_memory_capability(provider.capability())
    )
    async with claw.open_host(memory_config(host_config, "rec"), plugins=[plugin]) as host:
        async with operator_context(host) as ctx, host.memory.open(ctx) as handle:
            before = list(provider.call_names())
            with pytest.raises(claw.UnsupportedRequestError, match=needle) as info:
                await handle.search(MemorySearchRequest(query="deploy", **request_kwargs))  # type: ignore[arg-type]
            assert '"rec"' in str(info.value)
            assert provider.call_names() == before


async def test_undeclared_candidate_kind_is_rejected_before_provider_code(
    host_config: claw.HostConfig,
) -> None:
    provider = RecordingMemoryProvider(
        provider_id="rec",
        capabilities=ProviderCapabilities(sources=("memory",), candidates=("trigger",)),
    )
    plugin = claw.Plugin(
        id="rec", register=lambda api: api.register_memory_capability(provider.capability())
    )
    async with claw.open_host(memory_config(host_config, "rec"), plugins=[plugin]) as host:
        async with operator_context(host) as ctx, host.memory.open(ctx) as handle:
            before = list(provider.call_names())
            with pytest.raises(claw.UnsupportedRequestError, match="'project' candidates"):
                await handle.candidates(MemoryCandidatesRequest(kind="project"))
            with pytest.raises(claw.UnsupportedRequestError, match="project filtering"):
                await handle.candidates(
                    MemoryCandidatesRequest(kind="trigger", active_project_keys=("x",))
                )
            assert provider.call_names() == before
            result = await handle.candidates(
                MemoryCandidatesRequest(kind="trigger", query="deploy now")
            )
            assert provider.call_names()[-1] == "candidates"
            assert result.candidates == ()


async def test_candidates_method_must_match_the_declaration(host_config: claw.HostConfig) -> None:
    @attrs.define
    class Lying:
        capabilities: ProviderCapabilities = attrs.field(
            factory=lambda: ProviderCapabilities(sources=("memory",), candidates=("trigger",))
        )

        async def search(self, request: object) -> None: ...  # pragma: no cover
        async def get(self, request: object) -> None: ...  # pragma: no cover
        async def health(self) -> None: ...  # pragma: no cover
        async def close(self) -> None:
            pass

    @attrs.define
    class Runtime:
        async def open(self, *, agent_id: str, context: object) -> MemoryProviderOpenResult:
            return MemoryProviderOpenResult(provider=Lying())  # type: ignore[arg-type]

    cap = MemoryPluginCapability(provider_runtime=Runtime())
    plugin = claw.Plugin(id="liar", register=lambda api: api.register_memory_capability(cap))
    async with claw.open_host(memory_config(host_config, "liar"), plugins=[plugin]) as host:
        async with operator_context(host) as ctx:
            with pytest.raises(claw.ContractError, match="candidates"):
                async with host.memory.open(ctx):
                    pass  # pragma: no cover


async def test_another_providers_reference_is_rejected_before_provider_code(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    async with operator_context(native_host) as ctx, native_host.memory.open(ctx) as handle:
        before = list(provider.call_names())
        with pytest.raises(claw.memory.ForeignReferenceError, match='"memory-core"'):
            await handle.get(
                MemoryGetRequest(
                    reference=MemoryReference(provider_id="memory-core", id="shared-1")
                )
            )
        assert provider.call_names() == before


async def test_get_returns_ok_or_not_found_explicitly(native_host: claw.Host) -> None:
    async with operator_context(native_host) as ctx, native_host.memory.open(ctx) as handle:
        ok = await handle.get(
            MemoryGetRequest(
                reference=MemoryReference(provider_id="recording-memory", id="shared-1")
            )
        )
        missing = await handle.get(
            MemoryGetRequest(reference=MemoryReference(provider_id="recording-memory", id="nope"))
        )
        stale = await handle.get(
            MemoryGetRequest(
                reference=MemoryReference(
                    provider_id="recording-memory", id="shared-1", revision="0"
                )
            )
        )
    assert ok.status == "ok"
    assert ok.text is not None
    assert "friday" in ok.text
    assert missing.status == "not_found"
    assert stale.status == "not_found"


async def test_min_score_is_honoured(native_host: claw.Host) -> None:
    async with operator_context(native_host) as ctx, native_host.memory.open(ctx) as handle:
        low = await handle.search(MemorySearchRequest(query="friday deploy rotates"))
        high = await handle.search(
            MemorySearchRequest(query="friday deploy rotates", min_score=0.99)
        )
    assert any((h.score or 0) < 0.99 for h in low.hits)
    assert all((h.score or 0) >= 0.99 for h in high.hits)


async def test_health_works_for_host_status_authority(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    async with native_host.open_scope("status") as scope:
        ctx = scope.mint_caller_context(scope.mint_host_authority("status"), purpose="status")
        async with native_host.memory.open(ctx) as handle:
            health = await handle.health()
    assert health.status == "ready"
    assert health.details == {"records": len(provider.records)}


async def test_host_authority_sees_no_private_or_conversation_memory(
    native_host: claw.Host,
) -> None:
    async with native_host.open_scope("status") as scope:
        ctx = scope.mint_caller_context(scope.mint_host_authority("status"))
        async with native_host.memory.open(ctx) as handle:
            result = await handle.search(MemorySearchRequest(query="friday", sources=("memory",)))
    ids = {h.reference.id for h in result.hits}
    assert "owner-1" not in ids
    assert "grp-1" not in ids
    assert "shared-1" in ids


async def test_provider_that_awaits_is_refused_when_the_audience_goes_stale_meanwhile(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    provider.gate = trio.Event()
    async with native_host.open_run("grp:1", sender_is_owner=False) as run:
        async with native_host.memory.open(run.caller) as handle:

            async def reset_then_release() -> None:
                await trio.testing.wait_all_tasks_blocked()
                await native_host.sessions.reset("grp:1")
                assert provider.gate is not None
                provider.gate.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(reset_then_release)
                with pytest.raises(
                    claw.StaleCapabilityError, match="memory audience is no longer current"
                ):
                    await handle.search(MemorySearchRequest(query="friday"))
    assert "search.enter" in provider.call_names()
    assert "search" not in provider.call_names()  # the effect never happened


async def test_stale_caller_is_refused_before_provider_code(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    async with native_host.open_run("grp:1", sender_is_owner=False) as run:
        async with native_host.memory.open(run.caller) as handle:
            await native_host.sessions.reset("grp:1")
            before = list(provider.call_names())
            with pytest.raises(claw.StaleCapabilityError):
                await handle.search(MemorySearchRequest(query="friday"))
            assert provider.call_names() == before


async def test_aborted_request_is_refused_before_provider_code(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    async with operator_context(native_host) as ctx, native_host.memory.open(ctx) as handle:
        ctx.cancel_scope.cancel()
        before = list(provider.call_names())
        with pytest.raises(claw.StaleCapabilityError, match="aborted"):
            await handle.health()
        assert provider.call_names() == before
    assert provider.call_names()[-1] == "close"


async def test_session_caller_cannot_open_another_agents_memory(native_host: claw.Host) -> None:
    async with native_host.open_run("dm:alice", sender_is_owner=True) as run:
        with pytest.raises(claw.CapabilityDeniedError, match="agent 'other'"):
            async with native_host.memory.open(run.caller, agent_id="other"):
                pass  # pragma: no cover


async def test_owner_private_audience_sees_owner_memory_and_group_does_not(
    native_host: claw.Host,
) -> None:
    async with native_host.open_run("dm:alice", sender_is_owner=True) as run:
        async with native_host.memory.open(run.caller) as handle:
            owner = {
                h.reference.id
                for h in (await handle.search(MemorySearchRequest(query="friday"))).hits
            }
    async with native_host.open_run("grp:1", sender_is_owner=True) as run:
        async with native_host.memory.open(run.caller) as handle:
            group = {
                h.reference.id
                for h in (await handle.search(MemorySearchRequest(query="friday"))).hits
            }
    assert "owner-1" in owner
    assert "grp-1" not in owner
    assert "grp-1" in group
    assert "owner-1" not in group


async def test_session_hits_are_authorized_for_the_requesting_session_only(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    async with native_host.open_run("dm:alice", sender_is_owner=True) as run:
        async with native_host.memory.open(run.caller) as handle:
            hits = (await handle.search(MemorySearchRequest(query="friday deploy"))).hits
    ids = {h.reference.id for h in hits}
    assert "sess-main" in ids
    assert "sess-other" not in ids
    _, request = [c for c in provider.calls if c[0] == "authorize_search_hits"][-1]
    assert request.session_key == "dm:alice"
    assert request.trusted_agent_scope is None
    assert request.sandboxed is False


async def test_operator_search_gets_trusted_agent_scope_and_only_own_agent_session_hits(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    async with operator_context(native_host) as ctx, native_host.memory.open(ctx) as handle:
        hits = (await handle.search(MemorySearchRequest(query="friday deploy"))).hits
    ids = {h.reference.id for h in hits}
    assert "sess-main" in ids
    assert "sess-other" not in ids
    _, request = [c for c in provider.calls if c[0] == "authorize_search_hits"][-1]
    assert request.trusted_agent_scope == "main"
    assert request.session_key is None


async def test_without_authorize_hook_session_hits_are_withheld_and_memory_hits_kept(
    host_config: claw.HostConfig,
) -> None:
    from .conftest import RECORDS

    provider = RecordingMemoryProvider(provider_id="rec", records=list(RECORDS), authorize=False)
    plugin = claw.Plugin(
        id="rec", register=lambda api: api.register_memory_capability(provider.capability())
    )
    async with claw.open_host(memory_config(host_config, "rec"), plugins=[plugin]) as host:
        async with operator_context(host) as ctx, host.memory.open(ctx) as handle:
            hits = (await handle.search(MemorySearchRequest(query="friday deploy"))).hits
    assert hits
    assert all(h.source == "memory" for h in hits)


async def test_recall_pass_admits_the_named_conversation_transcript(
    host_config: claw.HostConfig,
) -> None:
    from claw_testing import MemoryRecord

    provider = RecordingMemoryProvider(
        provider_id="rec",
        records=[
            MemoryRecord(
                id="t-grp", text="grp transcript friday", source="sessions", session_key="grp:1"
            ),
            MemoryRecord(
                id="t-grp2", text="grp2 transcript friday", source="sessions", session_key="grp:2"
            ),
        ],
    )
    plugin = claw.Plugin(
        id="rec", register=lambda api: api.register_memory_capability(provider.capability())
    )
    async with claw.open_host(memory_config(host_config, "rec"), plugins=[plugin]) as host:
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        await host.sessions.create("grp:1", agent_id="main", chat_type="group")
        await host.sessions.create("grp:2", agent_id="main", chat_type="group")
        async with host.open_run(
            "dm:alice", sender_is_owner=True, conversation_recall=["grp:1"]
        ) as run:
            async with host.memory.open(run.caller) as handle:
                ids = {
                    h.reference.id
                    for h in (await handle.search(MemorySearchRequest(query="friday"))).hits
                }
    assert ids == {"t-grp"}


async def test_failure_is_an_error_and_never_falls_back_to_legacy(
    host_config: claw.HostConfig,
) -> None:
    from .conftest import FileManager, LegacyRuntime

    manager = FileManager(files={"MEMORY.md": "friday"}, calls=[])

    @attrs.define
    class Broken:
        async def open(self, *, agent_id: str, context: object) -> MemoryProviderOpenResult:
            raise OSError("disk on fire")

    cap = MemoryPluginCapability(provider_runtime=Broken(), runtime=LegacyRuntime(manager))
    plugin = claw.Plugin(id="broken", register=lambda api: api.register_memory_capability(cap))
    async with claw.open_host(memory_config(host_config, "broken"), plugins=[plugin]) as host:
        async with operator_context(host) as ctx:
            with pytest.raises(claw.ProviderError, match='"broken" failed to open'):
                async with host.memory.open(ctx):
                    pass  # pragma: no cover
    assert manager.calls == []


async def test_invalid_provider_runtime_never_falls_back_to_legacy(
    host_config: claw.HostConfig,
) -> None:
    from .conftest import FileManager, LegacyRuntime

    manager = FileManager(files={"MEMORY.md": "friday"}, calls=[])
    cap = MemoryPluginCapability(provider_runtime=object(), runtime=LegacyRuntime(manager))  # type: ignore[arg-type]
    plugin = claw.Plugin(id="bad", register=lambda api: api.register_memory_capability(cap))
    async with claw.open_host(memory_config(host_config, "bad"), plugins=[plugin]) as host:
        async with operator_context(host) as ctx:
            with pytest.raises(claw.ContractError, match="invalid provider_runtime"):
                async with host.memory.open(ctx):
                    pass  # pragma: no cover
    assert manager.calls == []


async def test_no_selected_memory_is_unavailable(host: claw.Host) -> None:
    async with operator_context(host) as ctx:
        with pytest.raises(claw.memory.MemoryUnavailableError, match="no memory plugin"):
            async with host.memory.open(ctx):
                pass  # pragma: no cover


async def test_close_releases_only_this_callers_lease(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    async with operator_context(native_host) as ctx:
        async with native_host.memory.open(ctx) as first:
            async with native_host.memory.open(ctx):
                assert provider.open_handles == 2
            assert provider.open_handles == 1
            assert (await first.health()).status == "ready"
    assert provider.open_handles == 0


async def test_pagination_cursor_is_passed_when_declared(native_host: claw.Host) -> None:
    async with operator_context(native_host) as ctx, native_host.memory.open(ctx) as handle:
        first = await handle.search(
            MemorySearchRequest(query="friday", max_results=1, sources=("memory",))
        )
        assert first.next_cursor is not None
        second = await handle.search(
            MemorySearchRequest(
                query="friday", max_results=1, sources=("memory",), cursor=first.next_cursor
            )
        )
    assert first.hits[0].reference.id != second.hits[0].reference.id


async def test_refresh_reports_omission(native_host: claw.Host) -> None:
    async with operator_context(native_host) as ctx, native_host.memory.open(ctx) as handle:
        assert handle.has_refresh is False
        assert await handle.refresh() is False


@pytest.mark.parametrize("operation", ["search", "get", "health", "candidates", "refresh"])
async def test_a_handle_used_after_its_block_closed_raises_without_reaching_the_provider(
    native_host: claw.Host, provider: RecordingMemoryProvider, operation: str
) -> None:
    async with operator_context(native_host) as ctx:
        async with native_host.memory.open(ctx) as handle:
            pass
        calls = provider.call_names()
        reference = MemoryReference(provider_id="recording-memory", id="shared-1")
        attempts = {
            "search": lambda: handle.search(MemorySearchRequest(query="friday")),
            "get": lambda: handle.get(MemoryGetRequest(reference=reference)),
            "health": handle.health,
            "candidates": lambda: handle.candidates(MemoryCandidatesRequest(kind="trigger")),
            "refresh": handle.refresh,
        }
        with pytest.raises(claw.memory.MemoryHandleClosedError, match="after the async with"):
            await attempts[operation]()
        assert isinstance(claw.memory.MemoryHandleClosedError("x"), claw.HostClosedError)
        assert provider.call_names() == calls


async def test_a_search_checks_its_caller_before_and_after_the_provider_and_once_at_release(
    native_host: claw.Host, provider: RecordingMemoryProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before the search, after it, and the release check after the authorize hook: a
    # check with nothing run since the last one (which repeated it on the same state)
    # is no longer made; they cost a sixth of the gateway's CPU per request.
    async with operator_context(native_host) as ctx, native_host.memory.open(ctx) as handle:
        checked: list[object] = []
        real = Currency.verify

        def counting(self: Currency, capability: object, **kw: object) -> None:
            checked.append(capability)
            real(self, capability, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(Currency, "verify", counting)
        hits = (await handle.search(MemorySearchRequest(query="friday deploy"))).hits
    assert hits
    assert "authorize_search_hits" in provider.call_names()
    assert checked == [ctx, ctx, ctx]


@attrs.define(eq=False)
class _RevokingHook:
    """A provider runtime whose authorize hook resets the caller's session (which
    revokes the caller's audience) before it answers."""

    inner: RecordingMemoryProvider
    host: claw.Host | None = None

    async def open(self, *, agent_id: str, context: claw.MemoryCallerContext) -> object:
        return await self.inner.open(agent_id=agent_id, context=context)

    async def authorize_search_hits(self, request: AuthorizeSearchHitsRequest) -> object:
        assert self.host is not None and request.session_key is not None
        await self.host.sessions.reset(request.session_key)
        return await self.inner.authorize_search_hits(request)


async def test_a_caller_revoked_inside_the_authorize_hook_gets_no_hits(
    host_config: claw.HostConfig,
) -> None:
    from .conftest import RECORDS

    inner = RecordingMemoryProvider(provider_id="rec", records=list(RECORDS))
    hook = _RevokingHook(inner=inner)
    plugin = claw.Plugin(
        id="rec",
        register=lambda api: api.register_memory_capability(
            MemoryPluginCapability(provider_runtime=hook)
        ),
    )
    async with claw.open_host(memory_config(host_config, "rec"), plugins=[plugin]) as host:
        hook.host = host
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        async with host.open_run("dm:alice", sender_is_owner=True) as run:
            async with host.memory.open(run.caller) as handle:
                with pytest.raises(claw.StaleCapabilityError):
                    await handle.search(MemorySearchRequest(query="friday deploy"))
    assert "authorize_search_hits" in inner.call_names()


@attrs.define(eq=False)
class _RewritingHook:
    """A provider runtime whose authorize hook answers with ``rewrite(given hits)``."""

    inner: RecordingMemoryProvider
    rewrite: Any

    async def open(self, *, agent_id: str, context: claw.MemoryCallerContext) -> object:
        return await self.inner.open(agent_id=agent_id, context=context)

    async def authorize_search_hits(self, request: AuthorizeSearchHitsRequest) -> object:
        admitted = await self.inner.authorize_search_hits(request)
        return self.rewrite(list(admitted))


@pytest.mark.parametrize("kind", ["as given", "reordered", "with a forged hit", "a subset"])
async def test_the_authorize_hook_admits_only_hits_it_was_given(
    host_config: claw.HostConfig, kind: str
) -> None:
    """Whatever the hook answers, only hits the guard gave it come back, in the hook's
    order; a hit it made up (equal to a given one, but not that object) is dropped."""
    from .conftest import RECORDS

    rewrites = {
        "as given": lambda hits: hits,
        "reordered": lambda hits: hits[::-1],
        "with a forged hit": lambda hits: [*hits, attrs.evolve(hits[0])],
        "a subset": lambda hits: hits[1:],
    }
    given: list[tuple[object, ...]] = []

    def rewrite(hits: list[Any]) -> list[Any]:
        given.append(tuple(hits))
        answer: list[Any] = rewrites[kind](hits)
        return answer

    inner = RecordingMemoryProvider(provider_id="rec", records=list(RECORDS))
    hook = _RewritingHook(inner=inner, rewrite=rewrite)
    plugin = claw.Plugin(
        id="rec",
        register=lambda api: api.register_memory_capability(
            MemoryPluginCapability(provider_runtime=hook)
        ),
    )
    async with claw.open_host(memory_config(host_config, "rec"), plugins=[plugin]) as host:
        async with operator_context(host) as ctx, host.memory.open(ctx) as handle:
            result = await handle.search(MemorySearchRequest(query="friday deploy"))
    (hits,) = given
    assert len(hits) >= 2
    expected = {"as given": hits, "reordered": hits[::-1], "a subset": hits[1:]}
    assert [id(h) for h in result.hits] == [id(h) for h in expected.get(kind, hits)]
