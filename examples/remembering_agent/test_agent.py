"""docs/models.md, run: its claw.toml and agent.py against a real HTTP server on loopback.

The server is ``claw_testing.StubChatServer`` (the standard library's HTTP server in a
thread); the agent runs as its own process, as a reader would run it.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from claw_testing import StubChatServer, StubReply, remembering_responder

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
GUIDE = ROOT / "docs" / "models.md"
BASE_URL = re.compile(r'^base_url = "[^"]*"', re.MULTILINE)
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")

pytestmark = pytest.mark.slow


def guide_block(language: str, number: int = 0) -> str:
    blocks = re.findall(
        rf"^```{language}\n(.*?)^```", GUIDE.read_text(encoding="utf-8"), re.M | re.S
    )
    return str(blocks[number])


def workspace_for(tmp_path: Path, base_url: str, *, extra: str = "") -> Path:
    """An empty directory with the guide's claw.toml, pointed at ``base_url``."""
    workspace = tmp_path / "my-agent"
    workspace.mkdir()
    toml = BASE_URL.sub(f'base_url = "{base_url}"', guide_block("toml")) + extra
    (workspace / "claw.toml").write_text(toml, encoding="utf-8")
    return workspace


def run_agent(
    workspace: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HERE / "agent.py"), "--workspace", str(workspace)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_the_guide_runs_end_to_end_and_prints_what_it_says(tmp_path: Path) -> None:
    with StubChatServer(remembering_responder) as server:
        workspace = workspace_for(tmp_path, server.base_url)
        done = run_agent(workspace)
        assert done.returncode == 0, done.stderr
        # The page's transcript of the run is the run's, but for the date.
        printed = guide_block("text", 0)
        assert DATE.sub("<date>", done.stdout) == DATE.sub("<date>", printed)
        notes = list((workspace / "memory").glob("*.md"))
        assert len(notes) == 1 and "genmaicha" in notes[0].read_text(encoding="utf-8")
        assert f"(Source: memory/{notes[0].name}#L1-L1)" in done.stdout
        # Every request went over HTTP, the flush's with its read/write tools.
        tools = [{t["function"]["name"] for t in r.body.get("tools", [])} for r in server.requests]
        assert {"read", "write"} in tools and {"memory_search", "memory_get", "memory_add"} in tools

        again = run_agent(workspace)  # the same workspace: it carries on
        assert again.returncode == 0, again.stderr
        answer = again.stdout.splitlines()[-1]
        assert "genmaicha" in answer and "(Source: " in answer


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def assert_reported(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    # The host's log may warn before it (a failed model, a turn closed as failed); the
    # script's own report is the last line.
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), done.stderr
    for needle in needles:
        assert needle in last


def test_a_server_that_is_down_is_reported_naming_the_provider_and_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    done = run_agent(workspace_for(tmp_path, url))
    assert_reported(done, "'local/qwen3:8b'", f"{url}/chat/completions", "connection failed")


def test_a_server_answering_garbage_is_reported_naming_the_provider_and_url(
    tmp_path: Path,
) -> None:
    def web_page(body: Mapping[str, Any]) -> StubReply:
        return StubReply(200, b"<html>It works!</html>", "text/html")

    with StubChatServer(web_page) as server:
        done = run_agent(workspace_for(tmp_path, server.base_url))
    assert_reported(
        done, "'local/qwen3:8b'", f"{server.base_url}/chat/completions", "unusable response"
    )


def test_an_unset_api_key_env_fails_at_open_and_a_set_one_is_sent(tmp_path: Path) -> None:
    extra = 'api_key_env = "CLAW_EXAMPLE_KEY"\n'
    with StubChatServer(remembering_responder) as server:
        workspace = workspace_for(tmp_path, server.base_url, extra=extra)
        env = {k: v for k, v in os.environ.items() if k != "CLAW_EXAMPLE_KEY"}
        done = subprocess.run(
            [sys.executable, str(HERE / "agent.py"), "--workspace", str(workspace)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env=env,
        )
        assert_reported(
            done, "models.providers.local.api_key_env", "CLAW_EXAMPLE_KEY is not set"
        )
        assert server.requests == []  # nothing was sent without its key
        done = run_agent(workspace, env={"CLAW_EXAMPLE_KEY": "sk-test-123"})
        assert done.returncode == 0, done.stderr
        assert {r.headers.get("Authorization") for r in server.requests} == {"Bearer sk-test-123"}
