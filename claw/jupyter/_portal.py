"""A blocking portal: Trio running in a background thread, driven from synchronous code.

A Jupyter kernel runs its own asyncio loop in the main thread, and each cell is
synchronous code (or asyncio code, with top-level ``await``). claw is Trio code whose
objects (a host, its scopes, a gateway client) live inside nurseries and must stay open
across cells. The portal runs one ``trio.run`` in a daemon thread for as long as you
need it: :meth:`TrioPortal.run` calls an async function in it and blocks the cell until
the result is back, and :meth:`TrioPortal.enter_async_context` enters an async context
manager (``claw.open_host(...)``) in a task of its own that holds it open until
:meth:`TrioPortal.stop`. Trio's guest mode would share the kernel's loop instead, but
it gives no blocking call to wait on a result, which is what a cell wants.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import attrs
import trio

from .._util import NoPublicConstructor, final

T = TypeVar("T")


class PortalClosedError(RuntimeError):
    """The portal is not running (never started, stopped, or its Trio thread ended)."""


@attrs.define(eq=False)
class _Held:
    release: trio.Event = attrs.field(factory=trio.Event)
    done: trio.Event = attrs.field(factory=trio.Event)
    exit_error: BaseException | None = None


@final
class TrioPortal(metaclass=NoPublicConstructor):
    """A Trio event loop in a background thread; from :func:`start_portal`.

    Use it from one ordinary (non-Trio) thread at a time, such as a notebook's cells.
    It is also a context manager: ``with start_portal() as portal:`` stops on exit.
    """

    def __init__(self, clock: trio.abc.Clock | None) -> None:
        self._clock = clock
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._held: list[_Held] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(
            target=self._thread_main, name="claw-trio-portal", daemon=True
        )
        self._failure: BaseException | None = None
        self._stopped = False

    # -- lifecycle ---------------------------------------------------------------

    def _thread_main(self) -> None:
        try:
            trio.run(self._main, clock=self._clock)
        except BaseException as exc:  # reported by the next call; the thread must end quietly
            self._failure = exc
        finally:
            self._token = None
            self._ready.set()

    async def _main(self) -> None:
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()
            # Leave held contexts newest first, each one fully before the next.
            for held in reversed(self._held):
                held.release.set()
                await held.done.wait()
            nursery.cancel_scope.cancel()

    def _start(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._token is None:
            raise PortalClosedError(f"the Trio thread failed to start: {self._failure!r}")

    @property
    def running(self) -> bool:
        """Whether the portal's Trio thread is running and accepting calls."""
        return self._token is not None and not self._stopped

    def stop(self) -> None:
        """Leave every held context (newest first), end the Trio run and join its thread.

        Idempotent. Raises the first error a held context raised while exiting.
        """
        if not self._stopped and self._token is not None:
            self._stopped = True
            stop = self._stop
            assert stop is not None
            with contextlib.suppress(trio.RunFinishedError):  # it may have ended by itself
                trio.from_thread.run_sync(stop.set, trio_token=self._token)
        self._stopped = True
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()
        errors = [h.exit_error for h in reversed(self._held) if h.exit_error is not None]
        self._held.clear()
        if errors:
            raise errors[0]

    def __enter__(self) -> TrioPortal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- calls -------------------------------------------------------------------

    def _check(self) -> trio.lowlevel.TrioToken:
        if threading.current_thread() is self._thread:
            raise RuntimeError("a portal call from inside its own Trio thread would deadlock")
        token = self._token
        if token is None or self._stopped:
            detail = f" (the Trio run failed: {self._failure!r})" if self._failure else ""
            raise PortalClosedError(f"the portal is not running{detail}")
        return token

    def _submit(
        self, fn: Callable[[concurrent.futures.Future[Any], trio.CancelScope], Awaitable[None]]
    ) -> Any:
        token = self._check()
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        scope = trio.CancelScope()

        def spawn() -> None:
            assert self._nursery is not None
            self._nursery.start_soon(fn, future, scope)

        try:
            trio.from_thread.run_sync(spawn, trio_token=token)
        except trio.RunFinishedError:
            raise PortalClosedError("the portal's Trio run has finished") from None
        try:
            return future.result()
        except KeyboardInterrupt:
            # An interrupted cell cancels the call it was waiting for.
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(scope.cancel, trio_token=token)
            raise

    def run(self, async_fn: Callable[..., Awaitable[T]], *args: object) -> T:
        """Run ``await async_fn(*args)`` in the portal's Trio thread; block until it returns.

        Its exception, if any, is raised here. Interrupting the wait (``KeyboardInterrupt``,
        the kernel's stop button) cancels the call.
        """

        async def call(future: concurrent.futures.Future[Any], scope: trio.CancelScope) -> None:
            try:
                with scope:
                    result = await async_fn(*args)
            except trio.Cancelled:
                future.set_exception(PortalClosedError("the portal stopped during the call"))
                raise
            except BaseException as exc:  # handed to the waiting thread
                future.set_exception(exc)
            else:
                if scope.cancelled_caught:
                    future.cancel()  # cancelled by an interrupted caller, who is gone
                else:
                    future.set_result(result)

        result: T = self._submit(call)
        return result

    def enter_async_context(self, manager: AbstractAsyncContextManager[T]) -> T:
        """Enter ``manager`` in a task of the portal and return what it yields.

        The context stays open (across cells) until :meth:`stop`, which leaves held
        contexts newest first. Entering happens in its own task so that a context owning
        a nursery, as ``claw.open_host`` does, is entered and left by the same task.
        """
        held = _Held()

        async def hold(future: concurrent.futures.Future[Any], scope: trio.CancelScope) -> None:
            try:
                async with manager as value:
                    self._held.append(held)
                    future.set_result(value)
                    await held.release.wait()
            except BaseException as exc:
                if future.done():
                    held.exit_error = exc
                else:
                    future.set_exception(exc)
            finally:
                held.done.set()

        value: T = self._submit(hold)
        return value


def start_portal(*, clock: trio.abc.Clock | None = None) -> TrioPortal:
    """Start a Trio run in a background thread and return its portal.

    ``clock`` is passed to ``trio.run`` (a ``trio.testing.MockClock`` for virtual time).
    Stop it with :meth:`TrioPortal.stop` (or use it as a context manager); the thread is
    a daemon, so a forgotten portal does not keep the interpreter alive.
    """
    portal = TrioPortal._create(clock)
    portal._start()
    return portal
