"""Hypothesis against a real ``claw serve`` process: hostile memory requests.

Every reply is a well-formed frame, no client mistake is answered ``INTERNAL`` (and the
server logs no method failure), the server answers ``memory.status`` afterwards, and
its resident memory stays bounded under floods of agent ids and large-file gets.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import claw
from claw.gateway import ERROR_CODES
from claw.gateway._client import open_websocket_stream

from ..._processes import reap

pytestmark = pytest.mark.slow

TOKEN = "serve-fuzz-token-0123"
KNOWN_AGENTS = [f"agent-{i}" for i in range(24)] + ["a/b", "a_b", "a b", ".."]


@attrs.frozen
class Server:
    url: str
    pid: int
    stderr: Path


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _sparse(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(size)


async def _create_sessions(workspace: Path) -> None:
    config = claw.HostConfig(workspace_dir=workspace, plugins=claw.PluginsConfig(discover=False))
    async with claw.open_host(config) as host:
        for i, agent in enumerate(KNOWN_AGENTS):
            await host.sessions.create(f"dm:{i}", agent_id=agent, chat_type="direct")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("serve")
    workspace = root / "ws"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "MEMORY.md").write_text(
        "# Memory\n- The staging database password rotates monthly.\n- Lunch is at noon.\n"
    )
    (workspace / "memory" / "notes.md").write_text("green tea at four\n" * 50)
    (workspace / "memory" / "long.md").write_text("a long memory line of text\n" * 70_000)
    _sparse(workspace / "huge.txt", 300 * 1024 * 1024)
    _sparse(workspace / "memory" / "huge.md", 300 * 1024 * 1024)
    trio.run(_create_sessions, workspace)
    stderr = root / "stderr.log"
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "claw", "serve", "--workspace", str(workspace), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, "CLAW_GATEWAY_TOKEN": TOKEN},
        )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().rstrip("\n")
        match = re.fullmatch(r"claw gateway listening on (ws://\S+)", first)
        assert match, (first, stderr.read_text())
        yield Server(url=match.group(1), pid=proc.pid, stderr=stderr)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, stderr.read_text()
    finally:
        reap(proc)
    logged = stderr.read_text()
    assert "Traceback" not in logged, logged
    assert "failed (connection" not in logged, logged


async def _exchange(url: str, requests: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Connect, send every request at once, return the answers in id order."""
    async with open_websocket_stream(url, max_message_bytes=1 << 24) as ws:
        await ws.send_message(
            json.dumps(
                {
                    "type": "req",
                    "id": "c",
                    "method": "connect",
                    "params": {"auth": {"token": TOKEN}, "scopes": ["operator.read"]},
                }
            )
        )
        hello = json.loads(await ws.get_message())
        assert hello["ok"] is True, hello
        for i, (method, params) in enumerate(requests):
            frame = {"type": "req", "id": i, "method": method, "params": params}
            await ws.send_message(json.dumps(frame))
        answers: dict[int, dict[str, Any]] = {}
        while len(answers) < len(requests):
            answer = json.loads(await ws.get_message())
            assert answer["type"] == "res"
            assert answer["id"] in range(len(requests)) and answer["id"] not in answers
            answers[answer["id"]] = answer
        return [answers[i] for i in range(len(requests))]


def _assert_not_internal(answer: dict[str, Any]) -> None:
    if answer["ok"] is True:
        assert isinstance(answer["payload"], dict)
        return
    assert answer["ok"] is False
    assert answer["error"]["code"] in ERROR_CODES
    assert answer["error"]["code"] != "INTERNAL", answer
    assert isinstance(answer["error"]["message"], str)


hostile_text = st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "a\x00b",
        "..",
        "a/b",
        "a_b",
        "a b",
        "main",
        "agent-3",
        "nobody",
        "²",
        "٣",
        "999999999",
        "9" * 30,
        "-1",
        "3",
        "L5-L2",
        "L0-",
        "L1-L3",
        "L2-L2\n",
        "garbage",
        "x" * 5000,
        "MEMORY.md",
        "./MEMORY.md",
        "memory/notes.md",
        "memory/long.md",
        "memory/huge.md",
        "huge.txt",
        "sessions/main/x",
        "sessions/x",
        "../../etc/passwd",
        "/etc/passwd",
        "memory-core",
    ]
) | st.text(max_size=12)
hostile_number = st.sampled_from(
    [0, -1, 1, 2, 50, 51, 2**31, 2**53, 2**63, 2**70, -5, 5, 0.5, 1.0001, 1e308, True, False]
) | st.integers(min_value=-(2**66), max_value=2**66)
scalars = st.none() | hostile_text | hostile_number
values = (
    scalars | st.lists(scalars, max_size=3) | st.dictionaries(hostile_text, scalars, max_size=2)
)

search_params = st.fixed_dictionaries(
    {},
    optional={
        "version": st.sampled_from([1, 2, 2, 2, 3, "2"]) | values,
        "query": st.sampled_from(["lunch", "green tea", "password", "a long memory"]) | values,
        "maxResults": values,
        "minScore": values,
        "cursor": values,
        "sources": st.sampled_from([["memory"], ["sessions"], ["memory", "sessions"], ["x"]])
        | values,
        "agentId": values,
        "surprise": values,
    },
)
references = (
    st.fixed_dictionaries(
        {},
        optional={
            "providerId": st.sampled_from(["memory-core", "memory-core", "other"]) | values,
            "id": values,
            "revision": values,
            "fragment": values,
            "extra": values,
        },
    )
    | values
)
get_params = st.fixed_dictionaries(
    {},
    optional={"reference": references, "from": values, "lines": values, "agentId": values},
)
status_params = st.fixed_dictionaries({}, optional={"agentId": values, "x": values})
requests = st.one_of(
    search_params.map(lambda p: ("memory.search", p)),
    get_params.map(lambda p: ("memory.get", p)),
    status_params.map(lambda p: ("memory.status", p)),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batch=st.lists(requests, min_size=1, max_size=5))
def test_hostile_memory_requests_never_get_internal_and_the_server_keeps_serving(
    server: Server, batch: list[tuple[str, Any]]
) -> None:
    async def run() -> None:
        with trio.fail_after(120):  # a hang guard, not a timing assertion
            for answer in await _exchange(server.url, batch):
                _assert_not_internal(answer)
            (status,) = await _exchange(server.url, [("memory.status", {})])
            assert status["ok"] is True and status["payload"]["status"] in ("ready", "degraded")

    trio.run(run)


def test_rss_stays_bounded_under_floods_of_agent_ids_and_large_file_gets(
    server: Server,
) -> None:
    async def flood() -> tuple[float, float, float]:
        await _exchange(server.url, [("memory.status", {})])
        before = _rss_mb(server.pid)
        unknown = [
            ("memory.search", {"version": 2, "query": "lunch", "agentId": f"flood-{i}"})
            for i in range(300)
        ]
        for start in range(0, len(unknown), 25):
            for answer in await _exchange(server.url, unknown[start : start + 25]):
                assert answer["ok"] is False
                assert answer["error"]["code"] == "INVALID_REQUEST"
        known = [
            ("memory.search", {"version": 2, "query": "lunch", "agentId": agent})
            for agent in KNOWN_AGENTS
        ]
        passes = []
        for _ in range(3):  # the open indexes are bounded: later passes do not grow
            for start in range(0, len(known), 8):
                for answer in await _exchange(server.url, known[start : start + 8]):
                    assert answer["ok"] is True, answer
            passes.append(_rss_mb(server.pid))
        gets = [
            ("memory.get", {"reference": {"providerId": "memory-core", "id": ref_id}})
            for ref_id in ["huge.txt", "memory/huge.md", "memory/long.md"] * 11
        ]
        for start in range(0, len(gets), 8):
            for answer in await _exchange(server.url, gets[start : start + 8]):
                assert answer["ok"] is True, answer
        return before, passes, _rss_mb(server.pid)

    before, passes, after_gets = trio.run(flood)
    print(
        f"claw serve RSS: {before:.0f} MB before; after 300 unknown agent ids and each pass "
        f"over {len(KNOWN_AGENTS)} known agents: "
        + ", ".join(f"{p:.0f}" for p in passes)
        + f" MB; {after_gets:.0f} MB after 33 large-file gets"
    )
    assert passes[-1] - passes[0] < 150
    assert after_gets - before < 600
    fds = len(list(Path(f"/proc/{server.pid}/fd").iterdir()))
    print(f"claw serve open fds after the floods: {fds}")
    assert fds < 400
