"""A crash-looping worker of ``claw serve --workers 2`` must not take the healthy one down.

Issue 25: five deaths of one worker slot within 60 s stopped the whole gateway and closed
the healthy worker's connections. Here worker 1 is killed (SIGKILL) as often as the
supervisor's crash-loop guard counts, with its defaults, while a client stays connected
to worker 0 and asks after every kill; then new clients connect. The healthy worker's
client must be answered every time, new clients must get in, and ``memory.status`` must
name the degraded slot.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
import trio

from claw.gateway import GatewayClient, open_gateway_client
from claw.gateway._supervisor import CRASH_LIMIT, CRASH_WINDOW

from ..gateway.test_supervisor import HANG, TOKEN, Supervised, _config, supervising

NEW_CLIENTS = 20


async def _client_on_worker(sup: Supervised, index: int, stack: list[object]) -> GatewayClient:
    """A connection that the kernel handed to worker ``index`` (connections are spread
    over the workers' listeners, so connect until one lands there)."""
    for _ in range(200):
        opened = open_gateway_client(sup.url, TOKEN)
        client = await opened.__aenter__()
        if client.hello["worker"]["index"] == index:
            stack.append(opened)
            return client
        await opened.__aexit__(None, None, None)
    raise AssertionError(f"no connection reached worker {index} in 200 tries")


async def _line_at(sup: Supervised, pattern: str, after: int) -> tuple[int, re.Match[str]]:
    """The first report line from index ``after`` on matching ``pattern``, and its index."""
    with trio.fail_after(HANG):
        while True:
            for index in range(after, len(sup.lines)):
                found = re.fullmatch(pattern, sup.lines[index])
                if found:
                    return index, found
            await sup.changed.wait()


@pytest.mark.slow
async def test_a_crash_looping_slot_leaves_the_healthy_workers_clients_served(
    tmp_path: Path,
) -> None:
    kept: list[object] = []
    answered = asked = 0
    async with supervising(_config(tmp_path), workers=2) as sup:
        with trio.fail_after(HANG):
            await sup.ready.wait()
        held = await _client_on_worker(sup, 0, kept)
        try:
            after = 0
            for _ in range(CRASH_LIMIT):
                at, victim = await _line_at(sup, r"worker 1 \(pid (\d+)\) listening", after)
                os.kill(int(victim.group(1)), signal.SIGKILL)
                after, _ = await _line_at(sup, r"worker 1 died.*", at + 1)
                asked += 1
                if "status" in await held.request("memory.status", {}):
                    answered += 1
            degraded = await sup.line(
                rf"worker 1 died {CRASH_LIMIT} times within {CRASH_WINDOW:g} s "
                r"\(last: killed by SIGKILL\); degraded: restarting in (\d+) s while the "
                r"other workers serve"
            )
            assert not sup.finished.is_set()
            status = await held.request("memory.status", {})
            assert status["gateway"]["status"] == "degraded"
            assert [w["state"] for w in status["gateway"]["workers"]] == ["serving", "degraded"]
            new_ok = 0
            for _ in range(NEW_CLIENTS):
                async with open_gateway_client(sup.url, TOKEN) as client:
                    if "status" in await client.request("memory.status", {}):
                        new_ok += 1
            assert "status" in await held.request("memory.status", {})
        finally:
            for opened in reversed(kept):
                await opened.__aexit__(None, None, None)  # type: ignore[attr-defined]
    print(
        f"\nworker slots: worker 1 killed {CRASH_LIMIT} times within {CRASH_WINDOW:g} s, "
        f"degraded (retry in {degraded.group(1)} s); the client held on worker 0 answered "
        f"{answered} of {asked} times; new clients {new_ok} of {NEW_CLIENTS}; "
        f"the gateway kept running: {sup.result == [signal.SIGUSR1]}"
    )
    assert answered == asked == CRASH_LIMIT
    assert new_ok == NEW_CLIENTS
    assert sup.result == [signal.SIGUSR1]
