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
from typing import TYPE_CHECKING, Any

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
#: The named migrations of the schema, in order (a released one never changes).
MIGRATIONS: tuple[tuple[str, Sequence[str]], ...] = (("records-1-tables", _SCHEMA_V1),)


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
    "SELECT ref, partition, text, metadata, revision, created_at, updated_at, forgotten"
    " FROM memory_records WHERE agent_id = %s AND ref = %s"
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
    conn.execute(
        "INSERT INTO memory_records (agent_id, ref, partition, text, metadata, created_at,"
        " updated_at, revision, seq, embedder, embedding)"
        " VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s, 1, %s, %s, %s)",
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
        ),
    )
    conn.execute(
        "INSERT INTO memory_record_revisions (agent_id, ref, revision, text, metadata,"
        " updated_at) VALUES (%s, %s, 1, %s, %s::jsonb, %s)",
        (agent_id, ref, text, meta, now),
    )
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
    conn.execute(
        "UPDATE memory_records SET text = %s, metadata = %s::jsonb, updated_at = %s,"
        " revision = %s, seq = %s, embedder = %s, embedding = %s"
        " WHERE agent_id = %s AND ref = %s",
        (
            text,
            meta,
            now,
            revision,
            seq,
            vector.embedder if vector else None,
            vector.data if vector else None,
            agent_id,
            ref,
        ),
    )
    conn.execute(
        "INSERT INTO memory_record_revisions (agent_id, ref, revision, text, metadata,"
        " updated_at) VALUES (%s, %s, %s, %s, %s::jsonb, %s)",
        (agent_id, ref, revision, text, meta, now),
    )
    _notify(conn, agent_id)
    return attrs.evolve(
        current,
        text=text,
        metadata=json.loads(meta),
        revision=revision,
        current_revision=revision,
        updated_at=now,
    )


def forget_record(conn: Connection, agent_id: str, edit: RecordEdit) -> StoredRecord | None:
    """Forget a live record: its text, metadata, vector and revisions are erased and a
    tombstone (the reference, the partition, ``forgotten``) stays for the change feed.

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
    conn.execute(
        "UPDATE memory_records SET text = '', metadata = '{}'::jsonb, updated_at = %s,"
        " forgotten = true, seq = %s, embedder = NULL, embedding = NULL"
        " WHERE agent_id = %s AND ref = %s",
        (now, seq, agent_id, ref),
    )
    conn.execute(
        "DELETE FROM memory_record_revisions WHERE agent_id = %s AND ref = %s", (agent_id, ref)
    )
    _notify(conn, agent_id)
    return found


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
        "SELECT text, metadata, updated_at FROM memory_record_revisions"
        " WHERE agent_id = %s AND ref = %s AND revision = %s",
        (agent_id, ref, revision),
    ).fetchone()
    if old is None:
        return None
    return attrs.evolve(
        current, text=old[0], metadata=_meta(old[1]), revision=revision, updated_at=float(old[2])
    )


def changes_after(conn: Connection, agent_id: str, after: int, limit: int) -> list[Change]:
    """The records of ``agent_id`` changed after sequence ``after``, in sequence order."""
    rows = conn.execute(
        "SELECT ref, partition, text, metadata, revision, forgotten, seq, created_at,"
        " updated_at, embedder, embedding FROM memory_records"
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
