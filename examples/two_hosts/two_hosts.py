"""Two claw hosts, two real processes, one PostgreSQL: shared memory, revocation across hosts.

Run it against any PostgreSQL database the role may create tables in::

    python examples/two_hosts/two_hosts.py --dsn "host=/run/postgresql dbname=claw"
    CLAW_POSTGRES_DSN=postgresql://claw@db/claw python examples/two_hosts/two_hosts.py

It starts host A and host B as two child processes of this script, each with its own
workspace, state directory, worker threads and connection pools, configured alike:
``[state] backend = "postgresql"`` (sessions, transcripts, turn ledger in the database)
and Memory Records in the memory slot (memories as records in the same database, each
host searching its own derived index). The DSN reaches them through
``CLAW_POSTGRES_DSN``, never their command line. Then:

1. A creates the session ``dm:alice`` and adds a memory as an operator;
2. B finds that memory with a search (its index hears of the write through NOTIFY);
3. B opens a run on ``dm:alice`` and searches through that run's memory handle;
4. A resets ``dm:alice``;
5. B's held run searches again and is refused: the reset on A revoked B's audience
   before B's provider released anything (the release check reads the committed
   session row from the database);
6. a new run on B, opened on the new incarnation, searches again.

Each step prints one line; the script exits 1 if a step did not behave as described.
A child is ``two_hosts.py host NAME ROOT`` and speaks one JSON command per line on
stdin, one JSON answer per line on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import trio

import claw
from claw.memory import GuardedMemoryHandle, MemorySearchRequest

DSN_ENV = "CLAW_POSTGRES_DSN"
SESSION = "dm:alice"
MEMORY = "The staging database moves to the Frankfurt region on Friday."
QUERY = "staging database region"
#: How long the parent waits for one answer of a child (a slow first start included).
GUARD = 180.0


# -- one host (the child process) -------------------------------------------------------


def host_config(root: Path) -> claw.HostConfig:
    """What every host of this deployment is configured with (only the paths differ)."""
    return claw.HostConfig.from_mapping(
        {
            "workspace_dir": str(root / "workspace"),
            "state_dir": str(root / "state"),
            "state": {"backend": "postgresql", "pool_max": 4},  # dsn: CLAW_POSTGRES_DSN
            "plugins": {
                "slots": {"memory": "memory-records"},
                "entries": {
                    "memory-core": {"enabled": False},
                    "memory-records": {"config": {"embedder": "claw-hash", "pool_max": 2}},
                },
            },
        }
    )


def _say(answer: Mapping[str, Any]) -> None:
    print(json.dumps(answer), flush=True)


async def _commands() -> AsyncIterator[dict[str, Any]]:
    while line := await trio.to_thread.run_sync(sys.stdin.readline):
        if line.strip():
            yield json.loads(line)


@asynccontextmanager
async def _session_handle(host: claw.Host, key: str) -> AsyncIterator[GuardedMemoryHandle]:
    """A run on ``key`` (the owner speaking) and its memory handle, for as long as held."""
    # The session may have been created on the other host a moment ago; this host's
    # mirror hears of it through NOTIFY.
    await _wait_revision(host, key, 1)
    async with host.open_run(key, sender_is_owner=True) as run, host.memory.open(
        run.caller
    ) as handle:
        yield handle


async def _wait_revision(host: claw.Host, key: str, revision: int) -> int:
    """Wait until this host's mirror has ``key`` at ``revision`` or later (through NOTIFY)."""
    with trio.fail_after(GUARD):
        while True:
            row = host.sessions.get_nowait(key)
            if row is not None and row.lifecycle_revision >= revision:
                return row.lifecycle_revision
            await trio.sleep(0.01)


async def _search(handle: GuardedMemoryHandle, query: str) -> dict[str, Any]:
    try:
        found = await handle.search(MemorySearchRequest(query=query, max_results=5))
    except claw.ClawError as exc:
        return {"refused": type(exc).__name__, "message": str(exc)}
    return {"hits": [hit.excerpt for hit in found.hits]}


async def serve_host(name: str, root: Path) -> None:
    """Open one host and answer the parent's commands until it says ``exit``."""
    async with claw.open_host(host_config(root)) as host, host.open_scope(name) as scope:
        operator = scope.mint_caller_context(
            scope.mint_operator_authority(["operator.read", "operator.write"])
        )
        _say({"ready": name, "pid": os.getpid()})
        async with AsyncExitStack() as held:
            held_handle: GuardedMemoryHandle | None = None
            async for cmd in _commands():
                op = cmd["op"]
                if op == "exit":
                    break
                if op == "create":
                    row = await host.sessions.create(
                        cmd["key"], agent_id="main", chat_type="direct"
                    )
                    _say({"revision": row.lifecycle_revision})
                elif op == "reset":
                    row = await host.sessions.reset(cmd["key"])
                    _say({"revision": row.lifecycle_revision})
                elif op == "add":
                    added = await host.memory.add(operator, cmd["text"])
                    _say({"ref": added.reference.id})
                elif op == "find":
                    # An operator's search until the memory appears here (or the guard).
                    t0 = time.monotonic()
                    async with host.memory.open(operator) as handle:
                        while not (answer := await _search(handle, cmd["query"])).get("hits"):
                            if time.monotonic() - t0 > GUARD:
                                break
                            await trio.sleep(0.01)
                    _say({**answer, "ms": round((time.monotonic() - t0) * 1000, 1)})
                elif op == "hold":
                    await held.aclose()
                    held_handle = await held.enter_async_context(
                        _session_handle(host, cmd["key"])
                    )
                    _say({"held": cmd["key"]})
                elif op == "search_held":
                    assert held_handle is not None, "hold a session first"
                    _say(await _search(held_handle, cmd["query"]))
                elif op == "wait_revision":
                    _say({"revision": await _wait_revision(host, cmd["key"], cmd["revision"])})
                else:
                    _say({"error": f"unknown op {op!r}"})


# -- the parent: two hosts and the story ------------------------------------------------


class Child:
    """One host process; :meth:`ask` sends a command and returns its answer."""

    def __init__(self, name: str, root: Path, env: Mapping[str, str]) -> None:
        self.name = name
        (root / "workspace").mkdir(parents=True)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "host", name, str(root)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(env),
        )
        self._buffer = b""
        self.pid = self._read()["pid"]

    def _read(self) -> Any:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], GUARD)
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                raise RuntimeError(f"host {self.name} exited or hung (exit {self.proc.poll()})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def ask(self, op: str, **args: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"op": op, **args}) + "\n").encode())
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(b'{"op": "exit"}\n')
                self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def story(a: Child, b: Child) -> list[str]:
    """Run the six steps; return what did not behave as described (nothing, normally)."""
    wrong: list[str] = []
    created = a.ask("create", key=SESSION)
    print(f"A: created session {SESSION} (revision {created['revision']})")
    added = a.ask("add", text=MEMORY)
    print(f"A: added memory {added['ref']}: {MEMORY!r}")
    found = b.ask("find", query=QUERY)
    if MEMORY in found.get("hits", []):
        print(f"B: found A's memory after {found['ms']} ms: {found['hits'][0]!r}")
    else:
        wrong.append(f"B did not find A's memory: {found}")
    b.ask("hold", key=SESSION)
    before = b.ask("search_held", query=QUERY)
    print(f"B: a run on {SESSION} searches: {len(before.get('hits', []))} hit(s)")
    if not before.get("hits"):
        wrong.append(f"B's run found nothing: {before}")
    reset = a.ask("reset", key=SESSION)
    print(f"A: reset {SESSION} (revision {reset['revision']})")
    # At once, without waiting for B to hear of the reset: B releases nothing under it.
    after = b.ask("search_held", query=QUERY)
    if after.get("refused") == "StaleCapabilityError":
        print(f"B: the same run searches again: refused, {after['refused']} (audience revoked)")
    else:
        wrong.append(f"B's revoked run was not refused: {after}")
    b.ask("wait_revision", key=SESSION, revision=reset["revision"])
    b.ask("hold", key=SESSION)
    fresh = b.ask("search_held", query=QUERY)
    print(f"B: a new run on the reset session searches: {len(fresh.get('hits', []))} hit(s)")
    if not fresh.get("hits"):
        wrong.append(f"B's new run found nothing: {fresh}")
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dsn", help=f"a libpq DSN (default: ${DSN_ENV})")
    parser.add_argument("--keep", type=Path, help="keep the hosts' directories under this path")
    args = parser.parse_args(argv)
    dsn = args.dsn or os.environ.get(DSN_ENV, "").strip()
    if not dsn:
        parser.error(f"give --dsn or set {DSN_ENV}")
    env = {**os.environ, DSN_ENV: dsn}
    with tempfile.TemporaryDirectory(prefix="claw-two-hosts-") as tmp:
        base = args.keep or Path(tmp)
        hosts: list[Child] = []
        try:
            for name in ("a", "b"):
                hosts.append(Child(name, base / name, env))
            print(f"host A: pid {hosts[0].pid}; host B: pid {hosts[1].pid}; one database")
            wrong = story(*hosts)
        finally:
            for child in hosts:
                child.close()
    for problem in wrong:
        print(f"UNEXPECTED: {problem}", file=sys.stderr)
    print("ok" if not wrong else "FAILED")
    return 1 if wrong else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["host"]:
        trio.run(serve_host, sys.argv[2], Path(sys.argv[3]))
    else:
        sys.exit(main())
