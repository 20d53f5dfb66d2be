"""The flush plans a memory plugin returns, and what its resolvers receive.

A memory plugin supplies the silent turn that saves durable context before compaction
by putting a resolver on its :class:`~claw.memory.MemoryPluginCapability`:

* ``flush_plan_resolver(request)`` returns a complete :class:`MemoryFlushPlan` (the file
  arm, with every timing field) or ``None``;
* ``provider_flush_plan_resolver(request)`` returns a plan the host completes: a
  :class:`MemoryFlushFilePlanDraft` (a complete :class:`MemoryFlushPlan` is accepted as
  one), a :class:`MemoryFlushToolsPlan`, or ``None``. Its ``soft_threshold_tokens``,
  ``force_flush_transcript_bytes``, ``reserve_tokens_floor`` and ``model`` are deliberate
  overrides; omitted ones come from the host.

``None`` skips the flush for provider-specific reasons. A resolver may be a plain
function or a coroutine function; it is consulted whenever the host checks whether a
flush is due (at most once per turn step), so it should be cheap and free of effects.
A ``model`` is an exact ``provider/model`` reference (``"ollama/qwen3:8b"``) and pins the
flush turn to it, without the session's fallback chain.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeAlias

import attrs

from ._errors import FlushPlanError
from ._timing import MemoryFlushTiming


def _text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise FlushPlanError(f"{attribute.name} must be a non-empty string, got {value!r}")


def _optional_count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FlushPlanError(
            f"{attribute.name} must be a non-negative integer or None, got {value!r}"
        )


def _count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        raise FlushPlanError(f"{attribute.name} is required in a complete MemoryFlushPlan")
    _optional_count(instance, attribute, value)


def _optional_model(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str) or "/" not in value.strip("/"):
        raise FlushPlanError(
            f"model must be an exact 'provider/model' reference such as 'ollama/qwen3:8b', "
            f"got {value!r}"
        )


def _tool_names(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise FlushPlanError(f"tool names must be a sequence of names, not one string: {value!r}")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise FlushPlanError(f"tool names must be non-empty strings, got {name!r}")
    return names


def _non_empty(instance: object, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    if not value:
        raise FlushPlanError(f"{attribute.name} must name at least one persistence tool")


@attrs.frozen(kw_only=True)
class MemoryFlushPlanRequest:
    """What a flush plan resolver receives.

    ``timing`` is the host's resolved timing for this session (a complete plan usually
    copies it, see :meth:`MemoryFlushPlan.from_timing`); ``now`` is the current time in
    seconds since the epoch (for dated files such as ``memory/YYYY-MM-DD.md``).
    """

    agent_id: str
    session_key: str
    timing: MemoryFlushTiming
    now: float


@attrs.frozen(kw_only=True)
class MemoryFlushPlan:
    """A complete file-arm plan: what ``flush_plan_resolver`` returns.

    The flush turn appends to ``relative_path`` (relative to the workspace) with an
    append-only ``write`` restricted to that file, and may ``read``. The host creates the
    file and requires writable workspace access. Without ``model`` the flush keeps the
    session's model.
    """

    relative_path: str = attrs.field(validator=_text)
    prompt: str = attrs.field(validator=_text)
    system_prompt: str = attrs.field(validator=_text)
    soft_threshold_tokens: int = attrs.field(validator=_count)
    force_flush_transcript_bytes: int = attrs.field(validator=_count)
    reserve_tokens_floor: int = attrs.field(validator=_count)
    model: str | None = attrs.field(default=None, validator=_optional_model)

    @classmethod
    def from_timing(
        cls,
        timing: MemoryFlushTiming,
        *,
        relative_path: str,
        prompt: str,
        system_prompt: str,
        model: str | None = None,
    ) -> MemoryFlushPlan:
        """A complete plan whose timing fields are the host's resolved ``timing``."""
        return cls(
            relative_path=relative_path,
            prompt=prompt,
            system_prompt=system_prompt,
            soft_threshold_tokens=timing.soft_threshold_tokens,
            force_flush_transcript_bytes=timing.force_flush_transcript_bytes,
            reserve_tokens_floor=timing.reserve_tokens_floor,
            model=model,
        )


@attrs.frozen(kw_only=True)
class MemoryFlushFilePlanDraft:
    """A file-arm plan the host completes: omitted timing fields come from the host.

    Returned by ``provider_flush_plan_resolver``; set fields are deliberate overrides.
    Without ``model`` the flush keeps the session's model (``memory_flush.model`` is for
    the tools arm only).
    """

    relative_path: str = attrs.field(validator=_text)
    prompt: str = attrs.field(validator=_text)
    system_prompt: str = attrs.field(validator=_text)
    soft_threshold_tokens: int | None = attrs.field(default=None, validator=_optional_count)
    force_flush_transcript_bytes: int | None = attrs.field(default=None, validator=_optional_count)
    reserve_tokens_floor: int | None = attrs.field(default=None, validator=_optional_count)
    model: str | None = attrs.field(default=None, validator=_optional_model)


@attrs.frozen(kw_only=True)
class MemoryFlushToolsPlan:
    """A tools-arm plan: the flush persists through the memory plugin's own tools.

    Only the selected memory slot owner may supply one, through
    ``provider_flush_plan_resolver``. ``persistence_tool_names`` (at least one) and the
    read-only ``lookup_tool_names`` must be tools that plugin registered, and must not
    overlap. The flush turn gets ``read`` plus the surviving tools; their contexts carry
    ``memory_flush.flush_id``. No target file is created and no writable workspace is
    needed. Without ``model`` the flush uses ``memory_flush.model``, else the session's.
    """

    persistence_tool_names: tuple[str, ...] = attrs.field(
        converter=_tool_names, validator=_non_empty
    )
    prompt: str = attrs.field(validator=_text)
    system_prompt: str = attrs.field(validator=_text)
    lookup_tool_names: tuple[str, ...] = attrs.field(default=(), converter=_tool_names)
    soft_threshold_tokens: int | None = attrs.field(default=None, validator=_optional_count)
    force_flush_transcript_bytes: int | None = attrs.field(default=None, validator=_optional_count)
    reserve_tokens_floor: int | None = attrs.field(default=None, validator=_optional_count)
    model: str | None = attrs.field(default=None, validator=_optional_model)

    @property
    def overlapping_tool_names(self) -> tuple[str, ...]:
        """Names declared both as persistence and as lookup tools (a broken plan)."""
        return tuple(sorted(set(self.persistence_tool_names) & set(self.lookup_tool_names)))


AnyFlushPlan: TypeAlias = MemoryFlushPlan | MemoryFlushFilePlanDraft | MemoryFlushToolsPlan
"""Any plan a resolver may return."""

FlushPlanResolver: TypeAlias = Callable[
    [MemoryFlushPlanRequest], MemoryFlushPlan | Awaitable[MemoryFlushPlan | None] | None
]
"""``flush_plan_resolver``: a complete plan, or ``None`` to skip."""

ProviderFlushPlanResolver: TypeAlias = Callable[
    [MemoryFlushPlanRequest], AnyFlushPlan | Awaitable[AnyFlushPlan | None] | None
]
"""``provider_flush_plan_resolver``: a file draft or complete plan, a tools plan, or ``None``."""
