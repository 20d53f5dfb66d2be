"""Transcripts and the accepted-turns ledger in PostgreSQL, shared by every host.

The same contracts as the SQLite store (:mod:`claw.state.sqlite._transcripts`,
:mod:`claw.turns._ledger`), whose rules and SQL it shares through
:mod:`claw.turns._transcript_core` (only the table names and placeholders differ):

* An append (or an admission: the user entry and the ledger row) is one transaction.
  Entries of one transcript are numbered under a transaction-scoped advisory lock on
  its session id, so two hosts appending to one session interleave, never clash.
* Admission is idempotent by advancement key across hosts: the ledger row is written
  with ``INSERT ... ON CONFLICT DO NOTHING`` in the admitting transaction; a host that
  loses the race (or retries) rolls its entry back and gets the recorded turn.
* A turn belongs to the host process that admitted it (``owner_id``). That process
  holds a session-level advisory lock on its owner id while it lives (see the backend);
  :meth:`close_orphaned_turns` closes only the open turns whose owner's lock it can
  take inside its own transaction: the owner's connection is gone, so it is dead, and
  two hosts doing it at once close each turn once.
* Every write sends ``NOTIFY claw_transcript_changes`` so other hosts' ``version``
  moves (readers cache derived views against it).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any, ClassVar, Final

import attrs
import psycopg
import trio

from ..._errors import HostClosedError
from ..._recent import RecentlyRead
from ...models import UserMessage
from ...turns import _transcript_core as core
from ...turns._ledger import AdmittedTurn, TurnLedgerError, TurnStatus
from ...turns._transcript_base import (
    TranscriptOps,
    TranscriptStoreBase,
    VisibleHistory,
    visible_histories,
)
from ...turns._transcript_core import (
    TranscriptCursor,
    TranscriptDelta,
    TranscriptEntry,
    TranscriptError,
)
from .. import _ledger_sql as ledger_sql
from .. import _transcript_writes as writes
from ._database import Database
from ._schema import OWNER_LOCK_CLASS, TRANSCRIPT_LOCK_CLASS

Connection = psycopg.Connection[Any]

TRANSCRIPT_CHANNEL: Final[str] = "claw_transcript_changes"

POSTGRES = core.TranscriptSql(
    entries="claw_transcript_entries",
    sessions="claw_transcript_sessions",
    ledger="claw_turn_ledger",
    placeholder="%s",
    payload_bytes="octet_length(payload)",
    creation_tiebreak="position",
)
"""The PostgreSQL spelling of the transcript tables."""
LEDGER = ledger_sql.LedgerSql(
    ledger="claw_turn_ledger",
    flushes="claw_flush_completions",
    placeholder="%s",
    order="position",
    lock=" FOR UPDATE",
)
"""The PostgreSQL spelling of the ledger: an update locks the turn's row first."""


class _AlreadyAdmitted(Exception):
    """Rolls back an admission whose advancement key another transaction recorded."""


def _lock_transcript(conn: Connection, session_id: str) -> None:
    conn.execute(
        "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (TRANSCRIPT_LOCK_CLASS, session_id)
    )


def _changed(conn: Connection, session_key: str) -> None:
    conn.execute("SELECT pg_notify(%s, %s)", (TRANSCRIPT_CHANNEL, session_key[:200]))


WRITES = writes.TranscriptWrites(POSTGRES, LEDGER, lock=_lock_transcript, changed=_changed)
"""What PostgreSQL adds to a write: the transcript's advisory lock, and a NOTIFY."""


def _admit(
    conn: Connection,
    *,
    session_key: str,
    session_id: str,
    message: UserMessage,
    turn_id: str,
    advancement_key: str,
    engine_id: str | None,
    lifecycle_revision: int | None,
    owner_id: str,
    now: float,
) -> tuple[TranscriptEntry, AdmittedTurn]:
    if ledger_sql.recorded_turn(conn, LEDGER, turn_id=turn_id, advancement_key=advancement_key):
        raise _AlreadyAdmitted
    writes.claim(conn, WRITES, session_key, session_id, now)
    # Another host admitting the same key waits on the unique index until the first
    # transaction ends, then records nothing: exactly one turn per key.
    entry, inserted = writes.insert_admission(
        conn,
        WRITES,
        session_key=session_key,
        session_id=session_id,
        message=message,
        payload=core.encode(message),
        turn_id=turn_id,
        advancement_key=advancement_key,
        engine_id=engine_id,
        lifecycle_revision=lifecycle_revision,
        owner_id=owner_id,
        now=now,
    )
    if not inserted:
        raise _AlreadyAdmitted
    _changed(conn, session_key)
    return entry, ledger_sql.get_turn(conn, LEDGER, turn_id)


def _recorded_admission(
    conn: Connection, session_id: str, turn_id: str, advancement_key: str, payload: str
) -> tuple[TranscriptEntry, AdmittedTurn]:
    turn = ledger_sql.recorded_turn(
        conn, LEDGER, turn_id=turn_id, advancement_key=advancement_key
    )
    if turn is None:  # pragma: no cover - the conflicting transaction rolled back
        raise TurnLedgerError(
            f"advancement key {advancement_key!r} clashed with a turn that no longer exists; "
            "retry the admission"
        )
    stored = conn.execute(
        "SELECT payload FROM claw_transcript_entries WHERE session_id = %s AND seq = %s",
        (turn.session_id, turn.first_seq),
    ).fetchone()
    # Only an exact repeat (same turn, key, session and message) gets the record back.
    if (
        (turn.turn_id, turn.advancement_key, turn.session_id)
        != (turn_id, advancement_key, session_id)
        or stored is None
        or stored[0] != payload
    ):
        raise TurnLedgerError(ledger_sql.clash_message(turn, turn_id))
    entries = core.read_entries(
        conn,
        POSTGRES,
        session_id,
        after_seq=turn.first_seq - 1,
        through_seq=turn.first_seq,
        limit=1,
    )
    return entries[0], turn


def _close_orphans(
    conn: Connection, owner_id: str, reason: str, now: float
) -> tuple[AdmittedTurn, ...]:
    owners = [
        str(r[0])
        for r in conn.execute(
            f"SELECT DISTINCT owner_id FROM claw_turn_ledger WHERE {ledger_sql.OPEN} "
            "AND owner_id <> %s",
            (owner_id,),
        ).fetchall()
    ]
    closed: list[AdmittedTurn] = []
    for owner in owners:
        # A live owner holds this lock on its own connection; taking it here (until our
        # commit) proves the owner is gone and keeps a second closer out meanwhile.
        (dead,) = conn.execute(
            "SELECT pg_try_advisory_xact_lock(%s, hashtext(%s))", (OWNER_LOCK_CLASS, owner)
        ).fetchone() or (False,)
        if not dead:
            continue
        ids = [
            str(r[0])
            for r in conn.execute(
                f"SELECT turn_id FROM claw_turn_ledger WHERE {ledger_sql.OPEN} "
                "AND owner_id = %s ORDER BY position",
                (owner,),
            ).fetchall()
        ]
        for turn_id in ids:
            turn = ledger_sql.close(
                conn, LEDGER, turn_id, status=TurnStatus.ABORTED, reason=reason, now=now
            )
            closed.append(turn)
            _changed(conn, turn.session_key)
    return tuple(closed)


def _delta(conn: Connection, session_id: str, cursor: TranscriptCursor | None) -> TranscriptDelta:
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    return core.delta(conn, POSTGRES, session_id, cursor)


@attrs.define(eq=False)
class PostgresTranscriptStore(TranscriptStoreBase):
    """Transcripts and the turn ledger in PostgreSQL (``host.transcripts``).

    Implements :class:`claw.state.TranscriptLedger`. ``owner_id`` is this host
    process's; the backend holds the advisory lock that says it is alive.
    """

    _sql: ClassVar[core.TranscriptSql] = POSTGRES
    _ops: ClassVar[TranscriptOps] = TranscriptOps(
        append=functools.partial(writes.append, w=WRITES),
        append_compaction=functools.partial(writes.append_compaction, w=WRITES),
        delta=_delta,
        terminal=functools.partial(writes.terminal, w=WRITES),
        committed=functools.partial(ledger_sql.set_committed, sql=LEDGER),
        close=functools.partial(ledger_sql.close, sql=LEDGER),
        reopen=functools.partial(ledger_sql.reopen, sql=LEDGER),
        flush_done=functools.partial(ledger_sql.record_flush, sql=LEDGER),
        flush_recorded=functools.partial(ledger_sql.flush_recorded, sql=LEDGER),
        select_turns=functools.partial(ledger_sql.select_turns, sql=LEDGER),
        get_turn=functools.partial(ledger_sql.get_turn, sql=LEDGER),
    )

    _db: Database
    _clock: Callable[[], float]
    _owner_id: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    _version: int = attrs.field(default=0, init=False)
    _visible: RecentlyRead[str, VisibleHistory] = attrs.field(factory=visible_histories, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    async def aclose(self) -> None:
        self._closed = True
        await trio.lowlevel.checkpoint()

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Move :attr:`version` on other hosts' writes until cancelled."""
        async with self._db.listen(TRANSCRIPT_CHANNEL) as events:
            task_status.started()
            async for event in events:
                # A (re)connection may have missed writes too: move either way.
                del event
                self._version += 1

    def _check_open(self) -> None:
        if self._closed:
            raise HostClosedError("the transcript store is closed")

    async def _write(self, fn: Callable[..., Any], /, *args: object, **kwargs: object) -> Any:
        self._check_open()
        try:
            return await self._db.transaction(functools.partial(fn, **kwargs), *args)
        finally:
            self._version += 1

    async def _read(self, fn: Callable[..., Any], /, *args: object, **kwargs: object) -> Any:
        self._check_open()
        return await self._db.transaction(functools.partial(fn, **kwargs), *args)

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
    ) -> tuple[TranscriptEntry, AdmittedTurn]:
        """Admit a turn (user entry and ledger row in one transaction), idempotently.

        Repeating an admission exactly (same session id, turn id and advancement key, on
        this host or another) returns the recorded entry and turn and writes nothing; a
        turn id or an advancement key recorded for another turn is refused.
        """
        if not isinstance(user_message, UserMessage):
            raise TranscriptError(f"a turn is admitted by a UserMessage, not {user_message!r}")
        core.check_admission_ids(turn_id, advancement_key)
        try:
            result: tuple[TranscriptEntry, AdmittedTurn] = await self._write(
                functools.partial(
                    _admit,
                    session_key=session_key,
                    session_id=session_id,
                    message=user_message,
                    turn_id=turn_id,
                    advancement_key=advancement_key,
                    engine_id=engine_id,
                    lifecycle_revision=lifecycle_revision,
                    owner_id=self._owner_id,
                    now=self._clock(),
                )
            )
        except _AlreadyAdmitted:
            result = await self._read(
                _recorded_admission,
                session_id,
                turn_id,
                advancement_key,
                core.encode(user_message),
            )
        return result

    async def close_orphaned_turns(self, reason: str) -> tuple[AdmittedTurn, ...]:
        """Close as ``aborted`` the open turns of every host process that is gone."""
        result: tuple[AdmittedTurn, ...] = await self._write(
            _close_orphans, self._owner_id, reason, self._clock()
        )
        return result
