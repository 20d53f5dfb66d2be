"""What one flush attempt did."""

from __future__ import annotations

from typing import Literal, TypeAlias

import attrs

from ._evidence import Evidence
from ._timing import FlushTrigger

FlushStatus: TypeAlias = Literal["completed", "skipped", "failed"]
FlushArm: TypeAlias = Literal["file", "tools"]


@attrs.frozen(kw_only=True)
class FlushResult:
    """The outcome of a flush that was due.

    ``status`` is ``"completed"`` (with its ``evidence``), ``"skipped"`` (no plan, a plan
    the host refused, no writable workspace, no audience, ...) or ``"failed"`` (the run
    raised, or a tools-arm turn left no completion evidence); ``reason`` says why for the
    last two. ``plugin_id`` is the plugin that supplied the effective resolver; ``warnings``
    repeats what was logged. The same outcome is recorded as a ``flush.<status>`` host
    event. A skipped or failed flush never stops compaction.
    """

    status: FlushStatus
    flush_id: str
    trigger: FlushTrigger
    reason: str | None = None
    plugin_id: str | None = None
    arm: FlushArm | None = None
    model_ref: str | None = None
    evidence: Evidence | None = None
    flush_session_key: str | None = None
    tool_names: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the flush completed."""
        return self.status == "completed"
