"""The tools arm: the owner's declared tools, projected, warned about, policy applied."""

from __future__ import annotations

import logging

import pytest

import claw
from claw.models import ToolResult
from claw_testing import ScriptedReply

from .conftest import (
    LOOKUP,
    SAVE,
    OpenEnv,
    RecordingProvider,
    big_text,
    impostor_plugin,
    tools_plan,
)

SAVE_THEN_SILENT = [ScriptedReply(tool_calls=[(SAVE, {"text": "alice likes tea"})]), "NO_REPLY"]


async def test_the_flush_turn_gets_read_and_the_owners_declared_tools(open_env: OpenEnv) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()]) as env:
        env.model.extend([*SAVE_THEN_SILENT, "answered"])
        result = await env.turn(big_text(2100))
        assert env.model.calls[0].tool_names == ("read", SAVE, LOOKUP)
        assert result.flush.tool_names == ("read", SAVE, LOOKUP)
        assert [c.tool for c in recorder.calls] == [SAVE]


async def test_a_same_named_tool_of_another_plugin_is_excluded(open_env: OpenEnv) -> None:
    impostor, impostor_calls = impostor_plugin()
    recorder = RecordingProvider()
    async with open_env([impostor, recorder.plugin()]) as env:
        env.model.extend([*SAVE_THEN_SILENT, "answered"])
        result = await env.turn(big_text(2100))
        assert result.flush.status == "completed"
        assert impostor_calls == []
        (call,) = recorder.calls
        assert call.context.owner_plugin_id == "recorder"


async def test_a_declared_tool_only_another_plugin_registered_is_missing(
    open_env: OpenEnv, caplog: pytest.LogCaptureFixture
) -> None:
    impostor, impostor_calls = impostor_plugin(name="memory_store")
    recorder = RecordingProvider(provider_plan=tools_plan(persistence_tool_names=("memory_store",)))
    async with open_env([impostor, recorder.plugin()]) as env:
        env.model.extend(["answered"])
        with caplog.at_level(logging.WARNING, logger="claw.flush"):
            result = await env.turn(big_text(2100))
        assert result.flush.status == "skipped"
        assert "memory_store" in result.flush.reason
        assert any("memory_store" in r.getMessage() for r in caplog.records)
        assert impostor_calls == []
        assert len(env.model.calls) == 1


async def test_overlapping_persistence_and_lookup_names_skip_with_a_warning_naming_the_plugin(
    open_env: OpenEnv, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = RecordingProvider(provider_plan=tools_plan(lookup_tool_names=(LOOKUP, SAVE)))
    async with open_env([recorder.plugin()]) as env:
        env.model.extend(["answered"])
        with caplog.at_level(logging.WARNING, logger="claw.flush"):
            result = await env.turn(big_text(2100))
        assert result.flush.status == "skipped"
        (warning,) = [r.getMessage() for r in caplog.records]
        assert '"recorder"' in warning and SAVE in warning
        assert len(env.model.calls) == 1


async def test_no_surviving_persistence_tool_skips_inference_naming_the_missing_tools(
    open_env: OpenEnv, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = RecordingProvider(
        provider_plan=tools_plan(persistence_tool_names=(SAVE, "memory_append"))
    )
    async with open_env([recorder.plugin()]) as env:
        env.model.extend(["answered"])
        with caplog.at_level(logging.WARNING, logger="claw.flush"):
            result = await env.turn(big_text(2100), tool_policy=claw.ToolPolicy(deny={SAVE}))
        assert result.flush.status == "skipped"
        assert SAVE in result.flush.reason and "memory_append" in result.flush.reason
        assert any(
            SAVE in r.getMessage() and "memory_append" in r.getMessage() for r in caplog.records
        )
        assert len(env.model.calls) == 1  # only the user turn: no flush inference


async def test_policy_removed_lookup_tools_give_one_warning_and_the_flush_runs(
    open_env: OpenEnv, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = RecordingProvider(
        extra_tools=("memory_browse",),
        provider_plan=tools_plan(lookup_tool_names=(LOOKUP, "memory_browse")),
    )
    async with open_env([recorder.plugin()]) as env:
        env.model.extend([*SAVE_THEN_SILENT, "answered"])
        with caplog.at_level(logging.WARNING, logger="claw.flush"):
            result = await env.turn(
                big_text(2100), tool_policy=claw.ToolPolicy(deny={LOOKUP, "memory_browse"})
            )
        assert result.flush.status == "completed"
        assert env.model.calls[0].tool_names == ("read", SAVE)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert LOOKUP in warnings[0] and "memory_browse" in warnings[0]


async def test_lookup_tools_must_be_read_only(open_env: OpenEnv) -> None:
    recorder = RecordingProvider(lookup_read_only=False)
    async with open_env([recorder.plugin()]) as env:
        env.model.extend([*SAVE_THEN_SILENT, "answered"])
        result = await env.turn(big_text(2100))
        assert LOOKUP not in env.model.calls[0].tool_names
        assert any("not read-only" in w for w in result.flush.warnings)


async def test_tool_errors_reach_the_flush_model_as_error_results(open_env: OpenEnv) -> None:
    recorder = RecordingProvider(fail_save=True)
    async with open_env([recorder.plugin()]) as env:
        env.model.extend([*SAVE_THEN_SILENT, "answered"])
        await env.turn(big_text(2100))
        (failed,) = [m for m in env.model.calls[1].messages if isinstance(m, ToolResult)]
        assert failed.is_error and "full" in failed.content
