"""Values of the provider-neutral memory runtime: declarations, requests, results.

A memory provider declares what it supports (:class:`ProviderCapabilities`) and the
host enforces those declarations before any provider code runs: unsupported
operations are declared, not discovered by calling the provider and handling failure.
References are provider-scoped (:class:`MemoryReference` always names its provider),
and every result is an explicit value: a ``not_found`` is a status, while denial and
failure are errors, never an empty success.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal, get_args

import attrs

from .._capabilities import CallerAuthority, SessionAuthority
from .._display import Table, html_record, utc_text
from .._errors import ContractError
from .._input import check_text

Source = Literal["memory", "sessions"]
CandidateKind = Literal["trigger", "project"]
WriterKind = Literal["operator", "run", "flush", "host"]
HealthStatus = Literal["ready", "degraded", "unavailable"]
GetStatus = Literal["ok", "not_found"]

SOURCES: tuple[Source, ...] = get_args(Source)
WRITER_KINDS: tuple[WriterKind, ...] = get_args(WriterKind)
CANDIDATE_KINDS: tuple[CandidateKind, ...] = get_args(CandidateKind)
HEALTH_STATUSES: tuple[HealthStatus, ...] = get_args(HealthStatus)


def _names(value: Any, allowed: tuple[str, ...], what: str, *, non_empty: bool) -> Any:
    if isinstance(value, str):
        raise ContractError(f"{what} must be a sequence of names, not the string {value!r}")
    items = tuple(value)
    for item in items:
        if item not in allowed:
            raise ContractError(
                f"{what} contains {item!r}; allowed: {', '.join(repr(a) for a in allowed)}"
            )
    if non_empty and not items:
        raise ContractError(f"{what} must not be empty")
    return tuple(dict.fromkeys(items))


def _declared_sources(value: Iterable[str]) -> tuple[Source, ...]:
    result: tuple[Source, ...] = _names(value, SOURCES, "capabilities.sources", non_empty=True)
    return result


def _declared_candidates(value: Iterable[str]) -> tuple[CandidateKind, ...]:
    result: tuple[CandidateKind, ...] = _names(
        value, CANDIDATE_KINDS, "capabilities.candidates", non_empty=False
    )
    return result


def _requested_sources(value: Iterable[str] | None) -> tuple[Source, ...] | None:
    if value is None:
        return None
    result: tuple[Source, ...] = _names(value, SOURCES, "sources", non_empty=True)
    return result


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class ProviderCapabilities:
    """What a provider handle declares it supports.

    ``sources``: the searchable corpora (non-empty; ``"memory"`` and/or
    ``"sessions"``). ``pagination``: whether search accepts a ``cursor``.
    ``candidates``: the automatic-recall candidate kinds (``"trigger"``, ``"project"``);
    a handle has a ``candidates`` method exactly when this is non-empty.
    ``project_filter``: whether search and candidates accept ``active_project_keys``.
    """

    sources: tuple[Source, ...] = attrs.field(converter=_declared_sources)
    pagination: bool = False
    candidates: tuple[CandidateKind, ...] = attrs.field(default=(), converter=_declared_candidates)
    project_filter: bool = False


@attrs.frozen
class MemoryReference:
    """A provider-scoped handle on one memory record.

    ``id`` and ``revision`` are the provider's own; ``fragment`` narrows to a part of
    the record (the legacy adapter uses ``"L<start>-L<end>"``). A reference does not
    grant access: the provider authorizes every ``get``.
    """

    provider_id: str
    id: str
    revision: str | None = None
    fragment: str | None = None


@attrs.frozen
class Citation:
    """Where a hit comes from, for a human: a (virtual) path and line range."""

    path: str
    start_line: int
    end_line: int
    source: Source = "memory"


_WIRE_PROVENANCE = (
    ("agent_id", "agentId"),
    ("connection_id", "connectionId"),
    ("session_key", "sessionKey"),
    ("session_id", "sessionId"),
    ("lifecycle_revision", "lifecycleRevision"),
    ("owner", "owner"),
    ("flush_id", "flushId"),
    ("tool", "tool"),
    ("plugin_id", "pluginId"),
    ("at", "at"),
    ("start_line", "startLine"),
    ("end_line", "endLine"),
)


@attrs.frozen
class MemoryProvenance:
    """Who wrote a memory entry (or made a change), as the host recorded it at the time.

    ``kind`` is who acted: ``"operator"`` (an operator connection, ``connection_id``:
    ``"cli"`` for the local ``claw`` command, ``"local"`` for ``claw.open_memory``, the
    gateway's or MCP server's connection otherwise), ``"run"`` (an agent run:
    ``agent_id``, ``session_key``, the incarnation ``session_id`` +
    ``lifecycle_revision``, and ``owner``: whether its audience was the owner's),
    ``"flush"`` (a pre-compaction flush run: the run's fields and its ``flush_id``) or
    ``"host"`` (the host's own maintenance). ``tool`` and ``plugin_id`` name the tool a
    run wrote through (``memory_add`` of ``memory-core``; the flush's ``write`` is the
    host's, plugin ``claw``). ``at`` is the wall-clock time of the write.

    On a search hit or a get, ``start_line``/``end_line`` say which lines of the result
    the entry occupies (``None`` for a record-shaped provider, whose result is the entry).
    The host fills provenance in, never the writer: a plugin cannot claim another writer.
    """

    kind: WriterKind
    agent_id: str | None = None
    connection_id: str | None = None
    session_key: str | None = None
    session_id: str | None = None
    lifecycle_revision: int | None = None
    owner: bool | None = None
    flush_id: str | None = None
    tool: str | None = None
    plugin_id: str | None = None
    at: float | None = None
    start_line: int | None = None
    end_line: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.kind not in WRITER_KINDS:
            raise ContractError(
                f"provenance kind must be one of {', '.join(WRITER_KINDS)}, got {self.kind!r}"
            )

    @property
    def label(self) -> str:
        """Who, in a few words (``operator cli``, ``run agent:main:main via memory_add``):
        what a table or a listing shows."""
        who = {
            "operator": f"operator {self.connection_id or '(unnamed connection)'}",
            "run": f"run {self.session_key}",
            "flush": f"flush {self.flush_id} of {self.session_key}",
            "host": "host",
        }[self.kind]
        return who + (f" via {self.tool}" if self.tool is not None else "")

    def row(self) -> dict[str, Any]:
        """The provenance as one flat row, every field in a fixed order (``None`` where
        it does not apply): ``hit.provenance_table()`` draws several."""
        lines = None
        if self.start_line is not None:
            lines = f"L{self.start_line}-L{self.end_line or self.start_line}"
        return {
            "who": self.label,
            "kind": self.kind,
            "lines": lines,
            "written": utc_text(self.at),
            "agent": self.agent_id,
            "connection": self.connection_id,
            "session": self.session_key,
            "session id": self.session_id,
            "revision": self.lifecycle_revision,
            "owner": self.owner,
            "flush": self.flush_id,
            "tool": self.tool,
            "plugin": self.plugin_id,
        }

    def _repr_html_(self) -> str:
        fields = {k: v for k, v in self.row().items() if v is not None}
        return html_record("memory provenance", fields)

    def to_wire(self) -> dict[str, Any]:
        """The camelCase form the journal, the gateway and MCP carry (``None``s left out)."""
        wire: dict[str, Any] = {"kind": self.kind}
        for name, key in _WIRE_PROVENANCE:
            value = getattr(self, name)
            if value is not None:
                wire[key] = value
        return wire

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> MemoryProvenance:
        """Read :meth:`to_wire`'s form back (unknown keys are ignored: newer writers)."""
        if not isinstance(wire, Mapping):
            raise ContractError("provenance must be an object")
        values = {name: wire.get(key) for name, key in _WIRE_PROVENANCE if key in wire}
        return cls(kind=wire.get("kind"), **values)  # type: ignore[arg-type]


def _provenance_tuple(value: Iterable[MemoryProvenance]) -> tuple[MemoryProvenance, ...]:
    return tuple(value)


def _provenance_table(
    provenance: Iterable[MemoryProvenance], *, caption: str = "who wrote it"
) -> Table:
    """Provenance as a table, one row per entry, without the fields no row has."""
    return Table.of(provenance, caption=caption).without_empty_columns()


def _with_provenance(page: str, provenance: tuple[MemoryProvenance, ...]) -> str:
    return page + _provenance_table(provenance)._repr_html_() if provenance else page


def _labels(provenance: tuple[MemoryProvenance, ...]) -> str:
    """Who wrote the entries, in one cell: their labels joined by ``; ``."""
    return "; ".join(p.label for p in provenance)


def _reference_text(reference: MemoryReference) -> str:
    """A reference in a row: its id and ``#fragment`` (when it has one)."""
    return reference.id + (f"#{reference.fragment}" if reference.fragment else "")


@attrs.frozen
class MemorySearchHit:
    """One search result: a reference, an excerpt, and optionally a score and citation.

    ``source`` says which corpus the hit comes from; the host withholds
    ``"sessions"`` hits unless the runtime's ``authorize_search_hits`` admits them.
    ``metadata`` is provider-owned (for example the transcript turns a chunk spans).
    ``provenance`` (optional; empty when the provider does not know) says who wrote the
    entries the hit covers, one :class:`MemoryProvenance` per entry with the lines it
    occupies. It reaches only callers the hit itself reaches.
    """

    reference: MemoryReference
    excerpt: str
    score: float | None = None
    citation: Citation | None = None
    source: Source = "memory"
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    provenance: tuple[MemoryProvenance, ...] = attrs.field(default=(), converter=_provenance_tuple)

    def row(self) -> dict[str, Any]:
        """The hit as one flat row (the table form; see :meth:`MemorySearchResult.table`)."""
        c = self.citation
        row: dict[str, Any] = {
            "score": self.score,
            "source": self.source,
            "citation": f"{c.path}#L{c.start_line}-L{c.end_line}" if c else None,
            "excerpt": self.excerpt,
            "reference": _reference_text(self.reference),
        }
        if self.provenance:
            row["provenance"] = _labels(self.provenance)
        return row

    def provenance_table(self) -> Table:
        """Who wrote the hit's entries, one row per entry (the lines each occupies)."""
        return _provenance_table(self.provenance)

    def _repr_html_(self) -> str:
        return _with_provenance(html_record("memory search hit", self.row()), self.provenance)


#: The most hits one search may ask for (a page; more come through the cursor).
MAX_SEARCH_RESULTS = 100


@attrs.frozen
class MemorySearchRequest:
    """A neutral search. ``sources=None`` means every declared source.

    ``min_score`` must be honoured by every provider; ``lexical_only`` is a hint a
    provider may ignore; ``cursor`` needs ``pagination``; non-empty
    ``active_project_keys`` needs ``project_filter``.

    Constructing one is the Python API's boundary: the values are checked here, once
    (``max_results`` from 1 to :data:`MAX_SEARCH_RESULTS`, ``min_score`` from 0 to 1),
    and nothing behind it (the guard, the provider) checks them again.
    """

    query: str
    max_results: int = 20
    min_score: float | None = None
    cursor: str | None = None
    sources: tuple[Source, ...] | None = attrs.field(default=None, converter=_requested_sources)
    lexical_only: bool = False
    active_project_keys: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.query, str):
            raise ContractError("search query must be a string")
        if isinstance(self.max_results, bool) or not isinstance(self.max_results, int):
            raise ContractError("max_results must be an integer")
        if not 1 <= self.max_results <= MAX_SEARCH_RESULTS:
            raise ContractError(
                f"max_results must be from 1 to {MAX_SEARCH_RESULTS}, got {self.max_results}"
            )
        if self.min_score is not None and (
            isinstance(self.min_score, bool)
            or not isinstance(self.min_score, int | float)
            or not math.isfinite(self.min_score)
            or not 0 <= self.min_score <= 1
        ):
            raise ContractError(f"min_score must be a number from 0 to 1, got {self.min_score!r}")

    @classmethod
    def _trusted(
        cls,
        *,
        query: str,
        max_results: int,
        min_score: float | None,
        cursor: str | None,
        sources: tuple[Source, ...] | None,
    ) -> MemorySearchRequest:
        """A request from a boundary that has checked every value already (the gateway's
        parser, whose own bounds are narrower): the same value, not checked twice."""
        request: MemorySearchRequest = object.__new__(cls)
        for name, value in (
            ("query", query),
            ("max_results", max_results),
            ("min_score", min_score),
            ("cursor", cursor),
            ("sources", sources),
            ("lexical_only", False),
            ("active_project_keys", ()),
        ):
            object.__setattr__(request, name, value)
        return request

    def _replace(self, **changes: Any) -> MemorySearchRequest:
        """A copy with ``changes``, values the caller has checked (the guard narrowing
        ``sources`` to the declared ones): not checked again."""
        request: MemorySearchRequest = object.__new__(type(self))
        for field in attrs.fields(MemorySearchRequest):
            object.__setattr__(
                request, field.name, changes.get(field.name, getattr(self, field.name))
            )
        return request


def _hits_tuple(value: Iterable[MemorySearchHit]) -> tuple[MemorySearchHit, ...]:
    return tuple(value)


@attrs.frozen
class SearchCoverage:
    """Which sources a search actually covered, and whether it was complete."""

    sources: tuple[Source, ...]
    complete: bool = True


@attrs.frozen
class MemorySearchResult:
    """Hits plus optional pagination, coverage and warning."""

    hits: tuple[MemorySearchHit, ...] = attrs.field(converter=_hits_tuple)
    next_cursor: str | None = None
    coverage: SearchCoverage | None = None
    warning: str | None = None

    def table(self) -> Table:
        """The hits as rows (rank, score, source, citation, excerpt, reference), with
        the warning, an incomplete coverage and the next cursor as notes."""
        notes = [self.warning or ""]
        if self.coverage is not None and not self.coverage.complete:
            notes.append(f"coverage incomplete: {', '.join(self.coverage.sources)}")
        if self.next_cursor is not None:
            notes.append(f"more: cursor {self.next_cursor}")
        return Table.of(
            ({"rank": rank, **hit.row()} for rank, hit in enumerate(self.hits, 1)),
            caption=f"{len(self.hits)} hit(s)",
            notes=notes,
        )

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()


@attrs.frozen
class MemoryGetRequest:
    """Resolve a reference, optionally at a revision and within read bounds (1-based lines)."""

    reference: MemoryReference
    from_line: int | None = None
    lines: int | None = None

    def __attrs_post_init__(self) -> None:
        for name in ("from_line", "lines"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ContractError(f"{name} must be an integer")
            if value is not None and value < 1:
                raise ContractError(f"{name} must be at least 1, got {value}")


@attrs.frozen
class MemoryGetResult:
    """An explicit answer to a get: ``ok`` with text, or ``not_found``.

    ``provenance`` (optional) says who wrote the entries of the text returned, as on a
    :class:`MemorySearchHit`.
    """

    status: GetStatus
    reference: MemoryReference
    text: str | None = None
    from_line: int | None = None
    lines: int | None = None
    total_lines: int | None = None
    truncated: bool = False
    provenance: tuple[MemoryProvenance, ...] = attrs.field(default=(), converter=_provenance_tuple)

    def row(self) -> dict[str, Any]:
        """The answer as one flat row: status, reference, the lines returned, the text."""
        lines = None
        if self.from_line is not None and self.lines is not None:
            lines = f"L{self.from_line}-L{self.from_line + max(self.lines, 1) - 1}"
        row: dict[str, Any] = {
            "status": self.status,
            "reference": _reference_text(self.reference),
            "lines": lines,
            "of lines": self.total_lines,
            "truncated": self.truncated,
            "text": self.text,
        }
        if self.provenance:
            row["provenance"] = _labels(self.provenance)
        return row

    def provenance_table(self) -> Table:
        """Who wrote the entries of the text returned, one row per entry."""
        return _provenance_table(self.provenance)

    def _repr_html_(self) -> str:
        return _with_provenance(html_record("memory get", self.row()), self.provenance)

    def __attrs_post_init__(self) -> None:
        if self.status not in ("ok", "not_found"):
            raise ContractError(f"get status must be 'ok' or 'not_found', got {self.status!r}")
        if self.status == "ok" and self.text is None:
            raise ContractError("an 'ok' get result must carry text")


@attrs.frozen
class MemoryHealth:
    """Provider health; ``details`` must not reveal partition content or host paths."""

    status: HealthStatus
    message: str | None = None
    details: Mapping[str, Any] = attrs.field(factory=dict)

    def row(self) -> dict[str, Any]:
        """Status, message and each detail, as one flat row."""
        return {"status": self.status, "message": self.message, **self.details}

    def _repr_html_(self) -> str:
        return html_record("memory provider health", self.row())

    def __attrs_post_init__(self) -> None:
        if self.status not in HEALTH_STATUSES:
            raise ContractError(
                f"health status must be one of {', '.join(HEALTH_STATUSES)}, got {self.status!r}"
            )


@attrs.frozen
class MemoryCandidatesRequest:
    """Ask for automatic-recall candidates of one declared kind."""

    kind: CandidateKind
    query: str | None = None
    active_project_keys: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    max_results: int = 10


@attrs.frozen
class MemoryCandidate:
    """An automatic-recall candidate with provider-owned project or trigger metadata."""

    reference: MemoryReference
    excerpt: str
    kind: CandidateKind
    score: float | None = None
    project_key: str | None = None
    trigger: str | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict)


def _candidates_tuple(value: Iterable[MemoryCandidate]) -> tuple[MemoryCandidate, ...]:
    return tuple(value)


@attrs.frozen
class MemoryCandidatesResult:
    """Candidates for automatic recall (may be empty: eligibility is the provider's)."""

    candidates: tuple[MemoryCandidate, ...] = attrs.field(converter=_candidates_tuple)


@attrs.frozen
class AuthorizeSearchHitsRequest:
    """What the host supplies to ``authorize_search_hits`` before hits reach a caller.

    ``session_key`` and ``sandboxed`` describe the requesting session (``None`` for a
    host or operator caller, in which case ``trusted_agent_scope`` names the agent whose
    own session hits may be returned). ``audience`` and ``conversation_recall`` are the
    host-minted grants of the requesting session, if any.
    """

    agent_id: str
    hits: tuple[MemorySearchHit, ...]
    session_key: str | None = None
    sandboxed: bool = False
    trusted_agent_scope: str | None = None
    audience: Any = None
    conversation_recall: Any = None

    @classmethod
    def for_caller(
        cls, *, agent_id: str, authority: CallerAuthority, hits: tuple[MemorySearchHit, ...]
    ) -> AuthorizeSearchHitsRequest:
        """The request for hits found for ``authority`` (a run's caller authority).

        A session's authority supplies its session, sandboxing and host-minted grants;
        any other authority (an operator's or the host's) is trusted with the agent's own
        session hits. The host's runtime and the bundled plugins' search tools build
        their requests here, so the rule lives once.
        """
        if isinstance(authority, SessionAuthority):
            return cls(
                agent_id=agent_id,
                hits=hits,
                session_key=authority.session_key,
                sandboxed=authority.sandboxed,
                audience=authority.audience,
                conversation_recall=authority.conversation_recall,
            )
        return cls(agent_id=agent_id, hits=hits, trusted_agent_scope=agent_id)


@attrs.frozen
class MemoryAddRequest:
    """Write one memory: ``text`` appended, with a timestamp, to a provider memory file.

    ``path`` (a provider path such as ``memory/notes.md``) and ``section`` (a heading
    to file the entry under) are optional; a provider picks its own default target
    (Memory Core: today's ``memory/YYYY-MM-DD.md``). ``now`` is the wall-clock time the
    entry is stamped with (seconds since the epoch; ``None``: the current time).
    """

    text: str
    path: str | None = None
    section: str | None = None
    now: float | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise ContractError("text must be non-empty text to remember")
        for name in ("path", "section"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ContractError(f"{name} must be non-empty text when given")
        # Text that is not text (a lone surrogate, NUL) is the caller's mistake, refused
        # here rather than by a provider's file or database write.
        for name in ("text", "path", "section"):
            value = getattr(self, name)
            if value is not None:
                check_text(value, name)
        if self.now is not None and (
            isinstance(self.now, bool)
            or not isinstance(self.now, int | float)
            or not math.isfinite(self.now)
        ):
            raise ContractError(f"now must be a finite number of seconds, got {self.now!r}")


@attrs.frozen
class MemoryAddResult:
    """Where an added memory landed: a reference (with line fragment) and its citation."""

    reference: MemoryReference
    citation: Citation
    timestamp: str


@attrs.frozen
class MemoryForgetResult:
    """What forgetting a reference removed (or, with ``dry_run``, would remove).

    ``removed_text`` is the text taken out of the source when the reference named lines
    of it; ``chunks`` counts derived index entries dropped when it named a whole source.
    ``removal_id`` names the removal in the provider's undo journal (pass it to
    ``host.memory.restore``; ``None`` for a dry run or a provider without undo);
    ``start_line``/``end_line`` are the lines removed, ``entries`` how many entries they
    held (see the provider's matched-entry rule). ``forget_id`` names an index-level
    forget (a whole source's chunks hidden): the provider's ``unforget`` takes it back.
    """

    reference: MemoryReference
    dry_run: bool
    paths: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    chunks: int = 0
    removed_text: str | None = None
    removal_id: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    entries: int | None = None
    forget_id: str | None = None


RemovalStatus = Literal["forgotten", "restored", "purged"]


@attrs.frozen
class MemoryRemoval:
    """One entry of the undo journal's listing: what a forget removed, and what became of it.

    ``id`` is what ``host.memory.restore`` takes. ``status`` is ``"forgotten"`` (it can be
    restored), ``"restored"`` or ``"purged"`` (its text is gone for good; ``text`` is
    ``None``). ``by`` is who forgot it, ``at`` when; ``provenance`` who had written it.
    """

    id: str
    path: str
    start_line: int
    end_line: int
    text: str | None
    at: float
    status: RemovalStatus
    by: MemoryProvenance | None = None
    provenance: tuple[MemoryProvenance, ...] = attrs.field(default=(), converter=_provenance_tuple)

    def row(self) -> dict[str, Any]:
        """The removal as one flat row (``claw.jupyter.table(removals)`` draws several)."""
        return {
            "id": self.id,
            "status": self.status,
            "where": f"{self.path}#L{self.start_line}-L{self.end_line}",
            "forgotten": utc_text(self.at),
            "by": None if self.by is None else self.by.label,
            "written by": _labels(self.provenance) or None,
            "text": self.text,
        }

    def _repr_html_(self) -> str:
        page = html_record(f"memory removal {self.id}", self.row())
        return _with_provenance(page, self.provenance)


RestoreMode = Literal["in-place", "appended", "present"]


@attrs.frozen
class MemoryRestoreResult:
    """What a restore put back, and where.

    ``mode``: ``"in-place"`` (the lines went back where they were), ``"appended"`` (the
    file changed so that their place is ambiguous: they were appended under a marked
    heading, never over anything) or ``"present"`` (they were already there; nothing
    was written). ``reference`` cites the restored lines. ``already`` is true when the
    removal had been restored before (a retried restore answers, it does not repeat).
    """

    removal_id: str
    reference: MemoryReference
    mode: RestoreMode
    dry_run: bool = False
    already: bool = False


@attrs.frozen
class MemoryPurgeRequest:
    """What to delete for good (exactly one of ``text``, ``reference``, ``removal_id``).

    ``text``: every memory entry containing it, everywhere the provider keeps one.
    ``reference``: what it names (Memory Core: the entry its lines lie in, every exact
    copy of that entry, and every undo copy; ``whole_range`` as for forget).
    ``removal_id``: the undo copy a forget kept.
    """

    text: str | None = None
    reference: MemoryReference | None = None
    removal_id: str | None = None
    whole_range: bool = False

    def __attrs_post_init__(self) -> None:
        given = [n for n in ("text", "reference", "removal_id") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ContractError(
                "purge needs exactly one of text, reference or removal_id"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.text is not None:
            if not isinstance(self.text, str) or not self.text.strip():
                raise ContractError("text must be non-empty text to purge")
            if "\x00" in self.text or "\n" in self.text:
                raise ContractError("text to purge must be one line without NUL characters")
            if len(self.text) > 4096:
                raise ContractError("text to purge is longer than 4096 characters")
        if self.reference is not None and not isinstance(self.reference, MemoryReference):
            raise ContractError("reference must be a MemoryReference")
        if self.removal_id is not None and (
            not isinstance(self.removal_id, str) or not self.removal_id.strip()
        ):
            raise ContractError("removal_id must be the id of a removal")


@attrs.frozen
class MemoryPurgeResult:
    """What a purge deleted (or, with ``dry_run``, would delete).

    ``paths``: the sources it changed (Memory Core: memory files; Memory Records: record
    references); ``entries``: how many entries (records) it deleted; ``removals``: the
    undo copies it erased. ``warning`` names copies the provider could not reach (text
    in transcripts, or in files it does not write).
    """

    dry_run: bool
    paths: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    entries: int = 0
    removals: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    warning: str | None = None
