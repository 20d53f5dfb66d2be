"""A second host process for the multi-host tests: Memory Records on a shared database.

``python _host_child.py <dsn> <root> <query>``: open a host (workspace and state under
``<root>``) whose memory slot is Memory Records on ``<dsn>``, search once (so its local
index is built), print ``READY``, then wait for a line ``GO <t0>`` on stdin (``t0`` a
``time.monotonic()`` reading of the parent, the moment its write returned; the
monotonic clock is the machine's, shared by both processes). It then searches for
``<query>`` until a hit appears or one second after ``t0`` has passed, and prints one
JSON line: ``{"found": bool, "delay": seconds after t0, "searches": n}``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import trio

import claw_records
from claw.memory import MemorySearchRequest
from claw_testing import harness_config, open_harness_host

DEADLINE = 1.0


async def main(dsn: str, root: Path, query: str) -> None:
    (root / "workspace").mkdir(parents=True, exist_ok=True)
    config = harness_config(
        root / "workspace",
        root / "state",
        memory="memory-records",
        plugin_config={"memory-records": {"dsn": dsn, "catch_up_interval": 3600.0}},
    )
    async with open_harness_host(config, plugins=[claw_records.plugin]) as host:
        async with host.open_scope("child") as scope:
            caller = scope.mint_caller_context(scope.mint_operator_authority(["operator.read"]))

            async def hits() -> int:
                async with host.memory.open(caller) as handle:
                    found = await handle.search(MemorySearchRequest(query=query))
                return len(found.hits)

            await hits()
            print("READY", flush=True)
            line = await trio.to_thread.run_sync(sys.stdin.readline)
            t0 = float(line.split()[1])
            searches = 0
            while True:
                searches += 1
                found = await hits() > 0
                now = time.monotonic()
                if found or now - t0 > DEADLINE:
                    print(json.dumps({"found": found, "delay": now - t0, "searches": searches}),
                          flush=True)
                    return
                await trio.sleep(0.002)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], Path(sys.argv[2]), sys.argv[3])
