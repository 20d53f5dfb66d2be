"""``claw.aio.Memory``: a workspace's memory, awaited from asyncio code."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar, TypeVarTuple

import trio

from .._bridge import HeldContext, TrioThread
from .._config import HostConfig
from .._local import LOCAL_SCOPES, LocalMemory
from .._local import open_memory as trio_open_memory
from .._util import NoPublicConstructor, final
from ._calls import Opening, awaitable, close_thread, start, wait_call

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


@final
class Memory(metaclass=NoPublicConstructor):
    """The memory of one workspace for a local operator, awaited from asyncio.

    From :func:`open_memory` (or ``await host.open_memory()`` on a :class:`claw.aio.Host`).
    Every method runs the matching :class:`claw.LocalMemory` method in claw's Trio thread;
    any number of asyncio tasks may call it at once. Errors are claw's own
    (``claw.ClawError`` subclasses); cancelling a task cancels its call in Trio.
    """

    def __init__(self, thread: TrioThread, held: HeldContext[LocalMemory], *, owner: bool) -> None:
        self._thread = thread
        self._held = held
        self._owner = owner
        self.local: LocalMemory = held.entered.outcome()

    def _bridge_target(self) -> LocalMemory:
        return self.local

    search = awaitable(LocalMemory.search)
    get = awaitable(LocalMemory.get)
    add = awaitable(LocalMemory.add)
    forget = awaitable(LocalMemory.forget)
    restore = awaitable(LocalMemory.restore)
    removals = awaitable(LocalMemory.removals)
    purge = awaitable(LocalMemory.purge)
    status = awaitable(LocalMemory.status)

    async def call(self, async_fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
        """Await ``async_fn(*args)`` in claw's Trio thread: any Trio API, such as a method
        of :attr:`local` or of ``local.host``. Only touch claw's objects in such calls."""
        return await wait_call(self._thread.submit(async_fn, *args))

    async def aclose(self) -> None:
        """Close what this facade opened (the host, when :func:`open_memory` opened it).

        Calls still in flight raise :class:`claw.HostClosedError`. Idempotent.
        """
        if self._owner:
            await close_thread(self._thread)
        else:
            await wait_call(self._held.release())

    async def __aenter__(self) -> Memory:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def open_memory(
    workspace: str | os.PathLike[str] | HostConfig | None = None,
    *,
    config: str | os.PathLike[str] | None = None,
    agent_id: str | None = None,
    scopes: Iterable[str] = LOCAL_SCOPES,
    trio_clock: trio.abc.Clock | None = None,
) -> Opening[Memory]:
    """Open the memory of ``workspace`` for asyncio code: ``claw.open_memory`` in a Trio
    thread of its own.

    ``async with claw.aio.open_memory(ws) as mem:`` closes it on exit; ``mem = await
    claw.aio.open_memory(ws)`` keeps it open until ``await mem.aclose()`` (an app's
    startup and shutdown). The arguments are :func:`claw.open_memory`'s; ``trio_clock``
    is the Trio clock (a ``trio.testing.MockClock`` in tests).
    """
    scope_list = tuple(scopes)

    async def open_() -> Memory:
        thread, held = await start(
            lambda: trio_open_memory(
                workspace, config=config, agent_id=agent_id, scopes=scope_list
            ),
            trio_clock=trio_clock,
        )
        return Memory._create(thread, held, owner=True)

    return Opening(open_)
