"""Plans: resolver selection and ownership, provider overrides, and the flush model."""

from __future__ import annotations

import logging

import pytest

import claw
from claw.models import RetryableModelError
from claw_testing import ScriptedReply

from .conftest import (
    FLUSH_PROMPT,
    FLUSH_SYSTEM,
    SAVE,
    OpenEnv,
    RecordingProvider,
    big_text,
    file_draft,
    tools_plan,
)

SAVE_THEN_SILENT = [ScriptedReply(tool_calls=[(SAVE, {"text": "alice likes tea"})]), "NO_REPLY"]


def complete_plan(**overrides: object) -> claw.MemoryFlushPlan:
    fields: dict[str, object] = {
        "relative_path": "memory/2024-05-01.md",
        "prompt": FLUSH_PROMPT,
        "system_prompt": FLUSH_SYSTEM,
        "soft_threshold_tokens": 1000,
        "reserve_tokens_floor": 1000,
        "force_flush_transcript_bytes": 2 * 1024 * 1024,
    }
    fields.update(overrides)
    return claw.MemoryFlushPlan(**fields)  # type: ignore[arg-type]


def test_plan_fields_are_validated_with_contract_errors() -> None:
    with pytest.raises(claw.FlushPlanError, match="persistence_tool_names"):
        tools_plan(persistence_tool_names=())
    with pytest.raises(claw.FlushPlanError, match="not one string"):
        tools_plan(persistence_tool_names="memory_save")
    with pytest.raises(claw.FlushPlanError, match="provider/model"):
        file_draft(model="qwen3")
    with pytest.raises(claw.FlushPlanError, match="required"):
        complete_plan(reserve_tokens_floor=None)
    assert isinstance(claw.FlushPlanError("x"), claw.ContractError)


async def test_a_plugin_registering_both_resolvers_gets_the_provider_one(
    open_env: OpenEnv,
) -> None:
    recorder = RecordingProvider(register_plain=True, plain_plan=complete_plan())
    async with open_env([recorder.plugin()]) as env:
        env.model.extend([*SAVE_THEN_SILENT, "answered"])
        result = await env.turn(big_text(2100))
        assert result.flush.status == "completed"
        assert result.flush.arm == "tools"
        assert [kind for kind, _ in recorder.requests] == ["provider"]


async def test_the_owners_plain_resolver_wins_over_a_sidecars_provider_resolver(
    open_env: OpenEnv,
) -> None:
    owner = RecordingProvider(
        register_provider=False, register_plain=True, plain_plan=complete_plan()
    )
    sidecar = RecordingProvider(plugin_id="side")
    async with open_env([owner.plugin(), sidecar.plugin()]) as env:
        env.model.extend(["NO_REPLY", "answered"])
        result = await env.turn(big_text(2100))
        assert (result.flush.status, result.flush.arm) == ("completed", "file")
        assert result.flush.plugin_id == "recorder"
        assert sidecar.requests == []


async def test_a_sidecar_file_plan_runs_when_the_owner_has_no_resolver(
    open_env: OpenEnv,
) -> None:
    owner = RecordingProvider(register_provider=False)
    sidecar = RecordingProvider(plugin_id="side", provider_plan=file_draft())
    async with open_env([owner.plugin(), sidecar.plugin()]) as env:
        env.model.extend(["NO_REPLY", "answered"])
        result = await env.turn(big_text(2100))
        assert (result.flush.status, result.flush.arm) == ("completed", "file")
        assert result.flush.plugin_id == "side"
        (event,) = env.flush_events()
        assert event.data["plugin_id"] == "side"


async def test_merged_sidecar_fields_prefer_a_provider_resolver_and_track_its_plugin(
    open_env: OpenEnv,
) -> None:
    plain_side = RecordingProvider(
        plugin_id="a-side", register_provider=False, register_plain=True, plain_plan=complete_plan()
    )
    provider_side = RecordingProvider(plugin_id="b-side", provider_plan=file_draft())
    async with open_env([plain_side.plugin(), provider_side.plugin()], memory="none") as env:
        env.model.extend(["NO_REPLY", "answered"])
        result = await env.turn(big_text(2100))
        assert result.flush.plugin_id == "b-side"
        assert plain_side.requests == []


async def test_a_tools_plan_from_a_sidecar_is_skipped_with_a_warning_naming_it(
    open_env: OpenEnv, caplog: pytest.LogCaptureFixture
) -> None:
    owner = RecordingProvider(register_provider=False)
    sidecar = RecordingProvider(plugin_id="side")
    async with open_env([owner.plugin(), sidecar.plugin()]) as env:
        env.model.extend(["answered"])
        with caplog.at_level(logging.WARNING, logger="claw.flush"):
            result = await env.turn(big_text(2100))
        assert result.flush.status == "skipped"
        assert result.flush.plugin_id == "side"
        assert any(
            '"side"' in r.getMessage() and "tools-arm" in r.getMessage() for r in caplog.records
        )
        assert sidecar.calls == [] and owner.calls == []
        assert len(env.model.calls) == 1


async def test_provider_overrides_replace_the_hosts_timing(open_env: OpenEnv) -> None:
    """With host timing the flush would not be due; the plan's own thresholds make it due."""
    recorder = RecordingProvider(
        provider_plan=tools_plan(soft_threshold_tokens=1000, reserve_tokens_floor=1000)
    )
    async with open_env(
        [recorder.plugin()], soft_threshold_tokens=0, reserve_tokens_floor=0
    ) as env:
        env.model.extend([*SAVE_THEN_SILENT, "answered"])
        result = await env.turn(big_text(2100))
        assert result.flush.status == "completed"
        (_, request) = recorder.requests[0]
        assert request.timing.threshold_tokens == 4000
        assert request.session_key == "dm:alice"


async def test_omitted_overrides_keep_the_hosts_timing(open_env: OpenEnv) -> None:
    recorder = RecordingProvider(provider_plan=tools_plan(force_flush_transcript_bytes=300))
    async with open_env([recorder.plugin()]) as env:
        env.model.extend(["first", *SAVE_THEN_SILENT, "second"])
        assert (await env.turn("a" * 200)).flush is None
        second = await env.turn("b" * 200)
        assert second.flush.trigger == "force"
        assert recorder.requests[-1][1].timing.force_flush_transcript_bytes == 2 * 1024 * 1024


async def test_a_model_override_pins_the_exact_ref_without_the_fallback_chain(
    open_env: OpenEnv,
) -> None:
    recorder = RecordingProvider(provider_plan=tools_plan(model="pinned/flusher"))
    async with open_env([recorder.plugin()], fallbacks=("scripted/backup",)) as env:
        flusher = env.host.models.resolve("pinned/flusher")
        backup = env.host.models.resolve("scripted/backup")
        flusher.extend([RetryableModelError("busy")])  # type: ignore[attr-defined]
        env.model.extend(["answered"])
        result = await env.turn(big_text(2100))
        assert result.flush.status == "failed"
        assert "AllModelsFailedError" in result.flush.reason
        assert backup.calls == ()  # type: ignore[attr-defined]
        assert result.reply.text == "answered"


async def test_a_tools_plan_without_model_uses_memory_flush_model(open_env: OpenEnv) -> None:
    recorder = RecordingProvider()
    async with open_env([recorder.plugin()], model="pinned/flusher") as env:
        flusher = env.host.models.resolve("pinned/flusher")
        flusher.extend(SAVE_THEN_SILENT)  # type: ignore[attr-defined]
        env.model.extend(["answered"])
        result = await env.turn(big_text(2100))
        assert result.flush.model_ref == "pinned/flusher"
        assert len(env.model.calls) == 1


async def test_a_file_plan_without_model_keeps_the_sessions_model(open_env: OpenEnv) -> None:
    recorder = RecordingProvider(provider_plan=file_draft())
    async with open_env([recorder.plugin()], model="pinned/flusher") as env:
        env.model.extend(["NO_REPLY", "answered"])
        result = await env.turn(big_text(2100))
        assert result.flush.model_ref == "scripted/main"
        assert env.host.models.resolve("pinned/flusher").calls == ()  # type: ignore[attr-defined]


async def test_a_file_plan_with_model_is_pinned_to_it(open_env: OpenEnv) -> None:
    recorder = RecordingProvider(provider_plan=file_draft(model="pinned/filer"))
    async with open_env([recorder.plugin()]) as env:
        env.host.models.resolve("pinned/filer").extend(["NO_REPLY"])  # type: ignore[attr-defined]
        env.model.extend(["answered"])
        result = await env.turn(big_text(2100))
        assert (result.flush.status, result.flush.model_ref) == ("completed", "pinned/filer")


async def test_a_plain_resolver_returning_a_tools_plan_is_refused(open_env: OpenEnv) -> None:
    recorder = RecordingProvider(
        register_provider=False, register_plain=True, plain_plan=tools_plan()
    )
    async with open_env([recorder.plugin()]) as env:
        env.model.extend(["answered"])
        result = await env.turn(big_text(2100))
        assert result.flush.status == "skipped"
        assert "MemoryFlushToolsPlan" in result.flush.reason
