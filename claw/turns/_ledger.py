"""The accepted-turns ledger: which turn was admitted, where it ends, whether it was committed.

The durable-admitted-turns contract says that a crash between a turn's
terminal entry and ``engine.commit_turn(advancement_key, ...)`` must lead to
the commit being retried with the same key on the next start. The ledger is
what makes that possible: one row per admitted turn, in the same SQLite
database (and, for admission and the terminal entry, the same transaction) as
the transcript entries it points at. A turn moves through

``admitted`` (user entry written) -> ``terminal`` (its last entry written) ->
``committed`` (the engine acknowledged ``commit_turn``, or said ``duplicate``).

A turn that cannot get there is *closed* instead, with a status and a reason:
``failed`` (its run raised before the terminal entry), ``aborted`` (the process
died or the run was cancelled before the terminal entry; a dead process's turn is
closed by any other process that notices, at its open or before a turn of that
session),
``stale`` (its session was reset since admission, so it must not be committed into
the new incarnation) or ``abandoned`` (its engine is no longer the configured one,
or no longer declares the durable contract). A closed turn is finished: readers
show its entries, and nothing commits it. A failed or aborted turn that is still
the latest of its session can be reopened to be retried.

Every turn records its *owner* (``owner_id``), the process that admitted or reopened
it; only a turn whose owner is dead (see :mod:`claw.state.sqlite._owners`) is closed as ``aborted``
by another process, so a live process's turn in flight is never aborted.

A turn admitted with ``engine_id=None`` runs on the legacy path and never
needs a commit; :meth:`TranscriptStore.pending_commits` lists only terminal,
uncommitted turns that name an engine.

This module holds the value type and the rules every backend applies; the ledger's SQL is
written once over each backend's dialect in :mod:`claw.state._ledger_sql`.
"""

from __future__ import annotations

import enum

import attrs

from claw._errors import ClawError


class TurnLedgerError(ClawError, ValueError):
    """A ledger update contradicts what is recorded (duplicate turn, wrong session, no terminal)."""


class TurnIdTakenError(TurnLedgerError):
    """The turn id or advancement key of an admission is already recorded for another
    admission (another process admitted a turn of the session in between, say)."""


class UnknownTurnError(ClawError, LookupError):
    """No admitted turn has this id."""


class TurnStatus(enum.StrEnum):
    """Where an admitted turn stands."""

    ADMITTED = "admitted"
    TERMINAL = "terminal"
    COMMITTED = "committed"
    FAILED = "failed"
    ABORTED = "aborted"
    STALE = "stale"
    ABANDONED = "abandoned"


CLOSED_STATUSES = frozenset(
    {TurnStatus.FAILED, TurnStatus.ABORTED, TurnStatus.STALE, TurnStatus.ABANDONED}
)
"""The statuses of a turn closed without (or instead of) a commit."""


@attrs.frozen
class AdmittedTurn:
    """One ledger row: an admitted turn and its inclusive entry range.

    ``entry ids`` follow the transcript's ``<session_id>:<seq>`` form.
    ``commit_outcome`` is what the host recorded when it marked the commit
    done (``"committed"``, ``"duplicate"``, ...). ``close_status`` and
    ``close_reason`` say why a turn was closed instead (see the module docstring).
    """

    turn_id: str
    session_key: str
    session_id: str
    advancement_key: str
    engine_id: str | None
    first_seq: int
    terminal_seq: int | None
    admitted_at: float
    terminal_at: float | None
    committed_at: float | None
    commit_outcome: str | None
    closed_at: float | None = None
    close_status: str | None = None
    close_reason: str | None = None
    #: The session's lifecycle revision at admission (``None`` for version-1 rows).
    lifecycle_revision: int | None = None
    #: The process that admitted (or reopened) the turn and runs it (``None`` for rows
    #: written before owners were recorded); see :mod:`claw.state.sqlite._owners`.
    owner_id: str | None = None

    @property
    def status(self) -> TurnStatus:
        """Admitted, terminal (commit pending if it names an engine), committed, or closed."""
        if self.close_status is not None:
            return TurnStatus(self.close_status)
        if self.committed_at is not None:
            return TurnStatus.COMMITTED
        if self.terminal_seq is not None:
            return TurnStatus.TERMINAL
        return TurnStatus.ADMITTED

    @property
    def first_entry_id(self) -> str:
        """The id of the admitted user entry."""
        return f"{self.session_id}:{self.first_seq}"

    @property
    def terminal_entry_id(self) -> str | None:
        """The id of the turn's terminal entry, once recorded."""
        return None if self.terminal_seq is None else f"{self.session_id}:{self.terminal_seq}"

    @property
    def open(self) -> bool:
        """True while the turn is in flight: admitted, not ended, not closed."""
        return self.status is TurnStatus.ADMITTED

    @property
    def needs_commit(self) -> bool:
        """True when the turn ended, names an engine, and was not committed yet."""
        return self.status is TurnStatus.TERMINAL and self.engine_id is not None


# The ledger's rules, shared by every backend: each takes the turn as read inside the
# caller's transaction and raises TurnLedgerError when the change is not allowed.


def check_terminal(turn: AdmittedTurn, *, session_id: str, terminal_seq: int) -> bool:
    """May ``terminal_seq`` end ``turn``? True when exactly that end is already recorded."""
    turn_id = turn.turn_id
    if turn.session_id != session_id:
        raise TurnLedgerError(
            f"turn {turn_id!r} belongs to session id {turn.session_id!r}, not {session_id!r}"
        )
    if turn.close_status is not None:
        raise TurnLedgerError(
            f"turn {turn_id!r} was closed as {turn.close_status} ({turn.close_reason}); "
            "reopen it to retry it"
        )
    if turn.terminal_seq is not None:
        if turn.terminal_seq == terminal_seq:
            return True
        raise TurnLedgerError(
            f"turn {turn_id!r} already ended at entry {turn.terminal_entry_id}; "
            f"cannot end it again at {session_id}:{terminal_seq}"
        )
    if terminal_seq < turn.first_seq:
        raise TurnLedgerError(
            f"terminal entry {session_id}:{terminal_seq} of turn {turn_id!r} is before its "
            f"user entry {turn.first_entry_id}"
        )
    return False


def check_commit(turn: AdmittedTurn) -> bool:
    """May ``turn`` be marked committed? True when it already is (the first record stays)."""
    if turn.committed_at is not None:
        return True
    if turn.close_status is not None:
        raise TurnLedgerError(
            f"turn {turn.turn_id!r} was closed as {turn.close_status} ({turn.close_reason}); "
            "a closed turn is never committed"
        )
    if turn.terminal_seq is None:
        raise TurnLedgerError(
            f"turn {turn.turn_id!r} has no terminal entry yet; record it before marking the commit"
        )
    return False


def check_close_request(status: TurnStatus, reason: str) -> None:
    """A close names a closing status and a non-empty reason (checked before any read)."""
    if status not in CLOSED_STATUSES:
        raise TurnLedgerError(f"{status!r} is not a closing status")
    if not isinstance(reason, str) or not reason:
        raise TurnLedgerError("closing a turn needs a non-empty reason")


def check_close(turn: AdmittedTurn, status: TurnStatus) -> bool:
    """May ``turn`` close as ``status``? True when it is closed already (the first record stays)."""
    if turn.close_status is not None:
        return True
    if turn.committed_at is not None:
        raise TurnLedgerError(f"turn {turn.turn_id!r} was committed; it cannot be closed")
    if turn.terminal_seq is not None and status in (TurnStatus.FAILED, TurnStatus.ABORTED):
        raise TurnLedgerError(
            f"turn {turn.turn_id!r} reached its terminal entry; it cannot have {status.value}"
        )
    return False


def check_reopen(turn: AdmittedTurn, later_turn_id: str | None) -> None:
    """Only a failed or aborted turn reopens, and only while it is its session's latest."""
    if turn.status not in (TurnStatus.FAILED, TurnStatus.ABORTED):
        raise TurnLedgerError(
            f"turn {turn.turn_id!r} is {turn.status.value}; "
            "only a failed or aborted turn is reopened"
        )
    if later_turn_id is not None:
        raise TurnLedgerError(
            f"turn {turn.turn_id!r} cannot be retried: turn {later_turn_id!r} was admitted after it"
        )
