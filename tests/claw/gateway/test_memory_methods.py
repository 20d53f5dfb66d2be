"""memory.search (v1/v2), memory.get and memory.status over the gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import claw
import claw_memory
from claw._currency import Currency
from claw.gateway import (
    Gateway,
    GatewayRequestContext,
    GatewayRequestError,
    open_gateway_client,
    open_in_memory_gateway_client,
)
from claw.gateway._memory import memory_search
from claw.memory import MemorySearchRequest
from claw_memory._search import Searcher
from claw_testing import MemoryRecord, RecordingMemoryProvider

TOKEN = "memory-token-0001"
NO_READ_TOKEN = "write-only-token-02"


def _config(tmp_path: Path, memory: str) -> claw.HostConfig:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "MEMORY.md").write_text(
        "# Memory\n- The staging database password rotates monthly.\n- Lunch is at noon.\n",
        encoding="utf-8",
    )
    return claw.HostConfig(
        workspace_dir=workspace,
        state_dir=tmp_path / "state",
        plugins=claw.PluginsConfig(discover=False, slots=claw.SlotsConfig(memory=memory)),
        workers=claw.WorkersConfig(inline=True),
        gateway=claw.GatewayConfig(
            tokens={TOKEN: ("operator.read",), NO_READ_TOKEN: ("operator.write",)}
        ),
    )


@pytest.fixture
async def core_host(tmp_path: Path) -> AsyncIterator[claw.Host]:
    async with claw.open_host(_config(tmp_path, "memory-core"), plugins=[claw_memory.plugin]) as h:
        yield h


@pytest.fixture
def provider() -> RecordingMemoryProvider:
    return RecordingMemoryProvider(
        provider_id="recording-memory",
        records=[
            MemoryRecord(id="shared", text="the quarterly report is due friday"),
            MemoryRecord(
                id="own-session",
                text="we discussed the quarterly report",
                source="sessions",
                session_key="dm:alice",
            ),
            MemoryRecord(
                id="other-agent",
                text="another agent discussed the quarterly report",
                source="sessions",
                agent_id="other",
                session_key="dm:zed",
            ),
        ],
    )


@pytest.fixture
async def native_host(
    tmp_path: Path, provider: RecordingMemoryProvider
) -> AsyncIterator[claw.Host]:
    plugin = claw.Plugin(
        id="recording-memory",
        register=lambda api: api.register_memory_capability(provider.capability()),
    )
    async with claw.open_host(_config(tmp_path, "recording-memory"), plugins=[plugin]) as h:
        await h.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        yield h


async def test_v2_search_get_and_status_for_an_operator_read_client(core_host: claw.Host) -> None:
    gateway = Gateway(core_host)
    async with open_in_memory_gateway_client(gateway, TOKEN) as client:
        search = await client.request(
            "memory.search", {"version": 2, "query": "staging database password", "minScore": 0}
        )
        assert search["version"] == 2
        assert search["agentId"] == "main"
        assert search["providerId"] == "memory-core"
        hit = search["hits"][0]
        assert set(hit) >= {"reference", "excerpt", "score", "citation"}
        assert hit["reference"]["providerId"] == "memory-core"
        assert hit["citation"] == {
            "path": "MEMORY.md",
            "startLine": 2,
            "endLine": 2,
            "source": "memory",
        }
        got = await client.request(
            "memory.get", {"reference": hit["reference"], "from": 2, "lines": 1}
        )
        assert got["status"] == "ok"
        assert got["text"] == "- The staging database password rotates monthly."
        assert (got["version"], got["providerId"]) == (2, "memory-core")
        missing = await client.request(
            "memory.get", {"reference": {"providerId": "memory-core", "id": "NOPE.md"}}
        )
        assert missing["status"] == "not_found"
        status = await client.request("memory.status", {})
        assert status["status"] == "ready"
        assert status["providerId"] == "memory-core"
        assert "/" not in repr(status.get("details"))


async def test_v1_search_returns_the_file_shaped_response(core_host: claw.Host) -> None:
    gateway = Gateway(core_host)
    async with open_in_memory_gateway_client(gateway, TOKEN) as client:
        payload = await client.request("memory.search", {"query": "lunch", "minScore": 0})
    assert set(payload) == {"agentId", "provider", "searchMode", "results"}
    assert payload["provider"] == "memory-core"
    assert payload["searchMode"] == "hybrid"
    assert payload["results"][0]["path"] == "MEMORY.md"


@pytest.mark.parametrize("version", [3, "2", True])
async def test_other_versions_are_invalid(core_host: claw.Host, version: object) -> None:
    async with open_in_memory_gateway_client(Gateway(core_host), TOKEN) as client:
        with pytest.raises(GatewayRequestError) as info:
            await client.request("memory.search", {"version": version, "query": "x"})
    assert info.value.code == "INVALID_REQUEST"


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"version": 2}, "query"),
        ({"version": 2, "query": "x", "maxResults": 0}, "maxResults"),
        ({"version": 2, "query": "x", "maxResults": 51}, "at most 50"),
        ({"version": 2, "query": "x", "sources": []}, "sources"),
        ({"version": 2, "query": "x", "sources": ["files"]}, "files"),
        ({"version": 2, "query": "x", "minScore": "high"}, "minScore"),
        ({"version": 2, "query": "x", "surprise": 1}, "surprise"),
    ],
)
async def test_bad_search_params_are_invalid_requests(
    core_host: claw.Host, params: dict[str, Any], needle: str
) -> None:
    async with open_in_memory_gateway_client(Gateway(core_host), TOKEN) as client:
        with pytest.raises(GatewayRequestError) as info:
            await client.request("memory.search", params)
        assert (await client.request("memory.status", {}))["status"] == "ready"
    assert info.value.code == "INVALID_REQUEST"
    assert needle in info.value.message


async def test_v1_is_directed_to_v2_for_a_native_provider(native_host: claw.Host) -> None:
    async with open_in_memory_gateway_client(Gateway(native_host), TOKEN) as client:
        with pytest.raises(GatewayRequestError) as info:
            await client.request("memory.search", {"query": "report"})
    assert info.value.code == "INVALID_REQUEST"
    assert '"recording-memory"' in info.value.message
    assert "version: 2" in info.value.message


async def test_without_operator_read_refused_before_provider_admission(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    async with open_in_memory_gateway_client(
        Gateway(native_host), NO_READ_TOKEN, scopes=("operator.write",)
    ) as client:
        for method, params in [
            ("memory.search", {"version": 2, "query": "report"}),
            ("memory.get", {"reference": {"providerId": "recording-memory", "id": "shared"}}),
            ("memory.status", {}),
        ]:
            with pytest.raises(GatewayRequestError) as info:
                await client.request(method, params)
            assert info.value.code == "FORBIDDEN"
    assert provider.calls == []


async def test_operator_v2_search_keeps_own_agent_session_hits_only(
    native_host: claw.Host,
) -> None:
    async with open_in_memory_gateway_client(Gateway(native_host), TOKEN) as client:
        payload = await client.request("memory.search", {"version": 2, "query": "quarterly report"})
    ids = {h["reference"]["id"] for h in payload["hits"]}
    assert ids == {"shared", "own-session"}


async def test_agent_tool_callers_use_their_runs_authority(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    async with native_host.open_run("dm:alice", sender_is_owner=True) as run:
        payload = await memory_search(
            native_host.memory,
            run.caller,
            {"version": 2, "query": "quarterly report"},
            lambda: None,
        )
    assert payload["agentId"] == "main"
    assert [c[1] for c in provider.calls if c[0] == "open"] == ["main"]
    _, authorize = next(c for c in provider.calls if c[0] == "authorize_search_hits")
    assert authorize.session_key == "dm:alice"
    assert authorize.trusted_agent_scope is None


async def _park_then(
    host: claw.Host,
    provider: RecordingMemoryProvider,
    act: Any,
) -> tuple[GatewayRequestError | None, list[str]]:
    """Start a v2 search whose provider parks on a gate; run ``act``; release the gate."""
    provider.gate = trio.Event()
    gateway = Gateway(host)
    outcome: list[GatewayRequestError | None] = [None]
    async with open_in_memory_gateway_client(gateway, TOKEN) as client:

        async def search() -> None:
            try:
                await client.request(
                    "memory.search", {"version": 2, "query": "report"}, request_id="s1"
                )
            except GatewayRequestError as exc:
                outcome[0] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(search)
            await trio.testing.wait_all_tasks_blocked()
            assert "search.enter" in provider.call_names()
            await act(gateway, client)
            provider.gate.set()
    return outcome[0], provider.call_names()


async def test_request_abort_refuses_before_provider_io(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    async def abort(gateway: Gateway, client: Any) -> None:
        await client.cancel("s1")
        await trio.testing.wait_all_tasks_blocked()

    error, calls = await _park_then(native_host, provider, abort)
    assert error is None or error.code == "UNAVAILABLE"
    assert "search" not in calls
    assert calls[-1] == "close"


async def test_client_invalidation_refuses_before_provider_io(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    async def invalidate(gateway: Gateway, client: Any) -> None:
        assert await gateway.invalidate(client.connection_id)

    error, calls = await _park_then(native_host, provider, invalidate)
    assert error is not None and error.code == "UNAVAILABLE"
    assert "search" not in calls
    assert calls[-1] == "close"


async def test_authority_loss_during_open_refuses_before_provider_io(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    provider.open_gate = trio.Event()
    gateway = Gateway(native_host)
    errors: list[GatewayRequestError] = []
    async with open_in_memory_gateway_client(gateway, TOKEN) as client:

        async def search() -> None:
            try:
                await client.request("memory.search", {"version": 2, "query": "report"})
            except GatewayRequestError as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(search)
            await trio.testing.wait_all_tasks_blocked()
            assert provider.call_names() == ["open.enter"]
            assert await gateway.invalidate(client.connection_id)
            provider.open_gate.set()
    assert errors and errors[0].code == "UNAVAILABLE"
    # The provider's own assert_current() refused the stale caller inside open():
    # no handle was handed out and no search ran.
    assert "search.enter" not in provider.call_names()
    assert provider.open_handles == 0


async def test_connection_close_refuses_before_provider_io(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    provider.gate = trio.Event()
    gateway = Gateway(native_host)
    client_scope = trio.CancelScope()

    async def client_task() -> None:
        with client_scope:
            async with open_in_memory_gateway_client(gateway, TOKEN) as client:
                await client.request("memory.search", {"version": 2, "query": "report"})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client_task)
        await trio.testing.wait_all_tasks_blocked()
        assert "search.enter" in provider.call_names()
        client_scope.cancel()  # the client goes away: its connection closes
        await trio.testing.wait_all_tasks_blocked()
        provider.gate.set()
    assert "search" not in provider.call_names()
    assert provider.call_names()[-1] == "close"


async def test_many_clients_at_once_are_all_answered_correctly(core_host: claw.Host) -> None:
    gateway = Gateway(core_host)
    results: dict[int, Any] = {}

    async def one(i: int) -> None:
        async with open_in_memory_gateway_client(gateway, TOKEN) as client:
            query = "lunch" if i % 2 else "staging database"
            payload = await client.request(
                "memory.search", {"version": 2, "query": query, "minScore": 0}
            )
            results[i] = (query, payload)

    async with trio.open_nursery() as nursery:
        for i in range(16):
            nursery.start_soon(one, i)
    assert len(results) == 16
    for query, payload in results.values():
        assert query.split()[0] in payload["hits"][0]["excerpt"].lower()


async def test_real_socket_client_gets_v2_search(core_host: claw.Host) -> None:
    gateway = Gateway(core_host)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(gateway.serve)
        async with open_gateway_client(address.url, TOKEN) as client:
            payload = await client.request(
                "memory.search", {"version": 2, "query": "lunch", "minScore": 0}
            )
        assert payload["hits"]
        nursery.cancel_scope.cancel()


@attrs.define
class _Counts:
    """The currency checks and committed-state reads one request makes."""

    verified: list[object] = attrs.field(factory=list)
    committed_reads: int = 0


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> _Counts:
    seen = _Counts()
    verify, read = Currency.verify, Currency.verify_committed

    def counting_verify(self: Currency, capability: object, **kw: Any) -> None:
        seen.verified.append(capability)
        verify(self, capability, **kw)

    async def counting_read(self: Currency, context: claw.MemoryCallerContext) -> None:
        authority = context.authority
        if isinstance(authority, claw.SessionAuthority) and authority.audience is not None:
            seen.committed_reads += 1
        await read(self, context)

    monkeypatch.setattr(Currency, "verify", counting_verify)
    monkeypatch.setattr(Currency, "verify_committed", counting_read)
    return seen


async def test_a_v2_search_checks_currency_once_at_each_point_the_seed_names(
    native_host: claw.Host, provider: RecordingMemoryProvider, counts: _Counts
) -> None:
    """The request's caller was just minted (no check before opening repeats that one);
    then after opening (before the search), after the search (before the authorize
    hook), and the release check after the hook and the handle's close. The gateway
    does not check again after the guard's release check."""
    async with open_in_memory_gateway_client(Gateway(native_host), TOKEN) as client:
        payload = await client.request("memory.search", {"version": 2, "query": "quarterly"})
    assert payload["hits"]
    assert "authorize_search_hits" in provider.call_names()
    assert len(counts.verified) == 3
    assert all(isinstance(c, claw.MemoryCallerContext) for c in counts.verified)


async def test_a_v2_search_asks_its_connection_once_with_each_currency_check(
    native_host: claw.Host,
    provider: RecordingMemoryProvider,
    counts: _Counts,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The request's own condition (its connection) goes with each of the guard's three
    checks, once: not twice around the release check's verification, and not the
    request's abort, which the caller context's verification already refuses."""
    asked: list[str] = []
    check_connection = GatewayRequestContext.check_connection

    def counting(self: GatewayRequestContext) -> None:
        asked.append("connection")
        check_connection(self)

    monkeypatch.setattr(GatewayRequestContext, "check_connection", counting)
    async with open_in_memory_gateway_client(Gateway(native_host), TOKEN) as client:
        payload = await client.request("memory.search", {"version": 2, "query": "quarterly"})
    assert payload["hits"]
    assert len(asked) == len(counts.verified) == 3


async def test_an_aborted_request_is_refused_by_its_context_before_the_search(
    native_host: claw.Host, provider: RecordingMemoryProvider
) -> None:
    """A request aborted with no checkpoint since (its scope cancelled, nothing raised
    yet) is refused by its caller context's checks, with a request condition that knows
    nothing of the abort: no search runs and no handle stays open."""
    async with native_host.open_scope("gw") as scope:
        aborted = trio.CancelScope()
        aborted.cancel()
        caller = scope.mint_caller_context(
            scope.mint_operator_authority({"operator.read"}), cancel_scope=aborted
        )
        with pytest.raises(claw.StaleCapabilityError, match="aborted"):
            await memory_search(
                native_host.memory, caller, {"version": 2, "query": "quarterly"}, lambda: None
            )
    assert "search.enter" not in provider.call_names()
    assert provider.open_handles == 0


async def test_a_tool_search_checks_currency_once_at_each_point_and_reads_once(
    native_host: claw.Host, provider: RecordingMemoryProvider, counts: _Counts
) -> None:
    """A tool's search (an owner run: an audience, so a committed-state read): before
    opening, after opening, after the search, then the release check (its read between
    two checks)."""
    tool = claw.RegisteredTool(
        plugin_id="recording-memory",
        tool=claw.Tool("recall", "recall", handler=_unused_handler),
    )
    async with native_host.open_run("dm:alice", sender_is_owner=True) as run:
        facet = native_host.turns.tools.context_for(tool, run).memory
        assert facet is not None
        counts.verified.clear()
        result = await facet.search(MemorySearchRequest(query="quarterly report"))
    assert result.hits
    assert len(counts.verified) == 5
    assert counts.committed_reads == 1


async def _unused_handler(context: claw.ToolContext, arguments: Any) -> str:
    raise AssertionError("not called")  # pragma: no cover


async def test_a_search_is_validated_once_where_it_enters(
    core_host: claw.Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway's parser checks the wire parameters; neither the neutral request's
    constructor nor Memory Core's index checks them again on the way in."""

    def checked_again(*args: object, **kwargs: object) -> None:
        raise AssertionError("a search's values were checked a second time")

    monkeypatch.setattr(MemorySearchRequest, "__attrs_post_init__", checked_again)
    monkeypatch.setattr(Searcher, "search_page", checked_again)
    async with open_in_memory_gateway_client(Gateway(core_host), TOKEN) as client:
        v2 = await client.request(
            "memory.search", {"version": 2, "query": "staging password", "maxResults": 3}
        )
        v1 = await client.request("memory.search", {"query": "staging password"})
        with pytest.raises(GatewayRequestError, match="maxResults"):
            await client.request("memory.search", {"version": 2, "query": "x", "maxResults": 0})
    assert v2["hits"] and v1["results"]


@pytest.mark.parametrize("query", ["", " ", "\t\n \u3000"])
async def test_an_empty_or_blank_query_is_refused_where_it_enters(
    native_host: claw.Host, provider: RecordingMemoryProvider, query: str
) -> None:
    async with open_in_memory_gateway_client(Gateway(native_host), TOKEN) as client:
        with pytest.raises(GatewayRequestError, match="query must not be empty") as refused:
            await client.request("memory.search", {"version": 2, "query": query})
    assert refused.value.code == "INVALID_REQUEST"
    assert provider.calls == []
