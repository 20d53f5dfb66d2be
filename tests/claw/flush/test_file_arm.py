"""The file arm: read plus an append-only write limited to the target the host creates."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import claw
from claw.memory_files import MemoryFileWriter
from claw.models import ToolResult, UserMessage
from claw_testing import ScriptedModel, ScriptedReply

from .conftest import WINDOW, OpenEnv, RecordingProvider, big_text, file_draft, flush_config

TARGET = "memory/2024-05-01.md"


def write(path: str, content: str) -> ScriptedReply:
    return ScriptedReply(tool_calls=[("write", {"path": path, "content": content})])


def tool_results(call: object) -> list[ToolResult]:
    return [m for m in call.messages if isinstance(m, ToolResult)]  # type: ignore[attr-defined]


async def test_file_flush_appends_to_the_target_with_only_read_and_write(
    open_env: OpenEnv,
) -> None:
    recorder = RecordingProvider(provider_plan=file_draft())
    async with open_env([recorder.plugin()]) as env:
        workspace = env.host.config.workspace_dir
        env.model.extend([write(TARGET, "- alice likes tea"), "NO_REPLY", "answered"])
        result = await env.turn(big_text(2100))
        assert (result.flush.status, result.flush.evidence) == ("completed", "run-completed")
        assert env.model.calls[0].tool_names == ("read", "write")
        assert (workspace / TARGET).read_text() == "- alice likes tea\n"
        assert recorder.calls == []


async def test_a_flush_note_is_journalled_as_written_by_that_flush(open_env: OpenEnv) -> None:
    """The write goes through the host's memory-file writer, which records who wrote it:
    the flush (its id and run), through the host's ``write`` tool."""
    recorder = RecordingProvider(provider_plan=file_draft())
    async with open_env([recorder.plugin()]) as env:
        env.model.extend([write(TARGET, "- alice likes tea"), "NO_REPLY", "answered"])
        result = await env.turn(big_text(2100))
        records = MemoryFileWriter(env.host.config.workspace_dir).journal.records()
        assert [r["op"] for r in records] == ["add"]
        by = records[0]["by"]
        assert by["kind"] == "flush" and by["flushId"] == result.flush.flush_id
        assert (by["tool"], by["pluginId"], by["owner"]) == ("write", "claw", True)
        assert by["sessionKey"] == "memory-flush:dm:alice"


async def test_the_host_creates_the_target_even_when_nothing_is_written(
    open_env: OpenEnv,
) -> None:
    recorder = RecordingProvider(provider_plan=file_draft())
    async with open_env([recorder.plugin()]) as env:
        env.model.extend(["NO_REPLY", "answered"])
        await env.turn(big_text(2100))
        assert (env.host.config.workspace_dir / TARGET).read_text() == ""


async def test_write_is_append_only_and_refuses_every_other_path(open_env: OpenEnv) -> None:
    recorder = RecordingProvider(provider_plan=file_draft())
    async with open_env([recorder.plugin()]) as env:
        workspace: Path = env.host.config.workspace_dir
        (workspace / "memory").mkdir()
        (workspace / TARGET).write_text("earlier note")
        (workspace / "MEMORY.md").write_text("durable facts\n")
        env.model.extend(
            [
                write("MEMORY.md", "overwrite attempt"),
                write("../escape.md", "escape attempt"),
                write(TARGET, "new note"),
                "NO_REPLY",
                "answered",
            ]
        )
        await env.turn(big_text(2100))
        refused = tool_results(env.model.calls[2])
        assert [r.is_error for r in refused] == [True, True]
        assert "limited to" in refused[0].content
        assert (workspace / "MEMORY.md").read_text() == "durable facts\n"
        assert not (workspace.parent / "escape.md").exists()
        assert (workspace / TARGET).read_text() == "earlier note\nnew note\n"


async def test_read_sees_workspace_files_but_not_outside(open_env: OpenEnv) -> None:
    recorder = RecordingProvider(provider_plan=file_draft())
    async with open_env([recorder.plugin()]) as env:
        workspace: Path = env.host.config.workspace_dir
        (workspace / "MEMORY.md").write_text("alice: prefers tea")
        env.model.extend(
            [
                ScriptedReply(tool_calls=[("read", {"path": "MEMORY.md"})]),
                ScriptedReply(tool_calls=[("read", {"path": "/etc/passwd"})]),
                "NO_REPLY",
                "answered",
            ]
        )
        await env.turn(big_text(2100))
        (ok,) = tool_results(env.model.calls[1])
        assert (ok.is_error, ok.content) == (False, "alice: prefers tea")
        _, refused = tool_results(env.model.calls[2])
        assert refused.is_error


async def test_a_read_only_workspace_skips_the_file_flush_with_a_logged_reason(
    open_env: OpenEnv, caplog: pytest.LogCaptureFixture
) -> None:
    """A sandboxed source turn has read-only workspace access in claw."""
    recorder = RecordingProvider(provider_plan=file_draft())
    async with open_env([recorder.plugin()], keep_recent_tokens=10) as env:
        env.model.extend(["earlier reply"])
        await env.turn("an earlier turn", sandboxed=True)
        env.model.extend(["answered", "the summary"])
        with caplog.at_level(logging.WARNING, logger="claw.flush"):
            result = await env.turn(big_text(3100), sandboxed=True)
        assert result.flush.status == "skipped"
        assert "no writable workspace access" in result.flush.reason
        assert "read-only" in result.flush.reason
        assert any("read-only" in r.getMessage() for r in caplog.records)
        # The warning names the file it could not write (issue 14 §4).
        assert any(
            TARGET in r.getMessage() and "read-only" in r.getMessage() for r in caplog.records
        )
        assert not (env.host.config.workspace_dir / TARGET).exists()
        assert result.compaction is not None and result.compaction.compacted


async def test_an_uncreatable_target_skips_the_file_flush(open_env: OpenEnv) -> None:
    recorder = RecordingProvider(provider_plan=file_draft())
    async with open_env([recorder.plugin()]) as env:
        (env.host.config.workspace_dir / "memory").write_text("a file where a folder belongs")
        env.model.extend(["answered"])
        result = await env.turn(big_text(2100))
        assert result.flush.status == "skipped"
        assert "could not create" in result.flush.reason
        assert len(env.model.calls) == 1


@pytest.mark.parametrize("path", ["/abs/memory.md", "../outside.md", "memory/../../x.md"])
async def test_a_target_outside_the_workspace_skips_the_plan(open_env: OpenEnv, path: str) -> None:
    recorder = RecordingProvider(provider_plan=file_draft(relative_path=path))
    async with open_env([recorder.plugin()]) as env:
        env.model.extend(["answered"])
        result = await env.turn(big_text(2100))
        assert result.flush.status == "skipped"
        assert "relative_path" in result.flush.reason
        assert any("recorder" in w for w in result.flush.warnings)


async def test_a_restart_inside_a_compaction_cycle_does_not_flush_that_cycle_again(
    host_config: claw.HostConfig,
) -> None:
    """Found by the flush kill loop: completions were only remembered in memory."""
    recorder = RecordingProvider(provider_plan=file_draft())
    config = flush_config(host_config)
    model = ScriptedModel([], context_window=WINDOW)
    async with claw.open_host(config, plugins=[recorder.plugin()]) as host:
        host.models.register_provider("scripted", lambda name: model)
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        model.extend([write(TARGET, "- alice likes tea"), "NO_REPLY", "answered"])
        first = await host.run_turn("dm:alice", UserMessage(big_text(2100)), sender_is_owner=True)
        assert first.flush.status == "completed"
        assert first.compaction is None  # the cycle is still open: no compaction yet
    async with claw.open_host(config, plugins=[recorder.plugin()]) as host:
        host.models.register_provider("scripted", lambda name: model)
        model.extend(["again"])
        second = await host.run_turn("dm:alice", UserMessage("more"), sender_is_owner=True)
        assert second.flush is None  # this cycle already flushed before the restart
    assert (host_config.workspace_dir / TARGET).read_text() == "- alice likes tea\n"
    model.assert_script_consumed()
