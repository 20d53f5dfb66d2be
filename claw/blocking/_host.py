"""``claw.blocking.Host``: a claw host, called from synchronous code."""

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
from ._calls import blocking, start
from ._memory import Memory

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


@final
class Sessions(metaclass=NoPublicConstructor):
    """``host.sessions`` of a :class:`claw.blocking.Host`: the durable session store
    (:class:`claw.Host`'s ``sessions``), called from synchronous code."""

    def __init__(self, host: Host) -> None:
        self._host = host
        self._thread = host._thread

    def _bridge_target(self) -> SessionStorage:
        return self._host.trio_host.sessions

    create = blocking(SessionStorage.create)
    get = blocking(SessionStorage.get)
    list = blocking(SessionStorage.list)
    reset = blocking(SessionStorage.reset)
    reassign = blocking(SessionStorage.reassign)
    spawn_child = blocking(SessionStorage.spawn_child)
    delete = blocking(SessionStorage.delete)


async def _register(host: TrioHost, name: str, factory: ProviderFactory) -> None:
    host.models.register_provider(name, factory)
    await trio.lowlevel.checkpoint()


@final
class Host(metaclass=NoPublicConstructor):
    """A claw host running in a Trio thread of its own, called from synchronous code.

    From :func:`open_host`. Turns, sessions and an operator's memory have methods here;
    :meth:`call` runs any other Trio API of the host in its thread. Any number of
    threads may call it at once; errors are claw's own.
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

    def call(self, async_fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
        """Run ``await async_fn(*args)`` in the host's Trio thread and return its result."""
        return self._thread.submit(async_fn, *args).result()

    def _bridge_target(self) -> TrioHost:
        return self.trio_host

    run_turn = blocking(TrioHost.run_turn)
    retry_turn = blocking(TrioHost.retry_turn)
    compact = blocking(TrioHost.compact)

    def register_model_provider(self, name: str, factory: ProviderFactory) -> None:
        """Resolve ``<name>/<model>`` references with ``factory`` (a Trio
        :class:`claw.Model`), as ``host.models.register_provider`` does."""
        self.call(_register, self.trio_host, name, factory)

    def open_memory(
        self, *, scopes: Iterable[str] = LOCAL_SCOPES, agent_id: str | None = None
    ) -> Memory:
        """A local operator's memory on this host (``operator.read`` and ``.write`` by
        default); ``mem.close()`` revokes it, closing the host closes it too."""
        held = self._thread.enter(
            operator_memory(self.trio_host, scopes=tuple(scopes), agent_id=agent_id)
        )
        held.entered.result()
        return Memory._create(self._thread, held, owner=False)

    def close(self) -> None:
        """Close the host and everything opened through it; calls in flight raise
        :class:`claw.HostClosedError`. Idempotent."""
        self._thread.close()

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def open_host(
    config: HostConfig | None = None,
    *,
    plugins: Sequence[Plugin] = (),
    trio_clock: trio.abc.Clock | None = None,
) -> Host:
    """Open a claw host for synchronous code: :func:`claw.open_host` in a Trio thread.

    ``with claw.blocking.open_host(config) as host:`` closes it on exit; ``host =
    claw.blocking.open_host(config)`` keeps it open until ``host.close()``.
    """
    thread, held = start(lambda: trio_open_host(config, plugins=plugins), trio_clock=trio_clock)
    return Host._create(thread, held)
