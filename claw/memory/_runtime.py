"""The host side of the provider-neutral memory runtime.

``host.memory.open(context, agent_id=...)`` selects the memory slot owner's runtime
(its ``provider_runtime`` when present, else the host-owned legacy adapter over its
``runtime``) and returns a :class:`GuardedMemoryHandle`. The guard is where the
contract is enforced:

* declared capabilities are checked before any provider code runs (undeclared
  sources, a cursor without pagination, an undeclared candidate kind, project keys
  without project filtering), with an error naming the provider and the capability;
* the caller context (and through it the audience), the host and the plugin's
  selection are rechecked before and after every asynchronous provider call;
* references of another provider are rejected; results are validated; ``min_score``
  is enforced again; health details never carry host paths;
* session-source hits reach the caller only through the runtime's
  ``authorize_search_hits``; without that hook they are withheld (fail closed);
* failure, denial or an invalid provider runtime is an error, never a retry against
  legacy storage and never an empty success. The handle is closed in every case.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import attrs
import trio

from .._agents import Agents
from .._capabilities import (
    HostAuthority,
    MemoryCallerContext,
    OperatorAuthority,
    SessionAuthority,
)
from .._currency import Currency
from .._errors import (
    CapabilityDeniedError,
    ClawError,
    ContractError,
    HostClosedError,
    ProviderError,
    UnknownAgentError,
    UnsupportedRequestError,
)
from .._scopes import Lifecycle
from .._slots import SlotView
from ._contracts import (
    MemoryPluginCapability,
    MemoryProviderHandle,
    MemoryProviderOpenResult,
)
from ._legacy import LegacyProviderHandle, strip_host_paths
from ._types import (
    AuthorizeSearchHitsRequest,
    MemoryAddRequest,
    MemoryAddResult,
    MemoryCandidatesRequest,
    MemoryCandidatesResult,
    MemoryForgetResult,
    MemoryGetRequest,
    MemoryGetResult,
    MemoryHealth,
    MemoryReference,
    MemorySearchHit,
    MemorySearchRequest,
    MemorySearchResult,
    ProviderCapabilities,
)
from ._writes import add_memory, forget_memory

logger = logging.getLogger("claw.memory")

T = TypeVar("T")


class MemoryUnavailableError(ProviderError):
    """No memory provider can serve this request (none selected, or no search runtime)."""


class ForeignReferenceError(UnsupportedRequestError):
    """A reference names another provider than the selected one."""


class MemoryHandleClosedError(HostClosedError):
    """A memory handle was used after the ``async with`` block that opened it closed."""


@attrs.define(eq=False)
class GuardedMemoryHandle:
    """A provider handle wrapped by the host's checks; see the module docstring.

    ``native`` is true for a ``provider_runtime`` handle and false for the legacy
    adapter. ``has_refresh`` says whether the provider offers ``refresh()``.
    """

    provider_id: str
    agent_id: str
    native: bool
    _handle: MemoryProviderHandle
    _context: MemoryCallerContext
    _check_selected: Callable[[], None]
    _authorize: Callable[[AuthorizeSearchHitsRequest], Awaitable[Any]] | None
    _currency: Currency
    _closed: bool = attrs.field(default=False, init=False)

    def _check_open(self) -> None:
        if self._closed:
            raise MemoryHandleClosedError(
                f'this handle on memory provider "{self.provider_id}" was used after the '
                "async with block that opened it closed; open a new one"
            )

    @property
    def capabilities(self) -> ProviderCapabilities:
        """What the provider declared (validated at open)."""
        return self._handle.capabilities

    @property
    def has_refresh(self) -> bool:
        return callable(getattr(self._handle, "refresh", None))

    def _check_usable(self) -> None:
        self._check_open()
        self._check_selected()

    async def _current(self) -> None:
        """Check currency by the host's own records (never by state reachable from the
        context); while a session write is in flight, wait for it and check again."""
        await self._currency.await_current(self._context, also=self._check_usable)

    async def _released(self) -> None:
        """The release check, right before a result leaves the guard: currency by the
        host's records, then the committed lineage read from the session store, so a
        reset committed by another process refuses the result even if this process has
        not heard of it yet (see ``Currency.verify_committed``, which verifies the
        context by the host's records first)."""
        self._check_open()
        self._check_selected()
        await self._currency.await_committed(self._context)

    async def _call(
        self,
        what: str,
        fn: Callable[[], Awaitable[T]],
        *,
        release: bool = False,
        current: bool = False,
    ) -> T:
        """Run one provider call between currency checks (the release check after it
        when ``release``). ``current``: the caller checked currency with nothing awaited
        since (the check before would repeat that one on the same state)."""
        if not current:
            await self._current()
        try:
            result = await fn()
        except ClawError:
            raise
        except Exception as exc:
            raise ProviderError(
                f'memory provider "{self.provider_id}" failed in {what}: {type(exc).__name__}'
            ) from exc
        if release:
            await self._released()
        else:
            await self._current()
        return result

    def _unsupported(self, capability: str, detail: str) -> UnsupportedRequestError:
        return UnsupportedRequestError(
            f'memory provider "{self.provider_id}" does not declare {capability}: {detail}'
        )

    async def search(self, request: MemorySearchRequest) -> MemorySearchResult:
        """Search, after enforcing the declared capabilities; session hits are authorized."""
        self._check_open()
        caps = self.capabilities
        sources = request.sources if request.sources is not None else caps.sources
        undeclared = [s for s in sources if s not in caps.sources]
        if undeclared:
            raise self._unsupported(
                "search source " + ", ".join(repr(s) for s in undeclared),
                f"declared sources are {', '.join(repr(s) for s in caps.sources)}",
            )
        if request.cursor is not None and not caps.pagination:
            raise self._unsupported("pagination", "a cursor was supplied")
        if request.active_project_keys and not caps.project_filter:
            raise self._unsupported("project filtering", "active_project_keys were supplied")
        request = attrs.evolve(request, sources=sources)
        result = await self._call("search", lambda: self._handle.search(request))
        if not isinstance(result, MemorySearchResult):
            raise ContractError(
                f'memory provider "{self.provider_id}" returned a {type(result).__name__} '
                "from search, not a MemorySearchResult"
            )
        hits: list[MemorySearchHit] = []
        for hit in result.hits:
            if not isinstance(hit, MemorySearchHit):
                raise ContractError(f'memory provider "{self.provider_id}" returned a non-hit')
            if hit.reference.provider_id != self.provider_id:
                raise ContractError(
                    f'memory provider "{self.provider_id}" returned a reference of provider '
                    f'"{hit.reference.provider_id}"'
                )
            if hit.source not in sources:
                continue
            if (
                request.min_score is not None
                and hit.score is not None
                and hit.score < request.min_score
            ):
                continue
            hits.append(hit)
        # Currency was checked when the search returned; nothing was awaited since.
        admitted = await self._authorize_hits(tuple(hits[: request.max_results]))
        return attrs.evolve(result, hits=admitted)

    async def _authorize_hits(
        self, hits: tuple[MemorySearchHit, ...]
    ) -> tuple[MemorySearchHit, ...]:
        """The hits the provider's hook admits, after the release check."""
        if not hits or self._authorize is None:
            await self._released()
            return tuple(h for h in hits if h.source != "sessions")
        request = AuthorizeSearchHitsRequest.for_caller(
            agent_id=self.agent_id, authority=self._context.authority, hits=hits
        )
        authorize = self._authorize
        admitted = await self._call(
            "authorize_search_hits", lambda: authorize(request), release=True, current=True
        )
        # Only hits the provider was given may come back: a hook cannot add results.
        given = {id(h) for h in hits}
        return tuple(h for h in admitted if id(h) in given)

    async def get(self, request: MemoryGetRequest) -> MemoryGetResult:
        """Resolve a reference of this provider; another provider's is rejected first."""
        self._check_open()
        ref = request.reference
        if ref.provider_id != self.provider_id:
            raise ForeignReferenceError(
                f'reference belongs to provider "{ref.provider_id}", not the selected memory '
                f'provider "{self.provider_id}"'
            )
        result = await self._call("get", lambda: self._handle.get(request), release=True)
        if not isinstance(result, MemoryGetResult):
            raise ContractError(
                f'memory provider "{self.provider_id}" returned a {type(result).__name__} '
                "from get, not a MemoryGetResult"
            )
        if result.reference.provider_id != self.provider_id:
            raise ContractError(
                f'memory provider "{self.provider_id}" answered get with another provider\'s '
                "reference"
            )
        if (
            result.status == "ok"
            and ref.revision is not None
            and result.reference.revision not in (None, ref.revision)
        ):
            raise ProviderError(
                f'memory provider "{self.provider_id}" answered revision '
                f"{result.reference.revision!r} for a request at revision {ref.revision!r}"
            )
        return result

    async def health(self) -> MemoryHealth:
        """Health without partition content; details never carry host paths."""
        result = await self._call("health", self._handle.health)
        if not isinstance(result, MemoryHealth):
            raise ContractError(
                f'memory provider "{self.provider_id}" returned a {type(result).__name__} '
                "from health, not a MemoryHealth"
            )
        return attrs.evolve(result, details=strip_host_paths(result.details))

    async def candidates(self, request: MemoryCandidatesRequest) -> MemoryCandidatesResult:
        """Automatic-recall candidates of a declared kind."""
        self._check_open()
        caps = self.capabilities
        if request.kind not in caps.candidates:
            raise self._unsupported(f"{request.kind!r} candidates", "candidates kind requested")
        if request.active_project_keys and not caps.project_filter:
            raise self._unsupported("project filtering", "active_project_keys were supplied")
        fn = self._handle.candidates  # type: ignore[attr-defined]
        result = await self._call("candidates", lambda: fn(request), release=True)
        if not isinstance(result, MemoryCandidatesResult):
            raise ContractError(
                f'memory provider "{self.provider_id}" returned a {type(result).__name__} '
                "from candidates, not a MemoryCandidatesResult"
            )
        for candidate in result.candidates:
            if candidate.reference.provider_id != self.provider_id:
                raise ContractError(
                    f'memory provider "{self.provider_id}" returned a candidate of provider '
                    f'"{candidate.reference.provider_id}"'
                )
        return result

    async def refresh(self) -> bool:
        """Run the provider's optional refresh; ``False`` when it offers none."""
        self._check_open()
        fn = getattr(self._handle, "refresh", None)
        if not callable(fn):
            return False
        await self._call("refresh", fn)
        return True


def _validate_handle(provider_id: str, handle: object) -> MemoryProviderHandle:
    for name in ("search", "get", "health", "close"):
        if not callable(getattr(handle, name, None)):
            raise ContractError(
                f'memory provider "{provider_id}" returned a handle without {name}()'
            )
    caps = getattr(handle, "capabilities", None)
    if not isinstance(caps, ProviderCapabilities):
        raise ContractError(
            f'memory provider "{provider_id}" returned a handle whose capabilities are not '
            "ProviderCapabilities"
        )
    has_candidates = callable(getattr(handle, "candidates", None))
    if bool(caps.candidates) != has_candidates:
        raise ContractError(
            f'memory provider "{provider_id}": candidates() must be present exactly when '
            "capabilities.candidates is non-empty"
        )
    return handle  # type: ignore[return-value]


@attrs.define(eq=False)
class MemoryRuntime:
    """``host.memory``: opens guarded handles on the selected memory provider.

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

    def selection(self) -> tuple[str | None, MemoryPluginCapability | None]:
        """The selected memory plugin id and its capability (``None``s when none)."""
        plugin_id = self._slots.memory_plugin
        if plugin_id is None:
            return None, None
        cap = self._slots.memory_capabilities.get(plugin_id)
        if cap is not None and not isinstance(cap, MemoryPluginCapability):
            raise ContractError(
                f'memory plugin "{plugin_id}" registered a {type(cap).__name__}, '
                "not a MemoryPluginCapability"
            )
        return plugin_id, cap

    def uses_provider_runtime(self) -> bool:
        """Whether consumers go through a native ``provider_runtime``."""
        _, cap = self.selection()
        return cap is not None and cap.provider_runtime is not None

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

    async def await_current(self, context: MemoryCallerContext) -> None:
        """Verify ``context`` with the host; while a session write is in flight, wait and retry."""
        await self._currency.await_current(context)

    async def await_committed(self, context: MemoryCallerContext) -> None:
        """:meth:`await_current`, then the release check against the committed lineage
        (``Currency.verify_committed``): what a write checks before its effect."""
        await self._currency.await_committed(context)

    def check_caller(self, context: MemoryCallerContext, agent_id: str | None) -> str:
        """Verify ``context`` (current, minted here) and return the agent it addresses."""
        self._lifecycle.check_open()
        self._currency.verify(context)
        agent = self._agent_for(context, agent_id)
        context.assert_current()
        return agent

    async def require_known_agent(self, requested: str | None, agent: str) -> None:
        """Refuse an explicitly named agent the host does not know (before any provider
        code runs, so that no provider creates state for a made-up name)."""
        if requested is not None and not await self._agents.knows(agent):
            raise UnknownAgentError(
                f"agentId {agent[:64]!r} is not an agent of this host (its agents are "
                "default_agent_id and the agents that have sessions)"
            )

    def check_reference(self, reference: MemoryReference) -> None:
        """Reject a reference that is not the selected provider's."""
        plugin_id = self._slots.memory_plugin
        if not isinstance(reference, MemoryReference):
            raise ContractError(f"expected a MemoryReference, got {type(reference).__name__}")
        if reference.provider_id != plugin_id:
            raise ForeignReferenceError(
                f'reference belongs to provider "{reference.provider_id}", not the selected '
                f'memory provider "{plugin_id}"'
            )

    def maintenance_for_writes(self, operation: str) -> tuple[str, Any]:
        """The selected plugin id and its maintenance, which must offer ``operation``."""
        plugin_id, cap = self.selection()
        if plugin_id is None or cap is None:
            raise MemoryUnavailableError("no memory plugin is selected (plugins.slots.memory)")
        maintenance = cap.maintenance
        if maintenance is None or not callable(getattr(maintenance, operation, None)):
            raise UnsupportedRequestError(
                f'memory plugin "{plugin_id}" offers no way to write memory ({operation})'
            )
        return plugin_id, maintenance

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
    ) -> MemoryForgetResult:
        """Forget what ``reference`` names, through the selected provider (a writer only).

        Memory Core removes the referenced lines of a memory file (a reference with a
        line fragment, such as one from :meth:`add` or a search hit), or drops the
        derived index entries of a whole source; ``dry_run`` reports without changing.
        """
        return await forget_memory(self, context, reference, agent_id=agent_id, dry_run=dry_run)

    @asynccontextmanager
    async def open(
        self, context: MemoryCallerContext, *, agent_id: str | None = None, legacy: bool = False
    ) -> AsyncIterator[GuardedMemoryHandle]:
        """Open the selected provider for ``context``; the handle is closed on exit.

        ``legacy=True`` asks for the file-shaped runtime (v1 callers); it is an error
        when the provider has none.
        """
        await self.await_current(context)
        agent = self._agent_for(context, agent_id)
        await self.require_known_agent(agent_id, agent)
        plugin_id, cap = self.selection()
        if plugin_id is None or cap is None:
            raise MemoryUnavailableError("no memory plugin is selected (plugins.slots.memory)")

        # The selection is fixed for the host's life: only the host's closing ends it.
        check_selected = self._lifecycle.check_open
        check_selected()
        handle: MemoryProviderHandle
        authorize: Any
        if legacy and cap.runtime is None:
            raise UnsupportedRequestError(
                f'memory plugin "{plugin_id}" has no file-shaped runtime; use the neutral one'
            )
        if cap.provider_runtime is not None and not legacy:
            runtime = cap.provider_runtime
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
            handle = opened.provider
            authorize = getattr(runtime, "authorize_search_hits", None)
            native = True
        elif cap.runtime is not None:
            legacy_runtime = cap.runtime
            manager = await legacy_runtime.get_search_manager(agent_id=agent, context=context)
            if manager is None:
                raise MemoryUnavailableError(
                    f'memory plugin "{plugin_id}" has no search manager for agent {agent!r}'
                )
            handle = LegacyProviderHandle(
                provider_id=plugin_id, manager=manager, session_key=context.session_key
            )
            authorize = getattr(legacy_runtime, "authorize_search_hits", None)
            native = False
        else:
            raise MemoryUnavailableError(
                f'memory plugin "{plugin_id}" does not offer host search support'
            )
        guarded: GuardedMemoryHandle | None = None
        try:
            validated = _validate_handle(plugin_id, handle)
            guarded = GuardedMemoryHandle(
                provider_id=plugin_id,
                agent_id=agent,
                native=native,
                handle=validated,
                context=context,
                check_selected=check_selected,
                authorize=authorize if callable(authorize) else None,
                currency=self._currency,
            )
            await guarded._current()
            yield guarded
        finally:
            if guarded is not None:
                guarded._closed = True
            with trio.CancelScope(shield=True):
                try:
                    await handle.close()
                except Exception:
                    logger.exception('memory provider "%s" failed to close a handle', plugin_id)
