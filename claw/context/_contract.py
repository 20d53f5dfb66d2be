"""The context engine contract: what an engine declares, receives and returns.

A context engine owns session context orchestration: it ingests new messages,
assembles the context the model sees, and compacts (or delegates compaction back to
the runtime with :func:`~claw.plugin_sdk.delegate_compaction_to_runtime`).
Required methods: ``ingest``, ``assemble``, ``compact``. Optional: ``bootstrap``,
``ingest_batch``, ``after_turn``, ``maintain`` (honours cancellation), ``commit_turn``
and ``dispose``.

Host-added lifecycle fields (session key and id, agent id, run id, available tools,
citations mode, token budget, context window, model, and ``maintain``'s cancel scope)
are filled on every params object; an engine that declares
``info.accepted_host_params`` receives only those it names (the others are ``None``),
and an engine that declares nothing receives all of them. ``session_id`` is the
session's identity, not an optional field: every engine receives it.

Durable admitted turns: an engine participates only if it declares
``transcript_semantics`` with ``current_turn_fence = "before-current-turn-entry-v1"``
and ``turn_advancement_idempotency = "atomic-idempotent-v1"`` *and* implements
``commit_turn``. The host then supplies each accepted turn, from its admitted user
entry through its terminal entry, with a deterministic ``advancement_key``;
``commit_turn`` must be atomic and idempotent by that key (a retry returns
``"duplicate"``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final, Literal, Protocol, runtime_checkable

import attrs
import trio

from .._errors import ContractError
from ..models import Message

CURRENT_TURN_FENCE: Final = "before-current-turn-entry-v1"
TURN_ADVANCEMENT_IDEMPOTENCY: Final = "atomic-idempotent-v1"

HOST_PARAMS: Final[frozenset[str]] = frozenset(
    {
        "session_key",
        "session_id",
        "agent_id",
        "run_id",
        "available_tools",
        "citations_mode",
        "token_budget",
        "context_window",
        "model",
        "cancel_scope",
    }
)

CitationsMode = Literal["on", "off", "auto"]


def _host_params(value: Iterable[str] | None) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        raise ContractError("accepted_host_params must be a sequence of field names")
    names = frozenset(value)
    unknown = sorted(names - HOST_PARAMS)
    if unknown:
        raise ContractError(
            f"accepted_host_params names unknown host fields {unknown}; "
            f"known: {sorted(HOST_PARAMS)}"
        )
    return names


@attrs.frozen
class TranscriptSemantics:
    """What an engine promises about transcripts (both fields needed for durable turns)."""

    current_turn_fence: str | None = None
    turn_advancement_idempotency: str | None = None

    @property
    def durable(self) -> bool:
        """Whether both durable-admitted-turn promises are made."""
        return (
            self.current_turn_fence == CURRENT_TURN_FENCE
            and self.turn_advancement_idempotency == TURN_ADVANCEMENT_IDEMPOTENCY
        )


@attrs.frozen
class ContextEngineInfo:
    """An engine's identity and declarations."""

    id: str
    name: str
    version: str = "0"
    owns_compaction: bool = False
    accepted_host_params: frozenset[str] | None = attrs.field(default=None, converter=_host_params)
    transcript_semantics: TranscriptSemantics | None = None


@attrs.frozen(kw_only=True)
class HostFields:
    """The host-added lifecycle fields every params object carries (see module doc)."""

    session_key: str | None = None
    session_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    available_tools: frozenset[str] | None = None
    citations_mode: CitationsMode | None = None
    token_budget: int | None = None
    context_window: int | None = None
    model: str | None = None
    cancel_scope: trio.CancelScope | None = None


@attrs.frozen(kw_only=True)
class IngestParams(HostFields):
    """One new message to ingest."""

    message: Message
    entry_id: str | None = None


@attrs.frozen(kw_only=True)
class IngestBatchParams(HostFields):
    """Several new messages to ingest at once."""

    messages: tuple[Message, ...]
    entry_ids: tuple[str, ...] = ()


@attrs.frozen
class IngestResult:
    """Whether the engine took the message(s) into its own store."""

    ingested: bool
    count: int | None = None


@attrs.frozen(kw_only=True)
class BootstrapParams(HostFields):
    """The visible history an engine bootstraps from (see the cursor API)."""

    messages: tuple[Message, ...]


def _trimmed(value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value


@attrs.frozen
class ContextProjection:
    """How an assembled context is projected into a persistent backend thread.

    ``mode="thread_bootstrap"``: inject once, reuse until ``epoch`` changes. The
    epoch is trimmed; an empty one makes the host project per turn (with a warning).
    """

    mode: Literal["thread_bootstrap"]
    epoch: str = attrs.field(converter=_trimmed)


@attrs.frozen(kw_only=True)
class AssembleParams(HostFields):
    """The messages to assemble context from (the visible transcript plus the new turn)."""

    messages: tuple[Message, ...]


def _messages_tuple(value: Iterable[Message]) -> tuple[Message, ...]:
    return tuple(value)


@attrs.frozen
class AssembleResult:
    """The context the model will see."""

    messages: tuple[Message, ...] = attrs.field(converter=_messages_tuple)
    estimated_tokens: int = 0
    system_prompt_addition: str | None = None
    context_projection: ContextProjection | None = None


CompactReason = Literal["threshold", "overflow", "manual"]


@attrs.frozen
class CompactResult:
    """Whether compaction ran, and what it did."""

    ok: bool
    compacted: bool
    reason: str | None = None
    summary: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    first_kept_entry_id: str | None = None


RuntimeCompactor = Callable[["CompactParams"], Awaitable[CompactResult]]


@attrs.frozen(kw_only=True)
class CompactParams(HostFields):
    """Ask the engine to compact a session.

    ``reason`` says why. An engine that does not own compaction passes the params to
    :func:`delegate_compaction_to_runtime`.
    """

    reason: CompactReason = "threshold"
    messages: tuple[Message, ...] = ()
    _runtime: RuntimeCompactor | None = attrs.field(default=None, alias="runtime", repr=False)


async def delegate_compaction_to_runtime(params: CompactParams) -> CompactResult:
    """Run the runtime's own compaction for these params (for engines that do not own it)."""
    runtime = params._runtime
    if runtime is None:
        raise ContractError(
            "these compaction params carry no runtime compactor; only params the host "
            "passed to compact() can be delegated"
        )
    return await runtime(params)


@attrs.frozen(kw_only=True)
class AfterTurnParams(HostFields):
    """The turn that just finished (its visible messages)."""

    messages: tuple[Message, ...]


@attrs.frozen(kw_only=True)
class MaintainParams(HostFields):
    """Periodic maintenance; honour ``cancel_scope`` (when accepted) and cancellation."""


@attrs.frozen(kw_only=True)
class CommitTurnParams(HostFields):
    """One accepted turn, inclusive of its admitted user entry through its terminal entry."""

    advancement_key: str
    turn_id: str
    entry_ids: tuple[str, ...]
    messages: tuple[Message, ...]


@attrs.frozen
class CommitTurnResult:
    """``committed`` the first time a key is seen, ``duplicate`` on every retry."""

    status: Literal["committed", "duplicate"]


@runtime_checkable
class ContextEngine(Protocol):
    """The required part of the context engine contract (see the module docstring)."""

    @property
    def info(self) -> ContextEngineInfo: ...

    async def ingest(self, params: IngestParams) -> IngestResult: ...

    async def assemble(self, params: AssembleParams) -> AssembleResult: ...

    async def compact(self, params: CompactParams) -> CompactResult: ...


def participates_in_durable_turns(engine: object) -> bool:
    """Whether ``engine`` declares the full durable-turn contract and implements commit_turn."""
    info = getattr(engine, "info", None)
    semantics = getattr(info, "transcript_semantics", None)
    return (
        isinstance(semantics, TranscriptSemantics)
        and semantics.durable
        and callable(getattr(engine, "commit_turn", None))
    )


IDENTITY_PARAMS: Final[frozenset[str]] = frozenset({"session_id"})
"""Host fields every engine receives whatever it accepts: the session's identity."""


def filter_host_fields(info: ContextEngineInfo, fields: dict[str, Any]) -> dict[str, Any]:
    """Drop (set to None) the optional host fields an engine did not accept.

    ``accepted_host_params`` restricts optional lifecycle fields, never the session's
    identity: ``session_id`` always reaches the engine.
    """
    accepted = info.accepted_host_params
    if accepted is None:
        return fields
    keep = accepted | IDENTITY_PARAMS
    return {k: (v if (k not in HOST_PARAMS or k in keep) else None) for k, v in fields.items()}


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A cheap, deterministic token estimate: about four characters a token."""
    total = 0
    for message in messages:
        text = getattr(message, "text", None) or getattr(message, "content", None) or ""
        total += 4 + len(str(text)) // 4
        for call in getattr(message, "tool_calls", ()) or ():
            total += 8 + len(str(call.arguments)) // 4
    return total
