"""claw.jupyter: the blocking portal, driven from plain synchronous code as a notebook does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

import claw
from claw.jupyter import PortalClosedError, TrioPortal, start_portal
from claw.models import UserMessage
from claw_testing import ScriptedModel, SessionBuilder, harness_config, open_harness_host


@pytest.fixture
def portal() -> Iterator[TrioPortal]:
    with start_portal() as p:
        yield p


async def _add(a: int, b: int) -> int:
    await trio.lowlevel.checkpoint()
    return a + b


async def _fail() -> None:
    await trio.lowlevel.checkpoint()
    raise LookupError("from trio")


def test_run_returns_the_result_and_raises_the_error(portal: TrioPortal) -> None:
    assert portal.run(_add, 2, 3) == 5
    with pytest.raises(LookupError, match="from trio"):
        portal.run(_fail)
    assert portal.run(_add, 1, 1) == 2  # an error does not break the portal


def test_a_host_stays_open_across_calls_and_closes_at_stop(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    model = ScriptedModel(["first", "second"])
    config = harness_config(tmp_path / "ws", tmp_path / "state")
    portal = start_portal()
    host = portal.enter_async_context(open_harness_host(config, model=model))
    portal.run(SessionBuilder(host).owner_direct, "dm:o")
    replies = [portal.run(_turn, host, text) for text in ("one", "two")]
    assert replies == ["first", "second"]
    assert not host.closed
    portal.stop()
    assert host.closed
    assert not portal.running


async def _turn(host: claw.Host, text: str) -> str:
    result = await host.run_turn("dm:o", UserMessage(text), sender_is_owner=True)
    return result.reply.text


def test_held_contexts_are_left_newest_first() -> None:
    order: list[str] = []

    @asynccontextmanager
    async def ctx(name: str) -> AsyncIterator[str]:
        order.append(f"enter {name}")
        try:
            yield name
        finally:
            await trio.lowlevel.checkpoint()
            order.append(f"exit {name}")

    with start_portal() as portal:
        assert portal.enter_async_context(ctx("a")) == "a"
        assert portal.enter_async_context(ctx("b")) == "b"
    assert order == ["enter a", "enter b", "exit b", "exit a"]


def test_an_error_entering_a_context_is_raised_by_the_call(portal: TrioPortal) -> None:
    @asynccontextmanager
    async def broken() -> AsyncIterator[None]:
        raise PermissionError("no entry")
        yield  # pragma: no cover

    with pytest.raises(PermissionError, match="no entry"):
        portal.enter_async_context(broken())


def test_an_error_leaving_a_context_is_raised_by_stop() -> None:
    @asynccontextmanager
    async def leaky() -> AsyncIterator[int]:
        yield 1
        raise OSError("close failed")

    portal = start_portal()
    portal.enter_async_context(leaky())
    with pytest.raises(OSError, match="close failed"):
        portal.stop()
    portal.stop()  # idempotent, and the error is reported once


def test_calls_after_stop_are_refused() -> None:
    portal = start_portal()
    portal.stop()
    with pytest.raises(PortalClosedError, match="not running"):
        portal.run(_add, 1, 2)


def test_a_call_from_the_portals_own_thread_is_refused(portal: TrioPortal) -> None:
    async def reenter() -> None:
        await trio.lowlevel.checkpoint()
        portal.run(_add, 1, 2)

    with pytest.raises(RuntimeError, match="deadlock"):
        portal.run(reenter)


def test_a_mock_clock_makes_the_portals_time_virtual() -> None:
    async def sleep_an_hour() -> float:
        start = trio.current_time()
        await trio.sleep(3600)
        return trio.current_time() - start

    with start_portal(clock=trio.testing.MockClock(autojump_threshold=0)) as portal:
        assert portal.run(sleep_an_hour) == 3600


def test_the_portal_has_no_public_constructor() -> None:
    with pytest.raises(TypeError, match="no public constructor"):
        TrioPortal(None)
