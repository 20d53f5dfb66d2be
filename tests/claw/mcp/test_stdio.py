"""``claw mcp --workspace DIR`` over stdio, driven by the SDK's own client as a subprocess."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from ..._processes import reap
from .conftest import claw_mcp_command, structured, subprocess_env, text_of


def _server(workspace: Path, *extra: str) -> StdioServerParameters:
    command = claw_mcp_command(workspace, *extra)
    return StdioServerParameters(command=command[0], args=command[1:], env=subprocess_env())


@pytest.mark.slow
async def test_the_sdk_client_lists_and_calls_the_read_tools_over_stdio(workspace: Path) -> None:
    async with Client(_server(workspace)) as client:
        assert client.server_info is not None
        assert client.server_info.name == "claw-memory"
        listed = await client.list_tools()
        assert [t.name for t in listed.tools] == ["memory_search", "memory_get", "memory_status"]
        assert all(t.annotations and t.annotations.read_only_hint for t in listed.tools)
        search = structured(
            await client.call_tool("memory_search", {"query": "staging database password"})
        )
        hit = search["hits"][0]
        assert hit["citation"]["path"] == "MEMORY.md"
        got = structured(
            await client.call_tool(
                "memory_get", {"reference": hit["reference"], "from": 2, "lines": 1}
            )
        )
        assert got["text"] == "- The staging database password rotates monthly."
        bad = await client.call_tool("memory_search", {"query": "x", "maxResults": -1})
        assert bad.is_error
        assert "maxResults" in text_of(bad)
        assert structured(await client.call_tool("memory_status", {}))["status"] == "ready"


def test_an_unknown_agent_flag_is_refused_before_serving(workspace: Path) -> None:
    proc = subprocess.run(
        claw_mcp_command(workspace, "--agent", "nobody"),
        input="",
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert "--agent 'nobody' is not an agent of this host" in line


def test_a_stdio_server_exits_cleanly_when_its_client_closes_stdin(workspace: Path) -> None:
    proc = subprocess.run(
        claw_mcp_command(workspace),
        input="",
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""


def test_garbage_on_stdin_does_not_stop_the_server_from_answering(workspace: Path) -> None:
    garbage = [
        "this is not json",
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": 5}',
        "[" * 10_000,
        '{"jsonrpc": "2.0", "id": "\u0000", "method": 7}',
    ]
    handshake = [
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "memory_status", "arguments": {"agentId": "x"}},
        },
    ]
    proc = subprocess.Popen(
        claw_mcp_command(workspace),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        for line in [*garbage, *(json.dumps(m) for m in handshake)]:
            proc.stdin.write(line + "\n")
        proc.stdin.flush()
        answers: dict[object, dict[str, object]] = {}
        while 3 not in answers:
            line = proc.stdout.readline()
            assert line, "the server closed stdout without answering"
            message = json.loads(line)
            answers[message.get("id")] = message
        result = answers[3]["result"]
        assert isinstance(result, dict) and result["isError"] is True
        assert "agentId" in result["content"][0]["text"]
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        assert proc.stderr is not None
        assert "Traceback" not in proc.stderr.read()
    finally:
        reap(proc)
