"""claw.blocking: claw's memory and host APIs from plain synchronous code and threads."""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import trio

import claw
import claw.blocking
import claw_memory
from claw.models import UserMessage
from claw.sessions import SessionNotFoundError
from claw_testing import ScriptedModel, ScriptedReply, harness_config


def bridge_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "claw-blocking"]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "MEMORY.md").write_text("- The deploy window is Friday 14:00 UTC.\n")
    return root


def test_memory_search_add_forget_from_plain_code(workspace: Path) -> None:
    with claw.blocking.open_memory(workspace) as mem:
        added = mem.add("Bob is the release manager for apollo.")
        hits = mem.search("release manager apollo").hits
        assert [h.citation.path for h in hits if h.citation] == [added.reference.id]
        assert "Bob" in (mem.get(added.reference).text or "")
        assert mem.status().status == "ready"
        gone = mem.forget(added.reference)
        assert mem.search("release manager apollo").hits == ()
        assert gone.removal_id is not None
        assert [r.id for r in mem.removals()] == [gone.removal_id]
        mem.restore(gone.removal_id)
        assert mem.search("release manager apollo").hits != ()
    assert mem.local.host.closed
    assert bridge_threads() == []


def test_errors_keep_their_claw_types_and_a_failed_open_leaves_no_thread(
    workspace: Path, tmp_path: Path
) -> None:
    with pytest.raises(claw.ConfigError, match="is not a directory"):
        claw.blocking.open_memory(tmp_path / "missing")
    assert bridge_threads() == []
    mem = claw.blocking.open_memory(workspace, scopes=("operator.read",))
    try:
        with pytest.raises(claw.CapabilityDeniedError):
            mem.add("a read-only handle cannot write")
    finally:
        mem.close()
    mem.close()  # idempotent
    with pytest.raises(claw.HostClosedError):
        mem.search("deploy window")


def test_web_handler_threads_share_one_facade(workspace: Path) -> None:
    with claw.blocking.open_memory(workspace) as mem:
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(lambda _: mem.search("deploy window"), range(32)))
    assert all(r.hits and r.hits[0].citation for r in results)


def test_closing_fails_calls_in_flight_from_other_threads(workspace: Path) -> None:
    mem = claw.blocking.open_memory(workspace)
    started, log = threading.Event(), []

    async def parked() -> None:
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            log.append("unwound")

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        waiting = pool.submit(mem.call, parked)
        started.wait()
        mem.close()
        with pytest.raises(claw.HostClosedError, match="closed while the call ran"):
            waiting.result()
    assert log == ["unwound"]


def test_a_script_that_forgets_to_close_still_closes_its_host(workspace: Path) -> None:
    """The bridge closes at interpreter exit: the host's owner lock file is removed."""
    script = textwrap.dedent(
        f"""
        import claw.blocking
        mem = claw.blocking.open_memory({str(workspace)!r})
        print(len(mem.search("deploy window").hits))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
    assert list((workspace / ".claw" / "owners").glob("*.lock")) == []


def test_sessions_and_turns_from_plain_code(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "MEMORY.md").write_text("- Alice prefers green tea.\n")
    config = harness_config(tmp_path / "ws", tmp_path / "state")
    model = ScriptedModel(
        [ScriptedReply(tool_calls=[("memory_search", {"query": "tea"})]), "Green tea."]
    )
    with claw.blocking.open_host(config, plugins=[claw_memory.plugin]) as host:
        host.register_model_provider("scripted", lambda name: model)
        host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        reply = host.run_turn("dm:alice", UserMessage("tea?", sender="alice"), sender_is_owner=True)
        assert reply.reply.text == "Green tea."
        with host.open_memory(scopes=("operator.read",)) as mem:
            assert mem.search("green tea").hits
        assert not host.trio_host.closed
        host.sessions.delete("dm:alice")
        with pytest.raises(SessionNotFoundError):
            host.sessions.reset("dm:alice")
    assert host.trio_host.closed
    model.assert_script_consumed()
