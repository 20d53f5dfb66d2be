"""``claw sessions list|show|reset|delete`` and a demo run twice on one workspace."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import claw
from claw._cli import main
from claw._demo import copy_sample_workspace
from claw.memory import MemorySearchRequest
from claw.sessions import SessionExistsError

from .test_cli import claw as run_claw

pytestmark = pytest.mark.slow


def cli(*args: str) -> tuple[int, str, str]:
    """``claw ARGS`` in this process (each call opens and closes its own host)."""
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def cli_json(*args: str) -> Any:
    code, out, err = cli(*args)
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return copy_sample_workspace(tmp_path / "ws")


def _create(workspace: Path, key: str, chat_type: claw.sessions.ChatType) -> None:
    async def create() -> None:
        async with claw.open_host(claw.load_workspace_config(workspace)) as host:
            await host.sessions.create(key, agent_id="main", chat_type=chat_type)

    trio.run(create)


def test_list_show_reset_delete_in_text_and_json(workspace: Path) -> None:
    ws = str(workspace)
    assert cli("sessions", "list", "--workspace", ws)[1] == "no sessions\n"
    _create(workspace, "dm:alice", "direct")
    _create(workspace, "grp:team", "group")
    listed = cli_json("--json", "sessions", "list", "--workspace", ws)
    assert [s["key"] for s in listed["sessions"]] == ["dm:alice", "grp:team"]
    first = listed["sessions"][0]
    assert (first["agentId"], first["chatType"], first["lifecycleRevision"]) == (
        "main",
        "direct",
        1,
    )
    code, text, _ = cli("sessions", "list", "--workspace", ws)
    assert code == 0 and text.splitlines()[0].split() == [
        "KEY", "AGENT", "CHAT", "REV", "SESSION", "ID", "UPDATED",
    ]  # fmt: skip
    shown = cli_json("sessions", "show", "dm:alice", "--workspace", ws, "--json")
    assert shown["session"]["sessionId"] == first["sessionId"]
    assert shown["transcript"] == {"entries": 0, "bytes": 0, "compactions": 0, "openTurns": 0}

    kept = cli_json("sessions", "reset", "dm:alice", "--workspace", ws, "--json")
    assert kept["session"]["lifecycleRevision"] == 2
    assert kept["session"]["sessionId"] == first["sessionId"]
    code, text, _ = cli("sessions", "reset", "dm:alice", "--new-session-id", "--workspace", ws)
    assert code == 0 and "revision 2 -> 3, a new session id" in text
    fresh = cli_json("sessions", "show", "dm:alice", "--workspace", ws, "--json")
    assert fresh["session"]["sessionId"] != first["sessionId"]

    deleted = cli_json("sessions", "delete", "grp:team", "--workspace", ws, "--json")
    assert deleted["deleted"]["key"] == "grp:team"
    keys = [s["key"] for s in cli_json("sessions", "list", "--workspace", ws, "--json")["sessions"]]
    assert keys == ["dm:alice"]


def test_an_unknown_session_is_not_found_and_says_how_to_see_them(workspace: Path) -> None:
    for command in ("show", "reset", "delete"):
        code, out, err = cli("sessions", command, "dm:bob", "--workspace", str(workspace), "--json")
        assert code == 2
        assert json.loads(out)["error"]["code"] == "NOT_FOUND"
        assert "no session 'dm:bob' (claw sessions list shows the sessions)" in err


async def test_a_reset_from_the_shell_revokes_what_another_process_holds(workspace: Path) -> None:
    """The same rules as the API: a reset committed by `claw sessions reset` (another
    process) refuses the next release under the audience this host minted before it."""
    async with claw.open_host(claw.load_workspace_config(workspace)) as host:
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        async with host.open_run("dm:alice", sender_is_owner=True) as run:
            async with host.memory.open(run.caller) as memory:
                assert (await memory.search(MemorySearchRequest(query="tea"))).hits
                done = await trio.run_process(
                    [sys.executable, "-m", "claw", "sessions", "reset", "dm:alice",
                     "--workspace", str(workspace)],
                    capture_stdout=True, capture_stderr=True, check=False,
                )  # fmt: skip
                assert done.returncode == 0, done.stderr
                with pytest.raises(claw.StaleCapabilityError):
                    await memory.search(MemorySearchRequest(query="tea"))
        with pytest.raises(SessionExistsError):  # the row is there, at its new revision
            await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        row = await host.sessions.get("dm:alice")
        assert row is not None and row.lifecycle_revision == 2


def test_the_demo_runs_again_on_the_same_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "demo"
    replies = []
    for _ in range(3):
        result = run_claw("--json", "demo", "--workspace", str(workspace))
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        replies.append([turn["reply"] for turn in report["turns"]])
        assert [turn["commit"] for turn in report["turns"]] == ["legacy", "legacy"]
    assert [r[0].startswith("From memory: - Alice prefers green tea") for r in replies] == [
        True, True, True,
    ]  # fmt: skip
    assert all(r[1].startswith("I found nothing in memory") for r in replies)
    assert report["copiedSample"] is False
    assert [t["sessionWas"] for t in report["turns"]] == ["reset", "reset"]
