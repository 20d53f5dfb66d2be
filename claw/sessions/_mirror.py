"""What every session store backend shares: the mirror, the pending marks, the changes.

A session store answers capability currency checks synchronously, from an in-memory
mirror of the committed rows, and changes a key's incarnation in one transaction of
its database. The SQLite store (:mod:`claw.state.sqlite._sessions`) and the PostgreSQL store
(:mod:`claw.state.postgres._sessions`) differ only in that transaction (how they lock,
write and notify) and in how other writers' commits reach the mirror. Everything
else is one piece of code, kept here: the mirror's synchronous reads, the listeners,
the bookkeeping that marks a key *pending* while its change is in flight, and the
five incarnation changes, which check their arguments here before any transaction
and hand the backend a function of a connection to run.
"""

from __future__ import annotations

import builtins
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import attrs
import trio

from .._errors import HostClosedError
from ._changes import SessionListener, check_reassign, check_spawn, notify_listeners, root_row
from ._rows import ChatType, SessionRow, SessionSnapshot, validate_flag


@attrs.frozen
class SessionChange:
    """A key's committed state after a change: its row (``None`` once deleted), watermark."""

    key: str
    row: SessionRow | None
    watermark: int

    @property
    def order(self) -> tuple[int, int]:
        """Later changes of one key sort higher (a delete after the row it deleted)."""
        return (self.watermark, 1 if self.row is None else 0)


#: A change as the backend runs it: a function of one of its connections, called inside
#: one transaction, returning the key's committed state.
ChangeOp = Callable[[Any], SessionChange]


@attrs.frozen
class SessionOps:
    """A backend's transactions for the incarnation changes (keyword arguments after the
    connection): ``create(row=)``, ``reset(key=, keep_session_id=, now=)``,
    ``reassign(key=, agent_id=, chat_type=, peer_is_owner=, now=)``,
    ``spawn_child(parent_key=, child_key=, chat_type=, session_id=, sender_is_owner=, now=)``
    and ``delete(key=)``."""

    create: Callable[..., SessionChange]
    reset: Callable[..., SessionChange]
    reassign: Callable[..., SessionChange]
    spawn_child: Callable[..., SessionChange]
    delete: Callable[..., SessionChange]


@attrs.define(eq=False)
class MirroredSessionStore(ABC):
    """The part of a session store that is the same on every backend.

    A subclass gives its :class:`SessionOps` (``_ops``), runs one change in a
    transaction (:meth:`_commit`) and names where it stores (:meth:`_place`).
    """

    _ops: ClassVar[SessionOps]

    _clock: Callable[[], float]
    _rows: dict[str, SessionRow]
    _watermarks: dict[str, int]
    #: Serialises this store's changes (and, where the backend has one connection,
    #: every use of it).
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _listeners: builtins.list[SessionListener] = attrs.field(factory=builtins.list, init=False)
    _closed: bool = attrs.field(default=False, init=False)
    _pending: dict[str, int] = attrs.field(factory=dict, init=False)
    _write_done: trio.Event = attrs.field(factory=trio.Event, init=False)

    # ---- the backend ---------------------------------------------------------------------

    @abstractmethod
    async def _commit(self, op: ChangeOp, box: builtins.list[SessionChange]) -> None:
        """Run ``op`` in one transaction; append its result to ``box`` once it committed.

        The box is filled only after COMMIT returned, so the store knows whether the
        change is durable even if the worker pool raises on the way back.
        """

    @abstractmethod
    def _place(self) -> str:
        """Where the store keeps its rows, for messages ("at PATH", "on NAME")."""

    # ---- the synchronous mirror ------------------------------------------------------------

    def get_nowait(self, key: str) -> SessionRow | None:
        """The committed row for ``key`` from the in-memory mirror, or ``None``."""
        return self._rows.get(key)

    def last_revision_nowait(self, key: str) -> int:
        """The highest lifecycle revision ``key`` ever had; 0 if it never had a row."""
        row = self._rows.get(key)
        if row is not None:
            return row.lifecycle_revision
        return self._watermarks.get(key, 0)

    def snapshot(self) -> SessionSnapshot:
        """An immutable copy of the committed rows and deleted-key watermarks."""
        return SessionSnapshot(dict(self._rows), dict(self._watermarks))

    def pending_nowait(self, keys: Iterable[str]) -> bool:
        """Whether a change of any of ``keys`` is in flight (started, outcome not yet seen)."""
        pending = self._pending
        return bool(pending) and any(k in pending for k in keys)

    async def wait_for_writes(self) -> None:
        """Wait until no change is in flight (returns at once, after a checkpoint, if none)."""
        await trio.lowlevel.checkpoint()
        while self._pending:
            await self._write_done.wait()

    # ---- listeners -------------------------------------------------------------------------

    def add_listener(self, listener: SessionListener) -> None:
        """Call ``listener(key)`` after every committed incarnation change of ``key``.

        Listeners run synchronously on the event loop thread, in the order
        added, after the mirror is updated. They must not block. If listeners
        raise, every listener still runs, and the errors then propagate from
        the call that made the (already committed) change.
        """
        self._listeners.append(listener)

    def remove_listener(self, listener: SessionListener) -> None:
        """Stop calling ``listener``; raises :class:`ValueError` if it was not added."""
        self._listeners.remove(listener)

    # ---- incarnation changes ---------------------------------------------------------------

    async def create(
        self,
        key: str,
        *,
        agent_id: str,
        chat_type: ChatType,
        session_id: str | None = None,
        peer_is_owner: bool = False,
    ) -> SessionRow:
        """Create a root session; raises :class:`SessionExistsError` if ``key`` has a row."""
        row = root_row(
            key,
            agent_id=agent_id,
            chat_type=chat_type,
            session_id=session_id,
            peer_is_owner=peer_is_owner,
            now=self._clock(),
        )
        return await self._change_row(key, functools.partial(self._ops.create, row=row))

    async def spawn_child(
        self,
        parent_key: str,
        child_key: str,
        *,
        sender_is_owner: bool,
        chat_type: ChatType | None = None,
        session_id: str | None = None,
    ) -> SessionRow:
        """Create ``child_key`` as a child of ``parent_key``'s current incarnation.

        The child records the parent's key, session id and lifecycle revision,
        takes the parent's agent id and owner flag, and by default its chat type.
        ``sender_is_owner`` is the spawn receipt: whether the sender of the turn
        that spawns the child is the agent's owner (the channel layer's trusted
        fact for that turn). It is stored with the child, and it, not the
        sender of any later run on the child, decides the child's audience.
        """
        sid = check_spawn(
            parent_key,
            child_key,
            sender_is_owner=sender_is_owner,
            chat_type=chat_type,
            session_id=session_id,
        )
        return await self._change_row(
            child_key,
            functools.partial(
                self._ops.spawn_child,
                parent_key=parent_key,
                child_key=child_key,
                chat_type=chat_type,
                session_id=sid,
                sender_is_owner=sender_is_owner,
                now=self._clock(),
            ),
        )

    async def reset(self, key: str, *, keep_session_id: bool = True) -> SessionRow:
        """Start a new incarnation of ``key``: revision + 1, and a new session id unless kept."""
        validate_flag("keep_session_id", keep_session_id)
        return await self._change_row(
            key,
            functools.partial(
                self._ops.reset, key=key, keep_session_id=keep_session_id, now=self._clock()
            ),
        )

    async def reassign(
        self,
        key: str,
        *,
        agent_id: str | None = None,
        chat_type: ChatType | None = None,
        peer_is_owner: bool | None = None,
    ) -> SessionRow:
        """Change who or what ``key`` belongs to; always a new lifecycle revision."""
        check_reassign(agent_id=agent_id, chat_type=chat_type, peer_is_owner=peer_is_owner)
        return await self._change_row(
            key,
            functools.partial(
                self._ops.reassign,
                key=key,
                agent_id=agent_id,
                chat_type=chat_type,
                peer_is_owner=peer_is_owner,
                now=self._clock(),
            ),
        )

    async def delete(self, key: str) -> None:
        """Delete ``key``'s row; its children then resolve to no audience."""
        await self._change(key, functools.partial(self._ops.delete, key=key))

    # ---- machinery -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise HostClosedError(f"the session store {self._place()} is closed")

    async def _change(self, key: str, op: ChangeOp) -> SessionChange:
        self._check_open()
        box: builtins.list[SessionChange] = []
        async with self._lock:
            self._check_open()
            # ``key`` is pending from before the transaction starts until the mirror and
            # the listeners have seen its outcome: in between, the database may already
            # hold a new incarnation the mirror does not show, so currency checks of
            # lineages through ``key`` must not answer from it.
            self._pending[key] = self._pending.get(key, 0) + 1
            done = self._write_done = trio.Event()
            try:
                await self._commit(op, box)
            finally:
                try:
                    # Runs even if the pool raised after the COMMIT: the mirror and the
                    # listeners must never miss a durable change.
                    if box:
                        self._apply(box[0])
                finally:
                    left = self._pending[key] - 1
                    if left:
                        self._pending[key] = left
                    else:
                        del self._pending[key]
                    done.set()
        return box[0]

    async def _change_row(self, key: str, op: ChangeOp) -> SessionRow:
        row = (await self._change(key, op)).row
        if row is None:  # pragma: no cover - only delete commits without a row
            raise AssertionError(f"{op!r} committed no row")
        return row

    def _current(self, key: str) -> SessionChange:
        row = self._rows.get(key)
        watermark = row.lifecycle_revision if row else self._watermarks.get(key, 0)
        return SessionChange(key, row, watermark)

    def _apply(self, change: SessionChange) -> None:
        """Put a committed change into the mirror, then tell the listeners."""
        if change.row is None:
            self._rows.pop(change.key, None)
            if change.watermark:
                self._watermarks[change.key] = max(
                    change.watermark, self._watermarks.get(change.key, 0)
                )
        else:
            self._rows[change.key] = change.row
            self._watermarks.pop(change.key, None)
        notify_listeners(self._listeners, (change.key,))
