"""Memory Core's runtimes: the provider-neutral handle, the legacy manager, visibility.

Visibility policy (Memory Core owns it, as the seed asks of every memory plugin):

* Memory files (``MEMORY.md``, ``memory/**``...) are the agent owner's: a session
  caller sees them only with an ``owner-private`` audience; an operator (authenticated
  with ``operator.read``) sees them for the agent it addressed; a host authority and a
  session without an audience see none. ``deny_sandboxed`` refuses sandboxed sessions.
* Session transcripts reach a caller only through :func:`authorize_hits`: the agent's
  own sessions for a trusted operator or host scope; for a session caller, its own
  session, its audience's root conversation, every session of the agent for the
  owner-private audience, and the conversations a host-granted recall pass names.
  Hits of another agent never pass.

The provider checks ``context.assert_current()`` right before each effect, including
after its own awaits, so a caller whose audience went stale meanwhile is refused.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from claw.plugin_sdk import (
    MIN_REVISION_CHARS,
    AuthorizeSearchHitsRequest,
    CapabilityDeniedError,
    Citation,
    ClawError,
    EmbeddingError,
    HealthStatus,
    HostAuthority,
    LegacyReadResult,
    LegacySearchResult,
    LexicalIndexError,
    MemoryAddRequest,
    MemoryAddResult,
    MemoryCallerContext,
    MemoryFlushPlan,
    MemoryFlushPlanRequest,
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
    OperatorAuthority,
    ProviderCapabilities,
    ProviderHandle,
    ProviderMaintenance,
    ProviderRuntime,
    PublicArtifact,
    SearchCoverage,
    SessionAuthority,
    UnsupportedRequestError,
    entry_spans,
    line_fragment,
    lines_revision,
    offset_cursor,
    parse_line_fragment,
    parse_offset_cursor,
)
from claw.plugin_sdk import build_capability as sdk_build_capability

from ._errors import InvalidSearchError, MemoryCoreError, SourcePathError
from ._index import MemoryIndex
from ._purge import purge_memory
from ._ranking import RankedRow
from ._records import ChunkRecord
from ._search import SearchPage
from ._transcripts import names_a_turn_piece
from ._types import ReadResult, SearchFilter
from ._writes import (
    PROVIDER_ID,
    add_memory,
    daily_note_path,
    forget_reference,
    list_removals,
    piece_matcher,
    restore_removal,
)

if TYPE_CHECKING:
    from ._plugin import MemoryCoreService

RECALL_TOOLS = ("memory_search", "memory_get")
_PROJECT_RE = re.compile(r"^memory/projects/([^/]+)/")
_EXCERPT_CHARS = 700


def may_read_memory_files(service: MemoryCoreService, context: MemoryCallerContext) -> bool:
    """Whether ``context`` may see the owner's memory files (see the module docstring)."""
    authority = context.authority
    if isinstance(authority, OperatorAuthority):
        return authority.has_scope("operator.read") or authority.has_scope("operator.admin")
    if isinstance(authority, SessionAuthority):
        if authority.sandboxed and service.config.deny_sandboxed:
            return False
        audience = authority.audience
        return audience is not None and audience.kind == "owner-private"
    return False


def _session_allowed(
    *,
    agent_id: str,
    hit_agent: str | None,
    hit_session: str | None,
    session_key: str | None,
    trusted_agent_scope: str | None,
    audience: Any,
    recall: Any,
    sandboxed: bool,
    deny_sandboxed: bool,
) -> bool:
    if hit_agent != agent_id:
        return False
    if trusted_agent_scope is not None:
        return hit_agent == trusted_agent_scope
    if sandboxed and deny_sandboxed:
        return False
    if session_key is not None and hit_session == session_key:
        return audience is not None
    if audience is not None:
        if audience.agent_id != agent_id:
            return False
        if audience.kind == "owner-private":
            return True
        if hit_session is not None and (
            hit_session == audience.session_key
            or hit_session.startswith(f"{audience.session_key}/")
        ):
            return True
    return recall is not None and hit_session in recall.conversation_keys


def authorize_hits(
    service: MemoryCoreService, request: AuthorizeSearchHitsRequest
) -> list[MemorySearchHit]:
    """Admit only the hits the requester may observe (the module docstring's policy)."""
    admitted: list[MemorySearchHit] = []
    for hit in request.hits:
        if hit.source != "sessions":
            admitted.append(hit)
            continue
        if _session_allowed(
            agent_id=request.agent_id,
            hit_agent=hit.metadata.get("agent_id"),
            hit_session=hit.metadata.get("session_key"),
            session_key=request.session_key,
            trusted_agent_scope=request.trusted_agent_scope,
            audience=request.audience,
            recall=request.conversation_recall,
            sandboxed=request.sandboxed,
            deny_sandboxed=service.config.deny_sandboxed,
        ):
            admitted.append(hit)
    return admitted


def transcript_revision(change_token: str) -> str:
    """The whole revision of a transcript at ``change_token`` (what a get without a
    revision answers with; a hash, so the counts in the token are not a contract)."""
    return hashlib.sha256(change_token.encode()).hexdigest()


def _context_grants(context: MemoryCallerContext) -> dict[str, Any]:
    authority = context.authority
    if isinstance(authority, SessionAuthority):
        return {
            "session_key": authority.session_key,
            "trusted_agent_scope": None,
            "audience": authority.audience,
            "recall": authority.conversation_recall,
            "sandboxed": authority.sandboxed,
        }
    return {
        "session_key": None,
        "trusted_agent_scope": None,
        "audience": None,
        "recall": None,
        "sandboxed": False,
    }


def neutral_hit(
    rec: ChunkRecord, ranked: RankedRow, provenance: tuple[MemoryProvenance, ...] = ()
) -> MemorySearchHit:
    """A ranked chunk as a provider-neutral hit (always with a citation), with the
    ``provenance`` of its entries.

    A memory-file hit's revision is its lines' hash (the chunk's content hash): it stays
    current while other lines of the file change, and goes stale when its own do (see
    :mod:`claw_memory._writes`). So is a transcript hit's: a transcript only grows, so
    the turns it cites stay current as later turns come (a get checks their hash).
    """
    # Positional arguments, in the classes' field order: a search builds three objects
    # for each of its hits, and keyword arguments cost about a fifth more here.
    source = rec.source
    path, start, end = rec.path, rec.start_line, rec.end_line
    return MemorySearchHit(
        MemoryReference(
            PROVIDER_ID,
            path,
            rec.content_hash,
            line_fragment(start, end),
        ),
        rec.text[:_EXCERPT_CHARS],
        round(float(ranked.score), 6),
        Citation(path, start, end, source),
        source,
        {
            "chunk_id": rec.chunk_id,
            "agent_id": rec.agent_id,
            "session_key": rec.session_key,
            "session_id": rec.session_id,
            "entry_ids": list(rec.entry_ids),
            "text_score": ranked.text_score,
            "vector_score": ranked.vector_score,
        },
        provenance,
    )


def entry_provenance(
    text: str, first_line: int, writers: Mapping[str, Any]
) -> tuple[MemoryProvenance, ...]:
    """Who wrote each whole entry of ``text`` (lines from ``first_line`` of a memory file).

    An entry is found by its hash in the workspace journal's record of writes (see
    :mod:`claw.memory_files`); entries written by hand, or cut by the excerpt's edge,
    have none and are left out.
    """
    if not writers:
        return ()
    lines = text.split("\n")
    found: list[MemoryProvenance] = []
    for a, b in entry_spans(lines):
        who = writers.get(lines_revision(lines[a - 1 : b]))
        if who is None:
            continue
        try:
            prov = MemoryProvenance.from_wire(who)
        except ClawError:
            continue  # a record edited by hand: no provenance rather than a wrong one
        found.append(attrs.evolve(prov, start_line=first_line + a - 1, end_line=first_line + b - 1))
    return tuple(found)


def _project_of(path: str) -> str | None:
    match = _PROJECT_RE.match(path)
    return match.group(1) if match else None


def _in_active_project(rec: ChunkRecord, active: set[str]) -> bool:
    """Whether a hit on ``rec`` passes the active-project filter: a memory file of a
    project (``memory/projects/<key>/...``) only when its project is active; anything
    else."""
    project = _project_of(rec.path) if rec.source == "memory" else None
    return project is None or project in active


@attrs.define(eq=False)
class MemoryCoreHandle(ProviderHandle["MemoryCoreService"]):
    """A caller-bound reader over one agent's Memory Core index."""

    async def search(self, request: MemorySearchRequest) -> MemorySearchResult:
        requested = request.sources or self.capabilities.sources
        memory_ok = may_read_memory_files(self.service, self.context)
        effective = tuple(s for s in requested if s != "memory" or memory_ok)
        warning = None
        if "memory" in requested and not memory_ok:
            warning = "memory files are owner-private and were not searched for this caller"
        if not effective:
            return MemorySearchResult(
                hits=(),
                coverage=SearchCoverage(sources=(), complete=False),
                warning=warning,
            )
        offset = parse_offset_cursor(request.cursor, PROVIDER_ID)
        api = self.service.api
        async with self.service.use(self.agent_id) as index:
            # The request was validated where it entered (the gateway, a tool, the
            # Python API's MemorySearchRequest): the index does not check it again.

            async def ranked() -> tuple[SearchPage, Mapping[str, Any]]:
                page = await index.rank_page(
                    request.query,
                    mode="lexical" if request.lexical_only else None,
                    limit=request.max_results,
                    offset=offset,
                    min_score=request.min_score,
                    filter=SearchFilter(
                        sources=frozenset(effective), agent_ids=frozenset((self.agent_id,))
                    ),
                    # The host's time: relative dates in the query ("10 days ago") and
                    # temporal decay count from the clock that stamped the transcripts.
                    now=api.clock(),
                )
                # Who wrote each memory-file entry: the workspace journal's record (read
                # by a worker only when the journal changed since it was last read).
                if not any(rec.source == "memory" for rec, _ in page.hits):
                    return page, {}
                files = api.memory_files
                found = files.writers_nowait()
                return page, (await files.writers() if found is None else found)

            # Between the caller's checks (the SDK skeleton's rule, kept in one place).
            result, writers = await self.effect(ranked)
            active = set(request.active_project_keys)
            hits = [
                neutral_hit(rec, ranked, entry_provenance(rec.text, rec.start_line, writers))
                if rec.source == "memory"
                else neutral_hit(rec, ranked)
                for rec, ranked in result.hits
                if not active or _in_active_project(rec, active)
            ]
            complete = effective == tuple(requested) and result.warning is None
            if result.warning is not None:
                warning = result.warning if warning is None else f"{warning}; {result.warning}"
            return MemorySearchResult(
                hits=tuple(hits),
                next_cursor=offset_cursor(result.next_offset),
                coverage=SearchCoverage(sources=effective, complete=complete),
                warning=warning,
            )

    async def _transcript_revision(self, path: str) -> str | None:
        """The revision of a transcript path this caller may read; ``None``: no such one."""
        if len(path.split("/")) != 3:
            return None  # no transcript has such a path: a missing reference, as any other
        sessions = await self.service.api.transcripts.list_sessions(agent_id=self.agent_id)
        by_path = {f"sessions/{s.agent_id}/{s.session_id}": s for s in sessions}
        session = by_path.get(path)
        if session is None:
            return None
        grants = _context_grants(self.context)
        if isinstance(self.context.authority, OperatorAuthority | HostAuthority):
            grants["trusted_agent_scope"] = self.agent_id
        if not _session_allowed(
            agent_id=self.agent_id,
            hit_agent=session.agent_id,
            hit_session=session.session_key,
            deny_sandboxed=self.service.config.deny_sandboxed,
            **grants,
        ):
            raise CapabilityDeniedError(f"this caller may not read transcript {path!r}")
        return transcript_revision(session.change_token)

    async def get(self, request: MemoryGetRequest) -> MemoryGetResult:
        """Read a source's lines; only a current source of the index is ever opened.

        Whether ``reference.id`` names a source is decided from the index's own view
        (the discovered memory files, the agent's transcripts) before any file is
        opened, and a memory file is read as a stream that keeps only the requested
        lines: a get for a large or foreign file costs nothing but the answer.
        """
        ref = request.reference
        path = ref.id
        if "\x00" in path:
            raise UnsupportedRequestError("reference.id must not contain NUL")
        from_line, lines = request.from_line, request.lines
        if ref.fragment is not None and from_line is None and lines is None:
            start, end = parse_line_fragment(ref.fragment)
            from_line, lines = start, end - start + 1
        # A transcript's whole revision (what its change token is now); a memory file's
        # comes with the read.
        whole: str | None = None
        provenance: tuple[MemoryProvenance, ...] = ()
        if path.startswith("sessions/"):
            whole = await self._transcript_revision(path)
            if whole is None:
                return MemoryGetResult(status="not_found", reference=ref)
        elif not may_read_memory_files(self.service, self.context):
            raise CapabilityDeniedError(
                f"{path[:200]!r} is an owner-private memory file; this caller may not read it"
            )
        async with self.service.use(self.agent_id) as index:
            try:
                read = await self.effect(
                    lambda: index.read(path, from_line=from_line or 1, lines=lines)
                )
            except SourcePathError:
                return MemoryGetResult(status="not_found", reference=ref)
            revision = whole if whole is not None else read.revision
            if ref.revision is not None:
                if not await self._lines_current(index, ref, read, whole):
                    return MemoryGetResult(status="not_found", reference=ref)
                revision = ref.revision
            if whole is None:
                writers = await self.service.api.memory_files.writers()
                provenance = entry_provenance(read.text, read.from_line, writers)
                self.context.assert_current()
            return MemoryGetResult(
                status="ok",
                reference=attrs.evolve(ref, revision=revision),
                text=read.text,
                from_line=read.from_line,
                lines=read.to_line - read.from_line + 1,
                total_lines=read.total_lines,
                truncated=read.truncated,
                provenance=provenance if read.source == "memory" else (),
            )

    async def _lines_current(
        self, index: MemoryIndex, ref: MemoryReference, read: ReadResult, whole: str | None
    ) -> bool:
        """Whether ``ref``'s revision still names what it cited: the whole source
        unchanged (``whole``: a transcript's revision now; a file's comes with
        ``read``), or the fragment's lines (where they were cited) with the same hash,
        or a piece of them as the index cut it."""
        wanted = (ref.revision or "").strip().lower()
        if len(wanted) < MIN_REVISION_CHARS:
            return False
        current = whole if whole is not None else read.revision
        if current is not None and current.startswith(wanted):
            return True
        if ref.fragment is None:
            return False
        start, end = parse_line_fragment(ref.fragment)
        if read.from_line == start and read.to_line == end and not read.truncated:
            cited = read
        else:
            try:
                cited = await index.read(ref.id, from_line=start, lines=end - start + 1)
            except SourcePathError:
                return False
        if cited.truncated or (cited.from_line, cited.to_line) != (start, end):
            return False
        lines = cited.text.split("\n")
        if lines_revision(lines).startswith(wanted):
            return True
        if whole is not None:
            # Transcript turns are cut with no overlap, a group of them or one turn,
            # each piece of a long turn starting with its speaker (turn_pieces).
            settings = self.service.config.settings
            return names_a_turn_piece(
                lines,
                cited.labels,
                wanted,
                max_tokens=settings.chunk_tokens,
                chars_per_token=settings.chars_per_token,
            )
        return piece_matcher(self.service, wanted)(lines)

    async def health(self) -> MemoryHealth:
        self.context.assert_current()
        try:
            async with self.service.use(self.agent_id) as index:
                status = index.status()
        except (MemoryCoreError, EmbeddingError, LexicalIndexError) as exc:
            return MemoryHealth(status="unavailable", message=type(exc).__name__)
        state: HealthStatus = "degraded" if status.skipped else "ready"
        return MemoryHealth(
            status=state,
            message=f"{len(status.skipped)} source(s) skipped" if status.skipped else None,
            details={
                "chunks": status.chunks,
                "memoryChunks": status.memory_chunks,
                "sessionChunks": status.session_chunks,
                "sources": status.sources,
                "skippedSources": len(status.skipped),
                "embedder": status.embedder_id,
                "model": status.embedder_model,
                "dims": status.dims,
                "searchMode": status.default_mode,
                "generation": status.generation,
            },
        )

    async def refresh(self) -> None:
        """Provider-owned refresh: sync the index with its sources now."""
        async with self.service.use(self.agent_id) as index:
            self.context.assert_current()
            await index.sync()


@attrs.define(eq=False)
class MemoryCoreProviderRuntime(ProviderRuntime["MemoryCoreService", MemoryCoreHandle]):
    """Memory Core's provider-neutral runtime."""

    handle_class = MemoryCoreHandle
    # What every handle declares: fixed by the configuration for the service's life,
    # so made (and its fields checked) once, not on every open.
    _capabilities: ProviderCapabilities | None = attrs.field(default=None, init=False)

    def capabilities(self) -> ProviderCapabilities:
        caps = self._capabilities
        if caps is None:
            caps = self._capabilities = ProviderCapabilities(
                sources=self.service.config.settings.sources,
                pagination=True,
                candidates=(),
                project_filter=True,
            )
        return caps

    async def authorize_search_hits(
        self, request: AuthorizeSearchHitsRequest
    ) -> Sequence[MemorySearchHit]:
        return authorize_hits(self.service, request)


@attrs.define(eq=False)
class MemoryCoreSearchManager:
    """The legacy, file-shaped manager over the same index (for v1 callers)."""

    service: MemoryCoreService
    agent_id: str
    context: MemoryCallerContext

    async def search(
        self,
        query: str,
        *,
        max_results: int,
        min_score: float | None,
        sources: tuple[str, ...],
        session_key: str | None,
    ) -> Sequence[LegacySearchResult]:
        handle = MemoryCoreHandle(
            self.service, self.agent_id, self.context, ProviderCapabilities(sources=sources)
        )
        result = await handle.search(
            MemorySearchRequest(query=query, max_results=max_results, min_score=min_score)
        )
        out = []
        for hit in result.hits:
            citation = hit.citation
            assert citation is not None
            out.append(
                LegacySearchResult(
                    path=citation.path,
                    start_line=citation.start_line,
                    end_line=citation.end_line,
                    score=hit.score or 0.0,
                    snippet=hit.excerpt,
                    source=hit.source,
                    citation=f"{citation.path}#L{citation.start_line}-L{citation.end_line}",
                    metadata=hit.metadata,
                )
            )
        return out

    async def read_file(
        self, path: str, *, from_line: int | None, lines: int | None
    ) -> LegacyReadResult | None:
        handle = MemoryCoreHandle(
            self.service, self.agent_id, self.context, ProviderCapabilities(sources=("memory",))
        )
        result = await handle.get(
            MemoryGetRequest(
                reference=MemoryReference(provider_id=PROVIDER_ID, id=path),
                from_line=from_line,
                lines=lines,
            )
        )
        if result.status != "ok" or result.text is None:
            return None
        return LegacyReadResult(
            path=path,
            text=result.text,
            from_line=result.from_line or 1,
            lines=result.lines,
            total_lines=result.total_lines,
            truncated=result.truncated,
        )

    async def status(self) -> dict[str, Any]:
        async with self.service.use(self.agent_id) as index:
            status = index.status()
            return {
                "status": "degraded" if status.skipped else "ready",
                "provider": PROVIDER_ID,
                "chunks": status.chunks,
                "sources": status.sources,
                "skipped": [{"path": s.path, "reason": s.reason} for s in status.skipped],
                "embedder": status.embedder_id,
                "model": status.embedder_model,
                "searchMode": status.default_mode,
                "index_dir": status.index_dir,
                "workspace_dir": status.workspace_dir,
            }

    async def close(self) -> None:
        return None


@attrs.define(eq=False)
class MemoryCoreLegacyRuntime:
    """The legacy file-shaped runtime (``MemoryPluginRuntime``)."""

    service: MemoryCoreService

    async def get_search_manager(
        self, *, agent_id: str, context: MemoryCallerContext
    ) -> MemoryCoreSearchManager:
        context.assert_current()
        return MemoryCoreSearchManager(self.service, agent_id, context)

    async def authorize_search_hits(
        self, request: AuthorizeSearchHitsRequest
    ) -> Sequence[MemorySearchHit]:
        return authorize_hits(self.service, request)


@attrs.define(eq=False)
class MemoryCoreArtifacts:
    """The exportable artifacts Memory Core declares: the workspace's memory files."""

    service: MemoryCoreService

    async def list_artifacts(self, *, agent_id: str) -> Sequence[PublicArtifact]:
        async with self.service.use(agent_id) as index:
            artifacts = []
            for path in index.source_paths("memory"):
                artifacts.append(PublicArtifact(id=path, kind="memory-file", path=path))
            return artifacts


@attrs.define(eq=False)
class MemoryCoreMaintenance(ProviderMaintenance["MemoryCoreService"]):
    """Reindex, forget and describe for local operators (the ``claw memory`` CLI)."""

    provider_name = "Memory Core"

    async def reindex(
        self,
        *,
        agent_id: str,
        context: MemoryCallerContext,
        force: bool = False,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> dict[str, Any]:
        self.operator(context)
        async with self.service.use(agent_id, sync_on_open=False) as index:
            report = await index.sync(force=force, progress=progress)
            hidden = await index.forgotten()
            return {
                "forgotten": len(hidden),
                "indexed": list(report.indexed),
                "removed": list(report.removed),
                "skipped": [{"path": s.path, "reason": s.reason} for s in report.skipped],
                "chunksAdded": report.chunks_added,
                "chunksRemoved": report.chunks_removed,
                "embedded": report.embedded,
                "generation": report.generation,
            }

    async def warm(
        self,
        *,
        agent_id: str,
        context: MemoryCallerContext,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> None:
        """Open (and, as a first search would, sync) the agent's index, with progress."""
        context.assert_current()
        if not may_read_memory_files(self.service, context):
            raise CapabilityDeniedError("warming Memory Core needs an operator or the owner")
        async with self.service.use(agent_id, progress=progress):
            context.assert_current()

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
        self.operator(context)
        by = self.service.api.describe_writer(context).to_wire()
        async with self.service.use(agent_id) as index:
            result = await index.forget(
                path=path, session_id=session_id, source=source, dry_run=dry_run, by=by
            )
            report: dict[str, Any] = {
                "dryRun": result.dry_run,
                "chunks": len(result.chunk_ids),
                "paths": list(result.paths),
            }
            if result.forget_id is not None:
                report["forgetId"] = result.forget_id
            return report

    async def forgotten(
        self, *, agent_id: str, context: MemoryCallerContext
    ) -> list[dict[str, Any]]:
        """The index-level forgets in effect (paths, sessions, sources hidden from search),
        newest first: each one's id (for :meth:`unforget`), what it hid, when, by whom."""
        self.operator(context)
        async with self.service.use(agent_id) as index:
            found = await index.forgotten()
        return [
            {
                "id": f.id,
                "criteria": dict(f.criteria),
                "paths": list(f.paths),
                "chunks": f.chunks,
                "at": f.at,
                **({"by": dict(f.by)} if f.by is not None else {}),
            }
            for f in found
        ]

    async def unforget(
        self, *, agent_id: str, context: MemoryCallerContext, forget_id: str
    ) -> dict[str, Any]:
        """Take an index-level forget back: what it hid is indexed again (as it is now)."""
        self.operator(context)
        if not isinstance(forget_id, str) or not forget_id.strip():
            raise InvalidSearchError("unforget needs the id of a forget (claw memory forgotten)")
        async with self.service.use(agent_id) as index:
            found = await index.unforget(forget_id.strip().lower())
        if found is None:
            raise InvalidSearchError(
                f"no forget {forget_id[:40]!r} in this index (claw memory forgotten lists them)"
            )
        return {"id": found.id, "criteria": dict(found.criteria), "paths": list(found.paths)}

    async def add(
        self,
        *,
        agent_id: str,
        context: MemoryCallerContext,
        request: MemoryAddRequest,
        tool: str | None = None,
    ) -> MemoryAddResult:
        """Append a stamped memory to a memory file (see :mod:`claw_memory._writes`);
        ``tool`` is the tool the host says the write came through (``memory_add``)."""
        return await add_memory(self.service, context, request, tool=tool)

    async def forget_reference(
        self,
        *,
        agent_id: str,
        context: MemoryCallerContext,
        reference: MemoryReference,
        dry_run: bool = False,
        whole_range: bool = False,
    ) -> MemoryForgetResult:
        """Remove the referenced entry of a memory file (``whole_range``: exactly the
        referenced lines), or a whole source's chunks."""
        return await forget_reference(
            self.service, agent_id, context, reference, dry_run=dry_run, whole_range=whole_range
        )

    async def purge(
        self,
        *,
        agent_id: str,
        context: MemoryCallerContext,
        request: MemoryPurgeRequest,
        dry_run: bool = False,
    ) -> MemoryPurgeResult:
        """Delete memory for good, every copy (see :mod:`claw_memory._purge`)."""
        return await purge_memory(self.service, context, request, dry_run=dry_run)

    async def restore(
        self,
        *,
        agent_id: str,
        context: MemoryCallerContext,
        removal_id: str,
        dry_run: bool = False,
    ) -> MemoryRestoreResult:
        """Put back what a forget removed from a memory file (the workspace's journal)."""
        return await restore_removal(self.service, context, removal_id, dry_run=dry_run)

    async def removals(
        self, *, agent_id: str, context: MemoryCallerContext, limit: int = 50
    ) -> Sequence[MemoryRemoval]:
        """The workspace's most recent removals from memory files, newest first."""
        return await list_removals(self.service, context, limit=limit)

    async def describe(self, *, agent_id: str, context: MemoryCallerContext) -> dict[str, Any]:
        self.operator(context)
        async with self.service.use(agent_id) as index:
            status = index.status()
            return {
                "workspaceDir": status.workspace_dir,
                "indexDir": status.index_dir,
                "identity": {
                    "embedder": status.embedder_id,
                    "model": status.embedder_model,
                    "dims": status.dims,
                    "chunkTokens": self.service.config.settings.chunk_tokens,
                    "chunkOverlap": self.service.config.settings.chunk_overlap,
                    "sources": list(self.service.config.settings.sources),
                },
                "generation": status.generation,
                "indexGeneration": status.index_generation,
                "chunks": status.chunks,
                "memoryChunks": status.memory_chunks,
                "sessionChunks": status.session_chunks,
                "sources": status.sources,
                "skipped": [{"path": s.path, "reason": s.reason} for s in status.skipped],
                "tombstones": status.tombstones,
                "searchMode": status.default_mode,
                "lastSyncAt": status.last_sync_at,
            }


FLUSH_SYSTEM_PROMPT = (
    "The conversation is about to be compacted. Save what is worth remembering before "
    "it is summarised: append concise, self-contained notes (facts, decisions, "
    "preferences, people, dates, open todos) to {path} with the write tool. Read the "
    "file first and do not repeat what it already holds. Do not answer the user. When "
    "you are done, or if there is nothing worth saving, reply exactly NO_REPLY."
)
FLUSH_PROMPT = "Pre-compaction memory flush: store durable memories in {path} now."


def flush_plan(request: MemoryFlushPlanRequest) -> MemoryFlushPlan:
    """Memory Core's file-arm flush: append to today's ``memory/YYYY-MM-DD.md``."""
    path = daily_note_path(request.now)
    return MemoryFlushPlan.from_timing(
        request.timing,
        relative_path=path,
        prompt=FLUSH_PROMPT.format(path=path),
        system_prompt=FLUSH_SYSTEM_PROMPT.format(path=path),
    )


def build_capability(service: MemoryCoreService) -> MemoryPluginCapability:
    """Memory Core's memory capability."""

    def guidance(agent_id: str, caller: MemoryCallerContext) -> str:
        if may_read_memory_files(service, caller):
            return (
                "Your long-term memory (MEMORY.md and memory/*.md) and past conversations "
                "are searchable."
            )
        return (
            "Only this conversation's own history is searchable here; the owner's private "
            "memory files are not available in this chat."
        )

    return sdk_build_capability(
        provider_runtime=MemoryCoreProviderRuntime(service),
        guidance=guidance,
        runtime=MemoryCoreLegacyRuntime(service),
        public_artifacts=MemoryCoreArtifacts(service),
        recall_tool_names=RECALL_TOOLS,
        maintenance=MemoryCoreMaintenance(service),
        flush_plan_resolver=flush_plan,
    )
