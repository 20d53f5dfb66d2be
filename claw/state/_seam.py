"""The state seam: what the host needs from durable state, as protocols.

Durable state is three things: the **session store** (rows, incarnations, the
synchronous mirror that capability currency is checked against), the **transcript
store** (append-only entries, the cursor API) and the **turn ledger** (admitted turns,
their terminal entries, commits and closes). The host, the runs, the turn runner and
the flush take these protocols, never a concrete store, so a second implementation
(PostgreSQL) is dropped in by configuration (``[state] backend``) instead of being a
second design. :class:`StateBackend` is the one object a backend provides.

Contracts every implementation keeps (the SQLite one is :mod:`claw.state.sqlite`, the
PostgreSQL one :mod:`claw.state.postgres`):

* One transaction per incarnation change; a key's lifecycle revision never decreases,
  even across delete and re-create.
* A change this process makes is *pending* (``pending_nowait``) from before its
  transaction starts until the mirror and the listeners have seen it, so a currency
  check during a write raises a retryable :class:`~claw.CurrencyPendingError` rather
  than pass on a stale mirror.
* Another process's committed change reaches the mirror through :meth:`SessionStorage.watch`
  (promptness), and :meth:`SessionStorage.read_committed` reads the committed rows
  from the database itself (safety): the host's release check before a provider result
  is handed out uses it, fail closed.
* Admission writes the user entry and the ledger row in one transaction; repeating an
  admission exactly (same turn id, advancement key, session and message) returns the
  recorded turn (idempotent across processes), never a second row; a turn id or key
  recorded for a different admission raises :class:`~claw.turns._ledger.TurnIdTakenError`
  (the runner then reads the next seq and tries again).
* A process's own session changes are in its mirror, and its listeners called, before
  the call returns; other processes' reach it through ``watch`` or ``refresh``, which
  call the listeners the same way.
* A turn belongs to the process that admitted it (its *owner*); only turns whose owner
  is no longer alive are closed by another process (:meth:`TurnLedger.close_orphaned_turns`).
* Turns of one session, with the flush and compaction they trigger, run one at a time
  across every process and host sharing the state (:class:`SessionLocks`); a holder
  that dies loses its lock with its process (or its database connection). Which
  compaction cycle already flushed is recorded in the backend
  (:meth:`TranscriptStorage.record_flush`), so it is flushed once across them too.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol

import attrs
import trio

from ..sessions._changes import SessionListener
from ..sessions._rows import ChatType, SessionRow, SessionSnapshot

if TYPE_CHECKING:
    from .._workers import WorkerPool
    from ..models import Message, UserMessage
    from ..turns._ledger import AdmittedTurn, TurnStatus
    from ..turns._transcript_core import (
        Appendable,
        TranscriptCursor,
        TranscriptDelta,
        TranscriptEntry,
        TranscriptStats,
    )


class SessionStorage(Protocol):
    """The durable session store (``host.sessions``), with a synchronous committed view.

    The ``*_nowait`` methods answer from an in-memory mirror of committed rows without
    I/O (they are what ``assert_current()`` reads); the ``async`` methods go to the
    database.
    """

    # -- the synchronous mirror (lineage resolution, currency checks) -------------

    def get_nowait(self, key: str) -> SessionRow | None:
        """The committed row for ``key`` from the mirror, or ``None``."""
        ...

    def last_revision_nowait(self, key: str) -> int:
        """The highest lifecycle revision ``key`` ever had; 0 if it never had a row."""
        ...

    def snapshot(self) -> SessionSnapshot:
        """An immutable copy of the mirror (rows and deleted-key watermarks)."""
        ...

    def pending_nowait(self, keys: Iterable[str]) -> bool:
        """Whether a change of any of ``keys`` is in flight (started, outcome not yet seen)."""
        ...

    async def wait_for_writes(self) -> None:
        """Wait until no change is in flight (a checkpoint when none is)."""
        ...

    def add_listener(self, listener: SessionListener) -> None:
        """Call ``listener(key)`` on the event loop thread after every committed
        incarnation change of ``key``, this process's or (once seen) another's."""
        ...

    def remove_listener(self, listener: SessionListener) -> None:
        """Stop calling ``listener``; :class:`ValueError` if it was not added."""
        ...

    # -- the database ---------------------------------------------------------------

    async def read_committed(self, keys: Iterable[str]) -> SessionSnapshot:
        """The committed rows and deleted-key watermarks of ``keys``, read from the
        database now (not the mirror): the release check's source of truth."""
        ...

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Bring other processes' commits into the mirror (and call the listeners) until
        cancelled; started by the host in its nursery."""
        ...

    async def refresh(self) -> int:
        """Bring other processes' commits into the mirror now (calling the listeners for
        each changed key); returns how many keys changed. Cheap when none did: the host
        calls it before each run and turn, so they start from the committed rows."""
        ...

    async def get(self, key: str) -> SessionRow | None:
        """The durable row for ``key``, read from the database, or ``None``."""
        ...

    async def list(self, agent_id: str | None = None) -> builtins.list[SessionRow]:
        """All rows (of ``agent_id`` when given), ordered by session key."""
        ...

    async def has_agent(self, agent_id: str) -> bool:
        """Whether ``agent_id`` has at least one session."""
        ...

    # -- incarnation changes (one transaction each) ---------------------------------

    async def create(
        self,
        key: str,
        *,
        agent_id: str,
        chat_type: ChatType,
        session_id: str | None = None,
        peer_is_owner: bool = False,
    ) -> SessionRow: ...

    async def spawn_child(
        self,
        parent_key: str,
        child_key: str,
        *,
        sender_is_owner: bool,
        chat_type: ChatType | None = None,
        session_id: str | None = None,
    ) -> SessionRow: ...

    async def reset(self, key: str, *, keep_session_id: bool = True) -> SessionRow: ...

    async def reassign(
        self,
        key: str,
        *,
        agent_id: str | None = None,
        chat_type: ChatType | None = None,
        peer_is_owner: bool | None = None,
    ) -> SessionRow: ...

    async def delete(self, key: str) -> None: ...

    async def aclose(self) -> None:
        """Close; later calls raise :class:`~claw.HostClosedError`."""
        ...


class SessionLister(Protocol):
    """The read-only session listing a plugin's ``api.transcripts`` facet holds.

    It must lead nowhere that can write a row or reach the host (see the threat model).
    """

    async def list(self, agent_id: str | None = None) -> builtins.list[SessionRow]: ...

    async def aclose(self) -> None: ...


class TranscriptStorage(Protocol):
    """Append-only session transcripts and the visible-message cursor API."""

    @property
    def version(self) -> int:
        """A counter that moves after every write (this process's or, once seen,
        another's): readers cache derived views against it."""
        ...

    async def append(
        self,
        session_key: str,
        session_id: str,
        messages: Sequence[Appendable],
        *,
        turn_id: str | None = None,
        advancement_key: str | None = None,
        terminal: bool = False,
    ) -> tuple[TranscriptEntry, ...]: ...

    async def append_compaction(
        self,
        session_key: str,
        session_id: str,
        summary: str,
        *,
        first_kept_seq: int | None = None,
        tokens_before: int | None = None,
        tokens_after: int | None = None,
        turn_id: str | None = None,
    ) -> TranscriptEntry: ...

    async def read_entries(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        through_seq: int | None = None,
        limit: int | None = None,
    ) -> tuple[TranscriptEntry, ...]: ...

    async def read_entry(self, entry_id: str) -> TranscriptEntry: ...

    async def stats(self, session_id: str) -> TranscriptStats: ...

    async def session_ids(self, session_key: str) -> tuple[str, ...]: ...

    async def session_listing(
        self, session_keys: Sequence[str] | None = None
    ) -> list[tuple[str, TranscriptStats]]: ...

    async def read_session_transcript_visible_message_delta(
        self, session_id: str, cursor: TranscriptCursor | None = None
    ) -> TranscriptDelta: ...

    async def visible_messages(self, session_id: str) -> tuple[Message, ...]: ...

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Move :attr:`version` after other processes' commits until cancelled; started
        by the host in its nursery."""
        ...

    async def record_flush(self, flush_id: str, session_key: str) -> bool:
        """Record durably that the flush ``flush_id`` is settled (it completed, or was
        skipped): its compaction cycle does not flush again, in any process. One short
        transaction; returns whether this call recorded it (``False``: already was)."""
        ...

    async def flush_recorded(self, flush_id: str) -> bool:
        """Whether :meth:`record_flush` recorded ``flush_id``, by any process (one read)."""
        ...

    async def aclose(self) -> None: ...


class TurnLedger(Protocol):
    """The accepted-turns ledger (see :mod:`claw.turns._ledger` for the statuses)."""

    @property
    def owner_id(self) -> str:
        """This process's owner id: the turns it admits are recorded as its own."""
        ...

    async def record_admitted(
        self,
        session_key: str,
        session_id: str,
        user_message: UserMessage,
        *,
        turn_id: str,
        advancement_key: str,
        engine_id: str | None = None,
        lifecycle_revision: int | None = None,
    ) -> tuple[TranscriptEntry, AdmittedTurn]: ...

    async def mark_terminal(self, turn_id: str, terminal_seq: int) -> AdmittedTurn: ...

    async def mark_committed(self, turn_id: str, *, outcome: str = "committed") -> AdmittedTurn: ...

    async def close_turn(self, turn_id: str, status: TurnStatus, reason: str) -> AdmittedTurn: ...

    async def reopen_turn(self, turn_id: str) -> AdmittedTurn: ...

    async def close_orphaned_turns(self, reason: str) -> tuple[AdmittedTurn, ...]:
        """Close as ``aborted`` every open turn whose owner process is no longer alive.

        A live process's turn in flight is never closed by another process.
        """
        ...

    async def pending_commits(
        self, session_id: str | None = None, *, session_key: str | None = None
    ) -> tuple[AdmittedTurn, ...]: ...

    async def turns(
        self, session_id: str | None = None, *, open_only: bool = False
    ) -> tuple[AdmittedTurn, ...]: ...

    async def get_turn(self, turn_id: str) -> AdmittedTurn: ...


class TranscriptLedger(TranscriptStorage, TurnLedger, Protocol):
    """Transcripts and the ledger together: admission writes both in one transaction,
    so one store implements both (``host.transcripts``)."""


class SessionLocks(Protocol):
    """Exclusive per-session locks shared by every process (and host) on the state.

    The turn runner holds a session's lock for a whole turn, flush and compaction
    included (see :mod:`claw.state._session_locks`). Waiting is cancellable and leaves
    nothing held; a holder's lock ends with its process (SQLite: ``flock``) or its
    database connection (PostgreSQL: a session-level advisory lock).
    """

    def hold(self, session_key: str) -> AbstractAsyncContextManager[None]:
        """Hold ``session_key``'s lock for the ``async with`` block, waiting for it."""
        ...


@attrs.frozen
class StateStores:
    """The open stores of one host: what :meth:`StateBackend.open` yields."""

    sessions: SessionStorage
    transcripts: TranscriptLedger
    session_locks: SessionLocks


class StateBackend(Protocol):
    """A durable-state implementation: opens the stores of one host process.

    ``name`` is what ``[state] backend`` selects (``"sqlite"`` is built in; others
    come from the ``claw.state_backends`` entry-point group, whose objects are called
    with the :class:`~claw.HostConfig` and return a backend).
    """

    @property
    def name(self) -> str: ...

    def session_lister(self, workers: WorkerPool) -> SessionLister:
        """A read-only session listing for one plugin facet; it connects on first use
        (it is made while plugins register, before :meth:`open`)."""
        ...

    def open(
        self, *, workers: WorkerPool, clock: Callable[[], float]
    ) -> AbstractAsyncContextManager[StateStores]:
        """Open (creating or migrating as needed) the stores; close them on exit."""
        ...
