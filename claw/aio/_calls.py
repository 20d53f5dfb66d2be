"""Awaiting a :class:`~claw._bridge.BridgeCall` on asyncio's loop.

The call runs in claw's Trio thread; the awaiting asyncio task is woken through
``loop.call_soon_threadsafe`` when it ends. Cancelling the task cancels the Trio side
and waits for it to unwind before ``CancelledError`` propagates, so an asyncio timeout
or a cancelled request handler never leaves claw work running behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

import trio

from .._bridge import BridgeCall, Facade, HeldContext, TrioThread, submit_method

T = TypeVar("T")


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _ended(call: BridgeCall[Any]) -> asyncio.Future[None]:
    """A future of the running loop that completes (is never cancelled) when ``call`` ends."""
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
            loop.call_soon_threadsafe(_set_done, finished)

    call.add_done_callback(wake)
    return finished


async def _wait_out(finished: asyncio.Future[None]) -> None:
    """Wait for ``finished`` however often the task is cancelled meanwhile."""
    cancels = 0
    while not finished.done():
        try:
            await asyncio.shield(finished)
        except asyncio.CancelledError:
            cancels += 1
    if cancels:
        raise asyncio.CancelledError


async def wait_call(call: BridgeCall[T]) -> T:
    """Await ``call``'s outcome; cancelling the awaiting task cancels the Trio side,
    waits for it to end, then raises ``CancelledError``."""
    finished = await _ended(call)
    try:
        await asyncio.shield(finished)
    except asyncio.CancelledError:
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await _wait_out(finished)
        raise
    return call.outcome()


async def close_thread(thread: TrioThread) -> None:
    """Close ``thread`` without blocking the loop; not interrupted by cancellation (a
    cancel that arrives meanwhile is raised once the thread is closed)."""
    closed = thread.close_soon()
    await _wait_out(await _ended(closed))
    thread.close()  # joins a thread that has ended; raises what leaving a context raised


class _Closable(Protocol):
    async def aclose(self) -> None: ...


C = TypeVar("C", bound=_Closable)


class Opening(Generic[C]):
    """What ``claw.aio.open_*`` returns: ``await`` it for a facade you close yourself
    (``await facade.aclose()``), or use it in ``async with`` to close on exit."""

    def __init__(self, open_: Callable[[], Coroutine[Any, Any, C]]) -> None:
        self._open = open_
        self._value: C | None = None

    def __await__(self) -> Generator[Any, None, C]:
        return self._open().__await__()

    async def __aenter__(self) -> C:
        self._value = await self._open()
        return self._value

    async def __aexit__(self, *exc_info: object) -> None:
        if self._value is not None:
            await self._value.aclose()


async def start(
    manager_factory: Callable[[], Any], *, trio_clock: trio.abc.Clock | None
) -> tuple[TrioThread, HeldContext[Any]]:
    """Start a Trio thread and enter the context ``manager_factory()`` there.

    If entering fails or the task is cancelled meanwhile, the thread is closed before
    the error propagates.
    """
    thread = TrioThread.start(clock=trio_clock, name="claw-aio")
    try:
        held = thread.enter(manager_factory())
        await wait_call(held.entered)
    except BaseException:
        await close_thread(thread)
        raise
    return thread, held


P = ParamSpec("P")


def awaitable(
    method: Callable[Concatenate[Any, P], Awaitable[T]],
) -> Callable[Concatenate[Facade, P], Coroutine[Any, Any, T]]:
    """The facade's method for a Trio object's async ``method``: same parameters,
    awaited on asyncio's loop (see :func:`wait_call`)."""
    name = method.__name__

    @functools.wraps(method)
    async def call(self: Facade, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = await wait_call(submit_method(self, name, args, kwargs))
        return result

    return call
