"""The host's write route into memory: ``host.memory.add``, ``forget``, ``restore``,
``removals``, ``purge``, ``forgotten`` and ``unforget``, the index maintenance
``reindex`` and ``forget_indexed`` (an operator's only), and on the same route the
maintenance reads ``describe`` and ``warm`` (an operator with ``operator.read``).

Writing goes through the selected provider's own operation (its
:class:`~claw.memory.MemoryMaintenance` ``add`` and ``forget_reference``), never around
it: the host neither knows nor touches the provider's storage. Before any provider code
runs the host checks that the caller is a *writer*:

* an operator granted ``operator.write`` (or ``operator.admin``), or
* a session whose audience is the agent owner's (``owner-private``) and that is not
  sandboxed (a sandboxed turn has read-only workspace access).

A conversation audience, a session without an audience and a host authority are
refused: the memory a provider keeps for an agent is its owner's. The provider checks
again (it owns the policy for its own records), and the caller context is rechecked
after the provider's awaits, as for reads.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from .._capabilities import (
    HostAuthority,
    MemoryCallerContext,
    OperatorAuthority,
    SessionAuthority,
)
from .._currency import Currency
from .._errors import CapabilityDeniedError, ContractError
from ._guard import provider_call
from ._types import (
    MemoryAddRequest,
    MemoryAddResult,
    MemoryForgetResult,
    MemoryProvenance,
    MemoryPurgeRequest,
    MemoryPurgeResult,
    MemoryReference,
    MemoryRemoval,
    MemoryRestoreResult,
)

WRITE_SCOPES = ("operator.write", "operator.admin")


class WriteRoute(Protocol):
    """What the write route uses of the memory guard (:class:`claw.memory.MemoryRuntime`)."""

    async def write_target(
        self,
        context: MemoryCallerContext,
        agent_id: str | None,
        operation: str,
        *,
        plugin_id: str | None = None,
        reference: MemoryReference | None = None,
        refusal: Callable[[MemoryCallerContext], str | None] = ...,
    ) -> WriteTarget: ...


@attrs.frozen
class WriteTarget:
    """A write the guard has admitted, its release check made with nothing awaited since:
    the provider, the agent, its maintenance, and the currency check after the effect."""

    plugin_id: str
    agent_id: str
    maintenance: Any
    context: MemoryCallerContext
    currency: Currency

    async def run(self, operation: str, **kw: Any) -> Any:
        """The provider's ``operation`` (the guard made the release check right before
        it), then the currency check; a provider's own failure is a
        :class:`~claw.ProviderError`."""
        context = self.context
        call = getattr(self.maintenance, operation)
        result = await provider_call(
            self.plugin_id, operation, lambda: call(agent_id=self.agent_id, context=context, **kw)
        )
        await self.currency.await_current(context)
        return result

    def accepts(self, operation: str, keyword: str) -> bool:
        """Whether the provider's ``operation`` takes ``keyword`` (an optional part of the
        contract, such as the ``tool`` a write came through)."""
        try:
            params = inspect.signature(getattr(self.maintenance, operation)).parameters
        except (TypeError, ValueError):
            return False
        return keyword in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def writer_refusal(context: MemoryCallerContext) -> str | None:
    """Why ``context`` may not write an agent's memory, or ``None`` when it may."""
    authority = context.authority
    if isinstance(authority, OperatorAuthority):
        if any(authority.has_scope(s) for s in WRITE_SCOPES):
            return None
        return "writing memory needs the operator.write scope"
    if isinstance(authority, SessionAuthority):
        if authority.sandboxed:
            return "a sandboxed session has read-only access and cannot write memory"
        audience = authority.audience
        if audience is not None and audience.kind == "owner-private":
            return None
        return "only the agent's owner can write its memory; this conversation's audience cannot"
    return "a host authority cannot write memory"


def describe_writer(
    caller: MemoryCallerContext,
    *,
    clock: Callable[[], float],
    flush_id: str | None = None,
    tool: str | None = None,
    plugin_id: str | None = None,
) -> MemoryProvenance:
    """Who ``caller`` is, as the provenance of a memory write (see :class:`MemoryProvenance`).

    Read from the host-minted authority only (a run's incarnation is the one it was
    admitted at), never from anything the writer supplies; ``clock`` stamps it.
    """
    authority = caller.authority
    at = clock()
    if isinstance(authority, OperatorAuthority):
        return MemoryProvenance(
            kind="operator",
            connection_id=authority.connection_id,
            flush_id=flush_id,
            tool=tool,
            plugin_id=plugin_id,
            at=at,
        )
    if isinstance(authority, SessionAuthority):
        audience = authority.audience
        return MemoryProvenance(
            kind="flush" if flush_id is not None else "run",
            agent_id=authority.agent_id,
            session_key=authority.session_key,
            session_id=authority.session_id,
            lifecycle_revision=authority.lifecycle_revision,
            owner=audience is not None and audience.kind == "owner-private",
            flush_id=flush_id,
            tool=tool,
            plugin_id=plugin_id,
            at=at,
        )
    assert isinstance(authority, HostAuthority)
    return MemoryProvenance(kind="host", tool=tool, plugin_id=plugin_id, at=at)


def purger_refusal(context: MemoryCallerContext) -> str | None:
    """Why ``context`` may not purge memory (delete it for good), or ``None`` when it may.

    Only an operator with ``operator.admin``: a purge cannot be undone, so no agent run
    (whatever its audience) and no ``operator.write`` client (an MCP client, say) may
    make one. The local ``claw`` command's operator has it.
    """
    authority = context.authority
    if isinstance(authority, OperatorAuthority) and authority.has_scope("operator.admin"):
        return None
    return "purging memory (deleting it for good) needs an operator with operator.admin"


def require_writer(context: MemoryCallerContext) -> None:
    """Raise :class:`~claw.CapabilityDeniedError` unless ``context`` may write memory."""
    refusal = writer_refusal(context)
    if refusal is not None:
        raise CapabilityDeniedError(refusal)


async def add_memory(
    route: WriteRoute,
    context: MemoryCallerContext,
    request: MemoryAddRequest,
    *,
    agent_id: str | None,
    plugin_id: str | None = None,
    tool: str | None = None,
) -> MemoryAddResult:
    """See :meth:`MemoryRuntime.add`; ``plugin_id`` is a tool facet's own plugin and
    ``tool`` the name of its tool the write came through (the provider records it in
    the entry's provenance when its ``add`` takes ``tool``)."""
    target = await route.write_target(context, agent_id, "add", plugin_id=plugin_id)
    extra = {"tool": tool} if tool is not None and target.accepts("add", "tool") else {}
    result = await target.run("add", request=request, **extra)
    if not isinstance(result, MemoryAddResult) or result.reference.provider_id != target.plugin_id:
        raise ContractError(
            f'memory provider "{target.plugin_id}" answered add with {type(result).__name__}, '
            "not a MemoryAddResult with its own reference"
        )
    return result


async def forget_memory(
    route: WriteRoute,
    context: MemoryCallerContext,
    reference: MemoryReference,
    *,
    agent_id: str | None,
    dry_run: bool,
    plugin_id: str | None = None,
    whole_range: bool = False,
) -> MemoryForgetResult:
    """See :meth:`MemoryRuntime.forget`; ``plugin_id`` is a tool facet's own plugin."""
    target = await route.write_target(
        context, agent_id, "forget_reference", plugin_id=plugin_id, reference=reference
    )
    # ``whole_range`` reaches the provider only when asked for: a provider that does
    # not know it refuses the request instead of removing more than one entry.
    extra = {"whole_range": True} if whole_range else {}
    result = await target.run("forget_reference", reference=reference, dry_run=dry_run, **extra)
    if not isinstance(result, MemoryForgetResult):
        raise ContractError(
            f'memory provider "{target.plugin_id}" answered forget with '
            f"{type(result).__name__}, not a MemoryForgetResult"
        )
    return result


async def restore_memory(
    route: WriteRoute,
    context: MemoryCallerContext,
    removal_id: str,
    *,
    agent_id: str | None,
    dry_run: bool,
) -> MemoryRestoreResult:
    """See :meth:`MemoryRuntime.restore`."""
    if not isinstance(removal_id, str) or not removal_id.strip():
        raise ContractError("removal_id must be the id of a removal (claw memory forgotten)")
    target = await route.write_target(context, agent_id, "restore")
    result = await target.run("restore", removal_id=removal_id, dry_run=dry_run)
    if (
        not isinstance(result, MemoryRestoreResult)
        or result.reference.provider_id != target.plugin_id
    ):
        raise ContractError(
            f'memory provider "{target.plugin_id}" answered restore with '
            f"{type(result).__name__}, not a MemoryRestoreResult with its own reference"
        )
    return result


async def list_removals(
    route: WriteRoute,
    context: MemoryCallerContext,
    *,
    agent_id: str | None,
    limit: int,
) -> tuple[MemoryRemoval, ...]:
    """See :meth:`MemoryRuntime.removals`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise ContractError(f"limit must be an integer from 1 to 1000, got {limit!r}")
    target = await route.write_target(context, agent_id, "removals")
    removals = tuple(await target.run("removals", limit=limit))
    if not all(isinstance(r, MemoryRemoval) for r in removals):
        raise ContractError(
            f'memory provider "{target.plugin_id}" answered removals with non-removals'
        )
    return removals[:limit]


async def purge_memory(
    route: WriteRoute,
    context: MemoryCallerContext,
    request: MemoryPurgeRequest,
    *,
    agent_id: str | None,
    dry_run: bool,
) -> MemoryPurgeResult:
    """See :meth:`MemoryRuntime.purge`: the write route, for an ``operator.admin`` only."""
    target = await route.write_target(
        context, agent_id, "purge", reference=request.reference, refusal=purger_refusal
    )
    result = await target.run("purge", request=request, dry_run=dry_run)
    if not isinstance(result, MemoryPurgeResult):
        raise ContractError(
            f'memory provider "{target.plugin_id}" answered purge with '
            f"{type(result).__name__}, not a MemoryPurgeResult"
        )
    return result


async def index_forgets(
    route: WriteRoute, context: MemoryCallerContext, *, agent_id: str | None
) -> tuple[Mapping[str, Any], ...]:
    """See :meth:`MemoryRuntime.forgotten`."""
    target = await route.write_target(context, agent_id, "forgotten")
    found = tuple(await target.run("forgotten"))
    if not all(isinstance(f, Mapping) for f in found):
        raise ContractError(
            f'memory provider "{target.plugin_id}" answered forgotten with non-mappings'
        )
    return found


async def unforget_memory(
    route: WriteRoute, context: MemoryCallerContext, forget_id: str, *, agent_id: str | None
) -> Mapping[str, Any]:
    """See :meth:`MemoryRuntime.unforget`."""
    if not isinstance(forget_id, str) or not forget_id.strip():
        raise ContractError("forget_id must be the id of a forget (claw memory forgotten)")
    target = await route.write_target(context, agent_id, "unforget")
    result = await target.run("unforget", forget_id=forget_id)
    if not isinstance(result, Mapping):
        raise ContractError(
            f'memory provider "{target.plugin_id}" answered unforget with '
            f"{type(result).__name__}, not a mapping"
        )
    return result


def maintainer_refusal(context: MemoryCallerContext) -> str | None:
    """Why ``context`` may not maintain a provider's index (reindex it, forget a whole
    path, session or source from it), or ``None`` when it may.

    Only an operator with ``operator.write`` (or ``operator.admin``): this maintenance is
    the operator's (``claw memory index`` / ``forget --path``), never a run's, whatever
    its audience; the provider refuses anyone but an operator again.
    """
    if _operator_with(context, WRITE_SCOPES):
        return None
    return (
        "index maintenance (reindex, forget by path, session or source) needs an operator "
        "with operator.write"
    )


async def reindex_memory(
    route: WriteRoute,
    context: MemoryCallerContext,
    *,
    agent_id: str | None,
    force: bool,
    progress: Callable[[str, int, int], None] | None,
) -> Mapping[str, Any]:
    """See :meth:`MemoryRuntime.reindex`."""
    target = await route.write_target(context, agent_id, "reindex", refusal=maintainer_refusal)
    result = await target.run("reindex", force=force, progress=progress)
    return _report(target, "reindex", result)


async def forget_indexed_memory(
    route: WriteRoute,
    context: MemoryCallerContext,
    *,
    agent_id: str | None,
    path: str | None,
    session_id: str | None,
    source: str | None,
    dry_run: bool,
) -> Mapping[str, Any]:
    """See :meth:`MemoryRuntime.forget_indexed`."""
    if path is None and session_id is None and source is None:
        raise ContractError("an index-level forget needs a path, a session_id or a source")
    target = await route.write_target(context, agent_id, "forget", refusal=maintainer_refusal)
    result = await target.run(
        "forget", path=path, session_id=session_id, source=source, dry_run=dry_run
    )
    return _report(target, "forget", result)


def _report(target: WriteTarget, operation: str, result: object) -> Mapping[str, Any]:
    if not isinstance(result, Mapping):
        raise ContractError(
            f'memory provider "{target.plugin_id}" answered {operation} with '
            f"{type(result).__name__}, not a mapping"
        )
    return result


READ_SCOPES = ("operator.read", "operator.admin")


def index_reader_refusal(context: MemoryCallerContext) -> str | None:
    """Why ``context`` may not describe or warm a provider's index, or ``None`` when it may.

    Only an operator with ``operator.read`` (or ``operator.admin``): these are the
    operator's terminal's (``claw doctor``, the CLI before a search), and a description
    may name local paths. Nothing is written, but the route is the maintenance one: the
    guard admits it (host open, caller current, agent known) before any provider code.
    """
    if _operator_with(context, READ_SCOPES):
        return None
    return (
        "describing or warming a memory index (claw doctor, a search's warm-up) needs an "
        "operator with operator.read"
    )


async def describe_index(
    route: WriteRoute, context: MemoryCallerContext, *, agent_id: str | None
) -> Mapping[str, Any]:
    """See :meth:`MemoryRuntime.describe`."""
    target = await route.write_target(context, agent_id, "describe", refusal=index_reader_refusal)
    return _report(target, "describe", await target.run("describe"))


async def warm_index(
    route: WriteRoute,
    context: MemoryCallerContext,
    *,
    agent_id: str | None,
    progress: Callable[[str, int, int], None] | None,
) -> None:
    """See :meth:`MemoryRuntime.warm`."""
    target = await route.write_target(context, agent_id, "warm", refusal=index_reader_refusal)
    await target.run("warm", progress=progress)


def _operator_with(context: MemoryCallerContext, scopes: tuple[str, ...]) -> bool:
    """Whether ``context`` is an operator's granted one of ``scopes``."""
    authority = context.authority
    return isinstance(authority, OperatorAuthority) and any(authority.has_scope(s) for s in scopes)
