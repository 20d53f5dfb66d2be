"""The MCP Inspector's CLI mode against ``claw mcp`` (stdio) and the HTTP server.

The Inspector is a client the project did not write. It is installed once, pinned,
into a cache directory (``CLAW_MCP_INSPECTOR_DIR``, default ``~/.cache/claw``) and run
with ``npx`` from there, so a clean clone needs only node, npm and the npm registry.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import claw
from claw.gateway._auth import TokenTable
from claw.mcp import MemoryMcpServer

from .conftest import READ_TOKEN, claw_mcp_command, subprocess_env

INSPECTOR = "@modelcontextprotocol/inspector"
INSPECTOR_VERSION = "2.12.0"

pytestmark = pytest.mark.slow


def _inspector_dir() -> Path:
    base = os.environ.get("CLAW_MCP_INSPECTOR_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "claw"
    return root / f"mcp-inspector-{INSPECTOR_VERSION}"


@pytest.fixture(scope="session")
def inspector() -> Path:
    """The directory the pinned Inspector is installed in (installed on first use)."""
    npx, npm = shutil.which("npx"), shutil.which("npm")
    if npx is None or npm is None:
        pytest.skip("npx/npm are not installed, so the MCP Inspector cannot run here")
    target = _inspector_dir()
    if not (target / "node_modules" / ".bin" / "mcp-inspector").exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="inspector-", dir=target.parent))
        subprocess.run(
            [
                npm,
                "install",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(staging),
                f"{INSPECTOR}@{INSPECTOR_VERSION}",
            ],
            check=True,
            capture_output=True,
            timeout=600,
        )
        try:
            staging.rename(target)
        except OSError:  # another run installed it meanwhile
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _npx(inspector: Path, *args: str) -> list[str]:
    npx = shutil.which("npx")
    assert npx is not None
    # The default connect timeout (15 s) is shorter than claw's start-up on a loaded CI
    # machine (imports, opening the host); the subprocess timeout still bounds a hang.
    return [npx, "--no-install", INSPECTOR, "--cli", "--connect-timeout", "120000", *args]


def _run(inspector: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _npx(inspector, *args),
        cwd=inspector,
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=300,
        check=False,
    )


@asynccontextmanager
async def _http_server(host: claw.Host) -> AsyncIterator[str]:
    """The host's MCP server on streamable HTTP at 127.0.0.1 (a free port): its URL."""
    server = MemoryMcpServer(host)
    tokens = TokenTable.from_config(host.config.gateway)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(
            functools.partial(server.serve_http, tokens=tokens), "127.0.0.1", 0
        )
        try:
            yield url
        finally:
            nursery.cancel_scope.cancel()


def _stdio(workspace: Path) -> list[str]:
    return claw_mcp_command(workspace)


def test_the_inspector_lists_the_read_tools_over_stdio(inspector: Path, workspace: Path) -> None:
    result = _run(inspector, *_stdio(workspace), "--method", "tools/list")
    assert result.returncode == 0, result.stderr
    tools = json.loads(result.stdout)["tools"]
    assert [t["name"] for t in tools] == ["memory_search", "memory_get", "memory_status"]
    for tool in tools:
        assert tool["annotations"]["readOnlyHint"] is True
        assert "outputSchema" in tool


def test_the_inspector_calls_memory_search_over_stdio(inspector: Path, workspace: Path) -> None:
    result = _run(
        inspector,
        *_stdio(workspace),
        "--method", "tools/call",
        "--tool-name", "memory_search",
        "--tool-arg", "query=staging database password",
        "--tool-arg", "maxResults=3",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    answer: dict[str, Any] = json.loads(result.stdout)
    assert answer.get("isError") is not True
    hits = answer["structuredContent"]["hits"]
    assert hits and hits[0]["citation"]["path"] == "MEMORY.md"
    assert json.loads(answer["content"][0]["text"]) == answer["structuredContent"]


def test_the_inspector_reports_a_bad_argument_by_name(inspector: Path, workspace: Path) -> None:
    result = _run(
        inspector,
        *_stdio(workspace),
        "--method", "tools/call",
        "--tool-name", "memory_search",
        "--tool-arg", "query=lunch",
        "--tool-arg", "maxResults=-4",
    )  # fmt: skip
    assert result.returncode != 0
    answer = json.loads(result.stdout)
    assert answer["isError"] is True
    assert "maxResults" in answer["content"][0]["text"]


def test_the_inspector_adds_a_memory_when_writes_are_allowed(
    inspector: Path, workspace: Path
) -> None:
    result = _run(
        inspector,
        *claw_mcp_command(workspace, "--allow-writes"),
        "--method", "tools/call",
        "--tool-name", "memory_add",
        "--tool-arg", "text=The inspector was here.",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    added = json.loads(result.stdout)["structuredContent"]
    written = (workspace / added["citation"]["path"]).read_text(encoding="utf-8")
    assert "The inspector was here." in written


async def test_the_inspector_calls_the_http_server_with_a_bearer_token(
    inspector: Path, core_host: claw.Host
) -> None:
    async with _http_server(core_host) as url:
        args = [
            url,
            "--transport", "http",
            "--header", f"Authorization: Bearer {READ_TOKEN}",
            "--method", "tools/call",
            "--tool-name", "memory_status",
        ]  # fmt: skip
        done = await trio.run_process(
            _npx(inspector, *args),
            cwd=inspector,
            capture_stdout=True,
            capture_stderr=True,
            env=subprocess_env(),
            check=False,
        )
        refused = await trio.run_process(
            _npx(inspector, url, "--transport", "http", "--method", "tools/list"),
            cwd=inspector,
            capture_stdout=True,
            capture_stderr=True,
            env=subprocess_env(),
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    status = json.loads(done.stdout)["structuredContent"]
    assert (status["providerId"], status["status"]) == ("memory-core", "ready")
    # Without the token the server answers 401, and the Inspector asks for authorization.
    assert refused.returncode != 0
    assert b"auth_required" in refused.stdout + refused.stderr


def _documented_commands() -> list[str]:
    page = (Path(__file__).parents[3] / "docs" / "mcp.md").read_text(encoding="utf-8")
    joined = page.replace("\\\n", " ")
    return [line[2:] for line in joined.splitlines() if line.startswith(f"$ npx {INSPECTOR}")]


def test_the_documented_inspector_commands_name_the_version_the_tests_run() -> None:
    commands = _documented_commands()
    assert len(commands) == 3
    for command in commands:
        assert shlex.split(command)[1] == f"{INSPECTOR}@{INSPECTOR_VERSION}", command


async def test_the_documented_http_command_runs_as_written(
    inspector: Path, core_host: claw.Host
) -> None:
    (command,) = [c for c in _documented_commands() if "--transport http" in c]
    async with _http_server(core_host) as url:
        argv = [
            url if arg == "http://127.0.0.1:8765/mcp" else arg.replace("$TOKEN", READ_TOKEN)
            for arg in shlex.split(command)
        ]
        # npx finds the pinned version installed in `inspector` and fetches nothing; the
        # connect timeout only allows for a loaded machine.
        argv[3:3] = ["--connect-timeout", "120000"]  # after --cli
        done = await trio.run_process(
            argv,
            cwd=inspector,
            capture_stdout=True,
            capture_stderr=True,
            env=subprocess_env(),
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    listed = [tool["name"] for tool in json.loads(done.stdout)["tools"]]
    assert listed == ["memory_search", "memory_get", "memory_status"]
