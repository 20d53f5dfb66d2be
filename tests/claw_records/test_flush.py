"""The pre-compaction flush through Memory Records' tools arm, on a real PostgreSQL."""

from __future__ import annotations

import claw
from claw.memory import MemorySearchRequest
from claw.models import RetryableModelError, ToolResult, UserMessage
from claw_testing import ScriptedCall, ScriptedModel, ScriptedReply

from .conftest import OpenRecordsHost, operator

WINDOW = 4000
ADD_TEA = ScriptedReply(tool_calls=[("record_add", {"text": "alice likes tea"})])


def big_text(tokens: int) -> str:
    """A user message estimated at about ``tokens`` tokens (4 + n // 4 per message)."""
    return "x" * (4 * (tokens - 4))


def _last_tool_result(call: ScriptedCall) -> str:
    results = [m.content for m in call.messages if isinstance(m, ToolResult)]
    return results[-1]


def flush_defaults() -> dict[str, object]:
    timing = claw.MemoryFlushConfig(soft_threshold_tokens=1000, reserve_tokens_floor=1000)
    return {"compaction": claw.CompactionConfig(memory_flush=timing, keep_recent_tokens=8000)}


async def owner_records(host: claw.Host, query: str) -> list[str]:
    async with operator(host) as op, host.memory.open(op) as handle:
        result = await handle.search(MemorySearchRequest(query=query, max_results=10))
    return [h.excerpt for h in result.hits]


async def test_the_flush_persists_through_record_add_and_a_retry_writes_once(
    open_records_host: OpenRecordsHost,
) -> None:
    model = ScriptedModel([], context_window=WINDOW)
    async with open_records_host(model=model, **flush_defaults()) as host:
        # The first attempt stores the memory, then the run fails: the flush fails.
        model.extend([ADD_TEA, RetryableModelError("busy"), "one"])
        first = await host.run_turn(
            "dm:alice", UserMessage(big_text(2100), sender="alice"), sender_is_owner=True
        )
        assert first.flush.status == "failed"
        assert first.flush.tool_names == ("read", "record_add", "record_update",
                                          "record_search", "record_get")
        # The retry in the same cycle has the same flush id and stores the same memory.
        model.extend([ADD_TEA, "NO_REPLY", "two"])
        second = await host.run_turn(
            "dm:alice", UserMessage("again", sender="alice"), sender_is_owner=True
        )
        assert second.flush.status == "completed"
        assert second.flush.flush_id == first.flush.flush_id
        assert await owner_records(host, "tea") == ["alice likes tea"]
        # What record_add answered each attempt (the last tool result the model saw).
        answers = [_last_tool_result(model.calls[i]) for i in (1, 4)]
        assert answers[0].startswith("Remembered.")
        assert answers[1].startswith("Already remembered by this flush.")
        assert answers[0].split("Ref: ")[1] == answers[1].split("Ref: ")[1]


async def test_a_group_flush_writes_the_groups_partition_not_the_owners(
    open_records_host: OpenRecordsHost,
) -> None:
    model = ScriptedModel([], context_window=WINDOW)
    async with open_records_host(model=model, **flush_defaults()) as host:
        model.extend([ADD_TEA, "NO_REPLY", "answered"])
        result = await host.run_turn(
            "grp:1", UserMessage(big_text(2100), sender="bob"), sender_is_owner=False
        )
        assert result.flush.status == "completed"
        async with host.open_run("grp:1", sender_is_owner=False) as group:
            async with host.memory.open(group.caller) as handle:
                hits = (await handle.search(MemorySearchRequest(query="tea"))).hits
        assert [(h.excerpt, h.source, h.metadata["session_key"]) for h in hits] == [
            ("alice likes tea", "sessions", "grp:1")
        ]
        async with host.open_run("grp:2", sender_is_owner=False) as other:
            async with host.memory.open(other.caller) as handle:
                assert (await handle.search(MemorySearchRequest(query="tea"))).hits == ()
