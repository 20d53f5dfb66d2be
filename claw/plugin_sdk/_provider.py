"""The skeleton of a memory provider: what every provider would otherwise write the same way.

A provider keeps its own storage, ranking and visibility policy; the rest is the same
for all of them and lives here:

* :class:`ProviderRuntime`: the ``provider_runtime`` whose ``open`` checks the caller
  for the agent (``assert_current_for``) and returns a handle of the provider's own
  class. A subclass names that class (``handle_class``) and declares its
  :meth:`~ProviderRuntime.capabilities`; it adds ``authorize_search_hits`` when it
  returns session hits.
* :class:`ProviderHandle`: the caller-bound handle's fields (the provider's service,
  the agent, the caller context, the declared capabilities), :meth:`~ProviderHandle.effect`
  (the caller's currency checked right before an effect and again before its result
  leaves the provider, as the seed asks), and a ``close`` with nothing to release. A
  subclass writes ``search``, ``get``, ``health`` (and ``refresh`` or ``candidates``).
* :class:`ProviderMaintenance`: the maintenance object's service and the operator
  check its operator-only operations start with (:meth:`~ProviderMaintenance.operator`).
* :func:`build_capability`: the :class:`~claw.plugin_sdk.MemoryPluginCapability`, with the
  async prompt preparation made from a plain function of the caller.
* :func:`parse_offset_cursor` / :func:`offset_cursor`: an offset as a search cursor.
* :func:`require_operator`: refuse anything but an operator's authority.
* :data:`SEARCH_TOOL_PARAMETERS` / :func:`search_tool_request`: a search tool's
  arguments (``query``, ``max_results``), their schema, and the one place they are
  checked before they become a :class:`~claw.plugin_sdk.MemorySearchRequest`.

The host's guard still checks everything it checks for any provider (declared
capabilities, currency around every call, the release check); these are the
provider's own checks, written once.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, ClassVar, Generic, TypeVar

import attrs

from .._capabilities import MemoryCallerContext, OperatorAuthority
from .._errors import CapabilityDeniedError, UnsupportedRequestError
from ..memory import (
    MemoryGetRequest,
    MemoryGetResult,
    MemoryHealth,
    MemoryPluginCapability,
    MemoryProviderOpenResult,
    MemoryProviderRuntime,
    MemorySearchRequest,
    MemorySearchResult,
    ProviderCapabilities,
)

S = TypeVar("S")
T = TypeVar("T")

# ASCII digits only (``str.isdigit`` also accepts superscripts and other scripts' digits,
# which ``int`` then refuses), at most nine of them.
_OFFSET_CURSOR = re.compile(r"\A[0-9]{1,9}\Z")


def parse_offset_cursor(cursor: str | None, provider_id: str) -> int:
    """The offset a search cursor encodes (0 without one).

    A cursor is one to nine ASCII digits, as :func:`offset_cursor` makes them; anything
    else is the caller's mistake: :class:`~claw.plugin_sdk.UnsupportedRequestError`
    naming the provider and asking for a ``nextCursor``.
    """
    if cursor is None:
        return 0
    if not _OFFSET_CURSOR.match(cursor):
        raise UnsupportedRequestError(
            f'memory provider "{provider_id}" cannot read cursor {cursor[:32]!r}; '
            "pass back the nextCursor of a previous search"
        )
    return int(cursor)


def offset_cursor(offset: int | None) -> str | None:
    """The cursor of the page that starts at ``offset`` (``None``: no next page)."""
    return None if offset is None else str(offset)


def require_operator(context: MemoryCallerContext, what: str) -> None:
    """Refuse a caller that is not a current operator: ``what`` needs one."""
    context.assert_current()
    if not isinstance(context.authority, OperatorAuthority):
        raise CapabilityDeniedError(f"{what} needs an operator's authority")


@attrs.define(eq=False)
class ProviderHandle(Generic[S]):
    """The base of a caller-bound provider handle (see the module docstring)."""

    service: S
    agent_id: str
    context: MemoryCallerContext
    capabilities: ProviderCapabilities
    #: Whether :meth:`close` may wait (checkpoint). Set for every subclass from whether
    #: it overrides ``close``: the host's guard shields a close that may wait from the
    #: request's cancellation (so that it runs to its end), and calls the base one,
    #: which has nothing to release and never waits, without a shield.
    close_waits: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.close_waits = cls.close is not ProviderHandle.close

    async def effect(self, fn: Callable[[], Awaitable[T]]) -> T:
        """``await fn()`` between the caller's currency checks: right before the effect,
        and again once the provider's own awaits are done, before anything it returns
        leaves the provider (a caller revoked meanwhile is refused)."""
        self.context.assert_current()
        result = await fn()
        self.context.assert_current()
        return result

    async def search(self, request: MemorySearchRequest) -> MemorySearchResult:
        """What this caller may find for ``request`` (the provider writes it)."""
        raise NotImplementedError

    async def get(self, request: MemoryGetRequest) -> MemoryGetResult:
        """Resolve one of this provider's references for this caller (the provider's)."""
        raise NotImplementedError

    async def health(self) -> MemoryHealth:
        """Ready, degraded or unavailable, without partition content (the provider's)."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release this caller's lease (nothing, unless a subclass holds one; it never
        waits, see :attr:`close_waits`)."""
        return None


H = TypeVar("H", bound=ProviderHandle[Any])


@attrs.define(eq=False)
class ProviderRuntime(Generic[S, H]):
    """The base of a ``provider_runtime`` (see the module docstring).

    A subclass sets ``handle_class`` and implements :meth:`capabilities`.
    """

    service: S
    handle_class: ClassVar[type[ProviderHandle[Any]]]

    def capabilities(self) -> ProviderCapabilities:
        """What the handles of this runtime declare."""
        raise NotImplementedError

    def handle(self, agent_id: str, context: MemoryCallerContext) -> H:
        """A handle of ``handle_class`` for this caller."""
        handle: H = self.handle_class(  # type: ignore[assignment]
            service=self.service,
            agent_id=agent_id,
            context=context,
            capabilities=self.capabilities(),
        )
        return handle

    async def open(
        self, *, agent_id: str, context: MemoryCallerContext
    ) -> MemoryProviderOpenResult:
        """Open agent ``agent_id``'s memory for ``context``: a current caller whose
        audience (if any) is that agent's, or an error."""
        context.assert_current_for(agent_id)
        return MemoryProviderOpenResult(provider=self.handle(agent_id, context))


@attrs.define(eq=False)
class ProviderMaintenance(Generic[S]):
    """The base of a provider's maintenance object (``MemoryPluginCapability.maintenance``).

    ``provider_name`` names the provider in refusals ("Memory Core maintenance needs an
    operator's authority").
    """

    service: S
    provider_name: ClassVar[str] = "this provider"

    def operator(self, context: MemoryCallerContext) -> None:
        """Refuse anything but a current operator (reindex, forget, describe, ...)."""
        require_operator(context, f"{self.provider_name} maintenance")


Guidance = Callable[[str, MemoryCallerContext], str | Iterable[str]]
"""``guidance(agent_id, caller)``: the memory guidance lines for one run's prompt."""


def build_capability(
    *,
    provider_runtime: MemoryProviderRuntime,
    guidance: Guidance | None = None,
    **fields: Any,
) -> MemoryPluginCapability:
    """The :class:`~claw.plugin_sdk.MemoryPluginCapability` of a provider.

    ``guidance`` is a plain function of the agent and the run's caller (what this
    caller may recall here); it becomes the capability's async ``prompt_preparation``.
    Every other field (``maintenance``, ``recall_tool_names``, a flush plan resolver,
    ``runtime``, ``public_artifacts``, ...) is passed as it is.
    """
    if guidance is not None:

        async def prepare(
            *, agent_id: str, session_key: str, caller: MemoryCallerContext
        ) -> list[str]:
            lines = guidance(agent_id, caller)
            return [lines] if isinstance(lines, str) else list(lines)

        fields["prompt_preparation"] = prepare
    return MemoryPluginCapability(provider_runtime=provider_runtime, **fields)


#: The most results a search tool asks for at once (a larger ``max_results`` is cut).
SEARCH_TOOL_MAX_RESULTS = 20

SEARCH_TOOL_PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to look for in memory."},
        "max_results": {"type": "integer", "minimum": 1, "maximum": SEARCH_TOOL_MAX_RESULTS},
    },
    "required": ["query"],
}
"""The JSON schema of a search tool's arguments."""


def search_tool_request(
    tool: str, arguments: Mapping[str, Any], *, default_results: int = 6
) -> MemorySearchRequest:
    """The search a search tool's ``arguments`` ask for, checked here once.

    ``query`` must be a non-empty string and ``max_results`` (optional, else
    ``default_results``) a positive integer; more than :data:`SEARCH_TOOL_MAX_RESULTS`
    asks for that many. Anything else is an
    :class:`~claw.plugin_sdk.UnsupportedRequestError` naming the tool and the argument
    (a tool returns its message to the model).
    """
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        raise UnsupportedRequestError(f"{tool} needs a non-empty 'query' string.")
    limit = arguments.get("max_results", default_results)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise UnsupportedRequestError(f"{tool}: 'max_results' must be a positive integer.")
    return MemorySearchRequest._trusted(
        query=query,
        max_results=min(limit, SEARCH_TOOL_MAX_RESULTS),
        min_score=None,
        cursor=None,
        sources=None,
    )
