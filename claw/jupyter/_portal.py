"""A blocking portal: Trio running in a background thread, driven from synchronous code.

A Jupyter kernel runs its own asyncio loop in the main thread, and each cell is
synchronous code (or asyncio code, with top-level ``await``). claw is Trio code whose
objects (a host, its scopes, a gateway client) live inside nurseries and must stay open
across cells. The portal is the notebook's face of claw's Trio thread
(:class:`claw._bridge.TrioThread`, which ``claw.blocking`` and ``claw.aio`` use too):
:meth:`TrioPortal.run` calls an async function in it and blocks the cell until the
result is back, and :meth:`TrioPortal.enter_async_context` enters an async context
manager (``claw.open_host(...)``) in a task of its own that holds it open until
:meth:`TrioPortal.stop`. Trio's guest mode would share the kernel's loop instead, but
it gives no blocking call to wait on a result, which is what a cell wants.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

import trio

from .._bridge import BridgeCall, TrioThread
from .._errors import HostClosedError
from .._util import NoPublicConstructor, final

T = TypeVar("T")


class PortalClosedError(HostClosedError):
    """The portal is not running (never started, stopped, or its Trio thread ended)."""


@final
class TrioPortal(metaclass=NoPublicConstructor):
    """A Trio event loop in a background thread; from :func:`start_portal`.

    Any number of ordinary (non-Trio) threads may call it. It is also a context manager:
    ``with start_portal() as portal:`` stops on exit.
    """

    def __init__(self, thread: TrioThread) -> None:
        self._thread = thread

    @property
    def running(self) -> bool:
        """Whether the portal's Trio thread is running and accepting calls."""
        return self._thread.running

    def stop(self) -> None:
        """Leave every held context (newest first), end the Trio run and join its thread.

        Idempotent. Raises the first error a held context raised while exiting (once).
        """
        self._thread.close()

    def __enter__(self) -> TrioPortal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _wait(self, submit: Callable[[], BridgeCall[T]]) -> T:
        try:
            call = submit()
        except HostClosedError as exc:
            raise PortalClosedError(f"the portal is not running: {exc}") from None
        try:
            return call.result()
        except HostClosedError as exc:
            if type(exc) is HostClosedError and not self._thread.running:
                raise PortalClosedError("the portal stopped during the call") from exc
            raise

    def run(self, async_fn: Callable[..., Awaitable[T]], *args: object) -> T:
        """Run ``await async_fn(*args)`` in the portal's Trio thread; block until it returns.

        Its exception, if any, is raised here. Interrupting the wait (``KeyboardInterrupt``,
        the kernel's stop button) cancels the call.
        """
        return self._wait(lambda: self._thread.submit(async_fn, *args))

    def enter_async_context(self, manager: AbstractAsyncContextManager[T]) -> T:
        """Enter ``manager`` in a task of the portal and return what it yields.

        The context stays open (across cells) until :meth:`stop`, which leaves held
        contexts newest first. Entering happens in its own task so that a context owning
        a nursery, as ``claw.open_host`` does, is entered and left by the same task.
        """
        return self._wait(lambda: self._thread.enter(manager).entered)


def start_portal(*, clock: trio.abc.Clock | None = None) -> TrioPortal:
    """Start a Trio run in a background thread and return its portal.

    ``clock`` is passed to ``trio.run`` (a ``trio.testing.MockClock`` for virtual time).
    Stop it with :meth:`TrioPortal.stop` (or use it as a context manager); the thread is
    a daemon, so a forgotten portal does not keep the interpreter alive.
    """
    return TrioPortal._create(TrioThread.start(clock=clock, name="claw-trio-portal"))
