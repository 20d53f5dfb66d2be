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

This module holds the value type and the synchronous SQL; the
:class:`~claw.turns.TranscriptStore` runs it through the worker pool.
"""

from __future__ import annotations

import enum
import sqlite3

import attrs

from claw._errors import ClawError

_PENDING = (
    "engine_id IS NOT NULL AND terminal_seq IS NOT NULL AND committed_at IS NULL "
    "AND close_status IS NULL"
)

LEDGER_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS turn_ledger (
        turn_id TEXT PRIMARY KEY,
        session_key TEXT NOT NULL,
        session_id TEXT NOT NULL,
        advancement_key TEXT NOT NULL UNIQUE,
        engine_id TEXT,
        first_seq INTEGER NOT NULL,
        terminal_seq INTEGER,
        admitted_at REAL NOT NULL,
        terminal_at REAL,
        committed_at REAL,
        commit_outcome TEXT,
        closed_at REAL,
        close_status TEXT CHECK (close_status IN ('failed', 'aborted', 'stale', 'abandoned')),
        close_reason TEXT,
        lifecycle_revision INTEGER,
        owner_id TEXT,
        FOREIGN KEY (session_id, first_seq) REFERENCES transcript_entries (session_id, seq),
        FOREIGN KEY (session_id, terminal_seq) REFERENCES transcript_entries (session_id, seq)
    )""",
    """CREATE INDEX IF NOT EXISTS turn_ledger_by_session
        ON turn_ledger (session_id, first_seq)""",
    # The commit queue: looked up before every turn, so it must not scan the ledger.
    f"""CREATE INDEX IF NOT EXISTS turn_ledger_pending
        ON turn_ledger (session_key) WHERE {_PENDING}""",
)
"""Statements creating the ledger table; run in the transcript database's schema transaction."""

LEDGER_MIGRATION_V1_V2 = (
    "ALTER TABLE turn_ledger ADD COLUMN closed_at REAL",
    "ALTER TABLE turn_ledger ADD COLUMN close_status TEXT CHECK "
    "(close_status IN ('failed', 'aborted', 'stale', 'abandoned'))",
    "ALTER TABLE turn_ledger ADD COLUMN close_reason TEXT",
    "ALTER TABLE turn_ledger ADD COLUMN lifecycle_revision INTEGER",
)
"""Statements bringing a version-1 ledger (no closed turns) to version 2."""

LEDGER_MIGRATION_V2_V3 = ("ALTER TABLE turn_ledger ADD COLUMN owner_id TEXT",)
"""Statements bringing a version-2 ledger (no turn owners) to version 3."""

_COLUMNS = (
    "turn_id, session_key, session_id, advancement_key, engine_id, first_seq, terminal_seq, "
    "admitted_at, terminal_at, committed_at, commit_outcome, closed_at, close_status, "
    "close_reason, lifecycle_revision, owner_id"
)


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


def _row_to_turn(row: tuple[object, ...]) -> AdmittedTurn:
    return AdmittedTurn(*row)  # type: ignore[arg-type]


def get_turn(conn: sqlite3.Connection, turn_id: str) -> AdmittedTurn:
    """The ledger row for ``turn_id``; raises :class:`UnknownTurnError`."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM turn_ledger WHERE turn_id = ?", (turn_id,)
    ).fetchone()
    if row is None:
        raise UnknownTurnError(f"no admitted turn {turn_id!r} in the ledger")
    return _row_to_turn(row)


def insert_admitted(
    conn: sqlite3.Connection,
    *,
    turn_id: str,
    session_key: str,
    session_id: str,
    advancement_key: str,
    engine_id: str | None,
    first_seq: int,
    now: float,
    lifecycle_revision: int | None = None,
    owner_id: str | None = None,
) -> AdmittedTurn:
    """Insert a new ledger row (inside the caller's transaction)."""
    clash = conn.execute(
        "SELECT turn_id, advancement_key FROM turn_ledger WHERE turn_id = ? OR advancement_key = ?",
        (turn_id, advancement_key),
    ).fetchone()
    if clash is not None:
        what = "turn id" if clash[0] == turn_id else "advancement key"
        raise TurnIdTakenError(
            f"{what} already recorded for turn {clash[0]!r} (advancement key {clash[1]!r}); "
            "admit each logical turn once and reuse its record on retry"
        )
    conn.execute(
        f"INSERT INTO turn_ledger ({_COLUMNS}) "
        "VALUES (?, ?, ?, ?, ?, ?, NULL, ?, NULL, NULL, NULL, NULL, NULL, NULL, ?, ?)",
        (
            turn_id,
            session_key,
            session_id,
            advancement_key,
            engine_id,
            first_seq,
            now,
            lifecycle_revision,
            owner_id,
        ),
    )
    return get_turn(conn, turn_id)


def set_terminal(
    conn: sqlite3.Connection, turn_id: str, *, session_id: str, terminal_seq: int, now: float
) -> AdmittedTurn:
    """Record the turn's terminal entry (inside the caller's transaction)."""
    turn = get_turn(conn, turn_id)
    if check_terminal(turn, session_id=session_id, terminal_seq=terminal_seq):
        return turn
    conn.execute(
        "UPDATE turn_ledger SET terminal_seq = ?, terminal_at = ? WHERE turn_id = ?",
        (terminal_seq, now, turn_id),
    )
    return get_turn(conn, turn_id)


def set_committed(
    conn: sqlite3.Connection, turn_id: str, *, outcome: str, now: float
) -> AdmittedTurn:
    """Record that the commit was done; a second call keeps the first record."""
    turn = get_turn(conn, turn_id)
    if check_commit(turn):
        return turn
    conn.execute(
        "UPDATE turn_ledger SET committed_at = ?, commit_outcome = ? WHERE turn_id = ?",
        (now, outcome, turn_id),
    )
    return get_turn(conn, turn_id)


def close(
    conn: sqlite3.Connection, turn_id: str, *, status: TurnStatus, reason: str, now: float
) -> AdmittedTurn:
    """Close a turn that will not be committed (inside the caller's transaction).

    ``failed`` and ``aborted`` close a turn that has no terminal entry; ``stale`` and
    ``abandoned`` also close a terminal turn whose commit is pending. Closing a closed
    turn again keeps the first record; a committed turn cannot be closed.
    """
    check_close_request(status, reason)
    turn = get_turn(conn, turn_id)
    if check_close(turn, status):
        return turn
    conn.execute(
        "UPDATE turn_ledger SET closed_at = ?, close_status = ?, close_reason = ? "
        "WHERE turn_id = ?",
        (now, status.value, reason, turn_id),
    )
    return get_turn(conn, turn_id)


def reopen(conn: sqlite3.Connection, turn_id: str, *, owner_id: str | None = None) -> AdmittedTurn:
    """Reopen a failed or aborted turn for a retry; it must be its session's latest turn.

    The reopened turn belongs to ``owner_id``, the process that runs the retry.
    """
    turn = get_turn(conn, turn_id)
    later = conn.execute(
        "SELECT turn_id FROM turn_ledger WHERE session_id = ? AND first_seq > ? LIMIT 1",
        (turn.session_id, turn.first_seq),
    ).fetchone()
    check_reopen(turn, None if later is None else str(later[0]))
    conn.execute(
        "UPDATE turn_ledger SET closed_at = NULL, close_status = NULL, close_reason = NULL, "
        "owner_id = ? WHERE turn_id = ?",
        (owner_id, turn_id),
    )
    return get_turn(conn, turn_id)


def open_turns(conn: sqlite3.Connection) -> tuple[AdmittedTurn, ...]:
    """Every turn still in flight (admitted, no terminal entry, not closed)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM turn_ledger "
        "WHERE terminal_seq IS NULL AND close_status IS NULL ORDER BY rowid"
    )
    return tuple(_row_to_turn(row) for row in rows)


def select_turns(
    conn: sqlite3.Connection,
    *,
    session_id: str | None,
    pending_only: bool,
    session_key: str | None = None,
) -> tuple[AdmittedTurn, ...]:
    """Ledger rows in admission order, optionally of one session (by id or key),
    optionally only pending."""
    clauses, args = [], []
    if session_id is not None:
        clauses.append("session_id = ?")
        args.append(session_id)
    if session_key is not None:
        clauses.append("session_key = ?")
        args.append(session_key)
    if pending_only:
        clauses.append(_PENDING)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM turn_ledger {where} ORDER BY rowid", args)
    return tuple(_row_to_turn(row) for row in rows)
