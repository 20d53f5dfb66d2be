"""A Trio run in a thread of its own, driven from other threads and event loops.

claw is Trio code: a host, its scopes and Memory Core live inside nurseries. Code that is
not Trio (a script, a web handler in a thread pool, an asyncio application, a notebook
cell) reaches it through one :class:`TrioThread`: ``trio.run`` in a dedicated thread,
owning a nursery for the calls it is sent and a task per context it holds open (a host).

* :meth:`TrioThread.submit` starts ``await fn(*args)`` there and returns a
  :class:`BridgeCall` at once; it never blocks and may be called from any thread. The
  caller waits on the call (:meth:`BridgeCall.result` blocks; ``claw.aio`` awaits it
  on asyncio's loop) and may cancel it: :meth:`BridgeCall.cancel` cancels the call's own
  Trio cancel scope, and the call completes only once the Trio side has ended, so a
  cancelled caller never leaves work running behind it.
* :meth:`TrioThread.enter` enters an async context manager in a task of its own (a
  context that owns a nursery, as ``claw.open_host`` does, must be entered and left by
  one task) and holds it open until it is released or the thread closes.
* :meth:`TrioThread.close` cancels the calls in flight, leaves the held contexts newest
  first (each fully before the next), ends the run and joins the thread. A thread still
  open when the interpreter exits is closed then.

Errors cross unchanged: the caller receives the very exception object raised in Trio,
so ``except claw.StaleCapabilityError`` works on both sides. A call ended by the thread's
closing raises :class:`~claw.HostClosedError`.

Why a thread and not Trio's guest mode on the caller's asyncio loop:
``benchmarks/bridge.py`` measures both (latency per call, cancellation, shutdown, and
how long the caller's loop stalls while claw works); the reasons are in
``docs/asyncio.md``.
"""

from __future__ import annotations

import atexit
import functools
import threading
import weakref
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, suppress
from typing import Any, Generic, Protocol, TypeVar

import trio

from ._errors import HostClosedError
from ._util import NoPublicConstructor, final

T = TypeVar("T")

_UNSET: Any = object()


def _only_cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` is Trio's ``Cancelled``, or a group of nothing else."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_cancelled(e) for e in exc.exceptions)
    return False


@final
class BridgeCall(Generic[T]):
    """One call sent to a :class:`TrioThread`; complete once its Trio side has ended.

    Thread-safe: :meth:`cancel` and :meth:`add_done_callback` may be called from any
    thread, :meth:`result` from any thread but the Trio thread's own.
    """

    def __init__(self, thread: TrioThread) -> None:
        self._thread = thread
        self._scope = trio.CancelScope()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._value: Any = _UNSET
        self._error: BaseException | None = None
        self._cancelled = False
        self._callbacks: list[Callable[[], None]] = []

    # -- the Trio side -------------------------------------------------------------

    def _finish(
        self, *, value: Any = _UNSET, error: BaseException | None = None, cancelled: bool = False
    ) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self._value = value
            self._error = error
            self._cancelled = cancelled
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    # -- the caller's side ---------------------------------------------------------

    def done(self) -> bool:
        """Whether the call has ended (returned, raised, or was cancelled)."""
        return self._done.is_set()

    def cancel(self) -> None:
        """Cancel the call's Trio cancel scope (a no-op once it has ended).

        Returns at once; the call completes when the Trio side has unwound.
        """
        if not self._done.is_set():
            self._thread._run_soon(self._scope.cancel)

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the call has ended: now if it has, else from the
        Trio thread. It must be quick and thread-safe (``loop.call_soon_threadsafe``)."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the call has ended (or ``timeout`` seconds pass); whether it has."""
        self._thread._check_not_own_thread()
        return self._done.wait(timeout)

    @property
    def cancelled(self) -> bool:
        """Whether the call ended because :meth:`cancel` cancelled it."""
        return self._done.is_set() and self._cancelled

    def outcome(self) -> T:
        """The ended call's value, or raise its error; :class:`RuntimeError` if it has
        not ended, :class:`~claw.HostClosedError` if it was cancelled."""
        if not self._done.is_set():
            raise RuntimeError("the call has not ended yet")
        if self._error is not None:
            raise self._error
        if self._cancelled:
            raise HostClosedError("the call was cancelled before it returned")
        value: T = self._value
        return value

    def result(self) -> T:
        """Block until the call has ended and return its value (or raise its error).

        A ``KeyboardInterrupt`` while waiting (Ctrl-C in a script, a notebook's stop
        button) cancels the call, waits for its Trio side to unwind, and is re-raised; a
        second one stops waiting at once.
        """
        try:
            self.wait()
        except KeyboardInterrupt:
            self.cancel()
            self.wait()
            raise
        return self.outcome()


@final
class HeldContext(Generic[T]):
    """An async context manager a :class:`TrioThread` holds open (from :meth:`TrioThread.enter`)."""

    def __init__(self, thread: TrioThread, manager: AbstractAsyncContextManager[T]) -> None:
        self._thread = thread
        self._manager = manager
        self.entered: BridgeCall[T] = BridgeCall(thread)
        self.exited: BridgeCall[None] = BridgeCall(thread)
        self._release = trio.Event()
        self._gone = trio.Event()

    async def _hold(self) -> None:
        """The task that enters, holds and leaves the context (runs in the Trio thread)."""
        try:
            with self.entered._scope:  # cancelled by release() while still entering
                async with self._manager as value:
                    self.entered._finish(value=value)
                    await self._release.wait()
        except BaseException as exc:
            cancelled = _only_cancelled(exc)
            if not self.entered.done():
                self.entered._finish(
                    error=HostClosedError("closed while entering") if cancelled else exc
                )
                self.exited._finish(value=None)
            else:
                self.exited._finish(value=None, error=None if cancelled else exc)
            if cancelled:
                raise
        else:
            if not self.entered.done():
                self.entered._finish(error=HostClosedError("released while entering"))
            self.exited._finish(value=None)
        finally:
            self._gone.set()

    def _release_now(self) -> None:
        """In the Trio thread: leave the context (or stop entering it)."""
        if self.entered.done():
            self._release.set()
        else:
            self.entered._scope.cancel()

    def release(self) -> BridgeCall[None]:
        """Leave the context now (thread-safe, returns at once); wait on the returned
        call for the exit to finish (it raises what leaving the context raised)."""
        self._thread._run_soon(self._release_now)
        return self.exited


@final
class TrioThread(metaclass=NoPublicConstructor):
    """``trio.run`` in a dedicated daemon thread; see the module docstring.

    Start one with :meth:`start`; any thread may submit calls to it, concurrently.
    """

    def __init__(self, clock: trio.abc.Clock | None, name: str) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._token: trio.lowlevel.TrioToken | None = None
        self._calls: trio.Nursery | None = None
        self._holders: trio.Nursery | None = None
        self._held: list[HeldContext[Any]] = []
        self._stop = trio.Event()
        self._closing = False
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._exit_errors: list[BaseException] = []
        self._reported = False
        self.closed: BridgeCall[None] = BridgeCall(self)
        self._thread = threading.Thread(target=self._thread_main, name=name, daemon=True)

    @classmethod
    def start(cls, *, clock: trio.abc.Clock | None = None, name: str = "claw-trio") -> TrioThread:
        """Start the Trio thread and return once it accepts calls.

        ``clock`` is passed to ``trio.run`` (a ``trio.testing.MockClock`` for virtual time).
        """
        thread: TrioThread = cls._create(clock, name)
        thread._thread.start()
        thread._started.wait()
        if thread._token is None:
            raise HostClosedError(f"the Trio thread failed to start: {thread._failure!r}")
        _LIVE.add(thread)
        return thread

    # -- the Trio side -------------------------------------------------------------

    def _thread_main(self) -> None:
        try:
            trio.run(self._main, clock=self._clock)
        except BaseException as exc:  # reported to every caller; the thread ends quietly
            self._failure = exc
        finally:
            with self._lock:
                self._token = None
                self._closing = True
            self._started.set()
            error = self._exit_errors[0] if self._exit_errors else None
            if self._failure is not None and error is None:
                error = HostClosedError(f"the Trio thread failed: {self._failure!r}")
            self.closed._finish(value=None, error=error)

    async def _main(self) -> None:
        async with trio.open_nursery() as holders:
            async with trio.open_nursery() as calls:
                self._holders, self._calls = holders, calls
                self._token = trio.lowlevel.current_trio_token()
                self._started.set()
                await self._stop.wait()
                calls.cancel_scope.cancel()
            # Every call has ended: leave the held contexts newest first, each one fully.
            for held in reversed(self._held):
                held._release_now()
                await held._gone.wait()
                if held.exited._error is not None:
                    self._exit_errors.append(held.exited._error)
            self._held.clear()

    async def _run_call(
        self, call: BridgeCall[T], async_fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]
    ) -> None:
        try:
            with call._scope:
                value = await async_fn(*args)
        except BaseException as exc:
            if _only_cancelled(exc):  # the thread is closing: its nursery was cancelled
                call._finish(error=HostClosedError("the bridge closed while the call ran"))
                raise
            call._finish(error=exc)
        else:
            if call._scope.cancelled_caught:
                call._finish(cancelled=True)
            else:
                call._finish(value=value)

    def _spawn(
        self, call: BridgeCall[Any], async_fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]
    ) -> None:
        if self._stop.is_set() or self._calls is None:
            call._finish(error=HostClosedError("the bridge is closed"))
            return
        self._calls.start_soon(self._run_call, call, async_fn, args, name=async_fn)

    def _spawn_holder(self, held: HeldContext[Any]) -> None:
        if self._stop.is_set() or self._holders is None:
            held.entered._finish(error=HostClosedError("the bridge is closed"))
            held.exited._finish(value=None)
            return
        self._held.append(held)
        self._holders.start_soon(held._hold)

    # -- any thread ----------------------------------------------------------------

    def _check_not_own_thread(self) -> None:
        if threading.current_thread() is self._thread:
            raise RuntimeError(
                "waiting on a claw bridge call from inside its own Trio thread would deadlock; "
                "await the Trio API directly there"
            )

    def _run_soon(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` in the Trio thread soon (never blocks); a no-op once it has ended."""
        token = self._token
        if token is None:
            return
        with suppress(trio.RunFinishedError):
            token.run_sync_soon(fn)

    def _token_or_raise(self) -> trio.lowlevel.TrioToken:
        with self._lock:
            token = self._token
            if self._closing or token is None:
                detail = f" (the Trio run failed: {self._failure!r})" if self._failure else ""
                raise HostClosedError(f"the bridge is closed{detail}")
            return token

    @property
    def running(self) -> bool:
        """Whether the thread accepts calls (started, not closing or closed)."""
        return self._token is not None and not self._closing

    def submit(self, async_fn: Callable[..., Awaitable[T]], *args: Any) -> BridgeCall[T]:
        """Start ``await async_fn(*args)`` in the Trio thread; returns at once.

        Raises :class:`~claw.HostClosedError` once the thread is closing or closed.
        """
        token = self._token_or_raise()
        call: BridgeCall[T] = BridgeCall(self)
        try:
            token.run_sync_soon(self._spawn, call, async_fn, args)
        except trio.RunFinishedError:
            raise HostClosedError("the bridge is closed") from None
        return call

    def enter(self, manager: AbstractAsyncContextManager[T]) -> HeldContext[T]:
        """Enter ``manager`` in a task of its own and hold it open; returns at once.

        ``held.entered`` completes with the value the context yields (or the error
        entering raised); the context stays open until ``held.release()`` or
        :meth:`close`.
        """
        token = self._token_or_raise()
        held: HeldContext[T] = HeldContext(self, manager)
        try:
            token.run_sync_soon(self._spawn_holder, held)
        except trio.RunFinishedError:
            raise HostClosedError("the bridge is closed") from None
        return held

    def close_soon(self) -> BridgeCall[None]:
        """Start closing (returns at once): calls in flight are cancelled (they raise
        :class:`~claw.HostClosedError`), held contexts are left newest first and the run
        ends. Wait on the returned call: it raises the first error leaving a context
        raised. Idempotent."""
        with self._lock:
            self._closing = True
        self._run_soon(self._stop.set)
        return self.closed

    def close(self) -> None:
        """Close (see :meth:`close_soon`), wait for it, and join the thread.

        The first call to return raises the first error leaving a held context raised;
        later calls return quietly.
        """
        self._check_not_own_thread()
        self.close_soon().wait()
        self._thread.join()
        _LIVE.discard(self)
        with self._lock:
            report, self._reported = not self._reported, True
        if report:
            self.closed.outcome()


_LIVE: weakref.WeakSet[TrioThread] = weakref.WeakSet()


@atexit.register
def _close_live_threads() -> None:
    """Close the bridges a program left open, so their hosts shut down cleanly."""
    for thread in list(_LIVE):
        with suppress(Exception):  # exiting: nothing is left to report an error to
            thread.close()


# -- facades: a Trio object's async methods, offered to other threads and loops ------------


class Facade(Protocol):
    """An object that offers the async methods of :meth:`_bridge_target` through
    :attr:`_thread` (``claw.aio`` and ``claw.blocking``)."""

    _thread: TrioThread

    def _bridge_target(self) -> object: ...


def submit_method(
    facade: Facade, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> BridgeCall[Any]:
    """Start ``await target.<name>(*args, **kwargs)`` in the facade's Trio thread.

    The method is looked up on the live target by name, so a protocol's method (the
    session store's) reaches the implementation behind it.
    """
    target = facade._bridge_target()
    return facade._thread.submit(functools.partial(getattr(target, name), *args, **kwargs))
