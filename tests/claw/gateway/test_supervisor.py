"""The supervisor of ``claw serve --workers N``, with real worker processes.

These run :func:`supervise_gateway` in the test process (its signals are SIGUSR1, which
the test sends itself) over one worker, so that the restart bound can be set low;
the tests of two workers over one state are in ``tests/claw/test_serve_workers.py``.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from claw._config import HostConfig
from claw._demo import copy_sample_workspace
from claw._local import load_workspace_config
from claw.gateway import GatewayAddress, open_gateway_client
from claw.gateway._listen import reserve_port
from claw.gateway._supervisor import (
    CRASH_LIMIT,
    DEGRADED_DELAY,
    WorkerCrashLoopError,
    WorkerStartError,
    supervise_gateway,
)

from ..._processes import gone

pytestmark = pytest.mark.slow

TOKEN = "supervisor-token-1234"
# Generous bounds so that a hang fails the test instead of the suite; no test asserts
# how long anything takes.
HANG = 120.0


@attrs.define
class Supervised:
    """A running supervisor: its report lines, address and result."""

    lines: list[str] = attrs.field(factory=list)
    changed: trio.Event = attrs.field(factory=trio.Event)
    address: GatewayAddress | None = None
    ready: trio.Event = attrs.field(factory=trio.Event)
    result: list[int | BaseException] = attrs.field(factory=list)
    finished: trio.Event = attrs.field(factory=trio.Event)

    def report(self, line: str) -> None:
        self.lines.append(line)
        self.changed.set()
        self.changed = trio.Event()

    def on_ready(self, address: GatewayAddress) -> None:
        self.address = address
        self.ready.set()

    async def line(self, pattern: str, *, after: int = 0) -> re.Match[str]:
        """The first report line from index ``after`` on that matches ``pattern``."""
        with trio.fail_after(HANG):
            while True:
                for line in self.lines[after:]:
                    found = re.fullmatch(pattern, line)
                    if found:
                        return found
                await self.changed.wait()

    @property
    def url(self) -> str:
        assert self.address is not None
        return self.address.url


def _config(tmp_path: Path) -> HostConfig:
    workspace = copy_sample_workspace(tmp_path / "ws")
    config = load_workspace_config(str(workspace), None)
    return attrs.evolve(config, gateway=attrs.evolve(config.gateway, token=TOKEN))


@asynccontextmanager
async def supervising(
    config: HostConfig,
    *,
    workers: int = 1,
    crash_limit: int = CRASH_LIMIT,
    degraded_delay: float = DEGRADED_DELAY,
) -> AsyncIterator[Supervised]:
    reserved = await reserve_port("127.0.0.1", 0)
    sup = Supervised()
    try:
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                try:
                    sup.result.append(
                        await supervise_gateway(
                            config,
                            workers,
                            reserved=reserved,
                            report=sup.report,
                            ready=sup.on_ready,
                            signals=(signal.SIGUSR1,),
                            crash_limit=crash_limit,
                            degraded_delay=degraded_delay,
                        )
                    )
                except (WorkerStartError, WorkerCrashLoopError) as exc:
                    sup.result.append(exc)
                finally:
                    sup.finished.set()
                    sup.ready.set()

            nursery.start_soon(run)
            try:
                yield sup
            finally:
                if not sup.finished.is_set():
                    os.kill(os.getpid(), signal.SIGUSR1)
                with trio.fail_after(HANG):
                    await sup.finished.wait()
    finally:
        for sock in reserved:
            sock.close()


async def _worker_pid(url: str) -> int:
    async with open_gateway_client(url, TOKEN) as client:
        await client.request("memory.status", {})
        worker = client.hello["worker"]
        assert worker["index"] == 0
        return int(worker["pid"])


async def test_a_worker_says_who_it_is_and_stops_cleanly_with_the_supervisor(
    tmp_path: Path,
) -> None:
    async with supervising(_config(tmp_path)) as sup:
        with trio.fail_after(HANG):
            await sup.ready.wait()
        listening = await sup.line(r"worker 0 \(pid (\d+)\) listening")
        pid = await _worker_pid(sup.url)
        assert pid == int(listening.group(1))
        assert pid != os.getpid()
        os.kill(os.getpid(), signal.SIGUSR1)
        with trio.fail_after(HANG):
            await sup.finished.wait()
    assert sup.result == [signal.SIGUSR1]
    assert gone(pid)


async def test_a_killed_worker_is_restarted_on_the_same_port(tmp_path: Path) -> None:
    async with supervising(_config(tmp_path)) as sup:
        with trio.fail_after(HANG):
            await sup.ready.wait()
        first = await _worker_pid(sup.url)
        mark = len(sup.lines)
        os.kill(first, signal.SIGKILL)
        await sup.line(r"worker 0 died \(killed by SIGKILL\); restarting in [\d.]+ s", after=mark)
        again = await sup.line(r"worker 0 \(pid (\d+)\) listening", after=mark)
        second = int(again.group(1))
        assert second != first
        assert await _worker_pid(sup.url) == second
    assert sup.result == [signal.SIGUSR1]
    assert gone(second)


async def test_a_worker_that_keeps_dying_stops_the_supervisor_with_the_reason(
    tmp_path: Path,
) -> None:
    async with supervising(_config(tmp_path), crash_limit=2) as sup:
        with trio.fail_after(HANG):
            await sup.ready.wait()
        os.kill(await _worker_pid(sup.url), signal.SIGKILL)
        mark = len(sup.lines)
        again = await sup.line(r"worker 0 \(pid (\d+)\) listening", after=mark)
        os.kill(int(again.group(1)), signal.SIGKILL)
        with trio.fail_after(HANG):
            await sup.finished.wait()
    [failure] = sup.result
    assert isinstance(failure, WorkerCrashLoopError)
    assert "worker 0 died 2 times within 60 s (last: killed by SIGKILL)" in str(failure)
    assert "no other worker is serving" in str(failure)
    assert gone(int(again.group(1)))


async def _status(url: str) -> tuple[int, dict[str, Any]]:
    async with open_gateway_client(url, TOKEN) as client:
        status = await client.request("memory.status", {})
        return int(client.hello["worker"]["index"]), status


async def test_a_crash_looping_slot_backs_off_degraded_while_the_healthy_worker_serves(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    async with supervising(config, workers=2, crash_limit=2, degraded_delay=3.0) as sup:
        with trio.fail_after(HANG):
            await sup.ready.wait()
        healthy = int((await sup.line(r"worker 0 \(pid (\d+)\) listening")).group(1))
        index, status = await _status(sup.url)
        assert status["gateway"]["status"] == "ready"
        assert [w["state"] for w in status["gateway"]["workers"]] == ["serving", "serving"]
        victim = int((await sup.line(r"worker 1 \(pid (\d+)\) listening")).group(1))
        mark = len(sup.lines)
        os.kill(victim, signal.SIGKILL)
        again = await sup.line(r"worker 1 \(pid (\d+)\) listening", after=mark)
        mark = len(sup.lines)
        os.kill(int(again.group(1)), signal.SIGKILL)
        await sup.line(
            r"worker 1 died 2 times within 60 s \(last: killed by SIGKILL\); degraded: "
            r"restarting in 3 s while the other workers serve",
            after=mark,
        )
        # The healthy worker keeps serving (the kernel sends every connection to the one
        # listener left) and says which slot is degraded.
        assert not sup.finished.is_set()
        index, status = await _status(sup.url)
        assert index == 0
        assert status["gateway"]["status"] == "degraded"
        slot = status["gateway"]["workers"][1]
        assert (slot["state"], slot["lastExit"], slot["retryIn"]) == (
            "degraded",
            "killed by SIGKILL",
            3.0,
        )
        assert status["gateway"]["workers"][0]["pid"] == healthy
        # After its back-off the slot comes back.
        back = await sup.line(r"worker 1 \(pid (\d+)\) listening", after=mark)
        _, status = await _status(sup.url)
        assert status["gateway"]["workers"][1]["state"] == "serving"
        assert status["gateway"]["workers"][1]["pid"] == int(back.group(1))
    assert sup.result == [signal.SIGUSR1]
    assert gone(healthy)
    # The supervisor removed its record when it stopped.
    assert list((config.resolved_state_dir / "gateway").glob("*.json")) == []


async def test_a_worker_that_cannot_start_stops_the_supervisor_before_ready(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    blocker = tmp_path / "state-is-a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    config = attrs.evolve(config, state_dir=blocker)
    async with supervising(config) as sup:
        with trio.fail_after(HANG):
            await sup.finished.wait()
    assert sup.address is None
    [failure] = sup.result
    assert isinstance(failure, WorkerStartError)
    assert "worker 0 exited before it listened (exit code 2)" in str(failure)


async def test_a_worker_whose_supervisor_vanishes_stops(tmp_path: Path) -> None:
    """End of file on the worker's stdin (the supervisor was killed) stops the worker."""
    from claw.gateway._listen import bind_addresses
    from claw.gateway._worker import READY, WorkerSpec, encode_spec, worker_command

    config = _config(tmp_path)
    reserved = await reserve_port("127.0.0.1", 0)
    try:
        spec = WorkerSpec(config=config, addresses=bind_addresses(reserved), index=3)
        process = await trio.lowlevel.open_process(
            worker_command(), stdin=-1, stdout=-1, process_group=0
        )
        try:
            assert process.stdin is not None and process.stdout is not None
            await process.stdin.send_all(encode_spec(spec))
            with trio.fail_after(HANG):
                assert await process.stdout.receive_some(64) == READY
            url = GatewayAddress("127.0.0.1", reserved[0].getsockname()[1]).url
            async with open_gateway_client(url, TOKEN) as client:
                assert client.hello["worker"] == {"index": 3, "pid": process.pid}
                await process.stdin.aclose()
                with trio.fail_after(HANG):
                    assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.stdout.aclose()  # type: ignore[union-attr]
    finally:
        for sock in reserved:
            sock.close()
