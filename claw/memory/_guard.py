"""The guarded handle: one opened provider handle behind the host's checks.

:class:`GuardedMemoryHandle` is what ``host.memory.open`` yields, and what every other
memory route (the gateway, MCP, agent tools, consumers) goes through inside
:class:`~claw.memory.MemoryRuntime`. It enforces, for every call:

* the declared capabilities, before any provider code runs (undeclared sources, a
  cursor without pagination, an undeclared candidate kind, project keys without project
  filtering), with an error naming the provider and the capability;
* currency around every provider call: the caller context (and through it the
  audience and recall pass), the host and the request's own condition (``also``: the
  gateway's connection) are checked before and after each call, and a check is not
  made twice with nothing awaited in between;
* the release check (:meth:`~claw._currency.Currency.verify_committed`) right before a
  result that carries memory (search hits, a get, candidates) leaves the guard;
* references of another provider are rejected; results are validated; ``min_score``
  is enforced again; health details never carry host paths;
* session-source hits reach the caller only through the runtime's
  ``authorize_search_hits``; without that hook they are withheld (fail closed);
* a provider's own failure becomes a :class:`~claw.ProviderError` naming the provider,
  never an empty success.
"""

from __future__ import annotations

import operator
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs

from .._capabilities import MemoryCallerContext
from .._currency import Currency, RequestCheck
from .._errors import (
    ClawError,
    ContractError,
    HostClosedError,
    ProviderError,
    UnsupportedRequestError,
)
from .._scopes import Lifecycle
from ._contracts import MemoryProviderHandle
from ._legacy import strip_host_paths
from ._types import (
    AuthorizeSearchHitsRequest,
    MemoryCandidatesRequest,
    MemoryCandidatesResult,
    MemoryGetRequest,
    MemoryGetResult,
    MemoryHealth,
    MemorySearchHit,
    MemorySearchRequest,
    MemorySearchResult,
    ProviderCapabilities,
)

T = TypeVar("T")

AuthorizeHook = Callable[[AuthorizeSearchHitsRequest], Awaitable[Any]]


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

    Each public method checks currency before its provider call and after it; the
    request routes of :class:`~claw.memory.MemoryRuntime` sequence the private ones
    so that no check repeats the one just made.
    """

    provider_id: str
    agent_id: str
    native: bool
    _handle: MemoryProviderHandle
    _context: MemoryCallerContext
    _authorize: AuthorizeHook | None
    _currency: Currency
    _lifecycle: Lifecycle
    _also: RequestCheck | None = None
    _closed: bool = attrs.field(default=False, init=False)

    @property
    def capabilities(self) -> ProviderCapabilities:
        """What the provider declared (validated at open)."""
        return self._handle.capabilities

    @property
    def has_refresh(self) -> bool:
        return callable(getattr(self._handle, "refresh", None))

    # -- checks ------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise MemoryHandleClosedError(
                f'this handle on memory provider "{self.provider_id}" was used after the '
                "async with block that opened it closed; open a new one"
            )

    def _check_usable(self) -> None:
        self._check_open()
        self._lifecycle.check_open()
        if self._also is not None:
            self._also()

    async def _current(self) -> None:
        """Check currency by the host's own records (never by state reachable from the
        context); while a session write is in flight, wait for it and check again."""
        if not self._currency.current_now(self._context, self._check_usable):
            await self._currency.await_current(self._context, also=self._check_usable)

    async def _released(self) -> None:
        """The release check, right before a result leaves the guard: currency by the
        host's records, then the committed lineage read from the session store, so a
        reset committed by another process refuses the result even if this process has
        not heard of it yet. It may follow the handle's closing (the request routes
        close first, so that this is their last check)."""
        self._lifecycle.check_open()
        if not self._currency.committed_now(self._context, self._also):
            await self._currency.await_committed(self._context, also=self._also)

    async def _call(
        self, what: str, fn: Callable[..., Awaitable[T]], *args: Any, checked: bool
    ) -> T:
        """One provider call, ``await fn(*args)``, after the check before it unless
        ``checked`` (a check was just made with nothing awaited since). The check after
        it is the caller's, so that it can be the check before the next step."""
        if not checked:
            await self._current()
        # provider_call, inlined: one coroutine less on every provider call.
        try:
            return await fn(*args)
        except ClawError:
            raise
        except Exception as exc:
            raise _provider_failed(self.provider_id, what, exc) from exc

    def _unsupported(self, capability: str, detail: str) -> UnsupportedRequestError:
        return UnsupportedRequestError(
            f'memory provider "{self.provider_id}" does not declare {capability}: {detail}'
        )

    # -- search ------------------------------------------------------------------

    async def search(self, request: MemorySearchRequest) -> MemorySearchResult:
        """Search, after enforcing the declared capabilities; session hits are authorized."""
        return await self._search(request, checked=False, release=True)

    def _declared_search(self, request: MemorySearchRequest) -> MemorySearchRequest:
        """``request`` if the provider declared what it asks for (``sources=None``, every
        declared source, is passed on as it is: it means the same to the provider)."""
        caps = self.capabilities
        if request.sources is not None:
            undeclared = [s for s in request.sources if s not in caps.sources]
            if undeclared:
                raise self._unsupported(
                    "search source " + ", ".join(repr(s) for s in undeclared),
                    f"declared sources are {', '.join(repr(s) for s in caps.sources)}",
                )
        if request.cursor is not None and not caps.pagination:
            raise self._unsupported("pagination", "a cursor was supplied")
        if request.active_project_keys and not caps.project_filter:
            raise self._unsupported("project filtering", "active_project_keys were supplied")
        return request

    async def _search(
        self, request: MemorySearchRequest, *, checked: bool, release: bool
    ) -> MemorySearchResult:
        """The search: check, call, check, authorize, and (``release``) the release
        check; without ``release`` the caller makes it after closing the handle."""
        self._check_open()
        request = self._declared_search(request)
        result = await self._call("search", self._handle.search, request, checked=checked)
        await self._current()
        admitted = await self._authorize_hits(self._valid_hits(result, request))
        if release:
            await self._released()
        if admitted == result.hits:  # nothing withheld: the provider's result as it is
            return result
        return attrs.evolve(result, hits=admitted)

    def _valid_hits(
        self, result: object, request: MemorySearchRequest
    ) -> tuple[MemorySearchHit, ...]:
        if not isinstance(result, MemorySearchResult):
            raise ContractError(
                f'memory provider "{self.provider_id}" returned a {type(result).__name__} '
                "from search, not a MemorySearchResult"
            )
        sources = request.sources or self.capabilities.sources
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
        return tuple(hits[: request.max_results])

    async def _authorize_hits(
        self, hits: tuple[MemorySearchHit, ...]
    ) -> tuple[MemorySearchHit, ...]:
        """The hits the provider's hook admits (currency was checked just before)."""
        if not hits or self._authorize is None:
            return tuple(h for h in hits if h.source != "sessions")
        request = AuthorizeSearchHitsRequest.for_caller(
            agent_id=self.agent_id, authority=self._context.authority, hits=hits
        )
        admitted = await self._call("authorize_search_hits", self._authorize, request, checked=True)
        # Only hits the provider was given may come back: a hook cannot add results. The
        # common answer, every hit as given (the very objects, in order), needs no table.
        if (
            isinstance(admitted, list | tuple)
            and len(admitted) == len(hits)
            and all(map(operator.is_, admitted, hits))
        ):
            return hits
        given = {id(h) for h in hits}
        return tuple(h for h in admitted if id(h) in given)

    # -- get, health, candidates, refresh ----------------------------------------

    async def get(self, request: MemoryGetRequest) -> MemoryGetResult:
        """Resolve a reference of this provider; another provider's is rejected first."""
        return await self._get(request, checked=False, release=True)

    async def _get(
        self, request: MemoryGetRequest, *, checked: bool, release: bool
    ) -> MemoryGetResult:
        self._check_open()
        ref = request.reference
        if ref.provider_id != self.provider_id:
            raise ForeignReferenceError(
                f'reference belongs to provider "{ref.provider_id}", not the selected memory '
                f'provider "{self.provider_id}"'
            )
        result = await self._call("get", self._handle.get, request, checked=checked)
        if release:
            await self._released()
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
        return await self._health(checked=False, after=True)

    async def _health(self, *, checked: bool, after: bool) -> MemoryHealth:
        self._check_open()
        result = await self._call("health", self._handle.health, checked=checked)
        if after:
            await self._current()
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
        result = await self._call("candidates", fn, request, checked=False)
        await self._released()
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
        await self._call("refresh", fn, checked=False)
        await self._current()
        return True


async def provider_call(provider_id: str, what: str, fn: Callable[[], Awaitable[T]]) -> T:
    """``await fn()``; a provider's failure other than a claw error becomes a
    :class:`~claw.ProviderError` naming the provider and the call (not its message,
    which may name host paths)."""
    try:
        return await fn()
    except ClawError:
        raise
    except Exception as exc:
        raise _provider_failed(provider_id, what, exc) from exc


def _provider_failed(provider_id: str, what: str, exc: Exception) -> ProviderError:
    return ProviderError(f'memory provider "{provider_id}" failed in {what}: {type(exc).__name__}')


def validate_handle(provider_id: str, handle: object) -> MemoryProviderHandle:
    """``handle`` as a provider handle, or :class:`~claw.ContractError` saying what it lacks."""
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
