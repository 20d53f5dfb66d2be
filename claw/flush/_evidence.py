"""Completion evidence of a tools-arm flush.

A tools-arm flush succeeds only if at least one declared (and surviving) persistence tool
completed without error, or the assistant's final output is exactly the silent token
``NO_REPLY``. A lookup call is not evidence, and neither is an earlier ``NO_REPLY``
followed by more output: only the final assistant message counts.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import attrs

from ..models import AssistantMessage, ToolResult

SILENT_TOKEN = "NO_REPLY"
NO_EVIDENCE_REASON = "no persistence tool call succeeded"

Evidence: TypeAlias = Literal["persistence-tool", "no-reply", "run-completed"]
"""What made a flush complete (``run-completed`` is the file arm's)."""


@attrs.define
class EvidenceTracker:
    """Watches one tools-arm flush turn and says whether it completed."""

    persistence_tool_names: frozenset[str]
    persisted_by: list[str] = attrs.field(factory=list)
    final_text: str | None = None

    def record_results(self, results: list[ToolResult]) -> None:
        """Note the tool results of one round."""
        for result in results:
            if result.name in self.persistence_tool_names and not result.is_error:
                self.persisted_by.append(result.name)

    def record_final(self, reply: AssistantMessage) -> None:
        """Note the final assistant message (``None`` text if it still asked for tools)."""
        self.final_text = None if reply.tool_calls else reply.text

    def verdict(self) -> Evidence | None:
        """The evidence of completion, or ``None`` when the flush failed."""
        if self.persisted_by:
            return "persistence-tool"
        if self.final_text is not None and self.final_text.strip() == SILENT_TOKEN:
            return "no-reply"
        return None
