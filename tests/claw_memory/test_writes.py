"""Writing memories: host.memory.add / forget through Memory Core, and the memory_add tool."""

from __future__ import annotations

import calendar
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import claw
import claw_memory
from claw.memory import MemoryReference, MemorySearchRequest
from claw.memory_files import MemoryFileWriter, Placement
from claw.models import ToolResult, UserMessage
from claw_memory._writes import daily_note_path, entry_text
from claw_testing import ScriptedModel, ScriptedReply

from .test_plugin import _config

NOW = calendar.timegm((2026, 12, 1, 9, 30, 12, 0, 0, 0))


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[claw.Host]:
    async with claw.open_host(_config(tmp_path), plugins=[claw_memory.plugin]) as h:
        await h.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        await h.sessions.create("grp:1", agent_id="main", chat_type="group")
        yield h


async def _as_operator(host: claw.Host, scopes: set[str], fn: Any) -> Any:
    async with host.open_scope("op") as scope:
        ctx = scope.mint_caller_context(scope.mint_operator_authority(scopes))
        return await fn(ctx)


async def _search(host: claw.Host, query: str) -> list[str]:
    async def run(ctx: claw.MemoryCallerContext) -> list[str]:
        async with host.memory.open(ctx) as handle:
            result = await handle.search(MemorySearchRequest(query=query, min_score=0.0))
        return [h.excerpt for h in result.hits]

    found: list[str] = await _as_operator(host, {"operator.read"}, run)
    return found


async def test_operator_add_appends_a_stamped_entry_to_todays_note_and_search_sees_it(
    host: claw.Host,
) -> None:
    result = await _as_operator(
        host,
        {"operator.write"},
        lambda ctx: host.memory.add(ctx, "The locker code is 7741."),
    )
    path = daily_note_path(time.time())
    assert result.reference.provider_id == "memory-core"
    assert result.reference.id == path == result.citation.path
    note = (host.config.workspace_dir / path).read_text(encoding="utf-8")
    assert f"- [{result.timestamp}] The locker code is 7741.\n" in note
    lines = note.splitlines()
    assert lines[result.citation.start_line - 1].endswith("The locker code is 7741.")
    assert any("locker code is 7741" in e for e in await _search(host, "locker code"))


async def test_owner_run_may_add_but_a_conversation_audience_is_refused(host: claw.Host) -> None:
    async with host.open_run("dm:alice", sender_is_owner=True) as run:
        added = await host.memory.add(run.caller, "Alice's flight lands at 18:05.")
    assert added.citation.path.startswith("memory/")
    async with host.open_run("grp:1", sender_is_owner=False) as run:
        with pytest.raises(claw.CapabilityDeniedError, match="only the agent's owner"):
            await host.memory.add(run.caller, "mallory was here")
        ref = added.reference
        with pytest.raises(claw.CapabilityDeniedError, match="only the agent's owner"):
            await host.memory.forget(run.caller, ref)
    note = (host.config.workspace_dir / added.citation.path).read_text(encoding="utf-8")
    assert "mallory" not in note and "flight lands" in note


async def test_an_operator_without_a_write_scope_and_a_host_authority_cannot_write(
    host: claw.Host,
) -> None:
    with pytest.raises(claw.CapabilityDeniedError, match="operator.write"):
        await _as_operator(host, {"operator.read"}, lambda ctx: host.memory.add(ctx, "x"))
    async with host.open_scope("status") as scope:
        ctx = scope.mint_caller_context(scope.mint_host_authority("status"))
        with pytest.raises(claw.CapabilityDeniedError, match="host authority"):
            await host.memory.add(ctx, "x")
    async with host.open_run("dm:alice", sender_is_owner=True, sandboxed=True) as run:
        with pytest.raises(claw.CapabilityDeniedError, match="sandboxed"):
            await host.memory.add(run.caller, "x")
    assert not (host.config.workspace_dir / daily_note_path(time.time())).exists()


async def test_the_provider_refuses_a_conversation_audience_even_without_the_host_guard(
    host: claw.Host,
) -> None:
    """Memory Core checks again: its maintenance is reachable without host.memory.add."""
    _, capability = host.memory.selection()
    assert capability is not None and capability.maintenance is not None
    async with host.open_run("grp:1", sender_is_owner=False) as run:
        with pytest.raises(claw.CapabilityDeniedError):
            await capability.maintenance.add(
                agent_id="main",
                context=run.caller,
                request=claw.memory.MemoryAddRequest(text="sneaky"),
            )


async def test_a_stale_caller_cannot_write(host: claw.Host) -> None:
    async with host.open_scope("op") as scope:
        ctx = scope.mint_caller_context(scope.mint_operator_authority({"operator.write"}))
    with pytest.raises(claw.StaleCapabilityError):
        await host.memory.add(ctx, "after the scope closed")


async def test_add_files_under_a_section_inside_the_file_and_creates_a_missing_one(
    host: claw.Host,
) -> None:
    async def add(ctx: claw.MemoryCallerContext) -> Any:
        inside = await host.memory.add(
            ctx, "Carol prefers rooibos.", path="MEMORY.md", section="Preferences"
        )
        new = await host.memory.add(ctx, "Ship 1.0\nthen rest", path="MEMORY.md", section="Plans")
        return inside, new

    inside, new = await _as_operator(host, {"operator.write"}, add)
    text = (host.config.workspace_dir / "MEMORY.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    prefs = lines.index("## Preferences")
    people = lines.index("## People")
    assert prefs < inside.citation.start_line - 1 < people
    assert lines[inside.citation.start_line - 1].endswith("Carol prefers rooibos.")
    assert lines[people - 1] == ""  # the next heading keeps its blank line
    assert text.endswith("## Plans\n\n" + f"- [{new.timestamp}] Ship 1.0\n  then rest\n")
    assert (new.citation.start_line, new.citation.end_line) == (len(lines) - 1, len(lines))
    assert any("rooibos" in e for e in await _search(host, "rooibos"))


async def test_forget_by_reference_removes_the_added_lines_and_search_no_longer_sees_them(
    host: claw.Host,
) -> None:
    async def run(ctx: claw.MemoryCallerContext) -> Any:
        keep = await host.memory.add(ctx, "The boiler is serviced in March.")
        drop = await host.memory.add(ctx, "The wifi password is hunter2.")
        dry = await host.memory.forget(ctx, drop.reference, dry_run=True)
        assert dry.dry_run and dry.removed_text is not None and "hunter2" in dry.removed_text
        assert dry.removal_id is None
        done = await host.memory.forget(ctx, drop.reference)
        return keep, done

    keep, done = await _as_operator(host, {"operator.write"}, run)
    assert not done.dry_run and done.paths == (keep.citation.path,)
    assert done.removal_id is not None and done.entries == 1
    note = (host.config.workspace_dir / keep.citation.path).read_text(encoding="utf-8")
    assert "hunter2" not in note and "boiler" in note
    assert not any("hunter2" in e for e in await _search(host, "wifi password hunter2"))


async def test_a_reference_stays_valid_while_other_lines_change_and_is_stale_once_its_own_do(
    host: claw.Host,
) -> None:
    """A reference's revision is its lines' hash: an add elsewhere in the file leaves it
    current (the lines only moved), an edit of the lines themselves makes it stale, and
    the refusal says what the lines read now."""

    async def run(ctx: claw.MemoryCallerContext) -> Any:
        first = await host.memory.add(ctx, "Gate code 1234.", path="MEMORY.md", section="Codes")
        await host.memory.add(ctx, "Alarm code 9.", path="MEMORY.md", section="Preferences")
        note = host.config.workspace_dir / "MEMORY.md"
        # Inserted above the first entry: it moved down a line, unchanged.
        moved = await host.memory.forget(ctx, first.reference, dry_run=True)
        assert moved.start_line == first.citation.start_line + 1
        text = note.read_text(encoding="utf-8").replace("Gate code 1234.", "Gate code 4321.")
        note.write_text(text, encoding="utf-8")
        with pytest.raises(claw.ClawError, match=r"changed since they were cited"):
            await host.memory.forget(ctx, first.reference)
        return note.read_text(encoding="utf-8")

    text = await _as_operator(host, {"operator.write"}, run)
    assert "Gate code 4321." in text and "Alarm code 9." in text


async def test_forget_of_a_whole_file_reference_drops_its_chunks_and_keeps_the_file(
    host: claw.Host,
) -> None:
    ref = MemoryReference(provider_id="memory-core", id="memory/2026-11-30.md")
    result = await _as_operator(host, {"operator.admin"}, lambda ctx: host.memory.forget(ctx, ref))
    assert result.chunks >= 1 and result.paths == ("memory/2026-11-30.md",)
    assert (host.config.workspace_dir / "memory" / "2026-11-30.md").is_file()
    assert not any("quarterly budget" in e for e in await _search(host, "quarterly budget"))


async def test_another_providers_reference_is_refused_before_the_provider_runs(
    host: claw.Host,
) -> None:
    ref = MemoryReference(provider_id="other", id="MEMORY.md", fragment="L1-L1")
    with pytest.raises(claw.memory.ForeignReferenceError):
        await _as_operator(host, {"operator.write"}, lambda ctx: host.memory.forget(ctx, ref))
    assert (
        (host.config.workspace_dir / "MEMORY.md").read_text(encoding="utf-8").startswith("# Memory")
    )


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../outside.md", "not a path inside the workspace"),
        ("/etc/passwd", "not a path inside the workspace"),
        ("notes.txt", "not a memory file"),
        ("memory/x.txt", "not a memory file"),
        ("sessions/main/x", "not a memory file"),
    ],
)
async def test_add_refuses_paths_that_are_not_memory_files(
    host: claw.Host, path: str, message: str
) -> None:
    with pytest.raises(claw.ClawError, match=message):
        await _as_operator(
            host, {"operator.write"}, lambda ctx: host.memory.add(ctx, "x", path=path)
        )


async def test_add_never_writes_through_a_symlink(host: claw.Host, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (host.config.workspace_dir / "memory" / "linked").symlink_to(outside)
    with pytest.raises(claw.ClawError, match="symlink"):
        await _as_operator(
            host,
            {"operator.write"},
            lambda ctx: host.memory.add(ctx, "x", path="memory/linked/a.md"),
        )
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"text": "   "}, "text must be non-empty"),
        ({"text": "a\x00b"}, "NUL"),
        ({"text": "x" * 40_000}, "longer than"),
        ({"text": "x", "section": "two\nlines"}, "one line"),
    ],
)
async def test_bad_entries_are_refused_naming_the_argument(
    host: claw.Host, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(claw.ClawError, match=message):
        await _as_operator(host, {"operator.write"}, lambda ctx: host.memory.add(ctx, **kwargs))


async def test_an_entry_that_would_pass_max_file_bytes_is_refused_and_the_file_is_unchanged(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, max_file_bytes=64)
    async with claw.open_host(config, plugins=[claw_memory.plugin]) as small:
        note = config.workspace_dir / "memory" / "n.md"
        note.write_text("- old\n", encoding="utf-8")
        with pytest.raises(claw.ClawError, match="max_file_bytes"):
            await _as_operator(
                small,
                {"operator.write"},
                lambda ctx: small.memory.add(ctx, "y" * 100, path="memory/n.md"),
            )
        assert note.read_text(encoding="utf-8") == "- old\n"


def test_append_adds_a_newline_to_an_unterminated_file_and_counts_lines(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    note = tmp_path / "memory" / "n.md"
    note.write_text("# Day\n- first", encoding="utf-8")
    written = MemoryFileWriter(tmp_path).append(
        "memory/n.md", entry_text("second", "2026-12-01 09:30:12 UTC"), by={"kind": "host"}
    )
    assert note.read_text(encoding="utf-8") == (
        "# Day\n- first\n- [2026-12-01 09:30:12 UTC] second\n"
    )
    assert (written.start_line, written.end_line) == (3, 3)


def test_a_rewrite_that_fails_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rename is the commit point: a crash before it loses nothing."""
    (tmp_path / "memory").mkdir()
    note = tmp_path / "memory" / "n.md"
    original = "- a\n- b\n- c\n"
    note.write_text(original, encoding="utf-8")

    def crash(*args: Any) -> bool:
        raise OSError("disk on fire")

    monkeypatch.setattr("claw.memory_files._writer._exchange", crash)
    with pytest.raises(OSError, match="disk on fire"):
        MemoryFileWriter(tmp_path).place(
            "memory/n.md", lambda _: Placement(text="- x\n", before=1), by={"kind": "host"}
        )
    assert note.read_text(encoding="utf-8") == original
    assert [p.name for p in (tmp_path / "memory").iterdir()] == ["n.md"]


async def test_memory_add_tool_writes_for_the_owner_and_is_refused_in_a_group(
    host: claw.Host,
) -> None:
    model = ScriptedModel(
        [
            ScriptedReply(tool_calls=[("memory_add", {"text": "Alice's bike is blue."})]),
            "Noted.",
            ScriptedReply(tool_calls=[("memory_add", {"text": "mallory owns alice"})]),
            "Refused.",
        ]
    )
    host.models.register_provider("scripted", lambda name: model)
    await host.run_turn("dm:alice", UserMessage("remember my bike"), sender_is_owner=True)
    owner = next(m for m in model.calls[1].messages if isinstance(m, ToolResult))
    assert owner.content.startswith("Remembered. Source: memory/")
    await host.run_turn("grp:1", UserMessage("remember this"), sender_is_owner=False)
    group = next(m for m in model.calls[3].messages if isinstance(m, ToolResult))
    assert group.content.startswith("memory_add refused: only the agent's owner")
    note = host.config.workspace_dir / daily_note_path(time.time())
    text = note.read_text(encoding="utf-8")
    assert "bike is blue" in text and "mallory" not in text


async def test_a_provider_without_a_write_path_is_reported_neutrally(tmp_path: Path) -> None:
    config = attrs.evolve(
        _config(tmp_path), plugins=claw.PluginsConfig(discover=False, slots=claw.SlotsConfig())
    )
    async with claw.open_host(config, plugins=[]) as host:
        with pytest.raises(claw.memory.MemoryUnavailableError):
            await _as_operator(host, {"operator.write"}, lambda ctx: host.memory.add(ctx, "x"))


async def test_writes_for_an_agent_the_host_does_not_know_are_refused_before_the_provider(
    host: claw.Host,
) -> None:
    reference = MemoryReference(provider_id="memory-core", id="MEMORY.md", fragment="L1-L1")
    for write in (
        lambda ctx: host.memory.add(ctx, "planted", agent_id="nobody"),
        lambda ctx: host.memory.forget(ctx, reference, agent_id=".."),
    ):
        with pytest.raises(claw.UnknownAgentError, match="agentId"):
            await _as_operator(host, {"operator.write"}, write)
    # Memory Core opened no index for them.
    root = host.config.resolved_state_dir / "memory"
    assert not root.exists() or [p.name for p in root.iterdir()] == ["main"]
