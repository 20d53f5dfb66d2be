"""Memory Records' memory capability: the neutral runtime, hit authorization, maintenance.

Reads go through :class:`RecordsHandle` (``search``, ``get`` with revisions, ``health``,
``refresh``); the partitions a caller reads come from its host-minted authority only
(:mod:`claw_records._policy`). There is no file-shaped legacy runtime: Memory Records
does not impersonate workspace files, so ``memory.search`` v1 callers are asked for
``version: 2``. Owner records are ``"memory"`` hits; conversation records are
``"sessions"`` hits, which the host passes through :func:`authorize_hits` as well.
"""

from __future__ import annotations

import datetime
import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import trio

from claw.plugin_sdk import (
    AuthorizeSearchHitsRequest,
    CapabilityDeniedError,
    Citation,
    ClawError,
    MemoryAddRequest,
    MemoryAddResult,
    MemoryCallerContext,
    MemoryFlushPlanRequest,
    MemoryFlushToolsPlan,
    MemoryForgetResult,
    MemoryGetRequest,
    MemoryGetResult,
    MemoryHealth,
    MemoryPluginCapability,
    MemoryProvenance,
    MemoryPurgeRequest,
    MemoryPurgeResult,
    MemoryReference,
    MemoryRemoval,
    MemoryRestoreResult,
    MemorySearchHit,
    MemorySearchRequest,
    MemorySearchResult,
    ProviderCapabilities,
    ProviderHandle,
    ProviderMaintenance,
    ProviderRuntime,
    SearchCoverage,
    WorkerPool,
    line_fragment,
    offset_cursor,
    parse_line_fragment,
    parse_offset_cursor,
)
from claw.plugin_sdk import build_capability as sdk_build_capability
from claw.plugin_sdk.search import product_slice

from . import _store
from ._errors import InvalidRecordError
from ._index import PartitionFilter, RankedRecord, RecordIndex
from ._policy import OWNER, ReadScope, partition_session_key, read_scope, source_of
from ._service import PLUGIN_ID, RecordsService
from ._writes import (
    add_record,
    forget_record,
    is_reference,
    list_removals,
    purge_records,
    restore_record,
)

RECALL_TOOLS = ("record_search", "record_get")
PERSISTENCE_TOOLS = ("record_add", "record_update")
LOOKUP_TOOLS = RECALL_TOOLS
EXCERPT_CHARS = 700
_REVISION_RE = re.compile(r"\A[1-9][0-9]{0,8}\Z")


def reference_of(record: Any) -> MemoryReference:
    """The provider-scoped reference of a record (its id and current revision)."""
    return MemoryReference(provider_id=PLUGIN_ID, id=record.ref, revision=str(record.revision))


def citation_of(ref: str, text: str, partition: str) -> Citation:
    """A human citation: the reference, and the record's lines (1..n)."""
    return Citation(
        path=ref,
        start_line=1,
        end_line=_line_count(text),
        source=source_of(partition),  # type: ignore[arg-type]
    )


def _line_count(text: str) -> int:
    return max(1, len(text.splitlines()))


def parse_revision(revision: str | None) -> int | None:
    """A reference's revision as a number; anything else is the caller's mistake."""
    if revision is None:
        return None
    if not _REVISION_RE.match(revision):
        raise InvalidRecordError(
            f"reference revision {revision[:32]!r} is not a record revision (1, 2, ...)"
        )
    return int(revision)


def _provenance(wire: Mapping[str, Any] | None) -> MemoryProvenance | None:
    """A stored provenance (``None``: none recorded, or not one this host can read)."""
    if wire is None:
        return None
    try:
        return MemoryProvenance.from_wire(wire)
    except ClawError:
        return None


def provenance_of(wire: Mapping[str, Any] | None) -> tuple[MemoryProvenance, ...]:
    """A record's provenance as the neutral results carry it: one entry (the record)."""
    found = _provenance(wire)
    return () if found is None else (found,)


def to_hit(ranked: RankedRecord, agent_id: str) -> MemorySearchHit:
    rec = ranked.record
    return MemorySearchHit(
        provenance=provenance_of(rec.provenance),
        reference=reference_of(rec),
        excerpt=rec.text[:EXCERPT_CHARS],
        score=round(ranked.score, 6),
        citation=citation_of(rec.ref, rec.text, rec.partition),
        source=source_of(rec.partition),  # type: ignore[arg-type]
        metadata={
            "agent_id": agent_id,
            "partition": rec.partition,
            "session_key": partition_session_key(rec.partition),
            "created_at": rec.created_at,
            "updated_at": rec.updated_at,
            "record": dict(rec.metadata),
            "text_score": ranked.text_score,
            "vector_score": ranked.vector_score,
        },
    )


def authorize_hits(
    service: RecordsService, request: AuthorizeSearchHitsRequest
) -> list[MemorySearchHit]:
    """Admit the conversation (``sessions``) hits the requester may observe.

    A hit of another agent is never admitted. A trusted agent scope (host or operator
    caller) admits its agent's hits; otherwise the requester's audience decides: the
    owner's admits every conversation of the agent, a conversation's only its own root
    session's, and a recall pass the conversations it names.
    """
    admitted: list[MemorySearchHit] = []
    for hit in request.hits:
        if hit.source != "sessions":
            admitted.append(hit)
            continue
        if hit.metadata.get("agent_id") != request.agent_id:
            continue
        key = hit.metadata.get("session_key")
        if request.trusted_agent_scope is not None:
            if request.trusted_agent_scope == request.agent_id:
                admitted.append(hit)
            continue
        if request.sandboxed and service.config.deny_sandboxed:
            continue
        audience = request.audience
        recall = request.conversation_recall
        if (
            audience is not None
            and audience.agent_id == request.agent_id
            and (audience.kind == "owner-private" or key == audience.session_key)
        ) or (
            recall is not None
            and recall.agent_id == request.agent_id
            and (key in recall.conversation_keys)
        ):
            admitted.append(hit)
    return admitted


# An index this small (rows times dimensions) is ranked on the event loop: its product
# and BM25 search cost less than handing them to a thread (the threshold Memory Core
# uses). From PARALLEL_CELLS the product is split into row slices on concurrent workers:
# it is bound by memory bandwidth, which one core does not saturate.
INLINE_CELLS = 4_000_000
INLINE_ROWS = 20_000
PARALLEL_CELLS = 8_000_000


async def rank(
    workers: WorkerPool,
    index: RecordIndex,
    query: str,
    query_vector: npt.NDArray[np.float32] | None,
    **params: Any,
) -> tuple[list[RankedRecord], bool]:
    """Search ``index`` where it is cheapest: inline, on a worker, or with a split product."""
    snap = index.snapshot()
    cells = snap.n * (index.dims or 0)
    if snap.n <= INLINE_ROWS and cells <= INLINE_CELLS:
        await trio.lowlevel.checkpoint()
        return index.search(query, query_vector, snap=snap, **params)
    sims = None
    stats = workers.statistics()
    if (
        query_vector is not None
        and snap.matrix is not None
        and cells >= PARALLEL_CELLS
        and not stats.inline
        and stats.total_tokens >= 2
    ):
        matrix = snap.matrix[: snap.n]
        sims = np.empty(snap.n, dtype=np.float32)
        parts = min(stats.total_tokens, 4)
        bounds = np.linspace(0, snap.n, parts + 1).astype(int).tolist()
        async with trio.open_nursery() as nursery:
            for start, stop in itertools.pairwise(bounds):
                nursery.start_soon(
                    workers.run_sync, product_slice, matrix, query_vector, sims, start, stop
                )
    return await workers.run_sync(
        lambda: index.search(query, query_vector, snap=snap, sims=sims, **params)
    )


def _scope_filter(scope: ReadScope, sources: Sequence[str]) -> PartitionFilter:
    return PartitionFilter(
        partitions=None if scope.everything else scope.partitions,
        memory="memory" in sources,
        sessions="sessions" in sources,
    )


@attrs.define(eq=False)
class RecordsHandle(ProviderHandle[RecordsService]):
    """A caller-bound reader over one agent's records."""

    def _scope(self) -> ReadScope:
        return read_scope(
            self.context, self.agent_id, deny_sandboxed=self.service.config.deny_sandboxed
        )

    async def search(self, request: MemorySearchRequest) -> MemorySearchResult:
        sources = tuple(request.sources or self.capabilities.sources)
        scope = self._scope()
        if scope.empty:
            return MemorySearchResult(
                hits=(),
                coverage=SearchCoverage(sources=(), complete=False),
                warning="this caller may read no memory records of this agent",
            )
        offset = parse_offset_cursor(request.cursor, PLUGIN_ID)
        index = await self.service.index_for(self.agent_id)
        qvec = None if request.lexical_only else await self.service.query_vector(request.query)
        vector_weight, text_weight = self.service.fusion_weights()
        min_score = request.min_score
        if min_score is None:
            min_score = self.service.config.min_score
        ranked, more = await self.effect(
            lambda: rank(
                self.service.api.workers,
                index,
                request.query,
                qvec,
                scope=_scope_filter(scope, sources),
                offset=offset,
                limit=request.max_results,
                min_score=min_score,
                vector_weight=vector_weight,
                text_weight=text_weight,
            )
        )
        hits = tuple(to_hit(r, self.agent_id) for r in ranked)
        complete = scope.everything or OWNER in scope.partitions or "memory" not in sources
        return MemorySearchResult(
            hits=hits,
            next_cursor=offset_cursor(offset + len(hits) if more else None),
            coverage=SearchCoverage(sources=sources, complete=complete),
            warning=None if complete else "the owner's private records were not searched",
        )

    async def get(self, request: MemoryGetRequest) -> MemoryGetResult:
        """A record at its current revision, or at the reference's revision.

        A reference to a revision the record no longer has (or a forgotten record) is
        ``not_found``: another revision's text is never substituted.
        """
        ref = request.reference
        revision = parse_revision(ref.revision)
        scope = self._scope()
        if not is_reference(ref.id):
            return MemoryGetResult(status="not_found", reference=ref)
        database = self.service.database()
        record = await self.effect(
            lambda: database.run(_store.get_record, self.agent_id, ref.id, revision)
        )
        if record is None:
            return MemoryGetResult(status="not_found", reference=ref)
        if not scope.admits(record.partition):
            raise CapabilityDeniedError(f"this caller may not read memory record {ref.id!r}")
        lines = record.text.splitlines() or [""]
        from_line, count = request.from_line, request.lines
        if ref.fragment is not None and from_line is None and count is None:
            start, end = parse_line_fragment(ref.fragment)
            from_line, count = start, end - start + 1
        first = from_line or 1
        if first > len(lines):
            return MemoryGetResult(status="not_found", reference=ref)
        chosen = lines[first - 1 : None if count is None else first - 1 + count]
        return MemoryGetResult(
            status="ok",
            reference=attrs.evolve(ref, revision=str(record.revision)),
            text="\n".join(chosen),
            from_line=first,
            lines=len(chosen),
            total_lines=len(lines),
            truncated=first - 1 + len(chosen) < len(lines),
            provenance=provenance_of(record.provenance),
        )

    async def health(self) -> MemoryHealth:
        """Ready when the database answers and every stored vector is usable here."""
        self.context.assert_current()
        try:
            db = self.service.database()
            head = await db.run(_store.head, self.agent_id)
            live, forgotten = await db.run(_store.counts, self.agent_id)
            index = await self.service.index_for(self.agent_id)
        except ClawError as exc:
            return MemoryHealth(status="unavailable", message=type(exc).__name__)
        foreign = index.foreign_vectors
        return MemoryHealth(
            status="degraded" if foreign else "ready",
            message=f"{foreign} record(s) have vectors of another embedder" if foreign else None,
            details={
                "records": live,
                "forgotten": forgotten,
                "sequence": head,
                "indexedSequence": index.cursor,
                "embedder": self.service.embedder_identity(),
                "foreignVectors": foreign,
            },
        )

    async def refresh(self) -> None:
        """Provider-owned refresh: catch this host's index up with the database now."""
        self.context.assert_current()
        await self.service.index_for(self.agent_id)
        await self.service.catch_up(self.agent_id)


@attrs.define(eq=False)
class RecordsProviderRuntime(ProviderRuntime[RecordsService, RecordsHandle]):
    """Memory Records' provider-neutral runtime."""

    handle_class = RecordsHandle

    def capabilities(self) -> ProviderCapabilities:
        return ProviderCapabilities(
            sources=("memory", "sessions"), pagination=True, candidates=(), project_filter=False
        )

    async def authorize_search_hits(
        self, request: AuthorizeSearchHitsRequest
    ) -> Sequence[MemorySearchHit]:
        return authorize_hits(self.service, request)


@attrs.define(eq=False)
class RecordsMaintenance(ProviderMaintenance[RecordsService]):
    """The operator route: ``host.memory.add/forget`` and ``claw memory ...``."""

    provider_name = "Memory Records"

    async def add(
        self, *, agent_id: str, context: MemoryCallerContext, request: MemoryAddRequest
    ) -> MemoryAddResult:
        """Add a record to the writer's partition (``section`` becomes metadata)."""
        if request.path is not None:
            raise InvalidRecordError(
                f'memory provider "{PLUGIN_ID}" keeps records, not files: omit the path'
            )
        metadata = {} if request.section is None else {"section": request.section}
        stored, _ = await add_record(
            self.service, context, agent_id, request.text, metadata=metadata, now=request.now
        )
        return MemoryAddResult(
            reference=reference_of(stored),
            citation=citation_of(stored.ref, stored.text, stored.partition),
            timestamp=_stamp(stored.created_at),
        )

    async def forget_reference(
        self,
        *,
        agent_id: str,
        context: MemoryCallerContext,
        reference: MemoryReference,
        dry_run: bool = False,
        whole_range: bool = False,
    ) -> MemoryForgetResult:
        """Forget the record a reference names (a record is forgotten whole: it is one
        entry, so ``whole_range`` changes nothing)."""
        if reference.fragment is not None:
            try:
                parse_line_fragment(reference.fragment)
            except ClawError as exc:
                raise InvalidRecordError(str(exc)) from None
            seen = await forget_record(self.service, context, agent_id, reference.id, dry_run=True)
            whole = None if seen is None else line_fragment(1, _line_count(seen[0].text))
            if whole is not None and reference.fragment != whole:
                raise InvalidRecordError(
                    f"a memory record is forgotten whole; {reference.id!r} has lines {whole}"
                )
        found = await forget_record(self.service, context, agent_id, reference.id, dry_run=dry_run)
        if found is None:
            raise InvalidRecordError(f"there is no memory record {reference.id!r} to forget")
        record, removal_id = found
        return MemoryForgetResult(
            reference=reference,
            dry_run=dry_run,
            paths=(reference.id,),
            chunks=1,
            removed_text=record.text,
            removal_id=removal_id,
            start_line=1,
            end_line=_line_count(record.text),
            entries=1,
        )

    async def purge(
        self,
        *,
        agent_id: str,
        context: MemoryCallerContext,
        request: MemoryPurgeRequest,
        dry_run: bool = False,
    ) -> MemoryPurgeResult:
        """Delete for good: records, revisions and kept copies (see ``_store.purge_records``)."""
        ref = None if request.reference is None else request.reference.id
        purged = await purge_records(
            self.service,
            context,
            agent_id,
            text=request.text,
            ref=ref,
            removal_id=request.removal_id,
            dry_run=dry_run,
        )
        return MemoryPurgeResult(
            dry_run=dry_run,
            paths=purged.refs,
            entries=len(purged.refs),
            removals=purged.removals,
        )

    async def restore(
        self,
        *,
        agent_id: str,
        context: MemoryCallerContext,
        removal_id: str,
        dry_run: bool = False,
    ) -> MemoryRestoreResult:
        """Put a forgotten record back, under its own reference (the undo table)."""
        removal, record, already = await restore_record(
            self.service, context, agent_id, removal_id, dry_run=dry_run
        )
        revision = removal.revision if record is None else record.revision
        return MemoryRestoreResult(
            removal_id=removal.id,
            reference=MemoryReference(
                provider_id=PLUGIN_ID, id=removal.ref, revision=str(revision)
            ),
            mode="present" if already and record is not None else "in-place",
            dry_run=dry_run,
            already=already,
        )

    async def removals(
        self, *, agent_id: str, context: MemoryCallerContext, limit: int = 50
    ) -> Sequence[MemoryRemoval]:
        """The most recent forgets of records this caller may change, newest first."""
        found = await list_removals(self.service, context, agent_id, limit=limit)
        return [
            MemoryRemoval(
                id=r.id,
                path=r.ref,
                start_line=1,
                end_line=_line_count(r.text or ""),
                text=r.text,
                at=r.at,
                status=r.status,
                by=_provenance(r.by),
                provenance=provenance_of(r.provenance),
            )
            for r in found
        ]

    async def reindex(
        self,
        *,
        agent_id: str,
        context: MemoryCallerContext,
        force: bool = False,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> dict[str, Any]:
        """Rebuild this host's derived index of the agent from the database."""
        self.operator(context)
        live = await self.service.rebuild(agent_id)
        index = await self.service.index_for(agent_id)
        if progress is not None:
            progress("publish", live, live)
        return {
            "indexed": [],
            "removed": [],
            "skipped": [],
            "chunksAdded": live,
            "chunksRemoved": 0,
            "embedded": 0,
            "generation": index.cursor,
        }

    async def forget(
        self,
        *,
        agent_id: str,
        context: MemoryCallerContext,
        path: str | None = None,
        session_id: str | None = None,
        source: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """``claw memory forget --path <reference>``: forget one record."""
        self.operator(context)
        if path is None or session_id is not None or source is not None:
            raise InvalidRecordError(
                "Memory Records forgets one record at a time: pass its reference"
            )
        found = await forget_record(self.service, context, agent_id, path, dry_run=dry_run)
        return {
            "dryRun": dry_run,
            "chunks": 0 if found is None else 1,
            "paths": [] if found is None else [path],
        }

    async def describe(self, *, agent_id: str, context: MemoryCallerContext) -> dict[str, Any]:
        self.operator(context)
        db = self.service.database()
        live, forgotten = await db.run(_store.counts, agent_id)
        index = await self.service.index_for(agent_id)
        return {
            "database": db.name,
            "records": live,
            "forgotten": forgotten,
            "sequence": await db.run(_store.head, agent_id),
            "indexedSequence": index.cursor,
            "embedder": self.service.embedder_identity(),
            "foreignVectors": index.foreign_vectors,
            "statistics": attrs.asdict(self.service.statistics()),
        }


def _stamp(epoch: float) -> str:
    when = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


FLUSH_SYSTEM_PROMPT = (
    "The conversation is about to be compacted. Save what is worth remembering before "
    "it is summarised: store concise, self-contained memories (facts, decisions, "
    "preferences, people, dates, open todos) with record_add, one per call. Look up "
    "what is stored first (record_search) and do not repeat it; correct a stored "
    "memory with record_update. Do not answer the user. When you are done, or if there "
    "is nothing worth saving, reply exactly NO_REPLY."
)
FLUSH_PROMPT = "Pre-compaction memory flush: store durable memories with record_add now."


def flush_plan(request: MemoryFlushPlanRequest) -> MemoryFlushToolsPlan:
    """The tools-arm flush: persist with ``record_add``/``record_update``, look up first."""
    return MemoryFlushToolsPlan(
        persistence_tool_names=PERSISTENCE_TOOLS,
        lookup_tool_names=LOOKUP_TOOLS,
        prompt=FLUSH_PROMPT,
        system_prompt=FLUSH_SYSTEM_PROMPT,
    )


def build_capability(service: RecordsService) -> MemoryPluginCapability:
    """Memory Records' memory capability."""

    def guidance(agent_id: str, caller: MemoryCallerContext) -> str:
        scope = read_scope(caller, agent_id, deny_sandboxed=service.config.deny_sandboxed)
        if scope.everything:
            return "Your long-term memory records are searchable (record_search)."
        if scope.empty:
            return "No memory records are available in this session."
        return (
            "Only this conversation's own memory records are searchable here; the owner's "
            "private memory is not available in this chat."
        )

    return sdk_build_capability(
        provider_runtime=RecordsProviderRuntime(service),
        guidance=guidance,
        recall_tool_names=RECALL_TOOLS,
        maintenance=RecordsMaintenance(service),
        provider_flush_plan_resolver=flush_plan,
    )
