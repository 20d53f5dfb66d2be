"""``claw.blocking.Memory``: a workspace's memory, called from synchronous code."""

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
from ._calls import blocking, start

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


@final
class Memory(metaclass=NoPublicConstructor):
    """The memory of one workspace for a local operator, from synchronous code.

    From :func:`open_memory` (or ``host.open_memory()`` on a :class:`claw.blocking.Host`).
    Every method runs the matching :class:`claw.LocalMemory` method in claw's Trio thread
    and blocks until it returns; any number of threads (a web server's workers) may call
    it at once. Errors are claw's own; Ctrl-C while a call waits cancels it in Trio.
    """

    def __init__(self, thread: TrioThread, held: HeldContext[LocalMemory], *, owner: bool) -> None:
        self._thread = thread
        self._held = held
        self._owner = owner
        self.local: LocalMemory = held.entered.outcome()

    def _bridge_target(self) -> LocalMemory:
        return self.local

    search = blocking(LocalMemory.search)
    get = blocking(LocalMemory.get)
    add = blocking(LocalMemory.add)
    forget = blocking(LocalMemory.forget)
    restore = blocking(LocalMemory.restore)
    removals = blocking(LocalMemory.removals)
    purge = blocking(LocalMemory.purge)
    status = blocking(LocalMemory.status)

    def call(self, async_fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
        """Run ``await async_fn(*args)`` in claw's Trio thread and return its result: any
        Trio API, such as a method of :attr:`local`. Only touch claw's objects in such calls."""
        return self._thread.submit(async_fn, *args).result()

    def close(self) -> None:
        """Close what this facade opened (the host, when :func:`open_memory` opened it).

        Calls still in flight raise :class:`claw.HostClosedError`. Idempotent.
        """
        if self._owner:
            self._thread.close()
        else:
            self._held.release().result()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def open_memory(
    workspace: str | os.PathLike[str] | HostConfig | None = None,
    *,
    config: str | os.PathLike[str] | None = None,
    agent_id: str | None = None,
    scopes: Iterable[str] = LOCAL_SCOPES,
    trio_clock: trio.abc.Clock | None = None,
) -> Memory:
    """Open the memory of ``workspace`` for synchronous code: ``claw.open_memory`` in a
    Trio thread of its own.

    ``with claw.blocking.open_memory(ws) as mem:`` closes it on exit; ``mem =
    claw.blocking.open_memory(ws)`` keeps it open until ``mem.close()`` (or the
    interpreter's exit). The arguments are :func:`claw.open_memory`'s; ``trio_clock`` is
    the Trio clock (a ``trio.testing.MockClock`` in tests).
    """
    scope_list = tuple(scopes)
    thread, held = start(
        lambda: trio_open_memory(workspace, config=config, agent_id=agent_id, scopes=scope_list),
        trio_clock=trio_clock,
    )
    return Memory._create(thread, held, owner=True)
