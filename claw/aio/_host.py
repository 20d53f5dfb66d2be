"""``claw.aio.Host``: a claw host, awaited from asyncio code."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeVar, TypeVarTuple

import trio

from .._bridge import HeldContext, TrioThread
from .._config import HostConfig
from .._host import Host as TrioHost
from .._host import open_host as trio_open_host
from .._local import LOCAL_SCOPES, operator_memory
from .._plugins import Plugin
from .._slots import SlotSelection
from .._util import NoPublicConstructor, final
from ..models._registry import ProviderFactory
from ..state import SessionStorage
from ._calls import Opening, awaitable, close_thread, start, wait_call
from ._memory import Memory

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


@final
class Sessions(metaclass=NoPublicConstructor):
    """``host.sessions`` of a :class:`claw.aio.Host`: the durable session store
    (:class:`claw.Host`'s ``sessions``), awaited from asyncio."""

    def __init__(self, host: Host) -> None:
        self._host = host
        self._thread = host._thread

    def _bridge_target(self) -> SessionStorage:
        return self._host.trio_host.sessions

    create = awaitable(SessionStorage.create)
    get = awaitable(SessionStorage.get)
    list = awaitable(SessionStorage.list)
    reset = awaitable(SessionStorage.reset)
    reassign = awaitable(SessionStorage.reassign)
    spawn_child = awaitable(SessionStorage.spawn_child)
    delete = awaitable(SessionStorage.delete)


async def _register(host: TrioHost, name: str, factory: ProviderFactory) -> None:
    host.models.register_provider(name, factory)
    await trio.lowlevel.checkpoint()


@final
class Host(metaclass=NoPublicConstructor):
    """A claw host running in a Trio thread of its own, awaited from asyncio.

    From :func:`open_host`. Turns, sessions and an operator's memory have methods here;
    :meth:`call` runs any other Trio API of the host in its thread. Any number of asyncio
    tasks may call it at once; cancelling a task cancels its call in Trio, and errors
    are claw's own.
    """

    def __init__(self, thread: TrioThread, held: HeldContext[TrioHost]) -> None:
        self._thread = thread
        self._held = held
        #: The Trio host itself: use it only inside functions passed to :meth:`call`.
        self.trio_host: TrioHost = held.entered.outcome()
        self.sessions: Sessions = Sessions._create(self)

    @property
    def config(self) -> HostConfig:
        """The host's configuration."""
        return self.trio_host.config

    @property
    def slots(self) -> SlotSelection:
        """Which plugins own the context-engine and memory slots."""
        return self.trio_host.slots

    async def call(self, async_fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
        """Await ``async_fn(*args)`` in the host's Trio thread (any Trio API of claw)."""
        return await wait_call(self._thread.submit(async_fn, *args))

    def _bridge_target(self) -> TrioHost:
        return self.trio_host

    run_turn = awaitable(TrioHost.run_turn)
    retry_turn = awaitable(TrioHost.retry_turn)
    compact = awaitable(TrioHost.compact)

    async def register_model_provider(self, name: str, factory: ProviderFactory) -> None:
        """Resolve ``<name>/<model>`` references with ``factory`` (a Trio
        :class:`claw.Model`), as ``host.models.register_provider`` does."""
        await self.call(_register, self.trio_host, name, factory)

    async def open_memory(
        self, *, scopes: Iterable[str] = LOCAL_SCOPES, agent_id: str | None = None
    ) -> Memory:
        """A local operator's memory on this host (``operator.read`` and ``.write`` by
        default); ``await mem.aclose()`` revokes it, closing the host closes it too."""
        held = self._thread.enter(
            operator_memory(self.trio_host, scopes=tuple(scopes), agent_id=agent_id)
        )
        await wait_call(held.entered)
        return Memory._create(self._thread, held, owner=False)

    async def aclose(self) -> None:
        """Close the host and everything opened through it; calls in flight raise
        :class:`claw.HostClosedError`. Idempotent."""
        await close_thread(self._thread)

    async def __aenter__(self) -> Host:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def open_host(
    config: HostConfig | None = None,
    *,
    plugins: Sequence[Plugin] = (),
    trio_clock: trio.abc.Clock | None = None,
) -> Opening[Host]:
    """Open a claw host for asyncio code: :func:`claw.open_host` in a Trio thread.

    ``async with claw.aio.open_host(config) as host:`` closes it on exit; ``host = await
    claw.aio.open_host(config)`` keeps it open until ``await host.aclose()``.
    """

    async def open_() -> Host:
        thread, held = await start(
            lambda: trio_open_host(config, plugins=plugins), trio_clock=trio_clock
        )
        return Host._create(thread, held)

    return Opening(open_)
