"""Durable, append-only session transcripts and the visible-message cursor API.

Every session id has one transcript: entries numbered ``seq = 1, 2, ...`` with
the stable id ``<session_id>:<seq>``. A reset that gives the session a new
session id starts a new, separate transcript under the same session key.

Storage: SQLite, not JSONL. The reasons, in order of weight:

* **Atomic batches.** An append of several entries (an assistant message and
  its tool results, or a turn's terminal entry together with the ledger row
  saying the turn ended) is one transaction: after a crash it is all there or
  none of it is. JSONL needs a torn-last-line repair pass and cannot make two
  files agree.
* **The ledger lives next to the entries.** Admitting a turn writes the user
  entry and the ledger row in one transaction (see :mod:`claw.turns._ledger`), which is
  what lets a restart find exactly the turns whose commit must be retried.
* **Reads the engine contract needs are queries:** a seq range, the latest
  compaction, count and byte size of a session, without rescanning a file.

The database runs in WAL mode with ``synchronous=FULL``, so a transaction
that returned is on disk (WAL's default ``NORMAL`` could lose the last commits
on power loss, and the admitted-turns rule depends on them). All blocking
calls go through the host's :class:`~claw.WorkerPool`; one connection is
shared and a :class:`trio.Lock` keeps it to one call at a time.

Visibility and compaction. A compaction entry carries a summary and
``first_kept_seq``: entries before that seq are replaced by the summary.
Only the latest compaction counts (its summary is expected to cover the
previous one). The visible history is therefore: the latest summary, then
the non-compaction entries from ``first_kept_seq`` on, in seq order.
``tool_call`` entries are records of a call's execution by the host; the
model-visible form of a call is the assistant message that asked for it, so
they are never visible messages.

The cursor. :class:`TranscriptCursor` holds ``(session_id, epoch, seq)``:
``seq`` is the last entry the holder has seen, ``epoch`` the seq of the latest
compaction when the cursor was made (0 before any). A delta with a cursor
whose epoch is still current returns exactly the visible messages appended
after ``seq``. If a compaction happened since (the epoch changed), or there is
no cursor, or the cursor points past the end (the transcript was replaced),
the delta is a *rebuild*: the whole visible history, starting with the
summary, with ``rebuilt=True`` telling the engine to replace what it holds.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import attrs
import trio

from claw._errors import HostClosedError
from claw._storage import enter_wal, naming_storage_failures
from claw._workers import WorkerPool
from claw.models import (
    UserMessage,
)

from ..._recent import RecentlyRead
from ...turns import _transcript_core as core
from ...turns._ledger import AdmittedTurn, TurnIdTakenError, TurnStatus
from ...turns._transcript_base import (
    TranscriptOps,
    TranscriptStoreBase,
    VisibleHistory,
    visible_histories,
)
from ...turns._transcript_core import (
    Appendable,
    CompactionInfo,
    TranscriptCursor,
    TranscriptDelta,
    TranscriptEntry,
    TranscriptEntryKind,
    TranscriptError,
    TranscriptStats,
    TranscriptStorageError,
    UnknownEntryError,
    entry_id,
    parse_entry_id,
)
from .. import _ledger_sql as ledger_sql
from .. import _transcript_writes as writes
from ._commit_watch import CommitWatcher

__all__ = [
    "Appendable",
    "CompactionInfo",
    "TranscriptCursor",
    "TranscriptDelta",
    "TranscriptEntry",
    "TranscriptEntryKind",
    "TranscriptError",
    "TranscriptStats",
    "TranscriptStorageError",
    "TranscriptStore",
    "UnknownEntryError",
    "entry_id",
    "open_transcript_store",
    "parse_entry_id",
]

T = TypeVar("T")
_WHAT = "the transcript database"

SQLITE = core.TranscriptSql(
    entries="transcript_entries",
    sessions="transcript_sessions",
    ledger="turn_ledger",
    placeholder="?",
    payload_bytes="LENGTH(CAST(payload AS BLOB))",
    creation_tiebreak="rowid",
)
"""The SQLite spelling of the transcript tables."""

LEDGER = ledger_sql.LedgerSql(
    ledger="turn_ledger", flushes="flush_completions", placeholder="?", order="rowid"
)
"""The SQLite spelling of the ledger (no row locks: writes run in ``BEGIN IMMEDIATE``)."""

WRITES = writes.TranscriptWrites(SQLITE, LEDGER)
"""What SQLite adds to a write: nothing (``BEGIN IMMEDIATE`` serialises the writers)."""

SCHEMA_VERSION = 4
"""Version 1 had no closed turns in the ledger, version 2 no turn owners, version 3 no
per-session summary of the entries; opening an older database adds them."""

_SCHEMA = (
    # The summary columns (entry_count .. last_compaction_seq) are kept by the trigger
    # below: claw.turns._transcript_core.stats reads them instead of the entries.
    """CREATE TABLE IF NOT EXISTS transcript_sessions (
        session_id TEXT PRIMARY KEY,
        session_key TEXT NOT NULL,
        created_at REAL NOT NULL,
        entry_count INTEGER NOT NULL DEFAULT 0,
        byte_size INTEGER NOT NULL DEFAULT 0,
        last_seq INTEGER NOT NULL DEFAULT 0,
        compaction_count INTEGER NOT NULL DEFAULT 0,
        last_compaction_seq INTEGER
    )""",
    """CREATE INDEX IF NOT EXISTS transcript_sessions_by_key
        ON transcript_sessions (session_key, created_at)""",
    """CREATE TABLE IF NOT EXISTS transcript_entries (
        session_id TEXT NOT NULL REFERENCES transcript_sessions (session_id),
        seq INTEGER NOT NULL CHECK (seq > 0),
        kind TEXT NOT NULL CHECK (kind IN
            ('user', 'assistant', 'tool_call', 'tool_result', 'compaction', 'system')),
        created_at REAL NOT NULL,
        payload TEXT NOT NULL,
        turn_id TEXT,
        advancement_key TEXT,
        first_kept_seq INTEGER,
        tokens_before INTEGER,
        tokens_after INTEGER,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID""",
    """CREATE INDEX IF NOT EXISTS transcript_compactions
        ON transcript_entries (session_id, seq) WHERE kind = 'compaction'""",
    # In the inserting transaction, by whatever process inserts: a row is never out of
    # step with its entries (entries are never updated or deleted).
    """CREATE TRIGGER IF NOT EXISTS transcript_entries_summary
        AFTER INSERT ON transcript_entries
        BEGIN
            UPDATE transcript_sessions SET
                entry_count = entry_count + 1,
                byte_size = byte_size + LENGTH(CAST(NEW.payload AS BLOB)),
                last_seq = MAX(last_seq, NEW.seq),
                compaction_count = compaction_count + (NEW.kind = 'compaction'),
                last_compaction_seq = CASE WHEN NEW.kind = 'compaction'
                    THEN MAX(COALESCE(last_compaction_seq, 0), NEW.seq)
                    ELSE last_compaction_seq END
            WHERE session_id = NEW.session_id;
        END""",
    # Settled (completed or skipped) pre-compaction flushes, by flush id (one per session
    # incarnation and compaction cycle), so neither a restart inside a cycle nor another
    # process flushes that cycle again.
    """CREATE TABLE IF NOT EXISTS flush_completions (
        flush_id TEXT PRIMARY KEY,
        session_key TEXT NOT NULL,
        completed_at REAL NOT NULL
    )""",
)


_LEDGER_SCHEMA = (
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
    # The turns in flight: read with every stats and listing, so not a ledger scan.
    """CREATE INDEX IF NOT EXISTS turn_ledger_open
        ON turn_ledger (session_id, first_seq)
        WHERE terminal_seq IS NULL AND close_status IS NULL""",
    # The commit queue: looked up before every turn, so it must not scan the ledger.
    f"""CREATE INDEX IF NOT EXISTS turn_ledger_pending
        ON turn_ledger (session_key) WHERE {ledger_sql.PENDING}""",
)
"""Statements creating the ledger table; run in the transcript database's schema transaction."""

_LEDGER_MIGRATION_V1_V2 = (
    "ALTER TABLE turn_ledger ADD COLUMN closed_at REAL",
    "ALTER TABLE turn_ledger ADD COLUMN close_status TEXT CHECK "
    "(close_status IN ('failed', 'aborted', 'stale', 'abandoned'))",
    "ALTER TABLE turn_ledger ADD COLUMN close_reason TEXT",
    "ALTER TABLE turn_ledger ADD COLUMN lifecycle_revision INTEGER",
)
"""Statements bringing a version-1 ledger (no closed turns) to version 2."""

_LEDGER_MIGRATION_V2_V3 = ("ALTER TABLE turn_ledger ADD COLUMN owner_id TEXT",)
"""Statements bringing a version-2 ledger (no turn owners) to version 3."""

_SUMMARY_MIGRATION_V3_V4 = (
    "ALTER TABLE transcript_sessions ADD COLUMN entry_count INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE transcript_sessions ADD COLUMN byte_size INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE transcript_sessions ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE transcript_sessions ADD COLUMN compaction_count INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE transcript_sessions ADD COLUMN last_compaction_seq INTEGER",
    """UPDATE transcript_sessions SET
        (entry_count, byte_size, last_seq, compaction_count, last_compaction_seq) = (
            SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(payload AS BLOB))), 0),
                COALESCE(MAX(seq), 0), COUNT(*) FILTER (WHERE kind = 'compaction'),
                MAX(seq) FILTER (WHERE kind = 'compaction')
            FROM transcript_entries e WHERE e.session_id = transcript_sessions.session_id
        )""",
)
"""Statements bringing version 3 (no per-session summary) to version 4: the summary,
counted once from the entries; the trigger (created with the schema, in the same
transaction) keeps it from then on."""


@attrs.define
class TranscriptStore(TranscriptStoreBase):
    """Session transcripts and the turn ledger in one SQLite database.

    Open it with :func:`open_transcript_store`; every method is safe to call
    from concurrent tasks.
    """

    _ops: ClassVar[TranscriptOps]
    _sql: ClassVar[core.TranscriptSql] = SQLITE

    _conn: sqlite3.Connection | None = attrs.field(alias="conn")
    _workers: WorkerPool = attrs.field(alias="workers")
    _clock: Callable[[], float] = attrs.field(alias="clock")
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _owner_id: str = attrs.field(factory=lambda: uuid.uuid4().hex, alias="owner_id", kw_only=True)
    _is_alive: Callable[[str | None], bool] | None = attrs.field(
        default=None, alias="is_alive", kw_only=True
    )
    _path: str | None = attrs.field(default=None, alias="path", kw_only=True)
    _version: int = attrs.field(default=0, init=False)
    _data_version: int | None = attrs.field(default=None, init=False)
    _visible: RecentlyRead[str, VisibleHistory] = attrs.field(factory=visible_histories, init=False)

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Move :attr:`version` after other processes' commits, until cancelled."""
        if self._path is None or self._path == ":memory:":
            task_status.started()
            await trio.sleep_forever()
        await CommitWatcher(self._path).run(self._external_change, task_status=task_status)

    async def _external_change(self) -> None:
        try:
            seen = await self._run(_data_version_sync)
        except (sqlite3.Error, HostClosedError):
            return
        if seen != self._data_version:
            # Only other connections' commits move this connection's data_version.
            self._data_version = seen
            self._version += 1

    async def _write(self, fn: Callable[..., T], /, *args: object, **kwargs: object) -> T:
        try:
            return await self._run(fn, *args, **kwargs)
        finally:
            self._version += 1

    async def _read(self, fn: Callable[..., T], /, *args: object, **kwargs: object) -> T:
        return await self._run(fn, *args, **kwargs)

    async def _run(self, fn: Callable[..., T], /, *args: object, **kwargs: object) -> T:
        """Run ``fn(conn, *args, **kwargs)`` on a worker, one call at a time; a full disk
        or a read-only directory is a :class:`~claw.StorageError` naming the database."""
        async with self._lock:
            conn = self._conn
            if conn is None:
                raise HostClosedError("the transcript store is closed")
            with naming_storage_failures(self._path or ":memory:", what=_WHAT):
                return await self._workers.run_sync(partial(fn, conn, *args, **kwargs))

    async def aclose(self) -> None:
        """Close the database; later calls raise :class:`~claw.HostClosedError`."""
        with trio.CancelScope(shield=True):
            async with self._lock:
                conn, self._conn = self._conn, None
                if conn is not None:
                    await self._workers.run_sync(conn.close)

    # -- the turn ledger -------------------------------------------------------

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
        """Admit a turn: append its user entry and its ledger row in one transaction.

        ``engine_id`` names the engine whose ``commit_turn`` must see this turn
        (``None`` for the legacy path, which needs no commit). ``lifecycle_revision``
        records the session's incarnation, so a commit after a reset is refused as
        stale. A turn id or advancement key that is already recorded is refused.
        """
        if not isinstance(user_message, UserMessage):
            raise TranscriptError(f"a turn is admitted by a UserMessage, not {user_message!r}")
        return await self._write(
            _admit_sync,
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

    def _owner_alive(self, owner_id: str | None) -> bool:
        if owner_id == self._owner_id:
            return True
        return self._is_alive is not None and self._is_alive(owner_id)

    async def close_orphaned_turns(self, reason: str) -> tuple[AdmittedTurn, ...]:
        """Close as ``aborted`` every open turn whose owner process is dead.

        The host calls it at open and before each turn; a turn in flight in a live
        process (this one or another) is never closed. Without a liveness test (a store
        opened on its own) every other owner counts as dead.
        """
        open_turns = await self._run(ledger_sql.open_turns, LEDGER)
        dead = {t.owner_id for t in open_turns if not self._owner_alive(t.owner_id)}
        if not dead:
            return ()
        return await self._write(_abort_orphans_sync, owners=dead, reason=reason, now=self._clock())


def _append_sync(conn: sqlite3.Connection, **kwargs: Any) -> tuple[TranscriptEntry, ...]:
    with _transaction(conn):
        return writes.append(conn, WRITES, **kwargs)


def _append_compaction_sync(conn: sqlite3.Connection, **kwargs: Any) -> TranscriptEntry:
    with _transaction(conn):
        return writes.append_compaction(conn, WRITES, **kwargs)


def _admit_sync(
    conn: sqlite3.Connection,
    *,
    session_key: str,
    session_id: str,
    message: UserMessage,
    turn_id: str,
    advancement_key: str,
    engine_id: str | None,
    lifecycle_revision: int | None,
    owner_id: str | None,
    now: float,
) -> tuple[TranscriptEntry, AdmittedTurn]:
    core.check_admission_ids(turn_id, advancement_key)
    payload = core.encode(message)
    with _transaction(conn):
        writes.claim(conn, WRITES, session_key, session_id, now)
        recorded = _same_admission(conn, turn_id, advancement_key, session_id, payload)
        if recorded is not None:
            return recorded
        clash = ledger_sql.recorded_turn(
            conn, LEDGER, turn_id=turn_id, advancement_key=advancement_key
        )
        if clash is not None:
            # Another admission holds the id or key (another process admitted a turn of
            # the session in between): the runner reads the next seq and tries again.
            raise TurnIdTakenError(ledger_sql.clash_message(clash, turn_id))
        entry, _ = writes.insert_admission(
            conn,
            WRITES,
            session_key=session_key,
            session_id=session_id,
            message=message,
            payload=payload,
            turn_id=turn_id,
            advancement_key=advancement_key,
            engine_id=engine_id,
            lifecycle_revision=lifecycle_revision,
            owner_id=owner_id,
            now=now,
        )
        turn = ledger_sql.get_turn(conn, LEDGER, turn_id)
    return entry, turn


def _same_admission(
    conn: sqlite3.Connection, turn_id: str, advancement_key: str, session_id: str, payload: str
) -> tuple[TranscriptEntry, AdmittedTurn] | None:
    """The recorded admission, when this one repeats it exactly (same turn, key, session
    and message): admitting it again, from this process or another, records one turn.
    Anything less than an exact repeat is left to the ledger to refuse."""
    row = conn.execute(
        "SELECT turn_id, session_id, first_seq FROM turn_ledger WHERE advancement_key = ?",
        (advancement_key,),
    ).fetchone()
    if row is None or row[0] != turn_id or row[1] != session_id:
        return None
    first = int(row[2])
    (entry,) = core.read_entries(
        conn, SQLITE, session_id, after_seq=first - 1, through_seq=first, limit=1
    )
    stored = conn.execute(
        "SELECT payload FROM transcript_entries WHERE session_id = ? AND seq = ?",
        (session_id, first),
    ).fetchone()
    if stored is None or stored[0] != payload:
        return None
    return entry, ledger_sql.get_turn(conn, LEDGER, turn_id)


def _terminal_sync(
    conn: sqlite3.Connection, turn_id: str, terminal_seq: int, *, now: float
) -> AdmittedTurn:
    with _transaction(conn):
        return writes.terminal(conn, WRITES, turn_id, terminal_seq, now)


@asynccontextmanager
async def open_transcript_store(
    path: str | Path,
    *,
    workers: WorkerPool,
    clock: Callable[[], float] = time.time,
    owner_id: str | None = None,
    is_alive: Callable[[str | None], bool] | None = None,
) -> AsyncIterator[TranscriptStore]:
    """Open (creating if needed) the transcript database at ``path``; close it on exit.

    ``clock`` stamps ``created_at`` and ledger times (seconds since the epoch).
    ``owner_id`` is recorded as the owner of the turns this store admits (a fresh id
    if omitted); ``is_alive(owner_id)`` tells whether another owner's process lives
    (see :mod:`claw.state.sqlite._owners`); without it, every other owner counts as dead.
    """
    with naming_storage_failures(path, what=_WHAT):
        conn = await workers.run_sync(_connect, str(path))
    store = TranscriptStore(
        conn=conn,
        workers=workers,
        clock=clock,
        owner_id=owner_id if owner_id is not None else uuid.uuid4().hex,
        is_alive=is_alive,
        path=str(path),
    )
    try:
        yield store
    finally:
        await store.aclose()


def _connect(path: str) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise TranscriptStorageError(f"cannot open the transcript database {path}: {exc}") from exc
    try:
        conn.execute("PRAGMA busy_timeout = 10000")
        _check_integrity(conn, path)
        _check_wal(enter_wal(conn), path)
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        # The version is read inside the write transaction: two processes opening one
        # database at once then migrate it once, the second finding it done.
        with _transaction(conn):
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            _check_version(version, path)
            if version == 1:
                for statement in _LEDGER_MIGRATION_V1_V2:
                    conn.execute(statement)
            if version in (1, 2):
                for statement in _LEDGER_MIGRATION_V2_V3:
                    conn.execute(statement)
            if version in (1, 2, 3):
                for statement in _SUMMARY_MIGRATION_V3_V4:
                    conn.execute(statement)
            for statement in (*_SCHEMA, *_LEDGER_SCHEMA):
                conn.execute(statement)
            if version != SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise TranscriptStorageError(
            f"the transcript database {path} cannot be used: {exc}{_KEEP_IT}"
        ) from exc
    except BaseException:
        conn.close()
        raise
    return conn


_KEEP_IT = (
    "; it is the system of record of the session transcripts, so claw leaves it in place: "
    "restore it from a backup, or move it aside to start with no history"
)


def _check_integrity(conn: sqlite3.Connection, path: str) -> None:
    """Refuse a corrupt database now, naming it, rather than at some later read.

    ``quick_check`` walks every page of the database (about half a second for
    200 MB), which finds torn pages and broken b-trees, not only a bad header.
    """
    try:
        problems = [str(row[0]) for row in conn.execute("PRAGMA quick_check(5)")]
    except sqlite3.DatabaseError as exc:
        what = (
            "is not a SQLite database"
            if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_NOTADB
            else f"is corrupt ({exc})"
        )
        raise TranscriptStorageError(f"the transcript database {path} {what}{_KEEP_IT}") from exc
    if problems != ["ok"]:
        detail = "; ".join(problems)[:400]
        raise TranscriptStorageError(
            f"the transcript database {path} is corrupt ({detail}){_KEEP_IT}"
        )


def _check_wal(mode: object, path: str) -> None:
    if str(mode).lower() != "wal" and path != ":memory:":
        raise TranscriptError(f"transcript database {path} refused WAL mode ({mode})")


def _check_version(version: object, path: str) -> None:
    if version not in (0, 1, 2, 3, SCHEMA_VERSION):
        raise TranscriptError(
            f"transcript database {path} has schema version {version}; this claw "
            f"understands version {SCHEMA_VERSION}"
        )


# -- synchronous helpers (always called on a worker, with the store's lock held) --


@contextmanager
def _transaction(conn: sqlite3.Connection, *, write: bool = True) -> Iterator[None]:
    """One transaction; ``BEGIN IMMEDIATE`` for writes so seq allocation cannot race."""
    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        yield
    except BaseException:
        # SQLite may have rolled back already (a full disk, an I/O error): a second
        # ROLLBACK would fail and hide the error that says what happened.
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _delta_sync(
    conn: sqlite3.Connection, session_id: str, cursor: TranscriptCursor | None
) -> TranscriptDelta:
    with _transaction(conn, write=False):
        return core.delta(conn, SQLITE, session_id, cursor)


def _committed_sync(
    conn: sqlite3.Connection, turn_id: str, *, outcome: str, now: float
) -> AdmittedTurn:
    with _transaction(conn):
        return ledger_sql.set_committed(conn, LEDGER, turn_id, outcome=outcome, now=now)


def _select_turns_sync(
    conn: sqlite3.Connection,
    *,
    session_id: str | None,
    pending_only: bool,
    session_key: str | None,
    open_only: bool = False,
) -> tuple[AdmittedTurn, ...]:
    return ledger_sql.select_turns(
        conn,
        LEDGER,
        session_id=session_id,
        pending_only=pending_only,
        session_key=session_key,
        open_only=open_only,
    )


def _get_turn_sync(conn: sqlite3.Connection, turn_id: str) -> AdmittedTurn:
    return ledger_sql.get_turn(conn, LEDGER, turn_id)


def _flush_done_sync(
    conn: sqlite3.Connection, flush_id: str, session_key: str, *, now: float
) -> bool:
    with _transaction(conn):
        return ledger_sql.record_flush(conn, LEDGER, flush_id, session_key, now)


def _flush_recorded_sync(conn: sqlite3.Connection, flush_id: str) -> bool:
    return ledger_sql.flush_recorded(conn, LEDGER, flush_id)


def _close_sync(
    conn: sqlite3.Connection, *, turn_id: str, status: TurnStatus, reason: str, now: float
) -> AdmittedTurn:
    with _transaction(conn):
        return ledger_sql.close(conn, LEDGER, turn_id, status=status, reason=reason, now=now)


def _reopen_sync(conn: sqlite3.Connection, *, turn_id: str, owner_id: str) -> AdmittedTurn:
    with _transaction(conn):
        return ledger_sql.reopen(conn, LEDGER, turn_id, owner_id=owner_id)


def _data_version_sync(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def _abort_orphans_sync(
    conn: sqlite3.Connection, *, owners: set[str | None], reason: str, now: float
) -> tuple[AdmittedTurn, ...]:
    """Close the turns still open of the ``owners`` found dead (re-read in the transaction:
    a turn that ended, or was reopened by a live process, since is left alone)."""
    with _transaction(conn):
        return tuple(
            ledger_sql.close(
                conn, LEDGER, t.turn_id, status=TurnStatus.ABORTED, reason=reason, now=now
            )
            for t in ledger_sql.open_turns(conn, LEDGER)
            if t.owner_id in owners
        )


TranscriptStore._ops = TranscriptOps(
    append=_append_sync,
    append_compaction=_append_compaction_sync,
    delta=_delta_sync,
    terminal=_terminal_sync,
    committed=_committed_sync,
    close=_close_sync,
    reopen=_reopen_sync,
    flush_done=_flush_done_sync,
    flush_recorded=_flush_recorded_sync,
    select_turns=_select_turns_sync,
    get_turn=_get_turn_sync,
)
