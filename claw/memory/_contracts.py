"""The contracts a memory plugin implements: the capability it registers and its runtimes.

A memory plugin registers one :class:`MemoryPluginCapability` with
``api.register_memory_capability(...)``. It may carry:

* ``provider_runtime``: the provider-neutral runtime (:class:`MemoryProviderRuntime`).
  ``open(agent_id=..., context=...)`` returns a caller-bound
  :class:`MemoryProviderHandle`. Consumers prefer it.
* ``runtime``: the legacy file-shaped runtime (:class:`MemoryPluginRuntime`), whose
  search manager speaks paths and line ranges. Only when ``provider_runtime`` is
  absent does the host wrap it in its own legacy adapter.
* flush plan resolvers, public artifacts, ``recall_tool_names`` and the async memory
  prompt preparation that runs before a non-legacy engine's ``assemble``.

A plugin may register a capability with no runtime at all (it handles memory through
its own hooks); the host then reports absent search support neutrally.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from ._types import (
    AuthorizeSearchHitsRequest,
    MemoryAddRequest,
    MemoryAddResult,
    MemoryForgetResult,
    MemoryGetRequest,
    MemoryGetResult,
    MemoryHealth,
    MemoryReference,
    MemorySearchHit,
    MemorySearchRequest,
    MemorySearchResult,
    ProviderCapabilities,
    Source,
)

if TYPE_CHECKING:
    from .._capabilities import MemoryCallerContext
    from ..flush._plans import FlushPlanResolver, ProviderFlushPlanResolver


@runtime_checkable
class MemoryProviderHandle(Protocol):
    """A caller-bound reader over one provider, returned by ``provider_runtime.open``.

    Optional members: ``candidates(request)`` (present exactly when
    ``capabilities.candidates`` is non-empty) and ``refresh()``.
    """

    @property
    def capabilities(self) -> ProviderCapabilities: ...

    async def search(self, request: MemorySearchRequest) -> MemorySearchResult: ...

    async def get(self, request: MemoryGetRequest) -> MemoryGetResult: ...

    async def health(self) -> MemoryHealth: ...

    async def close(self) -> None: ...


@attrs.frozen
class MemoryProviderOpenResult:
    """What ``open`` returns: a handle, or ``None`` with the provider's reason."""

    provider: MemoryProviderHandle | None
    reason: str | None = None


@runtime_checkable
class MemoryProviderRuntime(Protocol):
    """The provider-neutral runtime. May also define ``authorize_search_hits(request)``."""

    async def open(
        self, *, agent_id: str, context: MemoryCallerContext
    ) -> MemoryProviderOpenResult: ...


@attrs.frozen
class LegacySearchResult:
    """One hit from a legacy, file-shaped search manager."""

    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str
    source: Source = "memory"
    citation: str | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class LegacyReadResult:
    """The text of a (virtual) path, within the requested line bounds."""

    path: str
    text: str
    from_line: int = 1
    lines: int | None = None
    total_lines: int | None = None
    truncated: bool = False


@runtime_checkable
class MemorySearchManager(Protocol):
    """The legacy search manager: paths, line ranges and a status mapping."""

    async def search(
        self,
        query: str,
        *,
        max_results: int,
        min_score: float | None,
        sources: tuple[Source, ...],
        session_key: str | None,
    ) -> Sequence[LegacySearchResult]: ...

    async def read_file(
        self, path: str, *, from_line: int | None, lines: int | None
    ) -> LegacyReadResult | None: ...

    async def status(self) -> Mapping[str, Any]: ...

    async def close(self) -> None: ...


@runtime_checkable
class MemoryPluginRuntime(Protocol):
    """The legacy file-shaped runtime. May also define ``authorize_search_hits(request)``."""

    async def get_search_manager(
        self, *, agent_id: str, context: MemoryCallerContext
    ) -> MemorySearchManager | None: ...


AuthorizeSearchHits = Callable[[AuthorizeSearchHitsRequest], Awaitable[Sequence[MemorySearchHit]]]


@attrs.frozen
class PublicArtifact:
    """An exportable artifact a memory plugin declares (for host-managed exports)."""

    id: str
    kind: str
    path: str
    title: str | None = None


@runtime_checkable
class PublicArtifacts(Protocol):
    """Lists the exportable artifacts a memory plugin declares."""

    async def list_artifacts(self, *, agent_id: str) -> Sequence[PublicArtifact]: ...


@runtime_checkable
class MemoryMaintenance(Protocol):
    """Provider-owned maintenance: reindex, forget, describe, and the memory write path.

    Not part of the neutral read runtime: it is the provider's own. ``reindex``,
    ``forget`` and ``describe`` are invoked only with an operator's caller context;
    ``describe`` may include local paths (it is for the operator's own terminal, never
    for the gateway).

    ``progress(stage, done, total)`` reports a long sync stage by stage (Memory Core:
    ``scan``, ``chunk``, ``embed``, ``publish``). A provider may also offer
    ``warm(agent_id=, context=, progress=)``: do now, with progress, the work a first
    search would do implicitly (the CLI calls it before a search).

    The write path is optional (the host reports a provider without it neutrally):
    ``add`` appends a memory and ``forget_reference`` removes what a reference names.
    The host routes both (``host.memory.add`` / ``host.memory.forget``) only for a
    writer: an operator with ``operator.write`` (or ``operator.admin``), or a session
    whose audience is the owner's (``owner-private``). The provider checks again: its
    memory is the owner's, so a conversation audience never writes it.
    """

    async def reindex(
        self,
        *,
        agent_id: str,
        context: MemoryCallerContext,
        force: bool = False,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> Mapping[str, Any]: ...

    async def forget(
        self,
        *,
        agent_id: str,
        context: MemoryCallerContext,
        path: str | None = None,
        session_id: str | None = None,
        source: str | None = None,
        dry_run: bool = False,
    ) -> Mapping[str, Any]: ...

    async def describe(
        self, *, agent_id: str, context: MemoryCallerContext
    ) -> Mapping[str, Any]: ...

    async def add(
        self, *, agent_id: str, context: MemoryCallerContext, request: MemoryAddRequest
    ) -> MemoryAddResult: ...

    async def forget_reference(
        self,
        *,
        agent_id: str,
        context: MemoryCallerContext,
        reference: MemoryReference,
        dry_run: bool = False,
    ) -> MemoryForgetResult: ...

    # Optional: ``forget_reference`` may accept ``whole_range=True`` (the host passes it
    # only when the caller asks to remove a range of several entries) and ``add`` may
    # accept ``tool=`` (passed, when accepted, for a write through a tool's
    # ``context.memory``: the tool's name, for the entry's provenance). A provider with
    # undo offers ``restore(agent_id=, context=, removal_id=, dry_run=)`` ->
    # MemoryRestoreResult and ``removals(agent_id=, context=, limit=)`` -> sequence of
    # MemoryRemoval; one that deletes for good ``purge(agent_id=, context=, request=,
    # dry_run=)`` -> MemoryPurgeResult; one whose index forgets are reversible
    # ``forgotten(agent_id=, context=)`` -> sequence of mappings and
    # ``unforget(agent_id=, context=, forget_id=)`` -> mapping. The host reaches each
    # through its write route (``claw.memory._writes``), never directly.


def _names(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class MemoryPluginCapability:
    """What a memory plugin registers with ``api.register_memory_capability``.

    Every field is optional. ``flush_plan_resolver`` returns a complete
    :class:`~claw.flush.MemoryFlushPlan` or ``None``; ``provider_flush_plan_resolver``
    returns a file draft or a tools plan the host completes, and wins when both are set
    (see :mod:`claw.flush`). ``recall_tool_names`` are the concrete agent tools Active
    Memory uses for deep recall (only the selected slot owner's count).
    ``prompt_preparation`` is awaited by the host before a non-legacy engine's
    ``assemble`` and returns the immutable per-run snapshot that
    ``build_memory_system_prompt_addition`` reads.
    """

    provider_runtime: MemoryProviderRuntime | None = None
    runtime: MemoryPluginRuntime | None = None
    flush_plan_resolver: FlushPlanResolver | None = None
    provider_flush_plan_resolver: ProviderFlushPlanResolver | None = None
    public_artifacts: PublicArtifacts | None = None
    recall_tool_names: tuple[str, ...] = attrs.field(default=(), converter=_names)
    prompt_preparation: Callable[..., Awaitable[Any]] | None = None
    maintenance: MemoryMaintenance | None = None
    dreaming: Any = None
