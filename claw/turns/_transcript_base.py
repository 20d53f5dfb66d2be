"""What every transcript store backend shares: the asynchronous interface, written once.

The SQLite store (:mod:`claw.state.sqlite._transcripts`) and the PostgreSQL store
(:mod:`claw.state.postgres._transcripts`) differ in their transactions: how they lock a
transcript, claim a seq, notify other writers. The rules live in
:mod:`._transcript_core` and :mod:`._ledger`; the interface the host and the engines
call (appends, reads, the ledger's updates, the flush record) is the same on both and
is kept here. Each backend gives its transactions as :class:`TranscriptOps` (functions
of one of its connections, called with keyword arguments after it), its SQL spelling
for the shared queries, and how it runs one call (:meth:`TranscriptStoreBase._write`,
:meth:`TranscriptStoreBase._read`). What differs in meaning, admitting a turn and
closing the turns of dead owners, stays with each backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import attrs

from claw.models import CompactionSummary, Message

from .._recent import RecentlyRead
from . import _transcript_core as core
from ._ledger import AdmittedTurn, TurnStatus
from ._transcript_core import (
    Appendable,
    TranscriptCursor,
    TranscriptDelta,
    TranscriptEntry,
    TranscriptError,
    TranscriptStats,
    UnknownEntryError,
    parse_entry_id,
)


@attrs.frozen
class TranscriptOps:
    """A backend's transactions, each ``fn(conn, **keywords)``:

    ``append(session_key, session_id, rows, turn_id, advancement_key, terminal, now)``,
    ``append_compaction(session_key, session_id, message, first_kept_seq, tokens_before,
    tokens_after, turn_id, now)``, ``delta(session_id, cursor)``,
    ``terminal(turn_id, terminal_seq, now)``, ``committed(turn_id, outcome, now)``,
    ``close(turn_id, status, reason, now)``, ``reopen(turn_id, owner_id)``,
    ``flush_done(flush_id, session_key, now)``, ``flush_recorded(flush_id)``,
    ``select_turns(session_id, pending_only, session_key)``, ``get_turn(turn_id)``.
    """

    append: Callable[..., tuple[TranscriptEntry, ...]]
    append_compaction: Callable[..., TranscriptEntry]
    delta: Callable[..., TranscriptDelta]
    terminal: Callable[..., AdmittedTurn]
    committed: Callable[..., AdmittedTurn]
    close: Callable[..., AdmittedTurn]
    reopen: Callable[..., AdmittedTurn]
    flush_done: Callable[..., bool]
    flush_recorded: Callable[..., bool]
    select_turns: Callable[..., tuple[AdmittedTurn, ...]]
    get_turn: Callable[..., AdmittedTurn]


# How many visible messages a store keeps, over the sessions it read last (see
# TranscriptStoreBase.visible_messages): a few long contexts' worth.
_KEPT_MESSAGES = 20_000


VisibleHistory = tuple[TranscriptCursor, tuple[Message, ...]]
"""A session's visible history as read to a cursor (what a store keeps)."""


def visible_histories(limit: int = _KEPT_MESSAGES) -> RecentlyRead[str, VisibleHistory]:
    """What a store keeps of the visible histories it read last, by session id: up to
    ``limit`` messages in all."""
    return RecentlyRead(limit, lambda kept: len(kept[1]))


class TranscriptStoreBase(ABC):
    """Session transcripts and the turn ledger: the part every backend shares.

    A subclass sets ``_ops`` and ``_sql`` and has ``_clock``, ``_owner_id``,
    ``_version`` and ``_visible`` (:func:`visible_histories`) attributes.
    """

    _ops: ClassVar[TranscriptOps]
    _sql: ClassVar[core.TranscriptSql]
    _clock: Callable[[], float]
    _owner_id: str
    _version: int
    _visible: RecentlyRead[str, VisibleHistory]

    @abstractmethod
    async def _write(self, fn: Callable[..., Any], /, **kwargs: object) -> Any:
        """Run ``fn(conn, **kwargs)`` in one write transaction; moves :attr:`version`."""

    @abstractmethod
    async def _read(self, fn: Callable[..., Any], /, **kwargs: object) -> Any:
        """Run ``fn(conn, **kwargs)`` as one read."""

    @property
    def version(self) -> int:
        """A counter that moves after every write, this process's or (once ``watch``
        has seen it) another's: readers cache derived views against it."""
        return self._version

    @property
    def owner_id(self) -> str:
        """This process's owner id (the turns it admits are its own)."""
        return self._owner_id

    # -- appends ---------------------------------------------------------------

    async def append(
        self,
        session_key: str,
        session_id: str,
        messages: Sequence[Appendable],
        *,
        turn_id: str | None = None,
        advancement_key: str | None = None,
        terminal: bool = False,
    ) -> tuple[TranscriptEntry, ...]:
        """Append ``messages`` as consecutive entries, atomically; return the entries.

        With ``turn_id`` of an admitted turn, the entries inherit its
        advancement key, and ``terminal=True`` records the last of them as the
        turn's terminal entry in the same transaction.
        """
        rows = core.appendable_rows(messages, turn_id=turn_id, terminal=terminal)
        entries: tuple[TranscriptEntry, ...] = await self._write(
            self._ops.append,
            session_key=session_key,
            session_id=session_id,
            rows=rows,
            turn_id=turn_id,
            advancement_key=advancement_key,
            terminal=terminal,
            now=self._clock(),
        )
        return entries

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
    ) -> TranscriptEntry:
        """Append a compaction entry whose summary replaces every entry before ``first_kept_seq``.

        ``first_kept_seq=None`` keeps nothing older (the summary replaces all
        entries before it). It must not go back before the previous
        compaction's ``first_kept_seq``.
        """
        entry: TranscriptEntry = await self._write(
            self._ops.append_compaction,
            session_key=session_key,
            session_id=session_id,
            message=CompactionSummary(summary),
            first_kept_seq=first_kept_seq,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            turn_id=turn_id,
            now=self._clock(),
        )
        return entry

    # -- reads -----------------------------------------------------------------

    async def read_entries(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        through_seq: int | None = None,
        limit: int | None = None,
    ) -> tuple[TranscriptEntry, ...]:
        """Entries with ``after_seq < seq <= through_seq`` in seq order, at most ``limit``."""
        entries: tuple[TranscriptEntry, ...] = await self._read(
            core.read_entries,
            sql=self._sql,
            session_id=session_id,
            after_seq=after_seq,
            through_seq=through_seq,
            limit=limit,
        )
        return entries

    async def read_entry(self, entry_id: str) -> TranscriptEntry:
        """The entry with this id; raises :class:`UnknownEntryError`."""
        session_id, seq = parse_entry_id(entry_id)
        found = await self.read_entries(session_id, after_seq=seq - 1, through_seq=seq, limit=1)
        if not found:
            raise UnknownEntryError(f"no transcript entry {entry_id!r}")
        return found[0]

    async def stats(self, session_id: str) -> TranscriptStats:
        """Entry count, byte size, last seq and compactions of one session's transcript."""
        found: TranscriptStats = await self._read(core.stats, sql=self._sql, session_id=session_id)
        return found

    async def session_listing(
        self, session_keys: Sequence[str] | None = None
    ) -> list[tuple[str, TranscriptStats]]:
        """Every session id with a transcript (under ``session_keys``, when given), with
        its session key and :meth:`stats`, read at once: ids within a key oldest first,
        keys in the order given. What a listing of many sessions reads instead of a
        :meth:`session_ids` and a :meth:`stats` per session."""
        found: list[tuple[str, TranscriptStats]] = await self._read(
            core.session_listing, sql=self._sql, session_keys=session_keys
        )
        return found

    async def session_ids(self, session_key: str) -> tuple[str, ...]:
        """The session ids that have a transcript under ``session_key``, oldest first."""
        found: tuple[str, ...] = await self._read(
            core.session_ids, sql=self._sql, session_key=session_key
        )
        return found

    async def read_session_transcript_visible_message_delta(
        self, session_id: str, cursor: TranscriptCursor | None = None
    ) -> TranscriptDelta:
        """The visible messages after ``cursor`` (or all, as a rebuild), and the next cursor.

        See :mod:`claw.state.sqlite._transcripts` for how compaction and the cursor's epoch
        interact. A cursor of another session is refused.
        """
        delta: TranscriptDelta = await self._read(
            self._ops.delta, session_id=session_id, cursor=cursor
        )
        return delta

    async def visible_messages(self, session_id: str) -> tuple[Message, ...]:
        """The whole visible history of a session (what a rebuild returns).

        A turn reads it several times (to assemble the context, to time a flush and a
        compaction), and every read of it whole decoded every entry since the last
        compaction: a turn cost more the longer its context. Entries are never changed,
        so the history read last is kept with its cursor and only the messages after
        the cursor are read (the cursor API engines use); a compaction since, here or
        in another process, makes that read a rebuild.
        """
        kept = self._visible.take(session_id)
        delta = await self.read_session_transcript_visible_message_delta(
            session_id, None if kept is None else kept[0]
        )
        messages = delta.messages if kept is None or delta.rebuilt else kept[1] + delta.messages
        self._visible.keep(session_id, (delta.cursor, messages))
        return messages

    # -- the turn ledger -------------------------------------------------------

    async def mark_terminal(self, turn_id: str, terminal_seq: int) -> AdmittedTurn:
        """Record entry ``terminal_seq`` (already appended) as the turn's terminal entry."""
        turn: AdmittedTurn = await self._write(
            self._ops.terminal, turn_id=turn_id, terminal_seq=terminal_seq, now=self._clock()
        )
        return turn

    async def mark_committed(self, turn_id: str, *, outcome: str = "committed") -> AdmittedTurn:
        """Record that the engine's ``commit_turn`` succeeded (``outcome`` as it answered).

        Idempotent: a second call returns the first record unchanged.
        """
        if not outcome:
            raise TranscriptError("outcome must be a non-empty string")
        turn: AdmittedTurn = await self._write(
            self._ops.committed, turn_id=turn_id, outcome=outcome, now=self._clock()
        )
        return turn

    async def close_turn(self, turn_id: str, status: TurnStatus, reason: str) -> AdmittedTurn:
        """Close a turn that will not be committed (see :mod:`claw.turns._ledger`)."""
        turn: AdmittedTurn = await self._write(
            self._ops.close, turn_id=turn_id, status=status, reason=reason, now=self._clock()
        )
        return turn

    async def reopen_turn(self, turn_id: str) -> AdmittedTurn:
        """Reopen a failed or aborted turn (its session's latest) so it can be retried.

        The process reopening it runs the retry, so the turn becomes its own.
        """
        turn: AdmittedTurn = await self._write(
            self._ops.reopen, turn_id=turn_id, owner_id=self._owner_id
        )
        return turn

    async def record_flush(self, flush_id: str, session_key: str) -> bool:
        """Record durably that the flush ``flush_id`` is settled; whether this call did."""
        recorded: bool = await self._write(
            self._ops.flush_done, flush_id=flush_id, session_key=session_key, now=self._clock()
        )
        return recorded

    async def flush_recorded(self, flush_id: str) -> bool:
        """Whether any process recorded the flush ``flush_id`` as settled."""
        found: bool = await self._read(self._ops.flush_recorded, flush_id=flush_id)
        return found

    async def pending_commits(
        self, session_id: str | None = None, *, session_key: str | None = None
    ) -> tuple[AdmittedTurn, ...]:
        """Turns that ended, name an engine and were not committed: retry these on start.

        ``session_key`` selects every incarnation of one session (the runner's queue).
        """
        turns: tuple[AdmittedTurn, ...] = await self._read(
            self._ops.select_turns,
            session_id=session_id,
            pending_only=True,
            session_key=session_key,
        )
        return turns

    async def turns(
        self, session_id: str | None = None, *, open_only: bool = False
    ) -> tuple[AdmittedTurn, ...]:
        """Every ledger row (of one session, or all), in admission order; with
        ``open_only``, only the turns in flight (what a transcript reader skips: a
        session's whole ledger grows with it)."""
        turns: tuple[AdmittedTurn, ...] = await self._read(
            self._ops.select_turns,
            session_id=session_id,
            pending_only=False,
            session_key=None,
            open_only=open_only,
        )
        return turns

    async def get_turn(self, turn_id: str) -> AdmittedTurn:
        """The ledger row of ``turn_id``; raises :class:`~claw.turns.UnknownTurnError`."""
        turn: AdmittedTurn = await self._read(self._ops.get_turn, turn_id=turn_id)
        return turn
