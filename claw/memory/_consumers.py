"""The host's memory consumers: one function each, over the neutral runtime or the legacy one.

Each consumer prefers the selected provider's ``provider_runtime`` and uses it only
when the provider declares what that consumer needs; with a legacy runtime it keeps
the manager's calls, results and citation labels. A consumer whose needs a native
provider does not declare injects nothing (and says why in the result), rather than
calling the provider and handling failure. Each consumer takes the host and uses only its
memory guard (``host.memory``), so every one goes through the same capability checks,
currency checks and release check as every other route. Gateway
``memory.search``/``get``/``status`` live in :mod:`claw.gateway._memory`; doctor and CLI
status use :func:`provider_status`.

Native provider needs, per consumer:

* :func:`provider_status`: ``health()`` (every caller, host/status included);
* :func:`project_recall`: ``candidates: ["project"]``, plus ``project_filter`` when
  project keys are given;
* :func:`trigger_recall`: the ``memory`` source, ``trigger`` candidates, non-empty
  ``recall_tool_names`` that the turn's tool policy allows in full, and
  ``project_filter`` when project keys are given;
* :func:`deep_recall_tools`: the selected owner's ``recall_tool_names``;
* :func:`voice_fast_context`: every configured source;
* :func:`wiki_search`: the requested sources; protected transcript recall needs
  ``sessions``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

import attrs

from .._capabilities import MemoryCallerContext
from .._errors import UnsupportedRequestError
from ._runtime import MemoryRuntime
from ._types import (
    MemoryCandidate,
    MemoryCandidatesRequest,
    MemoryHealth,
    MemorySearchHit,
    MemorySearchRequest,
    Source,
)

if TYPE_CHECKING:
    from ..turns._tools import ToolPolicy


class MemoryHost(Protocol):
    """What a consumer uses of the host: its memory guard (``host.memory``), and nothing
    else. Every consumer reaches the provider through the guard's checks."""

    @property
    def memory(self) -> MemoryRuntime: ...

logger = logging.getLogger("claw.memory.consumers")

BUILTIN_RECALL_TOOLS: tuple[str, ...] = ("memory_search", "memory_get")

#: The tool whose lookup legacy trigger recall performs on the turn's behalf.
LEGACY_TRIGGER_TOOL = "memory_search"


@attrs.frozen
class RecallItem:
    """One piece of recalled memory, ready to inject: text, where it is from, and why."""

    excerpt: str
    reference_id: str
    provider_id: str
    source: Source
    score: float | None = None
    citation: str | None = None
    kind: Literal["search", "trigger", "project"] = "search"


@attrs.frozen
class RecallResult:
    """What a recall consumer injects (possibly nothing), and the reason when nothing."""

    items: tuple[RecallItem, ...] = ()
    skipped_reason: str | None = None
    native: bool = True


def _label(hit: MemorySearchHit) -> str | None:
    label = hit.metadata.get("citation_label")
    if isinstance(label, str):
        return label
    c = hit.citation
    return None if c is None else f"{c.path}#L{c.start_line}-L{c.end_line}"


def _items(
    hits: Iterable[MemorySearchHit], kind: Literal["search", "trigger", "project"]
) -> tuple[RecallItem, ...]:
    return tuple(
        RecallItem(
            excerpt=h.excerpt,
            reference_id=h.reference.id,
            provider_id=h.reference.provider_id,
            source=h.source,
            score=h.score,
            citation=_label(h),
            kind=kind,
        )
        for h in hits
    )


def _candidate_items(
    candidates: Iterable[MemoryCandidate], kind: Literal["trigger", "project"]
) -> tuple[RecallItem, ...]:
    return tuple(
        RecallItem(
            excerpt=c.excerpt,
            reference_id=c.reference.id,
            provider_id=c.reference.provider_id,
            source="memory",
            score=c.score,
            kind=kind,
        )
        for c in candidates
    )


def _skip(reason: str) -> RecallResult:
    logger.debug("memory recall skipped: %s", reason)
    return RecallResult(skipped_reason=reason)


async def provider_status(host: MemoryHost, caller: MemoryCallerContext) -> MemoryHealth:
    """Health of the selected provider (doctor and CLI status; any authenticated caller)."""
    async with host.memory.open(caller) as handle:
        return await handle.health()


async def project_recall(
    host: MemoryHost,
    caller: MemoryCallerContext,
    *,
    project_keys: Sequence[str],
    query: str | None = None,
    max_results: int = 5,
) -> RecallResult:
    """Memory about the active projects, through ``candidates(kind="project")``."""
    if host.memory.uses_provider_runtime():
        async with host.memory.open(caller) as handle:
            caps = handle.capabilities
            if "project" not in caps.candidates:
                return _skip(f'provider "{handle.provider_id}" declares no project candidates')
            if project_keys and not caps.project_filter:
                return _skip(f'provider "{handle.provider_id}" declares no project filtering')
            result = await handle.candidates(
                MemoryCandidatesRequest(
                    kind="project",
                    query=query,
                    active_project_keys=tuple(project_keys),
                    max_results=max_results,
                )
            )
            return RecallResult(items=_candidate_items(result.candidates, "project"))
    if not project_keys and not query:
        return _skip("no project keys or query for the legacy manager")
    async with host.memory.open(caller) as handle:
        result_hits = await handle.search(
            MemorySearchRequest(
                query=query or " ".join(project_keys),
                max_results=max_results,
                sources=("memory",),
                active_project_keys=tuple(project_keys),
            )
        )
        return RecallResult(items=_items(result_hits.hits, "project"), native=False)


def _owner_recall_tools(host: MemoryHost) -> tuple[str, ...]:
    return host.memory.recall_tool_names()


async def trigger_recall(
    host: MemoryHost,
    caller: MemoryCallerContext,
    *,
    message: str,
    tool_policy: ToolPolicy,
    project_keys: Sequence[str] = (),
    max_results: int = 3,
) -> RecallResult:
    """Active Memory trigger recall: lexical search plus trigger candidates.

    A native provider is used only when it declares the ``memory`` source, ``trigger``
    candidates, non-empty ``recall_tool_names`` that ``tool_policy`` allows in full, and
    project filtering when ``project_keys`` are given; otherwise nothing is injected.
    With a legacy runtime the lookup stands in for the owner's ``memory_search`` tool, so
    it runs only when the owner registers that tool and ``tool_policy`` allows it. A
    message with no text (only whitespace) recalls nothing.
    """
    if not message.strip():
        return _skip("the message has no text to recall for")
    if host.memory.uses_provider_runtime():
        recall_tools = _owner_recall_tools(host)
        if not recall_tools:
            return _skip("the selected provider declares no recall_tool_names")
        denied = [t for t in recall_tools if not tool_policy.allows(t)]
        if denied:
            return _skip(f"the turn's tool policy does not allow {', '.join(denied)}")
        async with host.memory.open(caller) as handle:
            caps = handle.capabilities
            if "memory" not in caps.sources:
                return _skip(f'provider "{handle.provider_id}" declares no memory source')
            if "trigger" not in caps.candidates:
                return _skip(f'provider "{handle.provider_id}" declares no trigger candidates')
            if project_keys and not caps.project_filter:
                return _skip(f'provider "{handle.provider_id}" declares no project filtering')
            found = await handle.search(
                MemorySearchRequest(
                    query=message,
                    max_results=max_results,
                    sources=("memory",),
                    lexical_only=True,
                    active_project_keys=tuple(project_keys),
                )
            )
            triggers = await handle.candidates(
                MemoryCandidatesRequest(
                    kind="trigger",
                    query=message,
                    active_project_keys=tuple(project_keys),
                    max_results=max_results,
                )
            )
            items = _items(found.hits, "search") + _candidate_items(triggers.candidates, "trigger")
            return RecallResult(items=items)
    owner = host.memory.slots.memory_plugin
    if owner is None or not host.memory.slots.tools_of(owner, LEGACY_TRIGGER_TOOL):
        return _skip(f'the memory plugin "{owner}" registers no {LEGACY_TRIGGER_TOOL} tool')
    if not tool_policy.allows(LEGACY_TRIGGER_TOOL):
        return _skip(f"the turn's tool policy does not allow {LEGACY_TRIGGER_TOOL}")
    async with host.memory.open(caller) as handle:
        found = await handle.search(
            MemorySearchRequest(
                query=message, max_results=max_results, sources=("memory",), lexical_only=True
            )
        )
        return RecallResult(items=_items(found.hits, "search"), native=False)


def deep_recall_tools(
    host: MemoryHost, *, tools_allow: Sequence[str] | None = None
) -> tuple[str, ...]:
    """The agent tools Active Memory uses for deep recall.

    A valid explicit ``tools_allow`` (every name a registered tool) wins, then the
    selected owner's ``recall_tool_names``, then the built-in fallback. Unselected
    sidecars cannot contribute.
    """
    registered = {t.name for t in host.memory.slots.tools}
    if tools_allow:
        unknown = [t for t in tools_allow if t not in registered]
        if not unknown:
            return tuple(tools_allow)
        logger.warning("ignoring Active Memory toolsAllow with unknown tools %s", unknown)
    owner = _owner_recall_tools(host)
    if owner:
        return owner
    return BUILTIN_RECALL_TOOLS


async def voice_fast_context(
    host: MemoryHost, caller: MemoryCallerContext, *, query: str, max_results: int = 3
) -> RecallResult:
    """Fast context for voice turns: one search over every configured source."""
    async with host.memory.open(caller) as handle:
        found = await handle.search(
            MemorySearchRequest(
                query=query, max_results=max_results, sources=handle.capabilities.sources
            )
        )
        return RecallResult(items=_items(found.hits, "search"), native=handle.native)


async def wiki_search(
    host: MemoryHost,
    caller: MemoryCallerContext,
    *,
    query: str,
    sources: Sequence[Source] = ("memory",),
    protected_transcripts: bool = False,
    max_results: int = 10,
) -> RecallResult:
    """Memory Wiki search over the requested sources.

    Protected transcript recall (``protected_transcripts``) requires the provider to
    declare ``sessions``; asking for it from one that does not is an error naming the
    provider, raised before its code runs.
    """
    requested = tuple(sources)
    if protected_transcripts and "sessions" not in requested:
        requested = (*requested, "sessions")
    async with host.memory.open(caller) as handle:
        if protected_transcripts and "sessions" not in handle.capabilities.sources:
            raise UnsupportedRequestError(
                f'memory provider "{handle.provider_id}" does not declare the sessions source '
                "that protected transcript recall requires"
            )
        found = await handle.search(
            MemorySearchRequest(query=query, max_results=max_results, sources=requested)
        )
        return RecallResult(items=_items(found.hits, "search"), native=handle.native)


def dreaming_owner(host: MemoryHost) -> str | None:
    """The plugin whose dreaming runs: the selected owner if it declares dreaming, else
    Memory Core as a loaded sidecar (unless it is disabled, in which case it is not loaded).

    Dreaming is not a provider runtime capability: selecting a provider does not imply it.
    """
    selected = host.memory.slots.memory_plugin
    capabilities = host.memory.slots.memory_capabilities
    if selected is not None and getattr(capabilities.get(selected), "dreaming", None) is not None:
        return selected
    if "memory-core" in capabilities:
        return "memory-core"
    return None
