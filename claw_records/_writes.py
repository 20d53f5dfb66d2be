"""Memory Records' write operations: add, update, forget, restore, behind one policy.

The agent tools, the flush's persistence tools and the operator route
(``host.memory.add`` / ``host.memory.forget``, so ``claw memory add/forget``) all call
these. Each decides the caller's partition from its host-minted authority
(:func:`claw_records._policy.write_grant`), computes the record's vector once (stored
with it in PostgreSQL), checks the caller is still current immediately before the
transaction, writes, brings this host's index up to date, and checks again before
anything is returned.

Every write records who made it (the host's :class:`~claw.plugin_sdk.MemoryProvenance`
of the caller, through ``api.describe_writer``) on the record, its revision and the
journal. A forget keeps what it removed in the undo table, so :func:`restore_record`
puts it back; only a purge erases it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from claw.plugin_sdk import CapabilityDeniedError, MemoryCallerContext, OperatorAuthority
from claw.plugin_sdk import check_text as check_input_text

from . import _store
from ._errors import InvalidRecordError
from ._policy import WriteGrant, write_grant
from ._service import RecordsService, flush_key, json_metadata

MAX_TEXT_BYTES = 32 * 1024
MAX_METADATA_BYTES = 8 * 1024


_REFERENCE = re.compile(r"\Arec_[0-9a-f]{32}\Z")


def new_reference() -> str:
    """A fresh, stable record reference (``rec_`` and 32 hex digits)."""
    return "rec_" + uuid.uuid4().hex


def is_reference(ref: object) -> bool:
    """Whether ``ref`` has the shape of a record reference (else no record has it)."""
    return isinstance(ref, str) and _REFERENCE.match(ref) is not None


_REMOVAL_ID = re.compile(r"\A[0-9a-f]{6,32}\Z")


def new_removal_id() -> str:
    """A fresh removal id (12 hex digits, as Memory Core's)."""
    return uuid.uuid4().hex[:12]


def _by(
    service: RecordsService,
    context: MemoryCallerContext,
    *,
    flush_id: str | None = None,
    tool: str | None = None,
) -> dict[str, Any]:
    return service.api.describe_writer(context, flush_id=flush_id, tool=tool).to_wire()


def _grant(context: MemoryCallerContext, agent_id: str) -> WriteGrant:
    context.assert_current()
    grant = write_grant(context, agent_id)
    if isinstance(grant, str):
        raise CapabilityDeniedError(grant)
    return grant


def _changeable(grant: WriteGrant) -> frozenset[str] | None:
    return None if grant.any_record else frozenset({grant.partition})


def check_text(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidRecordError("text must be non-empty text to remember")
    check_input_text(text, "text")  # no NUL (PostgreSQL's text holds none), no lone surrogate
    if len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        raise InvalidRecordError(f"text is longer than {MAX_TEXT_BYTES} bytes; split it")
    return text.strip()


def check_metadata(metadata: Any) -> Mapping[str, Any]:
    return json_metadata(metadata, what="metadata", max_bytes=MAX_METADATA_BYTES)


async def add_record(
    service: RecordsService,
    context: MemoryCallerContext,
    agent_id: str,
    text: Any,
    *,
    metadata: Any = None,
    flush_id: str | None = None,
    now: float | None = None,
    tool: str | None = None,
) -> tuple[_store.StoredRecord, bool]:
    """Write a new record to the caller's partition; ``(record, created)``.

    With ``flush_id`` (a tools-arm flush) a retry of the same write, on this host or
    another, returns the first one's record with ``created`` false.
    """
    grant = _grant(context, agent_id)
    body = check_text(text)
    meta = check_metadata(metadata)
    vector = await service.embed(body)
    key = None if flush_id is None else flush_key(flush_id, grant.partition, body)
    db = service.database()
    context.assert_current()
    new = _store.NewRecord(
        ref=new_reference(),
        partition=grant.partition,
        text=body,
        metadata=meta,
        now=service.clock() if now is None else now,
        vector=vector,
        flush_key=key,
        by=_by(service, context, flush_id=flush_id, tool=tool),
    )
    stored, created = await db.transaction(_store.add_record, agent_id, new)
    await service.catch_up(agent_id)
    context.assert_current()
    return stored, created


async def update_record(
    service: RecordsService,
    context: MemoryCallerContext,
    agent_id: str,
    ref: str,
    text: Any,
    *,
    metadata: Any = None,
    expected_revision: int | None = None,
    tool: str | None = None,
) -> _store.StoredRecord | None:
    """Replace a record's text as a new revision (``None``: no such record here)."""
    grant = _grant(context, agent_id)
    if not is_reference(ref):
        return None
    body = check_text(text)
    meta = None if metadata is None else check_metadata(metadata)
    vector = await service.embed(body)
    db = service.database()
    context.assert_current()
    edit = _store.RecordEdit(
        ref=ref,
        partitions=_changeable(grant),
        now=service.clock(),
        text=body,
        metadata=meta,
        expected_revision=expected_revision,
        vector=vector,
        by=_by(service, context, tool=tool),
    )
    stored = await db.transaction(_store.update_record, agent_id, edit)
    await service.catch_up(agent_id)
    context.assert_current()
    return stored


async def forget_record(
    service: RecordsService,
    context: MemoryCallerContext,
    agent_id: str,
    ref: str,
    *,
    dry_run: bool = False,
    tool: str | None = None,
) -> tuple[_store.StoredRecord, str | None] | None:
    """Forget a record: ``(what it said, the removal id)``, ``None`` when there is no such
    record here. The text leaves the record (a tombstone stays for the change feed) and
    is kept under the removal id until restored or purged."""
    grant = _grant(context, agent_id)
    if not is_reference(ref):
        return None
    db = service.database()
    context.assert_current()
    edit = _store.RecordEdit(
        ref=ref,
        partitions=_changeable(grant),
        now=service.clock(),
        forget=True,
        dry_run=dry_run,
        by=_by(service, context, tool=tool),
    )
    removal_id = None if dry_run else new_removal_id()
    found = await db.transaction(_store.forget_record, agent_id, edit, removal_id)
    if not dry_run:
        await service.catch_up(agent_id)
    context.assert_current()
    return None if found is None else (found, removal_id)


def _check_removal_id(removal_id: Any) -> str:
    if not isinstance(removal_id, str) or not _REMOVAL_ID.match(removal_id.strip().lower()):
        raise InvalidRecordError(
            f"{str(removal_id)[:40]!r} is not a removal id (6 to 32 of its hex digits)"
        )
    return removal_id.strip().lower()


async def restore_record(
    service: RecordsService,
    context: MemoryCallerContext,
    agent_id: str,
    removal_id: str,
    *,
    dry_run: bool = False,
) -> tuple[_store.Removal, _store.StoredRecord | None, bool]:
    """Put a forgotten record back (same authority as forget): ``(removal, record,
    already)``; a second restore answers the first."""
    grant = _grant(context, agent_id)
    wanted = _check_removal_id(removal_id)
    db = service.database()
    partitions = _changeable(grant)
    found = await db.run(_store.find_removal, agent_id, wanted, partitions)
    if len({r.id for r in found}) != 1:
        raise InvalidRecordError(
            f"no removal {wanted!r} among this caller's records (claw memory forgotten lists them)"
            if not found
            else f"{wanted!r} names several removals; give more of its digits"
        )
    removal = found[0]
    vector = None if removal.text is None or dry_run else await service.embed(removal.text)
    context.assert_current()
    edit = _store.RestoreEdit(
        removal_id=removal.id,
        partitions=partitions,
        now=service.clock(),
        vector=vector,
        by=_by(service, context),
        dry_run=dry_run,
    )
    result = await db.transaction(_store.restore_record, agent_id, edit)
    if not dry_run:
        await service.catch_up(agent_id)
    context.assert_current()
    return result


async def list_removals(
    service: RecordsService, context: MemoryCallerContext, agent_id: str, *, limit: int
) -> list[_store.Removal]:
    """The caller's most recent removals (they carry the removed text: writers only)."""
    grant = _grant(context, agent_id)
    db = service.database()
    removals: list[_store.Removal] = await db.run(
        _store.list_removals, agent_id, _changeable(grant), limit
    )
    context.assert_current()
    return removals


async def purge_records(
    service: RecordsService,
    context: MemoryCallerContext,
    agent_id: str,
    *,
    text: str | None = None,
    ref: str | None = None,
    removal_id: str | None = None,
    dry_run: bool = False,
) -> _store.Purged:
    """Delete for good (an operator with ``operator.admin`` only): every record, revision
    and kept copy holding ``text``, or record ``ref``, or removal ``removal_id``'s copy;
    then vacuum and bring this host's index up to it (other hosts follow the feed)."""
    context.assert_current()
    authority = context.authority
    if not (isinstance(authority, OperatorAuthority) and authority.has_scope("operator.admin")):
        raise CapabilityDeniedError("purging memory needs an operator with operator.admin")
    if ref is not None and not is_reference(ref):
        raise InvalidRecordError(f"{str(ref)[:80]!r} is not a memory record reference")
    wanted = None if removal_id is None else _check_removal_id(removal_id)
    if wanted is not None:
        found = await service.database().run(_store.find_removal, agent_id, wanted, None)
        if len({r.id for r in found}) != 1:
            raise InvalidRecordError(f"no single removal {wanted!r} to purge")
        wanted = found[0].id
    db = service.database()
    context.assert_current()
    edit = _store.PurgeEdit(
        partitions=None,
        now=service.clock(),
        text=text,
        ref=ref,
        removal_id=wanted,
        by=_by(service, context),
        dry_run=dry_run,
    )
    purged = await db.transaction(_store.purge_records, agent_id, edit)
    if not dry_run:
        await db.run(_store.vacuum)
        await service.catch_up(agent_id)
    context.assert_current()
    return purged
