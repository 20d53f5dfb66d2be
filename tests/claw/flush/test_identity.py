"""The detached flush session, its delegated audience, and the deterministic flush id."""

from __future__ import annotations

import logging

import pytest

import claw
from claw.flush import derive_flush_id, flush_session_key
from claw.models import RetryableModelError, UserMessage
from claw_testing import ScriptedReply

from .conftest import FLUSH_PROMPT, SAVE, OpenEnv, RecordingProvider, big_text

SAVE_CALL = ScriptedReply(tool_calls=[(SAVE, {"text": "alice likes tea"})])
FLUSH_KEY = flush_session_key("dm:alice")


def test_the_flush_id_derives_from_session_id_revision_and_compaction_count() -> None:
    base = derive_flush_id("sid-1", 1, 0)
    assert derive_flush_id("sid-1", 1, 0) == base
    assert derive_flush_id("sid-1", 1, None) == base
    others = {derive_flush_id("sid-2", 1, 0), derive_flush_id("sid-1", 2, 0)}
    others.add(derive_flush_id("sid-1", 1, 1))
    assert base not in others and len(others) == 3


async def test_the_flush_id_survives_fallback_and_retry_and_changes_after_compaction(
    open_env: OpenEnv,
) -> None:
    recorder = RecordingProvider()
    async with open_env(
        [recorder.plugin()], fallbacks=("scripted/backup",), keep_recent_tokens=1
    ) as env:
        backup = env.host.models.resolve("scripted/backup")
        env.model.extend([RetryableModelError("busy"), "one"])
        backup.extend([RetryableModelError("down")])  # type: ignore[attr-defined]
        first = await env.turn(big_text(2100))
        assert first.flush.status == "failed"
        assert "AllModelsFailedError" in first.flush.reason

        # The retry in the same cycle: the primary fails again, the fallback persists.
        env.model.extend([RetryableModelError("busy"), "NO_REPLY", "two"])
        backup.extend([SAVE_CALL])  # type: ignore[attr-defined]
        second = await env.turn("again")
        assert second.flush.status == "completed"
        assert second.flush.flush_id == first.flush.flush_id
        assert [c.flush_id for c in recorder.calls] == [first.flush.flush_id]

        env.model.extend(["the summary"])
        compacted = await env.host.compact("dm:alice")
        assert compacted.compacted
        env.model.extend([SAVE_CALL, "NO_REPLY", "three"])
        third = await env.turn(big_text(2100))
        assert third.flush.status == "completed"
        assert third.flush.flush_id != first.flush.flush_id
        row = env.host.sessions.get_nowait("dm:alice")
        assert row is not None
        assert third.flush.flush_id == derive_flush_id(row.session_id, row.lifecycle_revision, 1)


async def test_a_reset_keeping_the_id_and_a_new_session_id_each_get_a_new_flush_id(
    open_env: OpenEnv,
) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()]) as env:
        ids = []
        for keep in (None, True, False):
            if keep is not None:
                await env.host.sessions.reset("dm:alice", keep_session_id=keep)
            env.model.extend([SAVE_CALL, "NO_REPLY", "answered"])
            result = await env.turn(big_text(2100))
            assert result.flush.status == "completed"
            ids.append(result.flush.flush_id)
        assert len(set(ids)) == 3
        assert [c.flush_id for c in recorder.calls] == ids


async def test_tools_contexts_carry_the_delegated_audience_and_the_flush_identity(
    open_env: OpenEnv,
) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()]) as env:
        env.model.extend([SAVE_CALL, "NO_REPLY", "answered"])
        result = await env.turn(big_text(2100))
        (call,) = recorder.calls
        assert call.session_key == FLUSH_KEY == result.flush.flush_session_key
        assert call.audience_kind == "owner-private"
        assert isinstance(call.context.memory_flush.identity, claw.FlushIdentity)
        assert call.flush_id == result.flush.flush_id
        assert call.context.caller.authority.session_key == FLUSH_KEY
        # Everything minted for the flush run died with it.
        with pytest.raises(claw.StaleCapabilityError):
            call.context.caller.assert_current()
        with pytest.raises(claw.StaleCapabilityError):
            env.host.verify(call.context.memory_flush.identity)


async def test_a_non_owner_sources_flush_gets_the_conversation_audience(
    open_env: OpenEnv,
) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()]) as env:
        env.model.extend([SAVE_CALL, "NO_REPLY", "answered"])
        await env.turn(big_text(2100), sender_is_owner=False)
        (call,) = recorder.calls
        assert call.audience_kind == "conversation"
        assert call.context.audience.session_key == "dm:alice"


async def test_normal_turn_tool_contexts_carry_no_flush_identity(open_env: OpenEnv) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()]) as env:
        env.model.extend([SAVE_CALL, "done"])
        await env.turn("remember that alice likes tea")
        (call,) = recorder.calls
        assert (call.flush_id, call.session_key) == (None, "dm:alice")


async def test_the_flush_transcript_never_enters_later_user_turns(open_env: OpenEnv) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()]) as env:
        env.model.extend([SAVE_CALL, "NO_REPLY", "answered", "next answer"])
        first = await env.turn(big_text(2100))
        await env.turn("what did we talk about?")
        later = env.model.calls[-1]
        assert all(
            not (isinstance(m, UserMessage) and m.text == FLUSH_PROMPT) for m in later.messages
        )
        row = env.host.sessions.get_nowait("dm:alice")
        assert row is not None
        visible = await env.host.transcripts.visible_messages(row.session_id)
        assert FLUSH_PROMPT not in [getattr(m, "text", None) for m in visible]
        flush_log = await env.host.transcripts.visible_messages(first.flush.flush_id)
        assert getattr(flush_log[0], "text", None) == FLUSH_PROMPT
        assert await env.host.transcripts.session_ids(FLUSH_KEY) == (first.flush.flush_id,)
        assert [r.session_key for r in await env.host.sessions.list()] == ["dm:alice"]


async def test_a_maintenance_run_delegates_the_audience_with_sender_is_owner_false(
    open_env: OpenEnv,
) -> None:
    async with open_env([], memory=None) as env:
        host = env.host
        async with host.open_run("dm:alice", sender_is_owner=True) as run:
            with pytest.raises(claw.CapabilityDeniedError):
                run.open_maintenance_run("dm:alice")
            async with run.open_maintenance_run(FLUSH_KEY) as maintenance:
                assert maintenance.sender_is_owner is False
                assert maintenance.audience is not None
                assert maintenance.audience.kind == "owner-private"
                host.verify(maintenance.audience, session_key=FLUSH_KEY)
                await host.sessions.reset("dm:alice")
                with pytest.raises(claw.StaleCapabilityError):
                    host.verify(maintenance.audience)


async def test_no_valid_audience_skips_a_tools_flush_with_a_debug_log(
    open_env: OpenEnv, caplog: pytest.LogCaptureFixture
) -> None:
    """A child whose parent changed incarnation since the spawn resolves to no audience."""
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()]) as env:
        await env.host.sessions.spawn_child("dm:alice", "dm:alice:task", sender_is_owner=True)
        await env.host.sessions.reset("dm:alice")
        env.model.extend(["answered"])
        with caplog.at_level(logging.DEBUG, logger="claw.flush"):
            result = await env.turn(big_text(2100), session_key="dm:alice:task")
        assert result.flush.status == "skipped"
        assert "audience" in result.flush.reason
        # ... and says why: the child's lineage is stale.
        assert "stale lineage" in result.flush.reason
        assert any(
            r.levelno == logging.DEBUG and "audience" in r.getMessage() for r in caplog.records
        )
        # The log names the plugin whose flush was skipped (issue 14 §4).
        assert any(
            "audience" in r.getMessage() and '"recorder"' in r.getMessage()
            for r in caplog.records
        )
        assert recorder.calls == []
        assert len(env.model.calls) == 1
