"""The host's write route into memory: ``host.memory.add`` and ``host.memory.forget``.

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

from typing import Any, Protocol

from .._capabilities import MemoryCallerContext, OperatorAuthority, SessionAuthority
from .._errors import CapabilityDeniedError, ClawError, ContractError, ProviderError
from ._types import MemoryAddRequest, MemoryAddResult, MemoryForgetResult, MemoryReference


class MemoryRuntime(Protocol):
    """What the write route uses of the memory guard (:class:`claw.memory.MemoryRuntime`)."""

    async def await_current(self, context: MemoryCallerContext) -> None: ...

    async def await_committed(self, context: MemoryCallerContext) -> None: ...

    def check_caller(self, context: MemoryCallerContext, agent_id: str | None) -> str: ...

    async def require_known_agent(self, requested: str | None, agent: str) -> None: ...

    def check_reference(self, reference: MemoryReference) -> None: ...

    def maintenance_for_writes(self, operation: str) -> tuple[str, Any]: ...

WRITE_SCOPES = ("operator.write", "operator.admin")


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


def require_writer(context: MemoryCallerContext) -> None:
    """Raise :class:`~claw.CapabilityDeniedError` unless ``context`` may write memory."""
    refusal = writer_refusal(context)
    if refusal is not None:
        raise CapabilityDeniedError(refusal)


async def _call(runtime: MemoryRuntime, name: str, context: MemoryCallerContext, **kw: Any) -> Any:
    plugin_id, maintenance = runtime.maintenance_for_writes(name)
    try:
        result = await getattr(maintenance, name)(context=context, **kw)
    except ClawError:
        raise
    except Exception as exc:
        raise ProviderError(
            f'memory provider "{plugin_id}" failed in {name}: {type(exc).__name__}'
        ) from exc
    await runtime.await_current(context)
    return plugin_id, result


async def add_memory(
    runtime: MemoryRuntime,
    context: MemoryCallerContext,
    request: MemoryAddRequest,
    *,
    agent_id: str | None,
) -> MemoryAddResult:
    """See :meth:`MemoryRuntime.add`."""
    await runtime.await_committed(context)
    agent = runtime.check_caller(context, agent_id)
    require_writer(context)
    await runtime.require_known_agent(agent_id, agent)
    plugin_id, result = await _call(runtime, "add", context, agent_id=agent, request=request)
    if not isinstance(result, MemoryAddResult) or result.reference.provider_id != plugin_id:
        raise ContractError(
            f'memory provider "{plugin_id}" answered add with {type(result).__name__}, '
            "not a MemoryAddResult with its own reference"
        )
    return result


async def forget_memory(
    runtime: MemoryRuntime,
    context: MemoryCallerContext,
    reference: MemoryReference,
    *,
    agent_id: str | None,
    dry_run: bool,
) -> MemoryForgetResult:
    """See :meth:`MemoryRuntime.forget`."""
    await runtime.await_committed(context)
    agent = runtime.check_caller(context, agent_id)
    require_writer(context)
    await runtime.require_known_agent(agent_id, agent)
    runtime.check_reference(reference)
    plugin_id, result = await _call(
        runtime,
        "forget_reference",
        context,
        agent_id=agent,
        reference=reference,
        dry_run=dry_run,
    )
    if not isinstance(result, MemoryForgetResult):
        raise ContractError(
            f'memory provider "{plugin_id}" answered forget with {type(result).__name__}, '
            "not a MemoryForgetResult"
        )
    return result
