"""claw._bridge.TrioThread: the Trio thread behind claw.aio, claw.blocking and claw.jupyter."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
import trio

import claw
from claw._bridge import TrioThread


@pytest.fixture
def bridge() -> Iterator[TrioThread]:
    thread = TrioThread.start()
    yield thread
    thread.close()


async def _parked(started: threading.Event, log: list[str]) -> None:
    """Park until cancelled, saying when it started and that it unwound."""
    started.set()
    try:
        await trio.sleep_forever()
    finally:
        log.append("unwound")


def test_a_call_returns_its_value_and_raises_its_own_error(bridge: TrioThread) -> None:
    async def fail() -> None:
        await trio.lowlevel.checkpoint()
        raise claw.StaleCapabilityError("gone")

    async def add(a: int, b: int) -> int:
        await trio.lowlevel.checkpoint()
        return a + b

    assert bridge.submit(add, 2, 3).result() == 5
    error = claw.StaleCapabilityError("x")
    with pytest.raises(claw.StaleCapabilityError, match="gone") as caught:
        bridge.submit(fail).result()
    assert caught.value is not error
    assert bridge.submit(add, 1, 1).result() == 2


def test_cancel_reaches_the_trio_side_and_the_call_ends_after_it_unwound(
    bridge: TrioThread,
) -> None:
    started, log = threading.Event(), []
    call = bridge.submit(_parked, started, log)
    started.wait()
    call.cancel()
    call.wait()
    assert log == ["unwound"]
    assert call.cancelled
    with pytest.raises(claw.HostClosedError, match="cancelled"):
        call.outcome()


def test_close_cancels_calls_in_flight_then_leaves_contexts_newest_first() -> None:
    order: list[str] = []

    @asynccontextmanager
    async def ctx(name: str) -> AsyncIterator[str]:
        order.append(f"enter {name}")
        try:
            yield name
        finally:
            await trio.lowlevel.checkpoint()
            order.append(f"exit {name}")

    thread = TrioThread.start()
    assert thread.enter(ctx("a")).entered.result() == "a"
    assert thread.enter(ctx("b")).entered.result() == "b"
    started = threading.Event()
    call = thread.submit(_parked, started, order)
    started.wait()
    thread.close()
    assert order == ["enter a", "enter b", "unwound", "exit b", "exit a"]
    with pytest.raises(claw.HostClosedError, match="closed while the call ran"):
        call.result()
    with pytest.raises(claw.HostClosedError, match="closed"):
        thread.submit(trio.lowlevel.checkpoint)
    assert not thread.running


def test_a_held_context_released_early_is_left_at_once(bridge: TrioThread) -> None:
    order: list[str] = []

    @asynccontextmanager
    async def ctx() -> AsyncIterator[None]:
        yield
        order.append("left")

    held = bridge.enter(ctx())
    held.entered.result()
    held.release().result()
    assert order == ["left"]


def test_an_error_leaving_a_context_is_raised_by_the_first_close_only() -> None:
    @asynccontextmanager
    async def leaky() -> AsyncIterator[int]:
        yield 1
        raise OSError("close failed")

    thread = TrioThread.start()
    thread.enter(leaky()).entered.result()
    with pytest.raises(OSError, match="close failed"):
        thread.close()
    thread.close()


def test_closing_while_a_context_is_being_entered_cancels_the_entering() -> None:
    started, log = threading.Event(), []

    @asynccontextmanager
    async def slow() -> AsyncIterator[None]:
        await _parked(started, log)
        yield  # pragma: no cover

    thread = TrioThread.start()
    held = thread.enter(slow())
    started.wait()
    thread.close()
    assert log == ["unwound"]
    with pytest.raises(claw.HostClosedError, match="entering"):
        held.entered.result()


def _blocked_in_result(thread_id: int) -> bool:
    """Whether the thread is inside ``BridgeCall.result``, blocked on its lock."""
    frame = sys._current_frames().get(thread_id)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return len(names) > 1 and names[0] == "wait" and "result" in names


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in the main thread, as in an interactive script.

    A process started in the background by a non-interactive shell (``make test &``,
    some CI runners) begins with SIGINT ignored, and Python then installs no handler:
    the signal this test sends would be dropped and the wait below would never end.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("ctrl_c_raises")
def test_keyboard_interrupt_while_waiting_cancels_the_call(bridge: TrioThread) -> None:
    started, log = threading.Event(), []
    call = bridge.submit(_parked, started, log)

    main = threading.main_thread().ident
    assert main is not None and threading.get_ident() == main

    def interrupt() -> None:  # a real SIGINT, as Ctrl-C sends: it wakes the blocked wait
        started.wait()
        while not call.done():
            while not _blocked_in_result(main):  # the signal must find the caller waiting
                time.sleep(0.001)
            signal.pthread_kill(main, signal.SIGINT)
            # A signal that lands while the caller is in ``wait``'s Python lines, before
            # its lock blocks, is handled only at the next bytecode, which the blocked
            # thread never reaches (it hung a suite once): press Ctrl-C again, as a user
            # would, but only after the call had five seconds to be cancelled and unwind,
            # so that a signal that was handled never meets a second one.
            call.wait(5.0)

    helper = threading.Thread(target=interrupt)
    helper.start()
    with pytest.raises(KeyboardInterrupt):
        call.result()
    helper.join()
    assert log == ["unwound"]


def test_many_threads_call_at_once(bridge: TrioThread) -> None:
    gate = trio.Event()
    arrived: list[int] = []

    async def meet(i: int) -> int:
        arrived.append(i)
        if len(arrived) == 8:
            gate.set()
        await gate.wait()  # every call is in flight together before any returns
        return i * i

    results: dict[int, int] = {}

    def worker(i: int) -> None:
        results[i] = bridge.submit(meet, i).result()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: i * i for i in range(8)}


def test_waiting_from_the_trio_thread_itself_is_refused(bridge: TrioThread) -> None:
    async def reenter() -> None:
        await trio.lowlevel.checkpoint()
        bridge.submit(trio.lowlevel.checkpoint).result()

    with pytest.raises(RuntimeError, match="deadlock"):
        bridge.submit(reenter).result()


def test_the_thread_has_no_public_constructor() -> None:
    with pytest.raises(TypeError, match="no public constructor"):
        TrioThread(None, "x")
