"""When a pre-compaction memory flush is due.

The timing is resolved first from ``[agents.defaults.compaction.memory_flush]`` and the
active context window (:func:`resolve_timing`), then a provider plan may override any of
its fields (:func:`apply_overrides`). A flush is due (:func:`flush_trigger`) when:

* the turn overflowed the window (the overflow-recovery path flushes before compacting);
* the session's token estimate, counted with the incoming turn, is above
  ``context_window - reserve_tokens_floor - soft_threshold_tokens``; or
* the transcript has reached ``force_flush_transcript_bytes``.

Small windows. The reference defaults (20000-token reserve floor, 4000-token soft
threshold) exceed a 16K local model's whole window: taken literally, the threshold
would be negative and every turn would flush. Both are therefore capped at a quarter of
the window, which keeps the threshold at or above half the window (room for the
conversation) while leaving at least a quarter free for the flush turn itself.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import attrs

from .._config import MemoryFlushConfig
from ._errors import FlushPlanError

FlushTrigger: TypeAlias = Literal["threshold", "force", "overflow"]
"""Why a flush ran: the soft threshold, the transcript's force size, or an overflow."""


def _non_negative_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FlushPlanError(f"{attribute.name} must be a non-negative integer, got {value!r}")


def _positive_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FlushPlanError(f"{attribute.name} must be a positive integer, got {value!r}")


def scaled_reserve_floor(reserve_tokens_floor: int, context_window: int) -> int:
    """The reserve floor, capped at a quarter of the window so a flush can still run."""
    return min(reserve_tokens_floor, context_window // 4)


def scaled_soft_threshold(soft_threshold_tokens: int, context_window: int) -> int:
    """The soft threshold, capped at a quarter of the window (see the module docstring)."""
    return min(soft_threshold_tokens, context_window // 4)


@attrs.frozen(kw_only=True)
class MemoryFlushTiming:
    """The resolved timing of one session's flush, as the host applies it.

    ``reserve_tokens_floor`` and ``soft_threshold_tokens`` are already scaled to
    ``context_window``. ``model`` is ``memory_flush.model`` (the default model of a
    tools-arm flush) or ``None``.
    """

    context_window: int = attrs.field(validator=_positive_int)
    soft_threshold_tokens: int = attrs.field(validator=_non_negative_int)
    reserve_tokens_floor: int = attrs.field(validator=_non_negative_int)
    force_flush_transcript_bytes: int = attrs.field(validator=_positive_int)
    model: str | None = None

    @property
    def threshold_tokens(self) -> int:
        """The token estimate above which a flush is due."""
        return self.context_window - self.reserve_tokens_floor - self.soft_threshold_tokens


def resolve_timing(config: MemoryFlushConfig, context_window: int) -> MemoryFlushTiming:
    """The host's timing for a session running in a window of ``context_window`` tokens."""
    return MemoryFlushTiming(
        context_window=context_window,
        soft_threshold_tokens=scaled_soft_threshold(config.soft_threshold_tokens, context_window),
        reserve_tokens_floor=scaled_reserve_floor(config.reserve_tokens_floor, context_window),
        force_flush_transcript_bytes=config.force_flush_transcript_bytes,
        model=config.model,
    )


def apply_overrides(
    timing: MemoryFlushTiming,
    *,
    soft_threshold_tokens: int | None,
    reserve_tokens_floor: int | None,
    force_flush_transcript_bytes: int | None,
) -> MemoryFlushTiming:
    """``timing`` with a plan's provider overrides; omitted (``None``) fields are kept."""
    window = timing.context_window
    return attrs.evolve(
        timing,
        soft_threshold_tokens=(
            timing.soft_threshold_tokens
            if soft_threshold_tokens is None
            else scaled_soft_threshold(soft_threshold_tokens, window)
        ),
        reserve_tokens_floor=(
            timing.reserve_tokens_floor
            if reserve_tokens_floor is None
            else scaled_reserve_floor(reserve_tokens_floor, window)
        ),
        force_flush_transcript_bytes=(
            timing.force_flush_transcript_bytes
            if force_flush_transcript_bytes is None
            else force_flush_transcript_bytes
        ),
    )


def flush_trigger(
    timing: MemoryFlushTiming, *, tokens: int, transcript_bytes: int, overflow: bool
) -> FlushTrigger | None:
    """Why a flush is due now, or ``None`` when it is not (see the module docstring)."""
    if overflow:
        return "overflow"
    if tokens > timing.threshold_tokens:
        return "threshold"
    if transcript_bytes >= timing.force_flush_transcript_bytes:
        return "force"
    return None
