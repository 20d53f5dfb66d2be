"""``claw serve --workers 2``: two processes on one port over one state, supervised."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import attrs
import pytest
import trio
import trio_websocket

from claw._demo import copy_sample_workspace
from claw.gateway import open_gateway_client
from claw.gateway._client import open_websocket_stream

from .._processes import gone, reap

pytestmark = pytest.mark.slow

TOKEN = "workers-token-1234"
# A bound on waits so that a hang fails the test; nothing asserts a duration.
HANG = 120.0
# Connections to open before concluding the kernel never reaches a second worker: the
# chance that SO_REUSEPORT's hash puts 200 connections on one of two sockets is 2^-199.
CONNECTIONS = 200
CONNECT = {"type": "req", "id": "c", "method": "connect", "params": {"auth": {"token": TOKEN}}}
CLAW = (sys.executable, "-m", "claw")


@attrs.define
class Served:
    """A running ``claw serve --workers 2``: its process, URL and stderr lines."""

    proc: subprocess.Popen[str]
    url: str
    lines: list[str]
    changed: threading.Condition

    def wait_line(self, pattern: str, *, after: int = 0) -> re.Match[str]:
        with self.changed:
            found: list[re.Match[str]] = []

            def seen() -> bool:
                found[:] = [m for m in (re.search(pattern, s) for s in self.lines[after:]) if m]
                return bool(found)

            assert self.changed.wait_for(seen, timeout=HANG), (pattern, self.lines)
            return found[0]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return copy_sample_workspace(tmp_path / "ws")


@contextmanager
def serving(
    workspace: Path, *extra: str, cwd: Path | None = None, claw: Sequence[str] = CLAW
) -> Iterator[Served]:
    proc = subprocess.Popen(
        [
            *claw,
            *("serve", "--workers", "2"),
            *("--workspace", str(workspace), "--port", "0", *extra),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, "CLAW_GATEWAY_TOKEN": TOKEN},
    )
    lines: list[str] = []
    changed = threading.Condition()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            with changed:
                lines.append(line.rstrip("\n"))
                changed.notify_all()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().rstrip("\n")
        match = re.fullmatch(r"claw gateway listening on (ws://127\.0\.0\.1:(\d+))", first)
        assert match, (first, lines)
        yield Served(proc=proc, url=match.group(1), lines=lines, changed=changed)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=HANG)  # End of file once the process is gone.
        reap(proc)


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text(encoding="ascii")
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry.name))
    return found


async def _answering_pids(url: str, *, until: set[int] | None = None) -> set[int]:
    """Open connections (one search each) until ``until`` answered, or CONNECTIONS."""
    seen: set[int] = set()
    for _ in range(CONNECTIONS):
        async with open_gateway_client(url, TOKEN) as client:
            payload = await client.request(
                "memory.search", {"version": 2, "query": "green tea", "minScore": 0}
            )
            assert payload["providerId"] == "memory-core"
            seen.add(int(client.hello["worker"]["pid"]))
        if until is not None and until <= seen:
            break
        if until is None and len(seen) == 2:
            break
    return seen


def test_two_workers_answer_on_one_port_and_stop_cleanly_on_sigterm(workspace: Path) -> None:
    with serving(workspace) as served:
        listening = {
            int(served.wait_line(rf"worker {i} \(pid (\d+)\) listening")[1]) for i in (0, 1)
        }
        assert listening == _children(served.proc.pid)
        pids = trio.run(_answering_pids, served.url)
        assert pids == listening and len(pids) == 2
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(timeout=HANG) == 0
    assert all(gone(pid) for pid in pids)
    assert "claw: stopped by signal 15" in served.lines


def test_a_sigkilled_worker_is_restarted_and_the_port_stays_served(workspace: Path) -> None:
    with serving(workspace) as served:
        pids = trio.run(_answering_pids, served.url)
        assert len(pids) == 2
        victim, survivor = sorted(pids)
        mark = len(served.lines)
        os.kill(victim, signal.SIGKILL)
        served.wait_line(r"worker \d died \(killed by SIGKILL\); restarting", after=mark)
        # Served throughout: the survivor answers while the new worker starts.
        assert trio.run(functools.partial(_answering_pids, served.url, until={survivor})) >= {
            survivor
        }
        restarted = int(served.wait_line(r"worker \d \(pid (\d+)\) listening", after=mark)[1])
        assert restarted not in pids
        assert _children(served.proc.pid) == {survivor, restarted}
        assert trio.run(_answering_pids, served.url) == {survivor, restarted}
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(timeout=HANG) == 0
    assert gone(survivor) and gone(restarted) and gone(victim)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_closes_every_workers_connections_with_1001(
    workspace: Path, signum: signal.Signals
) -> None:
    with serving(workspace) as served:

        async def hold_connections() -> tuple[int, list[int]]:
            codes: list[int] = []
            opened: list[int] = []
            async with trio.open_nursery() as nursery:

                async def hold(task_status: trio.TaskStatus[None]) -> None:
                    async with open_websocket_stream(served.url) as ws:
                        await ws.send_message(json.dumps(CONNECT))
                        hello = json.loads(await ws.get_message())["payload"]
                        opened.append(int(hello["worker"]["pid"]))
                        task_status.started()
                        with pytest.raises(trio_websocket.ConnectionClosed) as closed:
                            with trio.fail_after(HANG):
                                await ws.get_message()
                        assert closed.value.reason is not None
                        codes.append(closed.value.reason.code)

                # Hold connections (each past its hello) until both workers hold some.
                while len(set(opened)) < 2 or len(opened) < 8:
                    assert len(opened) < CONNECTIONS, "every connection reached one worker"
                    await nursery.start(hold)
                served.proc.send_signal(signum)
            return len(opened), codes

        held, codes = trio.run(hold_connections)
        assert codes == [1001] * held
        assert served.proc.wait(timeout=HANG) == 0


def test_workers_on_a_taken_port_fail_with_the_address(workspace: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                *(sys.executable, "-m", "claw", "serve", "--workers", "2"),
                *("--workspace", str(workspace), "--token", TOKEN, "--port", str(port)),
            ],
            capture_output=True,
            text=True,
            timeout=HANG,
            check=False,
        )
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}: the address is already in use" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("shadow", ["claw.py", "claw/__init__.py"])
def test_workers_import_the_installed_claw_whatever_the_working_directory(
    tmp_path: Path, workspace: Path, shadow: str
) -> None:
    """A ``claw.py`` or a ``claw/`` folder in the current directory is not what the workers
    import (``python -m`` puts that directory first on ``sys.path``)."""
    here = tmp_path / "project"
    (here / shadow).parent.mkdir(parents=True, exist_ok=True)
    (here / shadow).write_text("raise SystemExit('imported the shadow claw')\n", encoding="utf-8")
    # The installed console script: its own sys.path does not start with the directory.
    script = Path(sys.executable).with_name("claw")
    with serving(workspace, cwd=here, claw=(str(script),)) as served:
        pids = trio.run(_answering_pids, served.url)
        assert len(pids) == 2
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(timeout=HANG) == 0
    assert not any("shadow" in line or "Traceback" in line for line in served.lines)
