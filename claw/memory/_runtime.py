"""The memory guard: the host side of the provider-neutral memory runtime (``host.memory``).

Not to be confused with Memory Core (``claw_memory``), the bundled memory *plugin*:
this package is the host's side of every memory plugin, whichever is selected.

Every route that reads or writes memory goes through :class:`MemoryRuntime`, with the
same checks (see :mod:`claw.memory._guard` for what a guarded handle enforces):

* the Python API: ``host.memory.open(context)`` yields a
  :class:`~claw.memory.GuardedMemoryHandle`; ``host.memory.add`` / ``forget`` write;
* the gateway (``memory.search`` v1 and v2, ``memory.get``, ``memory.status``) and the
  MCP server, through the request routes :meth:`MemoryRuntime.search`,
  :meth:`MemoryRuntime.get` and :meth:`MemoryRuntime.status`;
* agent tools (and the flush's persistence and lookup tools), through the
  :class:`ToolMemory` facet on their ``ToolContext``: a plugin's tools do not open
  their own provider runtime;
* the host's consumers (recall, voice, wiki, project, status, the post-compaction
  refresh), through ``open``.

The selected memory slot owner's runtime is used (its ``provider_runtime`` when
present, else the host-owned legacy adapter over its ``runtime``); a tool's facet opens
its own plugin's. Failure, denial or an invalid provider runtime is an error, never a
retry against legacy storage and never an empty success; the handle is closed in every
case.

A request route checks currency exactly where the seed asks, once each: before opening
(unless the caller minted the context with nothing awaited since: ``fresh``), after
opening (which is also before the first call), after each call (also before the next),
and the release check after the handle is closed, so that it is the last thing before
the answer leaves.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import attrs
import trio

from .._agents import Agents
from .._capabilities import (
    HostAuthority,
    MemoryCallerContext,
    OperatorAuthority,
    SessionAuthority,
)
from .._currency import Currency, RequestCheck
from .._errors import (
    CapabilityDeniedError,
    ClawError,
    ContractError,
    ProviderError,
    UnknownAgentError,
    UnsupportedRequestError,
)
from .._scopes import Lifecycle
from .._slots import SlotView
from .._util import NoPublicConstructor, final
from .._weak import WeakIdentityMap
from ._contracts import MemoryPluginCapability, MemoryProviderHandle, MemoryProviderOpenResult
from ._guard import (
    ForeignReferenceError,
    GuardedMemoryHandle,
    MemoryUnavailableError,
    provider_call,
    validate_handle,
)
from ._legacy import LegacyProviderHandle
from ._types import (
    MemoryAddRequest,
    MemoryAddResult,
    MemoryForgetResult,
    MemoryGetRequest,
    MemoryGetResult,
    MemoryHealth,
    MemoryPurgeRequest,
    MemoryPurgeResult,
    MemoryReference,
    MemoryRemoval,
    MemoryRestoreResult,
    MemorySearchRequest,
    MemorySearchResult,
    Source,
)
from ._writes import (
    WriteTarget,
    add_memory,
    describe_index,
    forget_indexed_memory,
    forget_memory,
    index_forgets,
    list_removals,
    purge_memory,
    reindex_memory,
    restore_memory,
    unforget_memory,
    warm_index,
    writer_refusal,
)

logger = logging.getLogger("claw.memory")

T = TypeVar("T")


@attrs.frozen
class MemoryAnswer(Generic[T]):
    """What a request route answers: the result, and which provider and agent gave it.

    ``health`` is the provider's health when the route asked for it too (a v1 search
    reports the search mode).
    """

    provider_id: str
    agent_id: str
    native: bool
    result: T
    health: MemoryHealth | None = None


@attrs.define(eq=False)
class MemoryRuntime:
    """``host.memory``: the one guard every memory route goes through.

    Built by ``open_host`` with what the guard uses: the currency checker, the read-only
    view of the slots, the host's lifecycle (a closed host serves nothing) and its
    agents.
    """

    _currency: Currency
    _slots: SlotView
    _lifecycle: Lifecycle
    _agents: Agents

    @property
    def slots(self) -> SlotView:
        """Who owns the memory slot, and what the loaded plugins registered."""
        return self._slots

    # -- selection ---------------------------------------------------------------

    def selection(self) -> tuple[str | None, MemoryPluginCapability | None]:
        """The selected memory plugin id and its capability (``None``s when none)."""
        plugin_id = self._slots.memory_plugin
        if plugin_id is None:
            return None, None
        return plugin_id, self._capability(plugin_id)

    def _capability(self, plugin_id: str) -> MemoryPluginCapability | None:
        cap = self._slots.memory_capabilities.get(plugin_id)
        if cap is not None and not isinstance(cap, MemoryPluginCapability):
            raise ContractError(
                f'memory plugin "{plugin_id}" registered a {type(cap).__name__}, '
                "not a MemoryPluginCapability"
            )
        return cap

    def _target(self, plugin_id: str | None) -> tuple[str, MemoryPluginCapability]:
        """The plugin a request goes to: the slot owner, or (a tool's facet) its own."""
        if plugin_id is None:
            selected, cap = self.selection()
            if selected is None or cap is None:
                raise MemoryUnavailableError("no memory plugin is selected (plugins.slots.memory)")
            return selected, cap
        cap = self._capability(plugin_id)
        if cap is None:
            raise MemoryUnavailableError(f'plugin "{plugin_id}" registered no memory capability')
        return plugin_id, cap

    def uses_provider_runtime(self) -> bool:
        """Whether consumers go through a native ``provider_runtime``."""
        _, cap = self.selection()
        return cap is not None and cap.provider_runtime is not None

    def recall_tool_names(self) -> tuple[str, ...]:
        """The selected owner's ``recall_tool_names`` (unselected sidecars contribute none)."""
        _, cap = self.selection()
        return tuple(cap.recall_tool_names) if cap is not None else ()

    # -- the caller --------------------------------------------------------------

    def _agent_for(self, context: MemoryCallerContext, agent_id: str | None) -> str:
        authority = context.authority
        if isinstance(authority, SessionAuthority):
            if agent_id is not None and agent_id != authority.agent_id:
                raise CapabilityDeniedError(
                    f"session {authority.session_key!r} belongs to agent "
                    f"{authority.agent_id!r} and cannot open memory of agent {agent_id!r}"
                )
            audience = authority.audience
            if audience is not None and audience.agent_id != authority.agent_id:
                raise CapabilityDeniedError("memory audience belongs to another agent")
            return authority.agent_id
        if not isinstance(authority, OperatorAuthority | HostAuthority):  # pragma: no cover
            raise CapabilityDeniedError("unknown caller authority")
        return agent_id if agent_id is not None else self._agents.default_agent_id

    async def _require_known_agent(self, requested: str | None, agent: str) -> bool:
        """Refuse an explicitly named agent the host does not know (before any provider
        code runs, so that no provider creates state for a made-up name). Whether it
        read the session store to tell (only for an agent other than the default)."""
        if requested is None or agent == self._agents.default_agent_id:
            return False
        if not await self._agents.knows(agent):
            raise UnknownAgentError(
                f"agentId {agent[:64]!r} is not an agent of this host (its agents are "
                "default_agent_id and the agents that have sessions)"
            )
        return True

    async def await_current(self, context: MemoryCallerContext) -> None:
        """Verify ``context`` with the host; while a session write is in flight, wait and retry."""
        await self._currency.await_current(context)

    # -- opening -----------------------------------------------------------------

    @asynccontextmanager
    async def open(
        self, context: MemoryCallerContext, *, agent_id: str | None = None, legacy: bool = False
    ) -> AsyncIterator[GuardedMemoryHandle]:
        """Open the selected provider for ``context``; the handle is closed on exit.

        ``legacy=True`` asks for the file-shaped runtime (the host's legacy adapter over
        it); it is an error when the provider has none.
        """
        async with self._open(context, agent_id=agent_id, legacy=legacy) as handle:
            await handle._current()
            yield handle

    @asynccontextmanager
    async def _open(
        self,
        context: MemoryCallerContext,
        *,
        agent_id: str | None = None,
        legacy: bool = False,
        plugin_id: str | None = None,
    ) -> AsyncIterator[GuardedMemoryHandle]:
        """:meth:`_open_guarded`, closed on exit (see :meth:`_close_guarded`)."""
        handle = await self._open_guarded(
            context, agent_id=agent_id, legacy=legacy, plugin_id=plugin_id
        )
        try:
            yield handle
        finally:
            await self._close_guarded(handle)

    async def _open_guarded(
        self,
        context: MemoryCallerContext,
        *,
        agent_id: str | None = None,
        legacy: bool = False,
        file_shaped: bool = False,
        plugin_id: str | None = None,
        also: RequestCheck | None = None,
        fresh: bool = False,
    ) -> GuardedMemoryHandle:
        """Open a provider, checking currency before (unless ``fresh``) but not after:
        the caller's first step checks before its call, which is that check. The caller
        closes the handle with :meth:`_close_guarded` (the request routes do it in a
        ``finally`` of their own: one context manager less on every request)."""
        self._lifecycle.check_open()
        if not fresh:
            await self._currency.await_current(context, also=also)
        agent = self._agent_for(context, agent_id)
        if agent_id is not None and await self._require_known_agent(agent_id, agent) and fresh:
            # The store was read: the context is no longer fresh.
            await self._currency.await_current(context, also=also)
        target, cap = self._target(plugin_id)
        if file_shaped and cap.runtime is None:
            raise UnsupportedRequestError(
                f'memory plugin "{target}" uses the provider runtime; '
                "retry memory.search with version: 2"
            )
        if legacy and cap.runtime is None:
            raise UnsupportedRequestError(
                f'memory plugin "{target}" has no file-shaped runtime; use the neutral one'
            )
        handle: MemoryProviderHandle
        if cap.provider_runtime is not None and not legacy:
            runtime: Any = cap.provider_runtime
            handle = await _open_native(target, runtime, agent, context)
            native = True
        elif cap.runtime is not None:
            runtime = cap.runtime
            manager = await runtime.get_search_manager(agent_id=agent, context=context)
            if manager is None:
                raise MemoryUnavailableError(
                    f'memory plugin "{target}" has no search manager for agent {agent!r}'
                )
            handle = LegacyProviderHandle(
                provider_id=target, manager=manager, session_key=context.session_key
            )
            native = False
        else:
            raise MemoryUnavailableError(
                f'memory plugin "{target}" does not offer host search support'
            )
        authorize = getattr(runtime, "authorize_search_hits", None)
        try:
            return GuardedMemoryHandle(
                provider_id=target,
                agent_id=agent,
                native=native,
                handle=validate_handle(target, handle),
                context=context,
                authorize=authorize if callable(authorize) else None,
                currency=self._currency,
                lifecycle=self._lifecycle,
                also=also,
            )
        except BaseException:
            await _close_handle(target, handle)
            raise

    async def _close_guarded(self, guarded: GuardedMemoryHandle) -> None:
        """Close an opened handle: no use of it after this, and the provider's close runs
        to its end even when the request was cancelled (shielded)."""
        guarded._closed = True
        await _close_handle(guarded.provider_id, guarded._handle)

    # -- request routes (the gateway, MCP, agent tools) --------------------------

    async def search(
        self,
        context: MemoryCallerContext,
        request: MemorySearchRequest,
        *,
        agent_id: str | None = None,
        file_shaped: bool = False,
        also: RequestCheck | None = None,
        fresh: bool = False,
        _plugin_id: str | None = None,
    ) -> MemoryAnswer[MemorySearchResult]:
        """One search as a request: open, search, close, release.

        ``file_shaped`` answers a v1 (file-shaped) caller: the plugin must register a
        file-shaped runtime, its ``provider_runtime`` serves when it has one too, and the
        answer carries the provider's health (its search mode). ``also`` is the
        request's own condition, checked with every currency check (the gateway's: not
        aborted, connection open); ``fresh`` says the caller minted ``context`` with
        nothing awaited since, so the check before opening would repeat that one.
        """
        health: MemoryHealth | None = None
        handle = await self._open_guarded(
            context,
            agent_id=agent_id,
            file_shaped=file_shaped,
            plugin_id=_plugin_id,
            also=also,
            fresh=fresh,
        )
        try:
            narrowed: MemorySearchRequest | None = request
            if file_shaped:
                health = await handle._health(checked=False, after=True)
                narrowed = _file_shaped_sources(request, handle.capabilities.sources)
            if narrowed is None:
                result = MemorySearchResult(hits=())
            else:
                result = await handle._search(narrowed, checked=file_shaped, release=False)
        finally:
            await self._close_guarded(handle)
        await handle._released()
        return MemoryAnswer(handle.provider_id, handle.agent_id, handle.native, result, health)

    async def get(
        self,
        context: MemoryCallerContext,
        request: MemoryGetRequest,
        *,
        agent_id: str | None = None,
        also: RequestCheck | None = None,
        fresh: bool = False,
        _plugin_id: str | None = None,
    ) -> MemoryAnswer[MemoryGetResult]:
        """One get as a request: open, get, close, release (see :meth:`search`)."""
        handle = await self._open_guarded(
            context, agent_id=agent_id, plugin_id=_plugin_id, also=also, fresh=fresh
        )
        try:
            result = await handle._get(request, checked=False, release=False)
        finally:
            await self._close_guarded(handle)
        await handle._released()
        return MemoryAnswer(handle.provider_id, handle.agent_id, handle.native, result)

    async def status(
        self,
        context: MemoryCallerContext,
        *,
        agent_id: str | None = None,
        also: RequestCheck | None = None,
        fresh: bool = False,
    ) -> MemoryAnswer[MemoryHealth]:
        """The provider's health as a request: open, health, close, check."""
        handle = await self._open_guarded(context, agent_id=agent_id, also=also, fresh=fresh)
        try:
            health = await handle._health(checked=False, after=False)
        finally:
            await self._close_guarded(handle)
        await self._currency.await_current(context, also=also)
        return MemoryAnswer(handle.provider_id, handle.agent_id, handle.native, health)

    # -- writes --------------------------------------------------------------------

    async def add(
        self,
        context: MemoryCallerContext,
        text: str,
        *,
        path: str | None = None,
        section: str | None = None,
        agent_id: str | None = None,
    ) -> MemoryAddResult:
        """Write one memory through the selected provider (see :mod:`claw.memory._writes`).

        ``context`` must be a writer's: an operator with ``operator.write`` (or
        ``operator.admin``) or a non-sandboxed session with the owner's audience.
        ``path`` and ``section`` choose where the provider files it (its default:
        Memory Core appends to today's ``memory/YYYY-MM-DD.md``). The result's
        reference can be passed to :meth:`forget`; the next search sees the entry.
        """
        request = MemoryAddRequest(text=text, path=path, section=section)
        return await add_memory(self, context, request, agent_id=agent_id)

    async def forget(
        self,
        context: MemoryCallerContext,
        reference: MemoryReference,
        *,
        dry_run: bool = False,
        agent_id: str | None = None,
        whole_range: bool = False,
    ) -> MemoryForgetResult:
        """Forget what ``reference`` names, through the selected provider (a writer only).

        Memory Core removes the one entry the reference's lines lie in (a reference with
        a line fragment, such as one from :meth:`add` or a search hit), refusing a
        reference that covers several entries unless ``whole_range`` asks for exactly
        those lines; or it drops the derived index entries of a whole source. A reference
        with a revision whose lines changed since is refused as stale. ``dry_run``
        reports without changing. What a forget removes stays restorable
        (:meth:`restore`, with the result's ``removal_id``).
        """
        return await forget_memory(
            self, context, reference, agent_id=agent_id, dry_run=dry_run, whole_range=whole_range
        )

    async def restore(
        self,
        context: MemoryCallerContext,
        removal_id: str,
        *,
        dry_run: bool = False,
        agent_id: str | None = None,
    ) -> MemoryRestoreResult:
        """Put back what a forget removed, through the selected provider (a writer only,
        the same authority as :meth:`forget`). Memory Core puts the lines back where they
        were when that is unambiguous, otherwise appends them under a marked heading;
        it never overwrites. Restoring twice answers the first restore."""
        return await restore_memory(self, context, removal_id, agent_id=agent_id, dry_run=dry_run)

    async def purge(
        self,
        context: MemoryCallerContext,
        *,
        text: str | None = None,
        reference: MemoryReference | None = None,
        removal_id: str | None = None,
        whole_range: bool = False,
        dry_run: bool = False,
        agent_id: str | None = None,
    ) -> MemoryPurgeResult:
        """Delete memory for good, through the selected provider: every entry containing
        ``text``, what ``reference`` names (and every copy of it), or the undo copy of
        removal ``removal_id``. Unlike :meth:`forget` it cannot be undone, so only an
        operator with ``operator.admin`` may. Memory Core then leaves no byte of it in
        the workspace or the state directory (files, journal, database, tantivy,
        published files, cached vectors); Memory Records in no row or revision.
        """
        request = MemoryPurgeRequest(
            text=text, reference=reference, removal_id=removal_id, whole_range=whole_range
        )
        return await purge_memory(self, context, request, agent_id=agent_id, dry_run=dry_run)

    async def removals(
        self, context: MemoryCallerContext, *, limit: int = 50, agent_id: str | None = None
    ) -> tuple[MemoryRemoval, ...]:
        """The most recent removals, newest first, with what became of each (a writer
        only: they carry the removed text)."""
        return await list_removals(self, context, agent_id=agent_id, limit=limit)

    async def forgotten(
        self, context: MemoryCallerContext, *, agent_id: str | None = None
    ) -> tuple[Mapping[str, Any], ...]:
        """The index-level forgets in effect, through the selected provider (a writer
        only; Memory Core: the paths, sessions and sources hidden from search, each with
        the id :meth:`unforget` takes). See :meth:`offers` for a provider without them."""
        return await index_forgets(self, context, agent_id=agent_id)

    async def unforget(
        self, context: MemoryCallerContext, forget_id: str, *, agent_id: str | None = None
    ) -> Mapping[str, Any]:
        """Take an index-level forget back through the selected provider (a writer only):
        what it hid is indexed again, as its sources stand now."""
        return await unforget_memory(self, context, forget_id, agent_id=agent_id)

    async def reindex(
        self,
        context: MemoryCallerContext,
        *,
        force: bool = False,
        progress: Callable[[str, int, int], None] | None = None,
        agent_id: str | None = None,
    ) -> Mapping[str, Any]:
        """Bring the selected provider's index up to date (``force``: re-read
        everything; index-level forgets stay in effect), through the write route, for an
        operator with ``operator.write`` only; ``progress(stage, done, total)`` reports
        it. Memory Core answers what it indexed, removed and skipped, and how many
        forgets still hide something (``claw memory index``)."""
        return await reindex_memory(
            self, context, agent_id=agent_id, force=force, progress=progress
        )

    async def forget_indexed(
        self,
        context: MemoryCallerContext,
        *,
        path: str | None = None,
        session_id: str | None = None,
        source: str | None = None,
        dry_run: bool = False,
        agent_id: str | None = None,
    ) -> Mapping[str, Any]:
        """An index-level forget through the write route (an operator with
        ``operator.write`` only): hide from search what the index holds of a path, a
        session or a source, leaving the sources as they are. Memory Core records it
        (:meth:`forgotten` lists it, :meth:`unforget` ends it) and answers its id
        (``forgetId``), the chunks and the paths (``claw memory forget --path``)."""
        return await forget_indexed_memory(
            self,
            context,
            agent_id=agent_id,
            path=path,
            session_id=session_id,
            source=source,
            dry_run=dry_run,
        )

    async def describe(
        self, context: MemoryCallerContext, *, agent_id: str | None = None
    ) -> Mapping[str, Any]:
        """The selected provider's own description of the agent's index, through the
        guard (an operator with ``operator.read`` only; it may name local paths, so it is
        for the operator's terminal: ``claw doctor``). See :meth:`offers`."""
        return await describe_index(self, context, agent_id=agent_id)

    async def warm(
        self,
        context: MemoryCallerContext,
        *,
        progress: Callable[[str, int, int], None] | None = None,
        agent_id: str | None = None,
    ) -> None:
        """Do now, through the guard, what a first search would do implicitly (Memory
        Core: open and sync the agent's index), reporting ``progress(stage, done,
        total)``; an operator with ``operator.read`` only (the CLI, before a search)."""
        await warm_index(self, context, agent_id=agent_id, progress=progress)

    def offers(self, operation: str) -> bool:
        """Whether the selected provider's maintenance offers ``operation`` (``restore``,
        ``purge``, ``forgotten``, ...): the optional parts of the write contract."""
        _, cap = self.selection()
        maintenance = cap.maintenance if cap is not None else None
        return callable(getattr(maintenance, operation, None))

    async def write_target(
        self,
        context: MemoryCallerContext,
        agent_id: str | None,
        operation: str,
        *,
        plugin_id: str | None = None,
        reference: MemoryReference | None = None,
        refusal: Callable[[MemoryCallerContext], str | None] = writer_refusal,
    ) -> WriteTarget:
        """Where a host-route write goes, after the checks made before any provider code:
        the host is open, the release check (the committed lineage: a write checks it
        before its effect), the caller may address the agent and may make this write
        (``refusal`` says why not: a writer, or for a purge an ``operator.admin``), the
        agent is known, ``reference`` (if any) is the target provider's, and its
        maintenance offers ``operation``. Nothing is awaited between the last check and
        the effect."""
        self._lifecycle.check_open()
        await self._currency.await_committed(context)
        agent = self._agent_for(context, agent_id)
        refused = refusal(context)
        if refused is not None:
            raise CapabilityDeniedError(refused)
        if await self._require_known_agent(agent_id, agent):
            await self._currency.await_committed(context)
        target, cap = self._target(plugin_id)
        if reference is not None:
            _check_reference(target, reference)
        maintenance = cap.maintenance
        if maintenance is None or not callable(getattr(maintenance, operation, None)):
            raise UnsupportedRequestError(
                f'memory plugin "{target}" offers no way to write memory ({operation})'
            )
        return WriteTarget(
            plugin_id=target,
            agent_id=agent,
            maintenance=maintenance,
            context=context,
            currency=self._currency,
        )

    async def guarded_write(
        self,
        context: MemoryCallerContext,
        plugin_id: str,
        what: str,
        effect: Callable[[MemoryCallerContext], Awaitable[T]],
    ) -> T:
        """A provider-owned write (a tool's): the release check right before the effect,
        the currency check after it; the provider applies its own write policy."""
        self._lifecycle.check_open()
        self._target(plugin_id)
        await self._currency.await_committed(context)
        result = await provider_call(plugin_id, what, lambda: effect(context))
        await self._currency.await_current(context)
        return result

    # -- tools ---------------------------------------------------------------------

    def for_tool(
        self, context: MemoryCallerContext, agent_id: str, plugin_id: str, tool: str | None = None
    ) -> ToolMemory | None:
        """The memory facet of a tool of ``plugin_id`` (named ``tool``) in a run (``None``
        when that plugin registered no memory capability)."""
        if plugin_id not in self._slots.memory_capabilities:
            return None
        facet = ToolMemory._create(plugin_id, agent_id, tool)
        _TOOL_BINDINGS[facet] = (self, context)
        return facet


def _file_shaped_sources(
    request: MemorySearchRequest, declared: tuple[Source, ...]
) -> MemorySearchRequest | None:
    """A file-shaped caller may ask for both sources whatever the provider declares
    (the legacy contract has both): a source the provider does not declare finds
    nothing, rather than being refused. ``None``: nothing is left to search."""
    if request.sources is None:
        return request
    kept = tuple(s for s in request.sources if s in declared)
    if not kept:
        return None
    return request if kept == request.sources else request._replace(sources=kept)


def _check_reference(plugin_id: str, reference: MemoryReference) -> None:
    if not isinstance(reference, MemoryReference):
        raise ContractError(f"expected a MemoryReference, got {type(reference).__name__}")
    if reference.provider_id != plugin_id:
        raise ForeignReferenceError(
            f'reference belongs to provider "{reference.provider_id}", not the selected '
            f'memory provider "{plugin_id}"'
        )


async def _close_handle(provider_id: str, handle: MemoryProviderHandle) -> None:
    """A provider handle's close, run to its end even under cancellation; its failure is
    logged (the request's own outcome stands). A handle that declares a close that never
    waits (``close_waits`` false: the SDK's ``ProviderHandle`` when its subclass keeps the
    base ``close``) has no checkpoint to be cancelled at, so it needs no shield (a cancel
    scope entered and left on every request)."""
    try:
        if getattr(handle, "close_waits", True):
            with trio.CancelScope(shield=True):
                await handle.close()
        else:
            await handle.close()
    except Exception:
        logger.exception('memory provider "%s" failed to close a handle', provider_id)


async def _open_native(
    plugin_id: str, runtime: Any, agent: str, context: MemoryCallerContext
) -> MemoryProviderHandle:
    if not callable(getattr(runtime, "open", None)):
        raise ContractError(f'memory plugin "{plugin_id}" has an invalid provider_runtime')
    try:
        opened = await runtime.open(agent_id=agent, context=context)
    except ClawError:
        raise
    except Exception as exc:
        raise ProviderError(
            f'memory provider "{plugin_id}" failed to open: {type(exc).__name__}'
        ) from exc
    if not isinstance(opened, MemoryProviderOpenResult):
        raise ContractError(
            f'memory provider "{plugin_id}" open() returned {type(opened).__name__}, '
            "not a MemoryProviderOpenResult"
        )
    if opened.provider is None:
        raise MemoryUnavailableError(
            f'memory provider "{plugin_id}" is unavailable'
            + (f": {opened.reason}" if opened.reason else "")
        )
    return opened.provider


#: The guard and caller each tool facet speaks for. It lives here, not on the facet, so
#: that no attribute path from a tool's context leads to the guard (and from it to the
#: capability registry); a weak identity table, whose weak references lead nowhere (a
#: ``WeakKeyDictionary``'s would lead from a facet back to this table); see
#: docs/threat-model.md.
_TOOL_BINDINGS: WeakIdentityMap[ToolMemory, tuple[MemoryRuntime, MemoryCallerContext]] = (
    WeakIdentityMap()
)


@final
class ToolMemory(metaclass=NoPublicConstructor):
    """A tool's door into memory (``ToolContext.memory``): the host's guard, bound to the
    run's caller context (and so to its agent) and to the tool's own plugin.

    Everything goes through the same guard as every other route: the declared
    capabilities, currency around every provider call, ``authorize_search_hits`` and
    the release check before anything is returned. A plugin's tools use it instead of
    opening their own provider runtime.
    """

    __slots__ = ("__weakref__", "agent_id", "plugin_id", "tool")

    def __init__(self, plugin_id: str, agent_id: str, tool: str | None = None) -> None:
        #: The plugin whose memory this facet opens (the tool's owner).
        self.plugin_id: str = plugin_id
        #: The run's agent.
        self.agent_id: str = agent_id
        #: The tool this facet was made for (the host names it in a write's provenance).
        self.tool: str | None = tool

    def _bound(self) -> tuple[MemoryRuntime, MemoryCallerContext]:
        bound = _TOOL_BINDINGS.get(self)
        if bound is None:
            raise ContractError("this tool memory facet was not made by a host")
        return bound

    async def search(self, request: MemorySearchRequest) -> MemorySearchResult:
        """Search this plugin's memory as the run's caller (hits authorized, released)."""
        guard, context = self._bound()
        answer = await guard.search(context, request, _plugin_id=self.plugin_id)
        return answer.result

    async def get(self, request: MemoryGetRequest) -> MemoryGetResult:
        """Resolve a reference of this plugin as the run's caller."""
        guard, context = self._bound()
        answer = await guard.get(context, request, _plugin_id=self.plugin_id)
        return answer.result

    async def add(self, request: MemoryAddRequest) -> MemoryAddResult:
        """Write one memory through the host's write route (a writer only); the provider
        is told which tool wrote it, for the entry's provenance."""
        guard, context = self._bound()
        return await add_memory(
            guard, context, request, agent_id=None, plugin_id=self.plugin_id, tool=self.tool
        )

    async def forget(
        self, reference: MemoryReference, *, dry_run: bool = False
    ) -> MemoryForgetResult:
        """Forget what ``reference`` names through the host's write route (a writer only)."""
        guard, context = self._bound()
        return await forget_memory(
            guard,
            context,
            reference,
            agent_id=None,
            dry_run=dry_run,
            plugin_id=self.plugin_id,
        )

    async def write(self, what: str, effect: Callable[[MemoryCallerContext], Awaitable[T]]) -> T:
        """Run a write the plugin owns (its own policy decides who may) under the guard:
        the release check right before ``effect(caller)``, the currency check after."""
        guard, context = self._bound()
        return await guard.guarded_write(context, self.plugin_id, what, effect)
