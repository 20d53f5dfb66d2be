"""LISTEN on a dedicated thread, handing notifications to the Trio event loop.

A LISTEN connection waits for as long as the host runs, so it cannot borrow a worker
thread (it would hold one forever) and psycopg's waiting is blocking. One thread per
listener waits on the connection's socket and on a wake-up pipe (no polling), and
hands each notification to Trio through :func:`trio.from_thread.run` into a bounded
memory channel (a slow consumer slows the thread, nothing piles up).

When the connection drops the thread reconnects (with backoff) and LISTENs again, and
says so with a :class:`ListenerConnected` event: notifications sent while it was away
are lost, so a consumer treats that event as "catch up from the database". The first
event is also a :class:`ListenerConnected`, so one code path covers the start too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import psycopg
import psycopg.sql
import trio

from ._dsn import describe, scrub
from ._translate import chainable, translate

log = logging.getLogger("claw.postgres")

#: How many events wait in the channel before the listener thread blocks.
EVENT_BUFFER = 256


@attrs.frozen
class Notification:
    """One NOTIFY: its channel, its payload and the server process that sent it."""

    channel: str
    payload: str
    pid: int


@attrs.frozen
class ListenerConnected:
    """The listener is (again) listening; anything sent before this may have been missed.

    ``reconnects`` counts the connections after the first (0 on the first event).
    """

    reconnects: int


ListenEvent = Notification | ListenerConnected


def _connect(dsn: str, channels: Sequence[str]) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
    try:
        for channel in channels:
            conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
    except BaseException:
        conn.close()
        raise
    return conn


@attrs.define(eq=False)
class _ListenerThread:
    dsn: str
    channels: tuple[str, ...]
    send: trio.MemorySendChannel[ListenEvent]
    token: trio.lowlevel.TrioToken
    conn: psycopg.Connection[Any] | None
    initial_backoff: float = 0.05
    max_backoff: float = 2.0
    _wake_r: int = attrs.field(init=False)
    _wake_w: int = attrs.field(init=False)
    _stopping: threading.Event = attrs.field(factory=threading.Event, init=False)
    _thread: threading.Thread | None = attrs.field(default=None, init=False)
    reconnects: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        self._wake_r, self._wake_w = os.pipe()

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._main, name=f"claw-pg-listen {','.join(self.channels)}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end (it wakes from any wait); :meth:`join` waits for it."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _hand(self, event: ListenEvent) -> bool:
        """Give ``event`` to the event loop; False once nobody listens any more."""
        try:
            trio.from_thread.run(self.send.send, event, trio_token=self.token)
        except (
            trio.RunFinishedError,
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            trio.Cancelled,
        ):
            return False
        return True

    def _wait(self, fd: int | None, timeout: float | None) -> bool:
        """Wait until ``fd`` is readable (or ``timeout``); False when asked to stop."""
        fds = [self._wake_r] if fd is None else [self._wake_r, fd]
        readable, _, _ = select.select(fds, [], [], timeout)
        return self._wake_r not in readable and not self._stopping.is_set()

    def _main(self) -> None:
        try:
            if self.conn is not None and not self._hand(ListenerConnected(reconnects=0)):
                return
            backoff = self.initial_backoff
            while not self._stopping.is_set():
                if self.conn is None:
                    try:
                        self.conn = _connect(self.dsn, self.channels)
                    except psycopg.Error as exc:
                        log.warning(
                            "LISTEN on %s: reconnect failed: %s",
                            describe(self.dsn),
                            scrub(str(exc), self.dsn),
                        )
                        if not self._wait(None, backoff):
                            return
                        backoff = min(backoff * 2, self.max_backoff)
                        continue
                    backoff = self.initial_backoff
                    self.reconnects += 1
                    if not self._hand(ListenerConnected(reconnects=self.reconnects)):
                        return
                try:
                    for n in self.conn.notifies(timeout=0):
                        if not self._hand(Notification(n.channel, n.payload, n.pid)):
                            return
                    if not self._wait(self.conn.fileno(), None):
                        return
                except psycopg.Error as exc:
                    log.warning(
                        "LISTEN on %s: connection lost, reconnecting: %s",
                        describe(self.dsn),
                        scrub(str(exc), self.dsn),
                    )
                    self._drop()
        finally:
            self._drop()
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self.send.close, trio_token=self.token)

    def _drop(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                self.conn.close()
            self.conn = None


@asynccontextmanager
async def open_listener(
    dsn: str, channels: Sequence[str], *, buffer: int = EVENT_BUFFER
) -> AsyncIterator[trio.MemoryReceiveChannel[ListenEvent]]:
    """LISTEN on ``channels`` and yield the channel of :data:`ListenEvent`s.

    The first connection is made before this yields, so a wrong DSN fails here
    (:class:`~claw.DatabaseUnavailableError`); later drops are repaired by the thread,
    each announced by a :class:`ListenerConnected`. On exit the thread stops and its
    connection closes.
    """
    if not channels:
        raise ValueError("open_listener needs at least one channel")
    try:
        conn = await trio.to_thread.run_sync(_connect, dsn, tuple(channels))
    except psycopg.Error as exc:
        raise translate(exc, what="LISTEN", dsn=dsn) from chainable(exc, dsn)
    send, receive = trio.open_memory_channel[ListenEvent](buffer)
    listener = _ListenerThread(
        dsn=dsn,
        channels=tuple(channels),
        send=send,
        token=trio.lowlevel.current_trio_token(),
        conn=conn,
    )
    listener.start()
    try:
        async with receive:
            yield receive
    finally:
        listener.stop()
        with trio.CancelScope(shield=True):
            await receive.aclose()
            await trio.to_thread.run_sync(listener.join)
