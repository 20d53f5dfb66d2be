"""A transcript's writes, written once for every backend: appends, compactions, a turn's end.

The numbering, the compaction floor and the ledger's rules are
:mod:`claw.turns._transcript_core` and :mod:`claw.turns._ledger`; their SQL is spelled by
each backend's :class:`~claw.turns._transcript_core.TranscriptSql` and
:class:`~claw.state._ledger_sql.LedgerSql`. What a backend adds to a write is said by
:class:`TranscriptWrites`: how it serialises the numbering of one transcript across
writers (PostgreSQL: a transaction-scoped advisory lock on the session id; SQLite:
nothing, ``BEGIN IMMEDIATE`` already holds the database's write lock) and how it tells
other writers a transcript changed (PostgreSQL: ``NOTIFY``). Every function runs inside
a transaction its caller opened.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ..models import CompactionSummary, UserMessage
from ..turns import _transcript_core as core
from ..turns._ledger import AdmittedTurn
from ..turns._transcript_core import Appendable, TranscriptEntry, TranscriptEntryKind
from . import _ledger_sql as ledger_sql


def _nothing(conn: Any, name: str) -> None:
    return None


@attrs.frozen
class TranscriptWrites:
    """One backend's transcript and ledger spelling, and what it adds to each write."""

    sql: core.TranscriptSql
    ledger: ledger_sql.LedgerSql
    #: Called with a session id before its entries are numbered (serialises writers).
    lock: Callable[[Any, str], None] = _nothing
    #: Called with a session key after a write to its transcript or its turns.
    changed: Callable[[Any, str], None] = _nothing


def claim(conn: Any, w: TranscriptWrites, session_key: str, session_id: str, now: float) -> None:
    """Claim ``session_id``'s transcript for ``session_key``, holding its numbering."""
    core.check_session_names(session_key, session_id)
    w.lock(conn, session_id)
    core.claim_session(conn, w.sql, session_key, session_id, now)


def append(
    conn: Any,
    w: TranscriptWrites,
    *,
    session_key: str,
    session_id: str,
    rows: list[tuple[TranscriptEntryKind, str, Appendable]],
    turn_id: str | None,
    advancement_key: str | None,
    terminal: bool,
    now: float,
) -> tuple[TranscriptEntry, ...]:
    """Append ``rows`` (under ``turn_id``, ending it when ``terminal``)."""
    claim(conn, w, session_key, session_id, now)
    if turn_id is not None:
        advancement_key = core.turn_advancement(
            ledger_sql.get_turn(conn, w.ledger, turn_id),
            turn_id=turn_id,
            session_id=session_id,
            advancement_key=advancement_key,
        )
    entries = core.insert_entries(
        conn,
        w.sql,
        session_key=session_key,
        session_id=session_id,
        rows=rows,
        turn_id=turn_id,
        advancement_key=advancement_key,
        now=now,
    )
    if terminal:
        assert turn_id is not None
        ledger_sql.set_terminal(
            conn, w.ledger, turn_id, session_id=session_id, terminal_seq=entries[-1].seq, now=now
        )
    w.changed(conn, session_key)
    return entries


def insert_admission(
    conn: Any,
    w: TranscriptWrites,
    *,
    session_key: str,
    session_id: str,
    message: UserMessage,
    payload: str,
    turn_id: str,
    advancement_key: str,
    engine_id: str | None,
    lifecycle_revision: int | None,
    owner_id: str | None,
    now: float,
) -> tuple[TranscriptEntry, bool]:
    """Write an admitted turn's user entry and its ledger row (the caller claimed the
    transcript); ``False`` when the turn id or advancement key is recorded already (a
    concurrent admission of the same key waits on the unique index until the first
    one's transaction ends, then records nothing: the caller rolls back)."""
    (entry,) = core.insert_entries(
        conn,
        w.sql,
        session_key=session_key,
        session_id=session_id,
        rows=[(TranscriptEntryKind.USER, payload, message)],
        turn_id=turn_id,
        advancement_key=advancement_key,
        now=now,
    )
    inserted = ledger_sql.insert_turn(
        conn,
        w.ledger,
        turn_id=turn_id,
        session_key=session_key,
        session_id=session_id,
        advancement_key=advancement_key,
        engine_id=engine_id,
        first_seq=entry.seq,
        now=now,
        lifecycle_revision=lifecycle_revision,
        owner_id=owner_id,
    )
    return entry, inserted


def append_compaction(
    conn: Any,
    w: TranscriptWrites,
    *,
    session_key: str,
    session_id: str,
    message: CompactionSummary,
    first_kept_seq: int | None,
    tokens_before: int | None,
    tokens_after: int | None,
    turn_id: str | None,
    now: float,
) -> TranscriptEntry:
    """Append a compaction entry: everything before ``first_kept_seq`` is replaced."""
    claim(conn, w, session_key, session_id, now)
    entry = core.insert_compaction(
        conn,
        w.sql,
        session_key=session_key,
        session_id=session_id,
        message=message,
        first_kept_seq=first_kept_seq,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        turn_id=turn_id,
        now=now,
    )
    w.changed(conn, session_key)
    return entry


def terminal(
    conn: Any, w: TranscriptWrites, turn_id: str, terminal_seq: int, now: float
) -> AdmittedTurn:
    """Record that entry ``terminal_seq`` (already written) ends ``turn_id``."""
    turn = ledger_sql.get_turn(conn, w.ledger, turn_id)
    w.lock(conn, turn.session_id)
    core.check_terminal_exists(conn, w.sql, turn, terminal_seq)
    ended = ledger_sql.set_terminal(
        conn, w.ledger, turn_id, session_id=turn.session_id, terminal_seq=terminal_seq, now=now
    )
    w.changed(conn, turn.session_key)
    return ended
