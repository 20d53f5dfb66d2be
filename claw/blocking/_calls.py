"""The blocking facades' methods: a Trio object's async method, called and waited for."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, suppress
from typing import Any, Concatenate, ParamSpec, TypeVar

import trio

from .._bridge import Facade, HeldContext, TrioThread, submit_method

P = ParamSpec("P")
T = TypeVar("T")


def blocking(
    method: Callable[Concatenate[Any, P], Awaitable[T]],
) -> Callable[Concatenate[Facade, P], T]:
    """The facade's method for a Trio object's async ``method``: same parameters; it
    blocks until the call has ended in the Trio thread (Ctrl-C cancels it there)."""
    name = method.__name__

    @functools.wraps(method)
    def call(self: Facade, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = submit_method(self, name, args, kwargs).result()
        return result

    return call


def start(
    manager: Callable[[], AbstractAsyncContextManager[Any]], *, trio_clock: trio.abc.Clock | None
) -> tuple[TrioThread, HeldContext[Any]]:
    """Start a Trio thread and enter ``manager()`` there; on failure (or Ctrl-C) the
    thread is closed before the error propagates."""
    thread = TrioThread.start(clock=trio_clock, name="claw-blocking")
    try:
        held = thread.enter(manager())
        held.entered.result()
    except BaseException:
        with suppress(Exception):  # the entering error is the one to report
            thread.close()
        raise
    return thread, held
