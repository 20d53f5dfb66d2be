"""When a flush is due: thresholds, the incoming turn, force size, cycles, overflow."""

from __future__ import annotations

import pytest

import claw
from claw.flush import flush_trigger, resolve_timing
from claw.models import ContextOverflowError, ToolResult, UserMessage
from claw_testing import ScriptedReply

from .conftest import FLUSH_PROMPT, FLUSH_SYSTEM, SAVE, OpenEnv, RecordingProvider, big_text

SAVE_THEN_SILENT = [ScriptedReply(tool_calls=[(SAVE, {"text": "alice likes tea"})]), "NO_REPLY"]


def test_reference_defaults_resolve_from_config_and_window() -> None:
    timing = resolve_timing(claw.MemoryFlushConfig(), 128_000)
    assert (timing.soft_threshold_tokens, timing.reserve_tokens_floor) == (4000, 20000)
    assert timing.force_flush_transcript_bytes == 2 * 1024 * 1024
    assert timing.threshold_tokens == 128_000 - 20000 - 4000


@pytest.mark.parametrize("window", [16_384, 8192, 2000, 10])
def test_reserve_floor_scales_down_so_a_small_window_can_still_flush(window: int) -> None:
    timing = resolve_timing(claw.MemoryFlushConfig(), window)
    assert timing.reserve_tokens_floor == window // 4
    assert timing.threshold_tokens >= window // 2
    due = flush_trigger(
        timing, tokens=timing.threshold_tokens + 1, transcript_bytes=0, overflow=False
    )
    assert due == "threshold"
    assert flush_trigger(timing, tokens=0, transcript_bytes=0, overflow=False) is None


def test_force_size_and_overflow_make_a_flush_due_below_the_threshold() -> None:
    timing = resolve_timing(claw.MemoryFlushConfig(force_flush_transcript_bytes=100), 128_000)
    assert flush_trigger(timing, tokens=10, transcript_bytes=99, overflow=False) is None
    assert flush_trigger(timing, tokens=10, transcript_bytes=100, overflow=False) == "force"
    assert flush_trigger(timing, tokens=10, transcript_bytes=0, overflow=True) == "overflow"


async def test_no_flush_below_the_soft_threshold(open_env: OpenEnv) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()]) as env:
        env.model.extend(["hello"])
        result = await env.turn("hi")
        assert result.flush is None
        assert env.flush_events() == []
        assert len(env.model.calls) == 1
        assert recorder.calls == []


async def test_a_large_incoming_message_flushes_before_the_turn_runs(open_env: OpenEnv) -> None:
    """The estimate counts the incoming turn: a small session with a huge message flushes."""
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()]) as env:
        message = big_text(2100)
        env.model.extend([*SAVE_THEN_SILENT, "answered"])
        result = await env.turn(message)
        assert result.flush.status == "completed"
        assert result.flush.trigger == "threshold"
        flush_call, _, turn_call = env.model.calls
        assert flush_call.system_prompt == FLUSH_SYSTEM
        assert flush_call.last_user_text == FLUSH_PROMPT
        assert any(isinstance(m, UserMessage) and m.text == message for m in flush_call.messages)
        assert turn_call.last_user_text == message
        kinds = env.host.events.kinds()
        assert kinds.index("flush.completed") < kinds.index("turn.terminal")


async def test_transcript_force_size_flushes_below_the_token_threshold(
    open_env: OpenEnv,
) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()], force_flush_transcript_bytes=300) as env:
        env.model.extend(["first", *SAVE_THEN_SILENT, "second"])
        first = await env.turn("a" * 200)
        assert first.flush is None
        second = await env.turn("b" * 200)
        assert second.flush.status == "completed"
        assert second.flush.trigger == "force"


async def test_at_most_one_flush_per_compaction_cycle(open_env: OpenEnv) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()]) as env:
        env.model.extend([*SAVE_THEN_SILENT, "one", "two"])
        first = await env.turn(big_text(2100))
        second = await env.turn("still above the threshold")
        assert first.flush.status == "completed"
        assert second.flush is None
        assert [e.kind for e in env.flush_events()] == ["flush.completed"]
        assert [c.tool for c in recorder.calls] == [SAVE]


async def test_threshold_compaction_does_not_flush_twice_in_one_cycle(open_env: OpenEnv) -> None:
    """The turn's flush covers the cycle; the compaction that follows does not flush again."""
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()], keep_recent_tokens=10) as env:
        env.model.extend(["earlier reply"])
        await env.turn("an earlier turn")
        env.model.extend([*SAVE_THEN_SILENT, "answered", "the summary"])
        result = await env.turn(big_text(3100))
        assert result.flush.status == "completed"
        assert result.compaction is not None and result.compaction.compacted
        kinds = env.host.events.kinds()
        assert kinds.count("flush.completed") == 1
        assert kinds.index("flush.completed") < kinds.index("compaction.completed")


async def test_an_overflowing_turn_flushes_before_it_compacts(open_env: OpenEnv) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()], keep_recent_tokens=10) as env:
        env.model.extend(["earlier reply"])
        await env.turn("an earlier turn")
        env.model.extend(
            [
                ContextOverflowError("prompt too long"),
                *SAVE_THEN_SILENT,
                "the summary",
                "answered after compaction",
            ]
        )
        result = await env.turn("a small message the provider still rejects")
        assert result.reply.text == "answered after compaction"
        assert result.flush.status == "completed"
        assert result.flush.trigger == "overflow"
        kinds = env.host.events.kinds()
        assert kinds.index("turn.overflow") < kinds.index("flush.completed")
        assert kinds.index("flush.completed") < kinds.index("compaction.completed")
        saved = env.model.calls[3]
        assert any(isinstance(m, ToolResult) and m.content == "saved" for m in saved.messages)


async def test_disabled_flush_never_invokes_the_resolver(open_env: OpenEnv) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()], enabled=False) as env:
        env.model.extend(["answered"])
        result = await env.turn(big_text(2100))
        assert result.flush is None
        assert recorder.requests == []
        assert env.flush_events() == []


async def test_a_resolver_returning_none_skips_the_flush(open_env: OpenEnv) -> None:
    recorder = RecordingProvider(provider_plan=None)
    async with open_env([recorder.plugin()], keep_recent_tokens=10) as env:
        env.model.extend(["earlier reply"])
        await env.turn("an earlier turn")
        env.model.extend(["answered", "the summary"])
        result = await env.turn(big_text(3100))
        assert result.flush.status == "skipped"
        assert "returned no plan" in result.flush.reason
        assert result.compaction is not None and result.compaction.compacted
        (event,) = env.flush_events()
        assert event.kind == "flush.skipped"
        assert event.data["plugin_id"] == "recorder"


async def test_a_due_flush_without_any_resolver_is_skipped_once_per_cycle(
    open_env: OpenEnv,
) -> None:
    async with open_env([], memory=None) as env:
        env.model.extend(["one", "two"])
        first = await env.turn(big_text(2100))
        second = await env.turn("still due, same cycle")
        assert first.flush.status == "skipped"
        assert first.flush.reason == "no memory plugin supplies a flush plan"
        assert second.flush is None
        assert len(env.model.calls) == 2
