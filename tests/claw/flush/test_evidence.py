"""Completion evidence of a tools-arm flush, and what failures do to compaction."""

from __future__ import annotations

from claw.flush import NO_EVIDENCE_REASON
from claw.models import ModelResponseError
from claw_testing import ScriptedReply

from .conftest import LOOKUP, SAVE, OpenEnv, RecordingProvider, big_text

SAVE_CALL = ScriptedReply(tool_calls=[(SAVE, {"text": "alice likes tea"})])
LOOKUP_CALL = ScriptedReply(tool_calls=[(LOOKUP, {"query": "alice"})])


async def test_a_successful_persistence_call_completes_the_flush(open_env: OpenEnv) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()]) as env:
        env.model.extend([SAVE_CALL, "Saved one memory.", "answered"])
        result = await env.turn(big_text(2100))
        assert (result.flush.status, result.flush.evidence) == ("completed", "persistence-tool")
        (event,) = env.flush_events()
        assert event.kind == "flush.completed"
        assert event.data["evidence"] == "persistence-tool"
        assert event.data["flush_id"] == result.flush.flush_id


async def test_a_final_no_reply_alone_completes_the_flush(open_env: OpenEnv) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()]) as env:
        env.model.extend(["NO_REPLY", "answered"])
        result = await env.turn(big_text(2100))
        assert (result.flush.status, result.flush.evidence) == ("completed", "no-reply")
        assert recorder.calls == []


async def test_an_earlier_no_reply_followed_by_other_text_is_not_evidence(
    open_env: OpenEnv,
) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()]) as env:
        env.model.extend(
            [
                ScriptedReply(text="NO_REPLY", tool_calls=[(LOOKUP, {"query": "alice"})]),
                "Nothing new to store.",
                "answered",
            ]
        )
        result = await env.turn(big_text(2100))
        assert result.flush.status == "failed"
        assert result.flush.reason == NO_EVIDENCE_REASON == "no persistence tool call succeeded"


async def test_a_final_output_that_only_starts_with_no_reply_is_not_evidence(
    open_env: OpenEnv,
) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()]) as env:
        env.model.extend(["NO_REPLY\nActually, alice likes tea.", "answered"])
        result = await env.turn(big_text(2100))
        assert (result.flush.status, result.flush.reason) == ("failed", NO_EVIDENCE_REASON)


async def test_lookup_calls_alone_are_a_failed_flush(open_env: OpenEnv) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()]) as env:
        env.model.extend([LOOKUP_CALL, "Looked it up.", "answered"])
        result = await env.turn(big_text(2100))
        assert [c.tool for c in recorder.calls] == [LOOKUP]
        assert (result.flush.status, result.flush.reason) == ("failed", NO_EVIDENCE_REASON)
        (event,) = env.flush_events()
        assert (event.kind, event.data["reason"]) == ("flush.failed", NO_EVIDENCE_REASON)


async def test_a_persistence_call_that_errors_is_not_evidence(open_env: OpenEnv) -> None:
    recorder = RecordingProvider(fail_save=True)
    async with open_env([recorder.plugin()]) as env:
        env.model.extend([SAVE_CALL, "Could not save.", "answered"])
        result = await env.turn(big_text(2100))
        assert [c.tool for c in recorder.calls] == [SAVE]
        assert (result.flush.status, result.flush.reason) == ("failed", NO_EVIDENCE_REASON)


async def test_a_run_error_fails_the_flush_and_compaction_continues(open_env: OpenEnv) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()], keep_recent_tokens=10) as env:
        env.model.extend(["earlier reply"])
        await env.turn("an earlier turn")
        env.model.extend([ModelResponseError("garbled"), "answered", "the summary"])
        result = await env.turn(big_text(3100))
        assert result.flush.status == "failed"
        assert (
            "ModelResponseError" in result.flush.reason or "AllModelsFailed" in result.flush.reason
        )
        assert result.reply.text == "answered"
        assert result.compaction is not None and result.compaction.compacted
        kinds = env.host.events.kinds()
        assert kinds.index("flush.failed") < kinds.index("compaction.completed")
