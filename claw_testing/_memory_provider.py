"""A record-only native memory provider for tests: no files, every call recorded.

:class:`RecordingMemoryProvider` owns a list of :class:`MemoryRecord` values and serves
them through the provider-neutral runtime exactly as a third-party record store
would: it declares its capabilities, applies visibility from the supplied authority
and audience, calls ``context.assert_current()`` immediately before each effect
(including after its own awaits), rejects an audience of another agent, and records
every call so tests can prove what the host did or did not let through.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

import attrs
import trio

from claw import (
    CapabilityDeniedError,
    HostAuthority,
    MemoryCallerContext,
    OperatorAuthority,
    SessionAuthority,
)
from claw.memory import (
    AuthorizeSearchHitsRequest,
    Citation,
    MemoryCandidate,
    MemoryCandidatesRequest,
    MemoryCandidatesResult,
    MemoryGetRequest,
    MemoryGetResult,
    MemoryHealth,
    MemoryPluginCapability,
    MemoryProviderOpenResult,
    MemoryReference,
    MemorySearchHit,
    MemorySearchRequest,
    MemorySearchResult,
    ProviderCapabilities,
    SearchCoverage,
)
from claw.plugin_sdk import ProviderHandle, offset_cursor, parse_offset_cursor

Visibility = Literal["shared", "owner-private", "conversation"]

_WORD = re.compile(r"\w+", re.UNICODE)


@attrs.frozen
class MemoryRecord:
    """One record of the recording provider.

    ``visibility`` decides who may see it: ``"shared"`` (any caller of the agent),
    ``"owner-private"`` (an owner-private audience) or ``"conversation"`` (a
    conversation audience, or a recall pass, for ``conversation_key``). Records with
    ``source="sessions"`` are transcript hits of ``session_key`` and are released only
    through ``authorize_search_hits``.
    """

    id: str
    text: str
    agent_id: str = "main"
    source: Literal["memory", "sessions"] = "memory"
    visibility: Visibility = "shared"
    conversation_key: str | None = None
    session_key: str | None = None
    project_key: str | None = None
    trigger: str | None = None
    revision: str = "1"


@attrs.define(eq=False)
class _Handle(ProviderHandle["RecordingMemoryProvider"]):
    """A caller-bound handle over the recording provider (its ``service``)."""

    def _effect(self, name: str, detail: Any = None) -> None:
        # The provider's own currency check right before it acts.
        self.context.assert_current()
        self.service.calls.append((name, detail))

    def _visible(self, record: MemoryRecord) -> bool:
        if record.agent_id != self.agent_id:
            return False
        if record.source == "sessions":
            return True  # released (or not) by authorize_search_hits
        if record.visibility == "shared":
            return True
        authority = self.context.authority
        if not isinstance(authority, SessionAuthority):
            return False  # operator and host authority grant no private or conversation access
        audience = authority.audience
        if record.visibility == "owner-private":
            return audience is not None and audience.kind == "owner-private"
        if (
            audience is not None
            and audience.kind == "conversation"
            and audience.session_key == record.conversation_key
        ):
            return True
        recall = authority.conversation_recall
        return recall is not None and record.conversation_key in recall.conversation_keys

    def _hit(self, record: MemoryRecord, score: float) -> MemorySearchHit:
        return MemorySearchHit(
            reference=MemoryReference(
                provider_id=self.service.provider_id, id=record.id, revision=record.revision
            ),
            excerpt=record.text[:200],
            score=score,
            citation=Citation(
                path=f"records/{record.id}", start_line=1, end_line=1, source=record.source
            ),
            source=record.source,
            metadata={"session_key": record.session_key, "agent_id": record.agent_id},
        )

    async def search(self, request: MemorySearchRequest) -> MemorySearchResult:
        self.service.calls.append(("search.enter", request))
        if self.service.gate is not None:
            await self.service.gate.wait()
        await trio.lowlevel.checkpoint()
        self._effect("search", request)
        terms = {w.lower() for w in _WORD.findall(request.query)}
        scored: list[tuple[float, MemoryRecord]] = []
        sources = request.sources or self.capabilities.sources
        for record in self.service.records:
            if record.source not in sources or not self._visible(record):
                continue
            if (
                request.active_project_keys
                and record.project_key not in request.active_project_keys
            ):
                continue
            words = {w.lower() for w in _WORD.findall(record.text)}
            if not terms:
                continue
            score = len(terms & words) / len(terms)
            if score <= 0 or (request.min_score is not None and score < request.min_score):
                continue
            scored.append((score, record))
        scored.sort(key=lambda item: (-item[0], item[1].id))
        start = parse_offset_cursor(request.cursor, self.service.provider_id)
        page = scored[start : start + request.max_results]
        more = self.capabilities.pagination and start + request.max_results < len(scored)
        next_cursor = offset_cursor(start + request.max_results if more else None)
        return MemorySearchResult(
            hits=tuple(self._hit(r, s) for s, r in page),
            next_cursor=next_cursor,
            coverage=SearchCoverage(sources=tuple(sources)),
        )

    async def get(self, request: MemoryGetRequest) -> MemoryGetResult:
        await trio.lowlevel.checkpoint()
        self._effect("get", request)
        ref = request.reference
        for record in self.service.records:
            if record.id == ref.id and self._visible(record):
                if ref.revision is not None and ref.revision != record.revision:
                    return MemoryGetResult(status="not_found", reference=ref)
                lines = record.text.splitlines() or [""]
                start = (request.from_line or 1) - 1
                count = request.lines or len(lines)
                return MemoryGetResult(
                    status="ok",
                    reference=attrs.evolve(ref, revision=record.revision),
                    text="\n".join(lines[start : start + count]),
                    from_line=start + 1,
                    lines=count,
                    total_lines=len(lines),
                )
        return MemoryGetResult(status="not_found", reference=ref)

    async def health(self) -> MemoryHealth:
        await trio.lowlevel.checkpoint()
        self._effect("health")
        return MemoryHealth(
            status=self.service.health_status, details={"records": len(self.service.records)}
        )

    async def close(self) -> None:
        self.service.calls.append(("close", None))
        self.service.open_handles -= 1


@attrs.define(eq=False)
class _CandidateHandle(_Handle):
    async def candidates(self, request: MemoryCandidatesRequest) -> MemoryCandidatesResult:
        await trio.lowlevel.checkpoint()
        self._effect("candidates", request)
        out: list[MemoryCandidate] = []
        for record in self.service.records:
            if not self._visible(record) or record.source != "memory":
                continue
            if request.kind == "project":
                if record.project_key is None:
                    continue
                if (
                    request.active_project_keys
                    and record.project_key not in request.active_project_keys
                ):
                    continue
            elif record.trigger is None or (
                request.query is not None and record.trigger.lower() not in request.query.lower()
            ):
                continue
            out.append(
                MemoryCandidate(
                    reference=MemoryReference(
                        provider_id=self.service.provider_id,
                        id=record.id,
                        revision=record.revision,
                    ),
                    excerpt=record.text[:200],
                    kind=request.kind,
                    project_key=record.project_key,
                    trigger=record.trigger,
                )
            )
        return MemoryCandidatesResult(candidates=tuple(out[: request.max_results]))


@attrs.define(eq=False)
class _RefreshHandle(_CandidateHandle):
    async def refresh(self) -> None:
        await trio.lowlevel.checkpoint()
        self._effect("refresh")


@attrs.define(eq=False)
class RecordingMemoryProvider:
    """A native, record-only memory provider that records every call it receives.

    ``provider_id`` must equal the id of the plugin that registers it (references name
    the selected provider). ``gate``, when set, makes ``search`` wait on it before its
    effect, and ``open_gate`` makes ``open`` wait, so a test can change the world in
    between. ``authorize`` toggles the
    ``authorize_search_hits`` hook: without it the host must withhold session hits.
    """

    provider_id: str = "recording-memory"
    records: list[MemoryRecord] = attrs.field(factory=list)
    capabilities: ProviderCapabilities = attrs.field(
        factory=lambda: ProviderCapabilities(sources=("memory", "sessions"), pagination=True)
    )
    refreshable: bool = False
    authorize: bool = True
    health_status: Literal["ready", "degraded", "unavailable"] = "ready"
    gate: trio.Event | None = None
    open_gate: trio.Event | None = None
    calls: list[tuple[str, Any]] = attrs.field(factory=list)
    open_handles: int = 0

    def call_names(self) -> list[str]:
        """The names of the recorded calls, in order."""
        return [name for name, _ in self.calls]

    async def open(
        self, *, agent_id: str, context: MemoryCallerContext
    ) -> MemoryProviderOpenResult:
        if self.open_gate is not None:
            self.calls.append(("open.enter", agent_id))
            await self.open_gate.wait()
        self.calls.append(("open", agent_id))
        authority = context.authority
        if not isinstance(authority, OperatorAuthority | SessionAuthority | HostAuthority):
            raise CapabilityDeniedError("unknown authority")  # pragma: no cover
        await trio.lowlevel.checkpoint()
        context.assert_current_for(agent_id)
        cls = _HANDLE_CLASSES[(bool(self.capabilities.candidates), self.refreshable)]
        self.open_handles += 1
        return MemoryProviderOpenResult(
            provider=cls(
                service=self, agent_id=agent_id, context=context, capabilities=self.capabilities
            )
        )

    async def authorize_search_hits(
        self, request: AuthorizeSearchHitsRequest
    ) -> Sequence[MemorySearchHit]:
        self.calls.append(("authorize_search_hits", request))
        admitted: list[MemorySearchHit] = []
        for hit in request.hits:
            if hit.source != "sessions":
                admitted.append(hit)
                continue
            owner = hit.metadata.get("agent_id")
            session = hit.metadata.get("session_key")
            if owner != request.agent_id:
                continue
            if request.trusted_agent_scope is not None:
                if owner == request.trusted_agent_scope:
                    admitted.append(hit)
                continue
            if request.session_key is not None and session == request.session_key:
                admitted.append(hit)
                continue
            recall = request.conversation_recall
            if recall is not None and session in recall.conversation_keys:
                admitted.append(hit)
        return admitted

    def capability(self) -> MemoryPluginCapability:
        """The memory capability to register for this provider."""
        return MemoryPluginCapability(
            provider_runtime=self if self.authorize else _NoAuthorize(self)
        )


@attrs.define(eq=False)
class _RefreshOnlyHandle(_Handle):
    async def refresh(self) -> None:
        await trio.lowlevel.checkpoint()
        self._effect("refresh")


_HANDLE_CLASSES: dict[tuple[bool, bool], type[_Handle]] = {
    (False, False): _Handle,
    (True, False): _CandidateHandle,
    (False, True): _RefreshOnlyHandle,
    (True, True): _RefreshHandle,
}


@attrs.define(eq=False)
class _NoAuthorize:
    """The same provider runtime without the authorize_search_hits hook."""

    inner: RecordingMemoryProvider

    async def open(
        self, *, agent_id: str, context: MemoryCallerContext
    ) -> MemoryProviderOpenResult:
        return await self.inner.open(agent_id=agent_id, context=context)
