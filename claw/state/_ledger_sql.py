"""The turn ledger's SQL, written once for every backend: reads, updates, the flush record.

What may happen to a turn is :mod:`claw.turns._ledger` (``check_terminal``,
``check_commit``, ``check_close``, ``check_reopen``); how it is read and written is
here, over a :class:`LedgerSql` that names a backend's tables, placeholder, admission
order and the row lock an update takes (SQLite: none, its ``BEGIN IMMEDIATE`` holds the
database's write lock; PostgreSQL: ``FOR UPDATE``). Every function runs inside a
transaction its caller opened. How a backend admits a turn idempotently across
processes and closes a dead owner's turns stays the backend's (the SQLite store and the
PostgreSQL one decide liveness differently), built from these pieces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs

from ..turns._ledger import (
    AdmittedTurn,
    TurnStatus,
    UnknownTurnError,
    check_close,
    check_close_request,
    check_commit,
    check_reopen,
    check_terminal,
)
from ._sessions_sql import Connection

#: The ledger's columns, in :class:`~claw.turns._ledger.AdmittedTurn`'s field order.
COLUMNS: Final[str] = (
    "turn_id, session_key, session_id, advancement_key, engine_id, first_seq, terminal_seq, "
    "admitted_at, terminal_at, committed_at, commit_outcome, closed_at, close_status, "
    "close_reason, lifecycle_revision, owner_id"
)
#: A turn whose commit is pending: ended, naming an engine, neither committed nor closed.
PENDING: Final[str] = (
    "engine_id IS NOT NULL AND terminal_seq IS NOT NULL AND committed_at IS NULL "
    "AND close_status IS NULL"
)
#: A turn in flight: admitted, not ended, not closed.
OPEN: Final[str] = "terminal_seq IS NULL AND close_status IS NULL"


@attrs.frozen
class LedgerSql:
    """How one backend names the ledger tables, spells a query and locks a turn's row.

    Queries here are written with ``?`` placeholders and ``{ledger}``, ``{flushes}`` and
    ``{order}`` (the column that orders turns by admission); :meth:`q` renders them.
    """

    ledger: str
    flushes: str
    placeholder: str
    order: str
    #: Appended to the read of a turn an update then writes (``" FOR UPDATE"``).
    lock: str = ""

    def q(self, sql: str) -> str:
        rendered = sql.format(ledger=self.ledger, flushes=self.flushes, order=self.order)
        return rendered.replace("?", self.placeholder)


def _turn(row: Sequence[Any]) -> AdmittedTurn:
    return AdmittedTurn(*row)


def get_turn(conn: Connection, sql: LedgerSql, turn_id: str, *, lock: bool = False) -> AdmittedTurn:
    """The ledger row of ``turn_id`` (``lock``: for an update); raises :class:`UnknownTurnError`."""
    query = sql.q(f"SELECT {COLUMNS} FROM {{ledger}} WHERE turn_id = ?")
    row = conn.execute(query + (sql.lock if lock else ""), (turn_id,)).fetchone()
    if row is None:
        raise UnknownTurnError(f"no admitted turn {turn_id!r} in the ledger")
    return _turn(row)


def recorded_turn(
    conn: Connection, sql: LedgerSql, *, turn_id: str, advancement_key: str
) -> AdmittedTurn | None:
    """The earliest recorded turn with this turn id or advancement key, if any."""
    row = conn.execute(
        sql.q(
            f"SELECT {COLUMNS} FROM {{ledger}} WHERE turn_id = ? OR advancement_key = ? "
            "ORDER BY {order} LIMIT 1"
        ),
        (turn_id, advancement_key),
    ).fetchone()
    return None if row is None else _turn(row)


def clash_message(recorded: AdmittedTurn, turn_id: str) -> str:
    """Why an admission is refused whose turn id or advancement key ``recorded`` holds."""
    what = "turn id" if recorded.turn_id == turn_id else "advancement key"
    return (
        f"{what} already recorded for turn {recorded.turn_id!r} (advancement key "
        f"{recorded.advancement_key!r}); admit each logical turn once and reuse its record "
        "on retry"
    )


def insert_turn(
    conn: Connection,
    sql: LedgerSql,
    *,
    turn_id: str,
    session_key: str,
    session_id: str,
    advancement_key: str,
    engine_id: str | None,
    first_seq: int,
    now: float,
    lifecycle_revision: int | None,
    owner_id: str | None,
) -> bool:
    """Insert an admitted turn's row; ``False`` when its turn id or advancement key is
    already recorded (then nothing is written: a concurrent admission of the same key
    waits on the unique index until the first one's transaction ends)."""
    cursor = conn.execute(
        sql.q(
            f"INSERT INTO {{ledger}} ({COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, NULL, ?, NULL, NULL, NULL, NULL, NULL, NULL, ?, ?) "
            "ON CONFLICT DO NOTHING"
        ),
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
    return bool(cursor.rowcount == 1)


def set_terminal(
    conn: Connection,
    sql: LedgerSql,
    turn_id: str,
    *,
    session_id: str,
    terminal_seq: int,
    now: float,
) -> AdmittedTurn:
    """Record the turn's terminal entry; the same end again keeps the record."""
    turn = get_turn(conn, sql, turn_id, lock=True)
    if check_terminal(turn, session_id=session_id, terminal_seq=terminal_seq):
        return turn
    conn.execute(
        sql.q("UPDATE {ledger} SET terminal_seq = ?, terminal_at = ? WHERE turn_id = ?"),
        (terminal_seq, now, turn_id),
    )
    return get_turn(conn, sql, turn_id)


def set_committed(
    conn: Connection, sql: LedgerSql, turn_id: str, *, outcome: str, now: float
) -> AdmittedTurn:
    """Record that the commit was done; a second call keeps the first record."""
    turn = get_turn(conn, sql, turn_id, lock=True)
    if check_commit(turn):
        return turn
    conn.execute(
        sql.q("UPDATE {ledger} SET committed_at = ?, commit_outcome = ? WHERE turn_id = ?"),
        (now, outcome, turn_id),
    )
    return get_turn(conn, sql, turn_id)


def close(
    conn: Connection,
    sql: LedgerSql,
    turn_id: str,
    *,
    status: TurnStatus,
    reason: str,
    now: float,
) -> AdmittedTurn:
    """Close a turn that will not be committed.

    ``failed`` and ``aborted`` close a turn that has no terminal entry; ``stale`` and
    ``abandoned`` also close a terminal turn whose commit is pending. Closing a closed
    turn again keeps the first record; a committed turn cannot be closed.
    """
    check_close_request(status, reason)
    turn = get_turn(conn, sql, turn_id, lock=True)
    if check_close(turn, status):
        return turn
    conn.execute(
        sql.q(
            "UPDATE {ledger} SET closed_at = ?, close_status = ?, close_reason = ? "
            "WHERE turn_id = ?"
        ),
        (now, status.value, reason, turn_id),
    )
    return get_turn(conn, sql, turn_id)


def reopen(conn: Connection, sql: LedgerSql, turn_id: str, *, owner_id: str | None) -> AdmittedTurn:
    """Reopen a failed or aborted turn for a retry; it must be its session's latest turn.

    The reopened turn belongs to ``owner_id``, the process that runs the retry.
    """
    turn = get_turn(conn, sql, turn_id, lock=True)
    later = conn.execute(
        sql.q("SELECT turn_id FROM {ledger} WHERE session_id = ? AND first_seq > ? LIMIT 1"),
        (turn.session_id, turn.first_seq),
    ).fetchone()
    check_reopen(turn, None if later is None else str(later[0]))
    conn.execute(
        sql.q(
            "UPDATE {ledger} SET closed_at = NULL, close_status = NULL, close_reason = NULL, "
            "owner_id = ? WHERE turn_id = ?"
        ),
        (owner_id, turn_id),
    )
    return get_turn(conn, sql, turn_id)


def open_turns(conn: Connection, sql: LedgerSql) -> tuple[AdmittedTurn, ...]:
    """Every turn still in flight (admitted, no terminal entry, not closed), in admission
    order."""
    rows = conn.execute(
        sql.q(f"SELECT {COLUMNS} FROM {{ledger}} WHERE {OPEN} ORDER BY {{order}}")
    ).fetchall()
    return tuple(_turn(row) for row in rows)


def select_turns(
    conn: Connection,
    sql: LedgerSql,
    *,
    session_id: str | None,
    pending_only: bool,
    session_key: str | None = None,
    open_only: bool = False,
) -> tuple[AdmittedTurn, ...]:
    """Ledger rows in admission order, optionally of one session (by id or key),
    optionally only pending, or only in flight (read through the partial index of the
    turns in flight, not the session's whole ledger)."""
    clauses: list[str] = []
    args: list[object] = []
    if session_id is not None:
        clauses.append("session_id = ?")
        args.append(session_id)
    if session_key is not None:
        clauses.append("session_key = ?")
        args.append(session_key)
    if pending_only:
        clauses.append(PENDING)
    if open_only:
        clauses.append(OPEN)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(
        sql.q(f"SELECT {COLUMNS} FROM {{ledger}} {where} ORDER BY {{order}}"), args
    ).fetchall()
    return tuple(_turn(r) for r in rows)


def record_flush(
    conn: Connection, sql: LedgerSql, flush_id: str, session_key: str, now: float
) -> bool:
    """Record a settled flush; ``False`` when ``flush_id`` was recorded already."""
    cursor = conn.execute(
        sql.q(
            "INSERT INTO {flushes} (flush_id, session_key, completed_at) VALUES (?, ?, ?) "
            "ON CONFLICT (flush_id) DO NOTHING"
        ),
        (flush_id, session_key, now),
    )
    return bool(cursor.rowcount == 1)


def flush_recorded(conn: Connection, sql: LedgerSql, flush_id: str) -> bool:
    """Whether ``flush_id`` is recorded as settled."""
    found = conn.execute(
        sql.q("SELECT 1 FROM {flushes} WHERE flush_id = ?"), (flush_id,)
    ).fetchone()
    return found is not None
