"""The transcript contract, written once for every state backend: values, rules, SQL.

The value types (entries, cursors, deltas, stats and the transcript errors) live here,
re-exported by :mod:`claw.turns`. The SQLite store (:mod:`claw.state.sqlite._transcripts`)
and the PostgreSQL store (:mod:`claw.state.postgres._transcripts`) keep the same tables
under different names and spell parameters differently; everything else (how entries
are numbered, what a compaction may keep, what a visible-message delta holds, which
stats are counted) is one contract. It lives here, over a :class:`TranscriptSql` that
names a backend's tables and placeholder; each backend keeps only its transactions,
locks and notifications. Every function runs inside a transaction the caller opened.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from claw._errors import ClawError
from claw.models import (
    AssistantMessage,
    CompactionSummary,
    Message,
    SystemMessage,
    ToolCall,
    ToolResult,
    UserMessage,
    message_from_dict,
    message_to_dict,
)

from ._ledger import AdmittedTurn


class TranscriptError(ClawError, ValueError):
    """A transcript operation was refused: wrong session key, bad range, foreign cursor."""


class TranscriptStorageError(ClawError, OSError):
    """The transcript database cannot be used: not SQLite, corrupt, or unreadable.

    Raised at open, naming the file. The database is the system of record of every
    session's history, so claw never deletes or rebuilds it: restore it from a backup.
    """


class UnknownEntryError(ClawError, LookupError):
    """No transcript entry has this id."""


class TranscriptEntryKind(enum.StrEnum):
    """What a transcript entry records."""

    USER = "user"
    ASSISTANT = "assistant"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    COMPACTION = "compaction"
    SYSTEM = "system"


Appendable = UserMessage | AssistantMessage | ToolCall | ToolResult | SystemMessage
"""What :meth:`TranscriptStore.append` takes (compactions have their own method)."""


@attrs.frozen
class CompactionInfo:
    """What a compaction entry replaced: every entry before ``first_kept_seq``."""

    first_kept_seq: int
    tokens_before: int | None
    tokens_after: int | None


@attrs.frozen
class TranscriptEntry:
    """One durable transcript entry.

    ``payload`` is the stored message: a :class:`~claw.models.ToolCall` for
    ``tool_call`` entries, a :class:`~claw.models.CompactionSummary` for
    compactions (with ``compaction`` set), otherwise the message itself.
    """

    session_key: str
    session_id: str
    seq: int
    kind: TranscriptEntryKind
    created_at: float
    payload: Message | ToolCall
    turn_id: str | None = None
    advancement_key: str | None = None
    compaction: CompactionInfo | None = None

    @property
    def entry_id(self) -> str:
        """The stable id ``<session_id>:<seq>``."""
        return entry_id(self.session_id, self.seq)

    @property
    def message(self) -> Message | None:
        """The entry as a model-visible message, or ``None`` for a ``tool_call`` record."""
        return None if isinstance(self.payload, ToolCall) else self.payload


def entry_id(session_id: str, seq: int) -> str:
    """The stable id of entry ``seq`` of session ``session_id``."""
    return f"{session_id}:{seq}"


def parse_entry_id(value: str) -> tuple[str, int]:
    """Split an entry id into ``(session_id, seq)``; raises :class:`UnknownEntryError`."""
    session_id, sep, seq = value.rpartition(":")
    if not sep or not session_id or not seq.isdigit() or int(seq) < 1:
        raise UnknownEntryError(f"{value!r} is not a transcript entry id ('<session_id>:<seq>')")
    return session_id, int(seq)


def _non_negative(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative int, got {value!r}")


@attrs.frozen
class TranscriptCursor:
    """Where a reader of a session's visible messages stands.

    Opaque to engines in intent, but serialisable (``to_dict``/``from_dict``)
    so an engine can persist it next to its own state.
    """

    session_id: str = attrs.field(validator=attrs.validators.instance_of(str))
    epoch: int = attrs.field(validator=_non_negative)
    seq: int = attrs.field(validator=_non_negative)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"sessionId", "epoch", "seq"}``."""
        return {"sessionId": self.session_id, "epoch": self.epoch, "seq": self.seq}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TranscriptCursor:
        """Parse the JSON form; raises :class:`TranscriptError` naming the bad field."""
        if not isinstance(data, Mapping) or set(data) != {"sessionId", "epoch", "seq"}:
            raise TranscriptError(f"a transcript cursor has sessionId, epoch and seq: {data!r}")
        try:
            return cls(data["sessionId"], data["epoch"], data["seq"])
        except (TypeError, ValueError) as exc:
            raise TranscriptError(f"bad transcript cursor {data!r}: {exc}") from None


@attrs.frozen
class TranscriptDelta:
    """The answer of :meth:`TranscriptStore.read_session_transcript_visible_message_delta`.

    ``rebuilt=False``: ``messages`` are the visible messages after the old
    cursor; append them. ``rebuilt=True``: ``messages`` are the whole visible
    history (first call, or a compaction since the old cursor); replace what
    you hold. ``entry_ids`` name the entry behind each message (the
    compaction entry for the summary). Keep ``cursor`` for the next call.
    """

    messages: tuple[Message, ...]
    entry_ids: tuple[str, ...]
    cursor: TranscriptCursor
    rebuilt: bool


@attrs.frozen
class TranscriptStats:
    """Size of one session's transcript, for flush and compaction thresholds.

    ``byte_size`` is the UTF-8 size of the stored payloads, every entry
    counted (compaction does not shrink a transcript; it only hides entries).
    """

    session_id: str
    entry_count: int
    byte_size: int
    last_seq: int
    compaction_count: int
    last_compaction_seq: int | None
    #: The first seq of each turn still in flight: what readers leave out for now.
    open_turn_seqs: tuple[int, ...] = ()


KIND_OF: dict[type, TranscriptEntryKind] = {
    UserMessage: TranscriptEntryKind.USER,
    AssistantMessage: TranscriptEntryKind.ASSISTANT,
    ToolResult: TranscriptEntryKind.TOOL_RESULT,
    SystemMessage: TranscriptEntryKind.SYSTEM,
    ToolCall: TranscriptEntryKind.TOOL_CALL,
}
"""The entry kind of each appendable payload type (compactions have their own call)."""

Row = tuple[TranscriptEntryKind, str, Appendable]
"""An entry to insert: its kind, its encoded payload and the payload itself."""


class Connection(Protocol):
    """What these functions need of a DB-API connection (sqlite3's and psycopg's both)."""

    def execute(self, sql: Any, parameters: Any = ..., /) -> Any: ...


@attrs.frozen
class TranscriptSql:
    """How one backend names the transcript tables and spells a query.

    Queries here are written with ``?`` placeholders and ``{entries}``, ``{sessions}``
    and ``{ledger}`` table names; :meth:`q` renders them for the backend.
    """

    entries: str
    sessions: str
    ledger: str
    placeholder: str
    payload_bytes: str
    """The SQL expression for the byte size of ``payload``."""
    creation_tiebreak: str
    """The column ordering two sessions created at the same time by insertion."""

    def q(self, sql: str) -> str:
        rendered = sql.format(entries=self.entries, sessions=self.sessions, ledger=self.ledger)
        return rendered.replace("?", self.placeholder)

    def entry_select(self) -> str:
        return self.q(
            "SELECT s.session_key, e.session_id, e.seq, e.kind, e.created_at, e.payload, "
            "e.turn_id, e.advancement_key, e.first_kept_seq, e.tokens_before, e.tokens_after "
            "FROM {entries} e JOIN {sessions} s USING (session_id)"
        )


_INVISIBLE = "('tool_call', 'compaction')"


def encode(payload: Message | ToolCall) -> str:
    """A payload's stored JSON (compact, no NaN, UTF-8 kept as is)."""
    data = payload.to_dict() if isinstance(payload, ToolCall) else message_to_dict(payload)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def row_to_entry(row: Sequence[Any]) -> TranscriptEntry:
    """The entry of one row of :meth:`TranscriptSql.entry_select`."""
    (key, session_id, seq, kind, created, payload, turn_id, adv, kept, before, after) = row
    kind = TranscriptEntryKind(kind)
    data = json.loads(payload)
    where = f"transcript entry {session_id}:{seq}"
    decoded: Message | ToolCall = (
        ToolCall.from_dict(data, path=where)
        if kind is TranscriptEntryKind.TOOL_CALL
        else message_from_dict(data, path=where)
    )
    compaction = (
        CompactionInfo(first_kept_seq=kept, tokens_before=before, tokens_after=after)
        if kind is TranscriptEntryKind.COMPACTION
        else None
    )
    return TranscriptEntry(
        session_key=key,
        session_id=session_id,
        seq=int(seq),
        kind=kind,
        created_at=float(created),
        payload=decoded,
        turn_id=turn_id,
        advancement_key=adv,
        compaction=compaction,
    )


def appendable_rows(
    messages: Sequence[Appendable], *, turn_id: str | None, terminal: bool
) -> list[Row]:
    """The rows of an append of ``messages``, or the error naming the one that cannot be."""
    if not messages:
        raise TranscriptError("append needs at least one message")
    for i, message in enumerate(messages):
        candidate: object = message
        if type(candidate) not in KIND_OF:
            hint = "; use append_compaction" if isinstance(candidate, CompactionSummary) else ""
            raise TranscriptError(f"messages[{i}]: cannot append a {type(message).__name__}{hint}")
    if terminal and turn_id is None:
        raise TranscriptError("terminal=True needs the turn_id of an admitted turn")
    return [(KIND_OF[type(m)], encode(m), m) for m in messages]


def check_admission_ids(turn_id: object, advancement_key: object) -> None:
    """Refuse an admission whose turn id or advancement key is not a non-empty string."""
    for name, value in (("turn_id", turn_id), ("advancement_key", advancement_key)):
        if not isinstance(value, str) or not value:
            raise TranscriptError(f"{name} must be a non-empty string, got {value!r}")


def turn_advancement(
    turn: AdmittedTurn, *, turn_id: str, session_id: str, advancement_key: str | None
) -> str:
    """The advancement key entries appended under ``turn`` carry; a mismatch is refused."""
    if turn.session_id != session_id:
        raise TranscriptError(
            f"turn {turn_id!r} belongs to session id {turn.session_id!r}, not {session_id!r}"
        )
    if advancement_key is not None and advancement_key != turn.advancement_key:
        raise TranscriptError(
            f"turn {turn_id!r} has advancement key {turn.advancement_key!r}, "
            f"not {advancement_key!r}"
        )
    return turn.advancement_key


def check_session_names(session_key: object, session_id: object) -> None:
    """Refuse a session key or id that is not a non-empty string."""
    for name, value in (("session_key", session_key), ("session_id", session_id)):
        if not isinstance(value, str) or not value:
            raise TranscriptError(f"{name} must be a non-empty string, got {value!r}")


def claim_session(
    conn: Connection, sql: TranscriptSql, session_key: str, session_id: str, now: float
) -> None:
    """Record that ``session_id``'s transcript lives under ``session_key`` (first use),
    or refuse a session id already claimed by another key."""
    check_session_names(session_key, session_id)
    conn.execute(
        sql.q(
            "INSERT INTO {sessions} (session_id, session_key, created_at) VALUES (?, ?, ?) "
            "ON CONFLICT (session_id) DO NOTHING"
        ),
        (session_id, session_key, now),
    )
    row = conn.execute(
        sql.q("SELECT session_key FROM {sessions} WHERE session_id = ?"), (session_id,)
    ).fetchone()
    owner = None if row is None else row[0]
    if owner != session_key:
        raise TranscriptError(
            f"session id {session_id!r} has its transcript under session key {owner!r}, "
            f"not {session_key!r}"
        )


def last_seq(conn: Connection, sql: TranscriptSql, session_id: str) -> int:
    row = conn.execute(
        sql.q("SELECT MAX(seq) FROM {entries} WHERE session_id = ?"), (session_id,)
    ).fetchone()
    return int(row[0] or 0) if row else 0


def latest_compaction(
    conn: Connection, sql: TranscriptSql, session_id: str
) -> tuple[int, int] | None:
    """``(seq, first_kept_seq)`` of the latest compaction entry, if any."""
    row = conn.execute(
        sql.q(
            "SELECT seq, first_kept_seq FROM {entries} "
            "WHERE session_id = ? AND kind = 'compaction' ORDER BY seq DESC LIMIT 1"
        ),
        (session_id,),
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def insert_entries(
    conn: Connection,
    sql: TranscriptSql,
    *,
    session_key: str,
    session_id: str,
    rows: Sequence[Row],
    turn_id: str | None,
    advancement_key: str | None,
    now: float,
) -> tuple[TranscriptEntry, ...]:
    """Number ``rows`` after the transcript's last entry and insert them."""
    seq = last_seq(conn, sql, session_id)
    insert = sql.q(
        "INSERT INTO {entries} (session_id, seq, kind, created_at, payload, turn_id, "
        "advancement_key) VALUES (?, ?, ?, ?, ?, ?, ?)"
    )
    entries = []
    for kind, payload, message in rows:
        seq += 1
        conn.execute(insert, (session_id, seq, kind.value, now, payload, turn_id, advancement_key))
        entries.append(
            TranscriptEntry(
                session_key=session_key,
                session_id=session_id,
                seq=seq,
                kind=kind,
                created_at=now,
                payload=message,
                turn_id=turn_id,
                advancement_key=advancement_key,
            )
        )
    return tuple(entries)


def insert_compaction(
    conn: Connection,
    sql: TranscriptSql,
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
    """Insert a compaction entry; it may not keep less than the previous one did."""
    seq = last_seq(conn, sql, session_id) + 1
    kept = seq if first_kept_seq is None else first_kept_seq
    previous = latest_compaction(conn, sql, session_id)
    floor = 1 if previous is None else previous[1]
    if not isinstance(kept, int) or not floor <= kept <= seq:
        raise TranscriptError(
            f"first_kept_seq must be between {floor} (the previous compaction's first "
            f"kept entry) and {seq} (this compaction), got {first_kept_seq!r}"
        )
    for name, value in (("tokens_before", tokens_before), ("tokens_after", tokens_after)):
        if value is not None and (not isinstance(value, int) or value < 0):
            raise TranscriptError(f"{name} must be a non-negative int, got {value!r}")
    conn.execute(
        sql.q(
            "INSERT INTO {entries} (session_id, seq, kind, created_at, payload, turn_id, "
            "first_kept_seq, tokens_before, tokens_after) "
            "VALUES (?, ?, 'compaction', ?, ?, ?, ?, ?, ?)"
        ),
        (session_id, seq, now, encode(message), turn_id, kept, tokens_before, tokens_after),
    )
    return TranscriptEntry(
        session_key=session_key,
        session_id=session_id,
        seq=seq,
        kind=TranscriptEntryKind.COMPACTION,
        created_at=now,
        payload=message,
        turn_id=turn_id,
        compaction=CompactionInfo(kept, tokens_before, tokens_after),
    )


def check_terminal_exists(
    conn: Connection, sql: TranscriptSql, turn: AdmittedTurn, terminal_seq: int
) -> None:
    """Refuse marking an entry terminal before it was appended."""
    if not 0 < terminal_seq <= last_seq(conn, sql, turn.session_id):
        raise TranscriptError(
            f"entry {turn.session_id}:{terminal_seq} does not exist; append "
            "the terminal entry before marking it"
        )


def read_entries(
    conn: Connection,
    sql: TranscriptSql,
    session_id: str,
    *,
    after_seq: int,
    through_seq: int | None,
    limit: int | None,
) -> tuple[TranscriptEntry, ...]:
    """Entries with ``after_seq < seq <= through_seq`` in seq order, at most ``limit``."""
    query = sql.entry_select() + sql.q(" WHERE e.session_id = ? AND e.seq > ?")
    args: list[object] = [session_id, after_seq]
    if through_seq is not None:
        query += sql.q(" AND e.seq <= ?")
        args.append(through_seq)
    query += " ORDER BY e.seq"
    if limit is not None:
        if limit < 0:
            raise TranscriptError(f"limit must not be negative, got {limit}")
        query += sql.q(" LIMIT ?")
        args.append(limit)
    return tuple(row_to_entry(row) for row in conn.execute(query, args).fetchall())


# What a session's row of the transcript sessions table says of its entries: kept by a
# trigger on every insert (so by any writer, whatever its build), in the inserting
# transaction, which makes a stats read one row, not a scan of the session's entries.
_SUMMARY = "entry_count, byte_size, last_seq, compaction_count, last_compaction_seq"


def stats(conn: Connection, sql: TranscriptSql, session_id: str) -> TranscriptStats:
    summary = conn.execute(
        sql.q(f"SELECT {_SUMMARY} FROM {{sessions}} WHERE session_id = ?"), (session_id,)
    ).fetchone()
    open_seqs = tuple(
        int(row[0])
        for row in conn.execute(
            sql.q(
                "SELECT first_seq FROM {ledger} WHERE session_id = ? AND terminal_seq IS NULL "
                "AND close_status IS NULL ORDER BY first_seq"
            ),
            (session_id,),
        ).fetchall()
    )
    return _stats(session_id, summary, open_seqs)


def _stats(
    session_id: str, summary: Sequence[Any] | None, open_seqs: Sequence[int]
) -> TranscriptStats:
    count, size, last, compactions, last_compaction = (
        (0, 0, 0, 0, None) if summary is None else summary
    )
    return TranscriptStats(
        session_id=session_id,
        entry_count=int(count),
        byte_size=int(size),
        last_seq=int(last),
        compaction_count=int(compactions),
        last_compaction_seq=None if last_compaction is None else int(last_compaction),
        open_turn_seqs=tuple(open_seqs),
    )


def counted_stats(conn: Connection, sql: TranscriptSql, session_id: str) -> TranscriptStats:
    """:func:`stats` counted from the entries themselves (a scan of the session's
    entries): what the summary kept by the trigger must always equal (the tests check
    it against every backend)."""
    row = conn.execute(
        sql.q(
            f"SELECT COUNT(*), COALESCE(SUM({sql.payload_bytes}), 0), COALESCE(MAX(seq), 0), "
            "COUNT(*) FILTER (WHERE kind = 'compaction'), "
            "MAX(seq) FILTER (WHERE kind = 'compaction') FROM {entries} WHERE session_id = ?"
        ),
        (session_id,),
    ).fetchone()
    return _stats(session_id, row, stats(conn, sql, session_id).open_turn_seqs)


def session_ids(conn: Connection, sql: TranscriptSql, session_key: str) -> tuple[str, ...]:
    """The session ids that had transcripts under ``session_key``, oldest first."""
    rows = conn.execute(
        sql.q(
            "SELECT session_id FROM {sessions} WHERE session_key = ? "
            f"ORDER BY created_at, {sql.creation_tiebreak}"
        ),
        (session_key,),
    ).fetchall()
    return tuple(str(row[0]) for row in rows)


# Session keys per statement of :func:`session_listing` (SQLite allows 32,766 bound
# parameters a statement, older builds 999).
_KEYS_PER_STATEMENT = 500


def session_listing(
    conn: Connection, sql: TranscriptSql, session_keys: Sequence[str] | None
) -> list[tuple[str, TranscriptStats]]:
    """Every session incarnation with a transcript (under ``session_keys``, when given)
    and its :func:`stats`, ordered as :func:`session_ids` orders them within a key,
    keys in the order given (sorted when none are).

    Two statements for any number of sessions (per 500 keys), where a :func:`stats`
    and a :func:`session_ids` per session cost two reads each: a memory provider lists
    an agent's sessions after every transcript write, and with thousands of sessions
    (on PostgreSQL, each read a round trip) that listing was the cost of the search.
    """
    if session_keys is None:
        return _listing_part(conn, sql, None)
    out: list[tuple[str, TranscriptStats]] = []
    keys = list(dict.fromkeys(session_keys))
    for start in range(0, len(keys), _KEYS_PER_STATEMENT):
        out.extend(_listing_part(conn, sql, keys[start : start + _KEYS_PER_STATEMENT]))
    return out


def _listing_part(
    conn: Connection, sql: TranscriptSql, keys: Sequence[str] | None
) -> list[tuple[str, TranscriptStats]]:
    among = "" if keys is None else f" IN ({', '.join('?' * len(keys))})"
    params: tuple[str, ...] = () if keys is None else tuple(keys)
    sessions = conn.execute(
        sql.q(
            f"SELECT session_key, session_id, {_SUMMARY} FROM {{sessions}}"
            f"{'' if keys is None else ' WHERE session_key' + among} "
            f"ORDER BY session_key, created_at, {sql.creation_tiebreak}"
        ),
        params,
    ).fetchall()
    open_seqs: dict[str, list[int]] = {}
    for session_id, first_seq in conn.execute(
        sql.q(
            "SELECT session_id, first_seq FROM {ledger} WHERE terminal_seq IS NULL "
            f"AND close_status IS NULL{'' if keys is None else ' AND session_key' + among} "
            "ORDER BY session_id, first_seq"
        ),
        params,
    ).fetchall():
        open_seqs.setdefault(str(session_id), []).append(int(first_seq))
    listed = [
        (str(row[0]), _stats(str(row[1]), row[2:], open_seqs.get(str(row[1]), ())))
        for row in sessions
    ]
    if keys is not None:
        order = {key: i for i, key in enumerate(keys)}
        listed.sort(key=lambda item: order[item[0]])  # stable: ids stay in creation order
    return listed


def delta(
    conn: Connection, sql: TranscriptSql, session_id: str, cursor: TranscriptCursor | None
) -> TranscriptDelta:
    """The visible messages after ``cursor``, or the whole visible history (a rebuild)
    when the cursor is missing, from another compaction epoch or past the end. The
    caller reads it in one snapshot. A cursor of another session id is refused."""
    if cursor is not None and cursor.session_id != session_id:
        raise TranscriptError(
            f"cursor belongs to session id {cursor.session_id!r}, not {session_id!r}; "
            "a reset session with a new id starts from no cursor"
        )
    last = last_seq(conn, sql, session_id)
    compaction = latest_compaction(conn, sql, session_id)
    epoch = 0 if compaction is None else compaction[0]
    rebuilt = cursor is None or cursor.epoch != epoch or cursor.seq > last
    head: list[TranscriptEntry] = []
    if rebuilt:
        start = 1 if compaction is None else compaction[1]
        if compaction is not None:
            head = list(
                read_entries(
                    conn,
                    sql,
                    session_id,
                    after_seq=compaction[0] - 1,
                    through_seq=compaction[0],
                    limit=1,
                )
            )
    else:
        assert cursor is not None
        start = cursor.seq + 1
    rows = conn.execute(
        sql.entry_select()
        + sql.q(f" WHERE e.session_id = ? AND e.seq >= ? AND e.kind NOT IN {_INVISIBLE}")
        + " ORDER BY e.seq",
        (session_id, start),
    ).fetchall()
    entries = head + [row_to_entry(row) for row in rows]
    messages = tuple(e.payload for e in entries if not isinstance(e.payload, ToolCall))
    return TranscriptDelta(
        messages=messages,
        entry_ids=tuple(e.entry_id for e in entries),
        cursor=TranscriptCursor(session_id, epoch, last),
        rebuilt=rebuilt,
    )
