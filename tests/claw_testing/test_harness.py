"""The harness's building blocks, used directly: workspace, sessions, events, gateways."""

from __future__ import annotations

import datetime
import logging
from pathlib import Path

import pytest
import trio

import claw
from claw.gateway import GatewayClient, GatewayRequestError
from claw.models import UserMessage
from claw_memory import HashEmbedder
from claw_testing import (
    HARNESS_GATEWAY_TOKEN,
    EventRecorder,
    MemoryWorkspace,
    ScriptedModel,
    SessionBuilder,
    harness_config,
    open_harness_gateway,
    open_harness_host,
    record_events,
)


def test_workspace_writes_memory_daily_and_nested_files(tmp_path: Path) -> None:
    ws = MemoryWorkspace(tmp_path)
    ws.write_memory("# Memory\n- a")
    ws.write_memory("- b\n", append=True)
    ws.write_daily(datetime.date(2026, 1, 2), "- met bob\n")
    ws.write_daily("2026-01-03", "- met carol\n")
    ws.write("memory/projects/x.md", "x\n")
    assert ws.read("MEMORY.md") == "# Memory\n- a\n- b\n"
    assert ws.memory_files() == [
        "MEMORY.md",
        "memory/2026-01-02.md",
        "memory/2026-01-03.md",
        "memory/projects/x.md",
    ]


@pytest.mark.parametrize("path", ["../out.md", "/etc/passwd", ""])
def test_workspace_refuses_paths_outside_it(tmp_path: Path, path: str) -> None:
    with pytest.raises(ValueError, match="inside the workspace"):
        MemoryWorkspace(tmp_path).write(path, "x")


def test_a_daily_file_needs_an_iso_date(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        MemoryWorkspace(tmp_path).write_daily("yesterday", "x")


def test_the_sample_workspace_has_memory_and_daily_notes(tmp_path: Path) -> None:
    files = MemoryWorkspace.sample(tmp_path / "ws").memory_files()
    assert "MEMORY.md" in files
    assert any(f.startswith("memory/20") for f in files)


def test_the_hash_embedder_fixture_is_deterministic(hash_embedder: HashEmbedder) -> None:
    first = hash_embedder.embed_sync(["green tea", "coffee"])
    again = HashEmbedder().embed_sync(["green tea", "coffee"])
    assert (first == again).all()
    assert first.shape == (2, hash_embedder.dims)


async def test_session_builder_makes_owner_group_and_child_audiences(
    claw_host: claw.Host, claw_sessions: SessionBuilder
) -> None:
    await claw_sessions.owner_direct("dm:owner")
    await claw_sessions.group("grp:team")
    chain = await claw_sessions.child_chain("grp:team", 3)
    assert [r.session_key for r in chain] == [
        "grp:team/child1",
        "grp:team/child2",
        "grp:team/child3",
    ]
    assert chain[-1].parent_key == "grp:team/child2"
    async with claw_host.open_run("dm:owner", sender_is_owner=True) as run:
        assert run.audience is not None and run.audience.kind == "owner-private"
    async with claw_host.open_run("grp:team/child3", sender_is_owner=False) as run:
        assert run.audience is not None
        assert (run.audience.kind, run.audience.session_key) == ("conversation", "grp:team")


async def test_a_reset_parent_leaves_the_child_chain_without_audience(
    claw_host: claw.Host, claw_sessions: SessionBuilder
) -> None:
    await claw_sessions.group("grp:team")
    (child,) = await claw_sessions.child_chain("grp:team", 1, prefix="sub")
    await claw_host.sessions.reset("grp:team")
    async with claw_host.open_run(child.session_key, sender_is_owner=False) as run:
        assert run.audience is None


async def test_a_child_chain_needs_a_positive_depth(claw_sessions: SessionBuilder) -> None:
    with pytest.raises(ValueError, match="at least one child"):
        await claw_sessions.child_chain("grp:none", 0)


async def test_recorder_sees_turn_events_in_order_and_matches_data(
    claw_host: claw.Host,
    claw_sessions: SessionBuilder,
    scripted_model: ScriptedModel,
    claw_events: EventRecorder,
) -> None:
    await claw_sessions.owner_direct("dm:alice")
    scripted_model.extend(["hi"])
    result = await claw_host.run_turn("dm:alice", UserMessage("hello"), sender_is_owner=True)
    event = claw_events.assert_emitted("turn.admitted", session_key="dm:alice")
    assert event.data["turn_id"] == result.turn_id
    claw_events.assert_emitted("turn", turn_id=lambda v: v == result.turn_id)
    claw_events.assert_order("turn.admitted", "turn.terminal")
    claw_events.assert_not_emitted("flush")
    assert claw_events.turns and not claw_events.compactions and not claw_events.flushes
    with pytest.raises(AssertionError, match=r"no turn.admitted after position \d"):
        claw_events.assert_order("turn.terminal", "turn.admitted")
    with pytest.raises(AssertionError, match="unexpected"):
        claw_events.assert_not_emitted("turn", session_key="dm:alice")
    with pytest.raises(AssertionError, match="no event turn.admitted for 'dm:bob'"):
        claw_events.assert_emitted("turn.admitted", session_key="dm:bob")


async def test_recorder_captures_claw_warnings_until_closed(claw_host: claw.Host) -> None:
    with record_events(claw_host) as recorder:
        logging.getLogger("claw.test").warning("disk %s is full", "sda")
        logging.getLogger("claw.test").info("not a warning")
        logging.getLogger("elsewhere").warning("not claw's")
        claw_host.events.emit("compaction.completed", "dm:x")
    logging.getLogger("claw.test").warning("after close")
    claw_host.events.emit("compaction.skipped", "dm:x")
    assert recorder.warnings == ["disk sda is full"]
    assert recorder.assert_warned("sda") == "disk sda is full"
    assert recorder.kinds("compaction") == ["compaction.completed"]
    with pytest.raises(AssertionError, match="unexpected warnings"):
        recorder.assert_no_warnings()
    recorder.clear()
    recorder.assert_no_warnings()


async def _search(client: GatewayClient, query: str) -> list[str]:
    payload = await client.request("memory.search", {"version": 2, "query": query, "minScore": 0})
    return [hit["citation"]["path"] for hit in payload["hits"]]


async def test_in_memory_and_socket_clients_speak_the_same_protocol(
    memory_workspace: MemoryWorkspace,
    gateway_client: GatewayClient,
    socket_gateway_client: GatewayClient,
) -> None:
    memory_workspace.write_daily("2026-02-01", "- The deploy window is Friday.\n")
    assert await _search(gateway_client, "deploy window") == ["memory/2026-02-01.md"]
    assert await _search(socket_gateway_client, "deploy window") == ["memory/2026-02-01.md"]
    assert gateway_client.scopes == socket_gateway_client.scopes == {"operator.read"}


async def test_the_harness_gateway_refuses_another_token(claw_host: claw.Host) -> None:
    with pytest.raises(GatewayRequestError) as info:
        async with open_harness_gateway(claw_host, token="not-" + HARNESS_GATEWAY_TOKEN):
            pass  # pragma: no cover - the connect is refused
    assert info.value.code == "UNAUTHORIZED"


async def test_the_socket_gateway_surfaces_the_callers_own_error(claw_host: claw.Host) -> None:
    with pytest.raises(KeyError, match="mine"):
        async with open_harness_gateway(claw_host, transport="socket"):
            raise KeyError("mine")


async def test_harness_host_runs_a_turn_under_virtual_time(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The inline pool keeps SQLite and tantivy on the task, so the clock never jumps."""
    model = ScriptedModel(["done"])
    config = harness_config(tmp_path / "ws", tmp_path / "state")
    (tmp_path / "ws").mkdir()
    async with open_harness_host(config, model=model) as host:
        await SessionBuilder(host).owner_direct("dm:o")
        before = trio.current_time()
        result = await host.run_turn("dm:o", UserMessage("hi"), sender_is_owner=True)
        assert trio.current_time() == before
    assert result.reply.text == "done"
