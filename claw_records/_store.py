"""The records in PostgreSQL: schema, writes, the change feed, reads.

Everything here is a blocking function ``fn(conn, ...)`` over one psycopg connection,
the shape the SDK's database runs in a worker thread inside one transaction
(``Database.transaction(fn, *args)``). No psycopg import is needed: values go through
plain parameters (JSON as text cast to ``jsonb``, vectors as float32 ``bytea``).

**The change sequence.** Each agent has a head row (``memory_record_heads``). Every
write first bumps its agent's head (``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``)
and stamps the changed record with the new value. The head's row lock is held until
commit, so a later write of the agent gets a larger number only after the earlier one
committed: numbers become visible in increasing order, and a reader that has applied
everything up to ``n`` finds every later change with ``seq > n``. A record keeps only
its latest ``seq``, so a reader that missed intermediate changes still reads the final
state. The same transaction sends ``NOTIFY claw_memory_records`` with the agent id;
PostgreSQL delivers it on commit, and never for a rolled-back write.

**Retried flushes.** A write made under a flush identity records ``(agent, flush
key)``, the key derived from the flush id, the partition and the text. It is checked
after the head is locked, so two hosts retrying the same flush at once write once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ._errors import InvalidRecordError, StaleRecordError

if TYPE_CHECKING:
    import psycopg

    Connection = psycopg.Connection[Any]
else:
    Connection = Any

SCHEMA_NAME = "memory-records"
CHANNEL = "claw_memory_records"
# NOTIFY payloads must stay under 8000 bytes; a longer agent id wakes every listener's
# open indexes instead (an empty payload), which catch up and find nothing to do.
_MAX_PAYLOAD = 1000

_SCHEMA_V1 = (
    """CREATE TABLE memory_record_heads (
        agent_id text PRIMARY KEY,
        seq bigint NOT NULL
    )""",
    """CREATE TABLE memory_records (
        agent_id text NOT NULL,
        ref text NOT NULL,
        partition text NOT NULL,
        text text NOT NULL,
        metadata jsonb NOT NULL,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        revision integer NOT NULL,
        forgotten boolean NOT NULL DEFAULT false,
        seq bigint NOT NULL,
        embedder text,
        embedding bytea,
        PRIMARY KEY (agent_id, ref)
    )""",
    "CREATE UNIQUE INDEX memory_records_by_seq ON memory_records (agent_id, seq)",
    """CREATE TABLE memory_record_revisions (
        agent_id text NOT NULL,
        ref text NOT NULL,
        revision integer NOT NULL,
        text text NOT NULL,
        metadata jsonb NOT NULL,
        updated_at double precision NOT NULL,
        PRIMARY KEY (agent_id, ref, revision)
    )""",
    """CREATE TABLE memory_record_flush_writes (
        agent_id text NOT NULL,
        flush_key text NOT NULL,
        ref text NOT NULL,
        PRIMARY KEY (agent_id, flush_key)
    )""",
)
_SCHEMA_V2 = (
    # Who wrote each record (its current revision) and each revision.
    "ALTER TABLE memory_records ADD COLUMN provenance jsonb",
    "ALTER TABLE memory_record_revisions ADD COLUMN provenance jsonb",
    # What each forget removed, kept for restore until purged (text NULL then).
    """CREATE TABLE memory_record_removals (
        agent_id text NOT NULL,
        id text NOT NULL,
        ref text NOT NULL,
        partition text NOT NULL,
        text text,
        metadata jsonb,
        revision integer NOT NULL,
        provenance jsonb,
        at double precision NOT NULL,
        by jsonb,
        status text NOT NULL,
        PRIMARY KEY (agent_id, id)
    )""",
    "CREATE INDEX memory_record_removals_by_time ON memory_record_removals (agent_id, at)",
    # Every change: what, to which record, when, by whom (never the text).
    """CREATE TABLE memory_record_journal (
        agent_id text NOT NULL,
        n bigint GENERATED ALWAYS AS IDENTITY,
        op text NOT NULL,
        ref text NOT NULL,
        revision integer,
        removal text,
        at double precision NOT NULL,
        by jsonb,
        PRIMARY KEY (agent_id, n)
    )""",
)
#: The named migrations of the schema, in order (a released one never changes).
MIGRATIONS: tuple[tuple[str, Sequence[str]], ...] = (
    ("records-1-tables", _SCHEMA_V1),
    ("records-2-provenance-undo", _SCHEMA_V2),
)


def ensure_schema(conn: Connection, where: str) -> tuple[str, ...]:
    """Create or migrate the schema, in the caller's transaction; return what it applied.

    Migrated by name through the host's migration table (component ``memory-records``):
    a database migrated by a newer claw, or out of order, is refused with
    :class:`~claw.SchemaVersionError` naming the migration.
    """
    # Imported here: psycopg is an optional extra (see _service.serve).
    from claw.plugin_sdk.postgres import Migration, migrate  # noqa: PLC0415

    migrations = [Migration(name=name, statements=tuple(sql)) for name, sql in MIGRATIONS]
    return migrate(conn, SCHEMA_NAME, migrations, where=where)


@attrs.frozen
class Change:
    """One record's state as of change ``seq`` (what a local index applies)."""

    ref: str
    partition: str
    text: str
    metadata: Mapping[str, Any]
    revision: int
    forgotten: bool
    seq: int
    created_at: float
    updated_at: float
    embedder: str | None
    embedding: bytes | None
    provenance: Mapping[str, Any] | None = None


@attrs.frozen
class StoredRecord:
    """A record (or one revision of it) as a read returns it."""

    ref: str
    partition: str
    text: str
    metadata: Mapping[str, Any]
    revision: int
    current_revision: int
    created_at: float
    updated_at: float
    provenance: Mapping[str, Any] | None = None


@attrs.frozen
class Vector:
    """An embedding computed once by the writer: its embedder identity and float32 bytes."""

    embedder: str
    data: bytes


@attrs.frozen
class NewRecord:
    """A record to insert: where, what, when, its vector, and its flush identity."""

    ref: str
    partition: str
    text: str
    metadata: Mapping[str, Any]
    now: float
    vector: Vector | None = None
    flush_key: str | None = None
    by: Mapping[str, Any] | None = None


@attrs.frozen
class RecordEdit:
    """A change to one live record, made by a caller who may change ``partitions``.

    ``partitions=None``: any partition (an operator). ``text`` with ``forget=False`` is
    an update (``metadata=None`` keeps the old metadata; ``expected_revision`` must still
    be current when given); ``forget=True`` forgets the record (``dry_run``: only say
    what would be forgotten).
    """

    ref: str
    partitions: frozenset[str] | None
    now: float
    text: str = ""
    metadata: Mapping[str, Any] | None = None
    expected_revision: int | None = None
    vector: Vector | None = None
    forget: bool = False
    dry_run: bool = False
    by: Mapping[str, Any] | None = None


@attrs.frozen
class Removal:
    """One forget of a record, as the undo table keeps it (``text`` ``None`` once purged)."""

    id: str
    ref: str
    partition: str
    text: str | None
    metadata: Mapping[str, Any]
    revision: int
    provenance: Mapping[str, Any] | None
    at: float
    by: Mapping[str, Any] | None
    status: Literal["forgotten", "restored", "purged"]


@attrs.frozen
class RestoreEdit:
    """Put a forgotten record back, for a caller who may change ``partitions``."""

    removal_id: str
    partitions: frozenset[str] | None
    now: float
    vector: Vector | None = None
    by: Mapping[str, Any] | None = None
    dry_run: bool = False


def _one(row: Sequence[Any] | None) -> Sequence[Any]:
    if row is None:  # pragma: no cover - these statements always return a row
        raise RuntimeError("the statement returned no row")
    return row


def _bump(conn: Connection, agent_id: str) -> int:
    row = conn.execute(
        "INSERT INTO memory_record_heads (agent_id, seq) VALUES (%s, 1)"
        " ON CONFLICT (agent_id) DO UPDATE SET seq = memory_record_heads.seq + 1"
        " RETURNING seq",
        (agent_id,),
    ).fetchone()
    return int(_one(row)[0])


def _notify(conn: Connection, agent_id: str) -> None:
    payload = agent_id if len(agent_id.encode("utf-8")) <= _MAX_PAYLOAD else ""
    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))


def _meta(row_value: Any) -> Mapping[str, Any]:
    if isinstance(row_value, str):
        loaded = json.loads(row_value)
        return loaded if isinstance(loaded, dict) else {}
    return dict(row_value) if isinstance(row_value, Mapping) else {}


_CURRENT = (
    "SELECT ref, partition, text, metadata, revision, created_at, updated_at, forgotten,"
    " provenance FROM memory_records WHERE agent_id = %s AND ref = %s"
)


def _json(value: Mapping[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(dict(value))


def _maybe_meta(row_value: Any) -> Mapping[str, Any] | None:
    return None if row_value is None else _meta(row_value)


def _journal(
    conn: Connection,
    agent_id: str,
    op: str,
    ref: str,
    *,
    at: float,
    by: Mapping[str, Any] | None,
    revision: int | None = None,
    removal: str | None = None,
) -> None:
    conn.execute(
        "INSERT INTO memory_record_journal (agent_id, op, ref, revision, removal, at, by)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb)",
        (agent_id, op, ref, revision, removal, at, _json(by)),
    )


def _stored(row: Sequence[Any]) -> StoredRecord:
    return StoredRecord(
        ref=row[0],
        partition=row[1],
        text=row[2],
        metadata=_meta(row[3]),
        revision=int(row[4]),
        current_revision=int(row[4]),
        created_at=float(row[5]),
        updated_at=float(row[6]),
        provenance=_maybe_meta(row[8]) if len(row) > 8 else None,
    )


def add_record(
    conn: Connection, agent_id: str, new: NewRecord, notify: bool = True
) -> tuple[StoredRecord, bool]:
    """Insert a record (revision 1); ``(record, False)`` when its flush key already wrote one.

    ``notify=False`` leaves out the NOTIFY: only tests use it, to stand for a notification
    that was lost (a listener that was away when it was sent).
    """
    ref, partition, text, metadata, now = new.ref, new.partition, new.text, new.metadata, new.now
    vector, flush_key = new.vector, new.flush_key
    seq = _bump(conn, agent_id)
    if flush_key is not None:
        done = conn.execute(
            "SELECT ref FROM memory_record_flush_writes WHERE agent_id = %s AND flush_key = %s",
            (agent_id, flush_key),
        ).fetchone()
        if done is not None:
            row = conn.execute(_CURRENT, (agent_id, done[0])).fetchone()
            if row is not None and not row[7]:
                return _stored(row), False
            # Written by this flush and forgotten since: forgetting wins over a retry.
            raise InvalidRecordError("this flush already wrote that record, and it was forgotten")
    meta = json.dumps(dict(metadata))
    by = _json(new.by)
    conn.execute(
        "INSERT INTO memory_records (agent_id, ref, partition, text, metadata, created_at,"
        " updated_at, revision, seq, embedder, embedding, provenance)"
        " VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s, 1, %s, %s, %s, %s::jsonb)",
        (
            agent_id,
            ref,
            partition,
            text,
            meta,
            now,
            now,
            seq,
            vector.embedder if vector else None,
            vector.data if vector else None,
            by,
        ),
    )
    conn.execute(
        "INSERT INTO memory_record_revisions (agent_id, ref, revision, text, metadata,"
        " updated_at, provenance) VALUES (%s, %s, 1, %s, %s::jsonb, %s, %s::jsonb)",
        (agent_id, ref, text, meta, now, by),
    )
    _journal(conn, agent_id, "add", ref, at=now, by=new.by, revision=1)
    if flush_key is not None:
        conn.execute(
            "INSERT INTO memory_record_flush_writes (agent_id, flush_key, ref) VALUES (%s, %s, %s)",
            (agent_id, flush_key, ref),
        )
    if notify:
        _notify(conn, agent_id)
    return (
        StoredRecord(
            ref=ref,
            partition=partition,
            text=text,
            metadata=dict(metadata),
            revision=1,
            current_revision=1,
            created_at=now,
            updated_at=now,
            provenance=new.by,
        ),
        True,
    )


def _locked_current(conn: Connection, agent_id: str, ref: str) -> Sequence[Any] | None:
    row = conn.execute(_CURRENT + " FOR UPDATE", (agent_id, ref)).fetchone()
    return None if row is None or row[7] else row


def record_partition(conn: Connection, agent_id: str, ref: str) -> str | None:
    """The partition of a live record (``None``: no such record, or forgotten)."""
    row = conn.execute(
        "SELECT partition FROM memory_records WHERE agent_id = %s AND ref = %s AND NOT forgotten",
        (agent_id, ref),
    ).fetchone()
    return None if row is None else str(row[0])


def update_record(conn: Connection, agent_id: str, edit: RecordEdit) -> StoredRecord | None:
    """Replace a live record's text (and metadata) as a new revision.

    ``None`` is returned when there is no such live record in the partitions the caller
    may change; a stale ``expected_revision`` raises :class:`StaleRecordError`.
    """
    ref, partitions, text, metadata = edit.ref, edit.partitions, edit.text, edit.metadata
    expected_revision, now, vector = edit.expected_revision, edit.now, edit.vector
    seq = _bump(conn, agent_id)  # the head lock first, as every write takes it
    row = _locked_current(conn, agent_id, ref)
    if row is None or (partitions is not None and row[1] not in partitions):
        return None
    current = _stored(row)
    if text == current.text and (metadata is None or dict(metadata) == dict(current.metadata)):
        # Nothing changes: no new revision. A retried update (a flush that runs again,
        # naming the revision it already replaced) is answered, not refused as stale.
        return current
    if expected_revision is not None and expected_revision != current.revision:
        raise StaleRecordError(
            f"record {ref} is at revision {current.revision}, not {expected_revision};"
            " get it again before updating"
        )
    revision = current.revision + 1
    meta = json.dumps(dict(current.metadata if metadata is None else metadata))
    by = _json(edit.by)
    conn.execute(
        "UPDATE memory_records SET text = %s, metadata = %s::jsonb, updated_at = %s,"
        " revision = %s, seq = %s, embedder = %s, embedding = %s, provenance = %s::jsonb"
        " WHERE agent_id = %s AND ref = %s",
        (
            text,
            meta,
            now,
            revision,
            seq,
            vector.embedder if vector else None,
            vector.data if vector else None,
            by,
            agent_id,
            ref,
        ),
    )
    conn.execute(
        "INSERT INTO memory_record_revisions (agent_id, ref, revision, text, metadata,"
        " updated_at, provenance) VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s::jsonb)",
        (agent_id, ref, revision, text, meta, now, by),
    )
    _journal(conn, agent_id, "update", ref, at=now, by=edit.by, revision=revision)
    _notify(conn, agent_id)
    return attrs.evolve(
        current,
        text=text,
        metadata=json.loads(meta),
        revision=revision,
        current_revision=revision,
        updated_at=now,
        provenance=edit.by,
    )


def forget_record(
    conn: Connection, agent_id: str, edit: RecordEdit, removal_id: str | None = None
) -> StoredRecord | None:
    """Forget a live record: it leaves search and get (its text, metadata, vector and
    revisions are erased from the record, and a tombstone, the reference, the partition,
    ``forgotten``, stays for the change feed), and what it said is kept in the undo
    table under ``removal_id`` for :func:`restore_record` until a purge.

    Returns what was forgotten (or would be, with ``dry_run``), ``None`` when there is
    no such live record in the partitions the caller may change.
    """
    ref, partitions, now, dry_run = edit.ref, edit.partitions, edit.now, edit.dry_run
    seq = 0 if dry_run else _bump(conn, agent_id)
    row = _locked_current(conn, agent_id, ref)
    if row is None or (partitions is not None and row[1] not in partitions):
        return None
    found = _stored(row)
    if dry_run:
        return found
    if removal_id is not None:
        conn.execute(
            "INSERT INTO memory_record_removals (agent_id, id, ref, partition, text, metadata,"
            " revision, provenance, at, by, status)"
            " VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s::jsonb, %s, %s::jsonb, 'forgotten')",
            (
                agent_id,
                removal_id,
                ref,
                found.partition,
                found.text,
                json.dumps(dict(found.metadata)),
                found.revision,
                _json(found.provenance),
                now,
                _json(edit.by),
            ),
        )
    conn.execute(
        "UPDATE memory_records SET text = '', metadata = '{}'::jsonb, updated_at = %s,"
        " forgotten = true, seq = %s, embedder = NULL, embedding = NULL"
        " WHERE agent_id = %s AND ref = %s",
        (now, seq, agent_id, ref),
    )
    conn.execute(
        "DELETE FROM memory_record_revisions WHERE agent_id = %s AND ref = %s", (agent_id, ref)
    )
    _journal(
        conn, agent_id, "forget", ref, at=now, by=edit.by, revision=found.revision,
        removal=removal_id,
    )  # fmt: skip
    _notify(conn, agent_id)
    return found


_STATUSES: dict[str, Literal["forgotten", "restored", "purged"]] = {
    "forgotten": "forgotten",
    "restored": "restored",
    "purged": "purged",
}
_REMOVAL = (
    "SELECT id, ref, partition, text, metadata, revision, provenance, at, by, status"
    " FROM memory_record_removals WHERE agent_id = %s"
)


def _removal(row: Sequence[Any]) -> Removal:
    return Removal(
        id=row[0],
        ref=row[1],
        partition=row[2],
        text=row[3],
        metadata=_maybe_meta(row[4]) or {},
        revision=int(row[5]),
        provenance=_maybe_meta(row[6]),
        at=float(row[7]),
        by=_maybe_meta(row[8]),
        status=_STATUSES.get(str(row[9]), "forgotten"),
    )


def find_removal(
    conn: Connection, agent_id: str, removal_id: str, partitions: frozenset[str] | None
) -> list[Removal]:
    """The removals (at most two) whose id starts with ``removal_id`` (hex digits,
    checked by the caller, so no LIKE wildcard) among the caller's partitions."""
    where = "" if partitions is None else " AND partition = ANY(%s)"
    args: tuple[Any, ...] = (agent_id, removal_id + "%")
    if partitions is not None:
        args += (sorted(partitions),)
    rows = conn.execute(_REMOVAL + " AND id LIKE %s" + where + " ORDER BY at LIMIT 2", args)
    return [_removal(r) for r in rows.fetchall()]


def list_removals(
    conn: Connection, agent_id: str, partitions: frozenset[str] | None, limit: int
) -> list[Removal]:
    """The caller's most recent removals, newest first."""
    if partitions is None:
        rows = conn.execute(_REMOVAL + " ORDER BY at DESC, id LIMIT %s", (agent_id, limit))
    else:
        rows = conn.execute(
            _REMOVAL + " AND partition = ANY(%s) ORDER BY at DESC, id LIMIT %s",
            (agent_id, sorted(partitions), limit),
        )
    return [_removal(r) for r in rows.fetchall()]


def restore_record(
    conn: Connection, agent_id: str, edit: RestoreEdit
) -> tuple[Removal, StoredRecord | None, bool]:
    """Put a forgotten record back as a new revision: ``(removal, record, already)``.

    ``already`` is true when the removal was restored before (the record is returned as
    it is now); a purged removal raises :class:`InvalidRecordError`. The restored record
    keeps its reference and who wrote it; the restore itself is journalled.
    """
    seq = 0 if edit.dry_run else _bump(conn, agent_id)
    row = conn.execute(_REMOVAL + " AND id = %s FOR UPDATE", (agent_id, edit.removal_id)).fetchone()
    if row is None:
        raise InvalidRecordError(f"there is no removal {edit.removal_id!r} to restore")
    removal = _removal(row)
    if edit.partitions is not None and removal.partition not in edit.partitions:
        raise InvalidRecordError(f"there is no removal {edit.removal_id!r} to restore")
    if removal.status == "purged" or removal.text is None:
        raise InvalidRecordError(f"removal {removal.id} was purged: its text is gone for good")
    current = conn.execute(_CURRENT + " FOR UPDATE", (agent_id, removal.ref)).fetchone()
    if removal.status == "restored" or current is None or not current[7]:
        return removal, None if current is None or current[7] else _stored(current), True
    if edit.dry_run:
        return removal, None, False
    revision = int(current[4]) + 1
    meta = json.dumps(dict(removal.metadata))
    vector = edit.vector
    conn.execute(
        "UPDATE memory_records SET text = %s, metadata = %s::jsonb, updated_at = %s,"
        " revision = %s, seq = %s, forgotten = false, embedder = %s, embedding = %s,"
        " provenance = %s::jsonb WHERE agent_id = %s AND ref = %s",
        (
            removal.text,
            meta,
            edit.now,
            revision,
            seq,
            vector.embedder if vector else None,
            vector.data if vector else None,
            _json(removal.provenance),
            agent_id,
            removal.ref,
        ),
    )
    conn.execute(
        "INSERT INTO memory_record_revisions (agent_id, ref, revision, text, metadata,"
        " updated_at, provenance) VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s::jsonb)",
        (agent_id, removal.ref, revision, removal.text, meta, edit.now, _json(removal.provenance)),
    )
    conn.execute(
        "UPDATE memory_record_removals SET status = 'restored' WHERE agent_id = %s AND id = %s",
        (agent_id, removal.id),
    )
    _journal(
        conn, agent_id, "restore", removal.ref, at=edit.now, by=edit.by, revision=revision,
        removal=removal.id,
    )  # fmt: skip
    _notify(conn, agent_id)
    restored = conn.execute(_CURRENT, (agent_id, removal.ref)).fetchone()
    return removal, None if restored is None else _stored(restored), False


@attrs.frozen
class PurgeEdit:
    """What a purge deletes for good: every record, revision and kept copy whose text
    holds ``text``; or record ``ref`` with its revisions and kept copies; or the kept
    copy of removal ``removal_id``. ``partitions=None``: any partition (an operator)."""

    partitions: frozenset[str] | None
    now: float
    text: str | None = None
    ref: str | None = None
    removal_id: str | None = None
    by: Mapping[str, Any] | None = None
    dry_run: bool = False


@attrs.frozen
class Purged:
    """What a purge deleted (or would): records taken out, kept copies erased."""

    refs: tuple[str, ...]
    removals: tuple[str, ...]


def _purge_where(edit: PurgeEdit) -> tuple[str, tuple[Any, ...]]:
    """The condition (and its parameters) a row's ``ref``/``text`` meets to be purged."""
    if edit.text is not None:
        return "strpos(text, %s) > 0", (edit.text,)
    return "ref = %s", (edit.ref,)


def purge_records(conn: Connection, agent_id: str, edit: PurgeEdit) -> Purged:
    """Delete for good what ``edit`` names (see :class:`PurgeEdit`), in one transaction.

    A live record that holds the text (or is ``ref``) is taken out as a forget would
    (tombstone for the change feed, so every host's index drops it) but keeps no copy;
    every revision and every kept copy (``memory_record_removals``) that holds it is
    erased (the copy's row stays, ``purged``, without text). The journal records the
    purge, never the text. The caller vacuums afterwards (:func:`vacuum`).
    """
    scope = "" if edit.partitions is None else " AND partition = ANY(%s)"
    scoped: tuple[Any, ...] = () if edit.partitions is None else (sorted(edit.partitions),)
    seq = 0 if edit.dry_run else _bump(conn, agent_id)
    if edit.removal_id is not None:
        rows = conn.execute(
            "SELECT id FROM memory_record_removals WHERE agent_id = %s AND id = %s"
            " AND text IS NOT NULL" + scope + " FOR UPDATE",
            (agent_id, edit.removal_id, *scoped),
        ).fetchall()
        removals = tuple(r[0] for r in rows)
        refs: tuple[str, ...] = ()
    else:
        where, args = _purge_where(edit)
        refs = tuple(
            r[0]
            for r in conn.execute(
                "SELECT ref FROM memory_records WHERE agent_id = %s AND NOT forgotten AND "
                + where
                + scope
                + " ORDER BY ref FOR UPDATE",
                (agent_id, *args, *scoped),
            ).fetchall()
        )
        removals = tuple(
            r[0]
            for r in conn.execute(
                "SELECT id FROM memory_record_removals WHERE agent_id = %s AND text IS NOT NULL"
                " AND " + where + scope + " ORDER BY id FOR UPDATE",
                (agent_id, *args, *scoped),
            ).fetchall()
        )
    if edit.dry_run:
        return Purged(refs, removals)
    for ref in refs:
        conn.execute(
            "UPDATE memory_records SET text = '', metadata = '{}'::jsonb, updated_at = %s,"
            " forgotten = true, seq = %s, embedder = NULL, embedding = NULL"
            " WHERE agent_id = %s AND ref = %s",
            (edit.now, seq, agent_id, ref),
        )
        conn.execute(
            "DELETE FROM memory_record_revisions WHERE agent_id = %s AND ref = %s", (agent_id, ref)
        )
        _journal(conn, agent_id, "purge", ref, at=edit.now, by=edit.by)
    if edit.text is not None:
        # Older revisions of records whose current text no longer holds it.
        conn.execute(
            "DELETE FROM memory_record_revisions WHERE agent_id = %s AND strpos(text, %s) > 0",
            (agent_id, edit.text),
        )
    if removals:
        conn.execute(
            "UPDATE memory_record_removals SET text = NULL, metadata = NULL, status = 'purged'"
            " WHERE agent_id = %s AND id = ANY(%s)",
            (agent_id, list(removals)),
        )
        for rid in removals:
            _journal(conn, agent_id, "purge", "", at=edit.now, by=edit.by, removal=rid)
    if refs:
        _notify(conn, agent_id)
    return Purged(refs, removals)


#: The tables a purge vacuums, so that deleted row versions leave their pages.
PURGED_TABLES = ("memory_records", "memory_record_revisions", "memory_record_removals")


def vacuum(conn: Connection) -> None:
    """``VACUUM`` the records' tables (on an autocommit connection): the dead row versions
    a purge left stop holding the deleted text in the tables' pages."""
    for table in PURGED_TABLES:
        conn.execute(f"VACUUM {table}")


def get_record(
    conn: Connection, agent_id: str, ref: str, revision: int | None
) -> StoredRecord | None:
    """A live record at its current revision, or at ``revision`` (``None``: none such)."""
    row = conn.execute(_CURRENT, (agent_id, ref)).fetchone()
    if row is None or row[7]:
        return None
    current = _stored(row)
    if revision is None or revision == current.revision:
        return current
    old = conn.execute(
        "SELECT text, metadata, updated_at, provenance FROM memory_record_revisions"
        " WHERE agent_id = %s AND ref = %s AND revision = %s",
        (agent_id, ref, revision),
    ).fetchone()
    if old is None:
        return None
    return attrs.evolve(
        current,
        text=old[0],
        metadata=_meta(old[1]),
        revision=revision,
        updated_at=float(old[2]),
        provenance=_maybe_meta(old[3]),
    )


def changes_after(conn: Connection, agent_id: str, after: int, limit: int) -> list[Change]:
    """The records of ``agent_id`` changed after sequence ``after``, in sequence order."""
    rows = conn.execute(
        "SELECT ref, partition, text, metadata, revision, forgotten, seq, created_at,"
        " updated_at, embedder, embedding, provenance FROM memory_records"
        " WHERE agent_id = %s AND seq > %s ORDER BY seq LIMIT %s",
        (agent_id, after, limit),
    ).fetchall()
    return [
        Change(
            ref=r[0],
            partition=r[1],
            text=r[2],
            metadata=_meta(r[3]),
            revision=int(r[4]),
            forgotten=bool(r[5]),
            seq=int(r[6]),
            created_at=float(r[7]),
            updated_at=float(r[8]),
            embedder=r[9],
            embedding=None if r[10] is None else bytes(r[10]),
            provenance=_maybe_meta(r[11]),
        )
        for r in rows
    ]


def head(conn: Connection, agent_id: str) -> int:
    """The agent's latest change sequence (0 before its first write)."""
    row = conn.execute(
        "SELECT seq FROM memory_record_heads WHERE agent_id = %s", (agent_id,)
    ).fetchone()
    return 0 if row is None else int(row[0])


def counts(conn: Connection, agent_id: str) -> tuple[int, int]:
    """``(live records, forgotten tombstones)`` of an agent (for health; no content)."""
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE NOT forgotten), count(*) FILTER (WHERE forgotten)"
        " FROM memory_records WHERE agent_id = %s",
        (agent_id,),
    ).fetchone()
    live, forgotten = _one(row)
    return int(live), int(forgotten)
