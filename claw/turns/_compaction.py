"""The runtime's own compaction: summarise older entries, keep the recent tail.

Used by the legacy engine and by engines that delegate with
``delegate_compaction_to_runtime``. The older part of the visible history is
summarised with the session's model into a compaction entry; the recent tail (about
``keep_recent_tokens``) is kept verbatim, cut at a user message so a tool call is never
separated from its result. Tokens before and after are recorded on the entry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from ..context import CompactParams, CompactResult, estimate_tokens
from ..models import (
    AssistantMessage,
    CompactionSummary,
    Message,
    SystemMessage,
    ToolResult,
    UserMessage,
)
from ..state.sqlite._transcripts import parse_entry_id

if TYPE_CHECKING:
    from ..state import TranscriptStorage

SUMMARY_PROMPT = (
    "You compact a conversation transcript. Write a faithful, dense summary of the "
    "conversation below: decisions, facts, names, dates, open questions and todos. "
    "Do not invent anything. Reply with the summary only."
)

Summarise = Callable[[Sequence[Message], str], Awaitable[AssistantMessage]]


def render_for_summary(messages: Sequence[Message]) -> str:
    """A plain-text rendering of messages for the summariser."""
    lines: list[str] = []
    for message in messages:
        if isinstance(message, UserMessage):
            who = message.sender or "user"
            lines.append(f"{who}: {message.text}")
        elif isinstance(message, AssistantMessage):
            if message.text:
                lines.append(f"assistant: {message.text}")
            for call in message.tool_calls:
                lines.append(f"assistant called {call.name}({call.arguments.thaw()})")
        elif isinstance(message, ToolResult):
            lines.append(f"tool {message.name} -> {message.content[:2000]}")
        elif isinstance(message, CompactionSummary):
            lines.append(f"(earlier summary) {message.text}")
        elif isinstance(message, SystemMessage):
            lines.append(f"system: {message.text}")
    return "\n".join(lines)


def choose_boundary(messages: Sequence[Message], keep_recent_tokens: int) -> int:
    """Index of the first kept message: the tail of about ``keep_recent_tokens``, at a user turn."""
    kept = 0
    index = len(messages)
    while index > 0 and kept < keep_recent_tokens:
        index -= 1
        kept += estimate_tokens([messages[index]])
    while index > 0 and not isinstance(messages[index], UserMessage):
        index -= 1
    return index


async def runtime_compaction(
    params: CompactParams,
    *,
    store: TranscriptStorage,
    session_key: str,
    session_id: str,
    summarise: Summarise,
    keep_recent_tokens: int,
) -> CompactResult:
    """Compact ``session_id`` (see the module docstring)."""
    delta = await store.read_session_transcript_visible_message_delta(session_id, None)
    messages = delta.messages
    tokens_before = estimate_tokens(messages)
    boundary = choose_boundary(messages, keep_recent_tokens)
    if boundary <= 0:
        return CompactResult(
            ok=True,
            compacted=False,
            reason="nothing old enough to compact",
            tokens_before=tokens_before,
            tokens_after=tokens_before,
        )
    older = messages[:boundary]
    reply = await summarise([UserMessage(text=render_for_summary(older))], SUMMARY_PROMPT)
    summary = reply.text.strip() or "(empty summary)"
    _, first_kept_seq = parse_entry_id(delta.entry_ids[boundary])
    kept = messages[boundary:]
    tokens_after = estimate_tokens([CompactionSummary(text=summary), *kept])
    entry = await store.append_compaction(
        session_key,
        session_id,
        summary,
        first_kept_seq=first_kept_seq,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
    )
    return CompactResult(
        ok=True,
        compacted=True,
        reason=params.reason,
        summary=summary,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        first_kept_entry_id=delta.entry_ids[boundary] if entry is not None else None,
    )
