"""While a session write is in flight, audience currency is unavailable, not stale-but-passing.

The window: the worker thread has COMMITted a reset, the event loop has not yet updated
the store's mirror (and revoked the audience). A pool that parks right after running a
session transaction holds that window open so the test can look inside it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import attrs
import pytest
import trio

import claw
from claw._capabilities import AUDIENCE_STALE_MESSAGE
from claw.memory import Citation, MemoryAddResult, MemoryReference, MemorySearchRequest
from claw.state.sqlite._sessions import _run_transaction
from claw_testing import MemoryRecord, RecordingMemoryProvider

T = TypeVar("T")


@attrs.define(eq=False)
class ParkingPool:
    """Inline, except that an armed pool parks after a session transaction has committed."""

    armed: bool = False
    committed: trio.Event = attrs.field(factory=trio.Event)
    release: trio.Event = attrs.field(factory=trio.Event)

    async def run_sync(self, fn: Callable[..., T], *args: object) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        result = fn(*args)
        if self.armed and fn is _run_transaction:
            self.armed = False
            self.committed.set()
            await self.release.wait()
        await trio.lowlevel.cancel_shielded_checkpoint()
        return result

    def statistics(self) -> Any:
        return claw.InlineWorkerPool().statistics()


@pytest.fixture
def pool() -> ParkingPool:
    return ParkingPool()


@pytest.fixture
def provider() -> RecordingMemoryProvider:
    return RecordingMemoryProvider(
        provider_id="rec",
        records=[
            MemoryRecord(id="o", text="owner secret deploy pin", visibility="owner-private")
        ],
    )


@pytest.fixture
async def host(
    host_config: claw.HostConfig, pool: ParkingPool, provider: RecordingMemoryProvider
) -> AsyncIterator[claw.Host]:
    plugin = claw.Plugin(
        id="rec", register=lambda api: api.register_memory_capability(provider.capability())
    )
    config = attrs.evolve(
        host_config,
        plugins=attrs.evolve(host_config.plugins, slots=claw.SlotsConfig(memory="rec")),
    )
    async with claw.open_host(config, plugins=[plugin], workers=pool) as h:  # type: ignore[arg-type]
        await h.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        await h.sessions.create("grp:1", agent_id="main", chat_type="group")
        yield h


async def _reset_in_background(
    host: claw.Host, pool: ParkingPool, nursery: trio.Nursery, key: str = "dm:alice"
) -> None:
    pool.armed = True
    nursery.start_soon(host.sessions.reset, key)
    await pool.committed.wait()  # the reset is durable; the mirror does not know yet


async def test_checks_during_a_lineage_write_raise_a_retryable_error(
    host: claw.Host, pool: ParkingPool
) -> None:
    async with host.open_run("dm:alice", sender_is_owner=True) as run:
        async with trio.open_nursery() as n:
            await _reset_in_background(host, pool, n)
            with pytest.raises(claw.CurrencyPendingError, match="in flight"):
                run.caller.assert_current()
            with pytest.raises(claw.CurrencyPendingError):
                host.verify(run.audience)
            assert isinstance(claw.CurrencyPendingError("x"), claw.StaleCapabilityError)
            pool.release.set()
        with pytest.raises(claw.StaleCapabilityError, match=AUDIENCE_STALE_MESSAGE):
            run.caller.assert_current()


async def test_a_write_outside_the_lineage_leaves_currency_decidable(
    host: claw.Host, pool: ParkingPool
) -> None:
    async with host.open_run("dm:alice", sender_is_owner=True) as run:
        async with trio.open_nursery() as n:
            await _reset_in_background(host, pool, n, key="grp:1")
            run.caller.assert_current()
            pool.release.set()
        run.caller.assert_current()


async def test_a_provider_call_waits_for_the_write_then_rechecks(
    host: claw.Host, pool: ParkingPool, provider: RecordingMemoryProvider
) -> None:
    async with host.open_run("dm:alice", sender_is_owner=True) as run:
        async with host.memory.open(run.caller) as handle, trio.open_nursery() as n:
            found = await handle.search(MemorySearchRequest(query="deploy"))
            assert [h.reference.id for h in found.hits] == ["o"]
            await _reset_in_background(host, pool, n)
            before = provider.call_names().count("search")
            outcome: list[BaseException] = []

            async def search() -> None:
                try:
                    await handle.search(MemorySearchRequest(query="deploy"))
                except claw.ClawError as exc:
                    outcome.append(exc)

            n.start_soon(search)
            await trio.testing.wait_all_tasks_blocked()
            assert outcome == []  # waiting for the write, not answering from the old mirror
            assert provider.call_names().count("search") == before
            pool.release.set()
        (error,) = outcome
        assert isinstance(error, claw.StaleCapabilityError)
        assert not isinstance(error, claw.CurrencyPendingError)
        assert provider.call_names().count("search") == before  # never reached the provider


@attrs.define(eq=False)
class RecordingAdds:
    adds: list[str] = attrs.field(factory=list)

    async def add(self, *, agent_id: str, context: claw.MemoryCallerContext, request: Any) -> Any:
        self.adds.append(request.text)
        return MemoryAddResult(
            reference=MemoryReference(provider_id="rec", id="memory/today.md", fragment="L1-L1"),
            citation=Citation(path="memory/today.md", start_line=1, end_line=1, source="memory"),
            timestamp="2026-12-01T00:00:00Z",
        )


async def test_a_memory_write_waits_for_a_lineage_write_then_rechecks(
    host_config: claw.HostConfig, pool: ParkingPool, provider: RecordingMemoryProvider
) -> None:
    adds = RecordingAdds()
    capability = attrs.evolve(provider.capability(), maintenance=adds)
    plugin = claw.Plugin(id="rec", register=lambda api: api.register_memory_capability(capability))
    config = attrs.evolve(
        host_config,
        plugins=attrs.evolve(host_config.plugins, slots=claw.SlotsConfig(memory="rec")),
    )
    async with claw.open_host(config, plugins=[plugin], workers=pool) as host:  # type: ignore[arg-type]
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        async with host.open_run("dm:alice", sender_is_owner=True) as run:
            await host.memory.add(run.caller, "first")
            outcome: list[BaseException] = []
            async with trio.open_nursery() as n:
                await _reset_in_background(host, pool, n)

                async def add() -> None:
                    try:
                        await host.memory.add(run.caller, "during the reset")
                    except claw.ClawError as exc:
                        outcome.append(exc)

                n.start_soon(add)
                await trio.testing.wait_all_tasks_blocked()
                assert outcome == []  # waiting, not refused as pending, not written
                pool.release.set()
    (error,) = outcome
    assert isinstance(error, claw.StaleCapabilityError)
    assert not isinstance(error, claw.CurrencyPendingError)
    assert adds.adds == ["first"]
