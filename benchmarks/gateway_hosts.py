"""Gateway load on several hosts sharing one PostgreSQL: ``gateway_load --hosts N``.

The deployment of ``docs/postgres.md`` on loopback: one PostgreSQL server (a private
one started the way the tests start theirs, ``tests/_postgres.py``, unless ``--dsn``
names one), and N ``claw serve`` host processes, each configured with ``[state] backend
= "postgresql"`` on that database, each with its own copy of the workspace and its own
local Memory Core index (built by ``claw memory index`` with that same configuration).
``--clients`` clients per host issue ``memory.search`` v2 back to back, all hosts at
once, the same load generator as :mod:`benchmarks.gateway_load` (aborted requests
included). Two phases:

* **distinct**: queries no request asked before; afterwards every answer is asked
  again *on the next host* and must come back the same (the hosts' local indexes of
  the same files must agree);
* **cycled**: 200 queries in turn, each answer checked as it arrives against the
  answer host 1 gave in a sequential warm-up.

Per host and for all hosts together: requests/s, p50/p99 (per host), the host's server
CPU per answered request (its whole process tree, from ``/proc``), wrong and lost
requests, and the machine's load average. A ``memory.search`` by an operator reads
the local index and no session, so the database is on the path of each host's start
(migrations, the session mirror, the owner lock, the LISTEN connections), not of each
request: the figures show what N hosts on one machine cost next to one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from benchmarks._common import load, machine, table
from benchmarks.gateway_load import (
    DISTINCT_PER_SECOND,
    _claw,
    _expected,
    _load,
    _server,
    _verify,
    _write_workspace,
)
from benchmarks.records_latency import _server as _database

#: The configuration of every host: the state in PostgreSQL (DSN from the environment).
HOST_CONFIG = """\
[state]
backend = "postgresql"
pool_max = 4
"""


def _live_hosts(dsn: str) -> int:
    """How many live claw hosts the database sees: each holds an owner-lock connection."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name LIKE 'claw owner %'"
        ).fetchone()
    return int(row[0]) if row else 0


async def _phase(
    urls: Sequence[str],
    pids: Sequence[int],
    token: str,
    *,
    queries: Sequence[str],
    clients: int,
    seconds: float,
    abort_fraction: float,
    expected: dict[str, tuple[str, ...]] | None,
) -> list[dict[str, Any]]:
    """Every host under load at once; each host's figures (distinct answers verified on
    the next host when ``expected`` is None)."""
    results: list[Any] = [None] * len(urls)
    share = len(queries) // len(urls)

    async def one(i: int) -> None:
        mine = queries if expected is not None else queries[i * share : (i + 1) * share]
        results[i] = await _load(
            urls[i], token, queries=mine, clients=clients, seconds=seconds,
            abort_fraction=abort_fraction, server_pid=pids[i],
            check="inline" if expected is not None else "after", expected=expected,
        )

    async with trio.open_nursery() as nursery:
        for i in range(len(urls)):
            nursery.start_soon(one, i)
    phases = []
    for i, (phase, answers) in enumerate(results):
        if expected is None:
            phase["wrong"] = await _verify(urls[(i + 1) % len(urls)], token, answers)
        phase["host"] = i + 1
        phases.append(phase)
    return phases


def _together(phases: Sequence[dict[str, Any]]) -> dict[str, Any]:
    answered = sum(p["answered"] for p in phases)
    cpu_us = sum(p["server_cpu_us_per_request"] * p["answered"] for p in phases)
    # The hosts' loads ran at once in this one process: each measured all of its CPU.
    loadgen_us = max((p["loadgen_cpu_us_per_request"] * p["answered"] for p in phases),
                     default=float("nan"))
    return {
        "requests_per_s": sum(p["requests_per_s"] for p in phases),
        "answered": answered,
        "wrong": sum(p["wrong"] for p in phases),
        "lost": sum(p["lost"] for p in phases),
        "server_cpu_us_per_request": cpu_us / answered if answered else float("nan"),
        "loadgen_cpu_us_per_request": loadgen_us / answered if answered else float("nan"),
        "load": load(),
    }


def run(
    *,
    hosts: int,
    chunks: int,
    clients: int,
    seconds: float,
    abort_fraction: float,
    dsn: str | None = None,
) -> dict[str, Any]:
    token = secrets.token_urlsafe(16)
    with _database(dsn) as url_dsn, tempfile.TemporaryDirectory(prefix="claw-hosts-") as tmp:
        root = Path(tmp)
        config = root / "host.toml"
        config.write_text(HOST_CONFIG, encoding="utf-8")
        distinct_count = max(1_000, int(DISTINCT_PER_SECOND * seconds))
        first = root / "host-1" / "ws"
        cycled, warm, distinct = _write_workspace(first, chunks, distinct_count)
        env = dict(os.environ, CLAW_GATEWAY_TOKEN=token, CLAW_POSTGRES_DSN=url_dsn)
        workspaces = [first]
        for i in range(2, hosts + 1):
            workspaces.append(root / f"host-{i}" / "ws")
            shutil.copytree(first, workspaces[-1])
        builds = []
        for ws in workspaces:
            t0 = time.perf_counter()
            subprocess.run(
                _claw("memory", "index", "--workspace", str(ws), "--config", str(config)),
                check=True, capture_output=True, env=env,
            )
            builds.append(time.perf_counter() - t0)
        with contextlib.ExitStack() as stack:
            servers = [
                stack.enter_context(_server(_claw(
                    "serve", "--workspace", str(ws), "--config", str(config),
                    "--host", "127.0.0.1", "--port", "0",
                ), env))
                for ws in workspaces
            ]
            urls = [u for u, _ in servers]
            pids = [p for _, p in servers]

            async def phases() -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
                for u in urls:
                    await _expected(u, token, warm)
                expected = await _expected(urls[0], token, cycled)
                # The other hosts must answer the warm-up like host 1 before any load.
                differ = 0
                for u in urls[1:]:
                    theirs = await _expected(u, token, cycled)
                    differ += sum(theirs[q] != expected[q] for q in cycled)
                load_args: dict[str, Any] = {
                    "clients": clients, "seconds": seconds, "abort_fraction": abort_fraction,
                }
                spread = await _phase(urls, pids, token, queries=distinct, expected=None,
                                      **load_args)
                cycled_phase = await _phase(urls, pids, token, queries=cycled,
                                            expected=expected, **load_args)
                return spread, cycled_phase, differ

            distinct_phases, cycled_phases, differ = trio.run(phases)
            seen = _live_hosts(url_dsn)
    return {
        "hosts": hosts,
        "clients_per_host": clients,
        "chunks": chunks,
        "seconds": seconds,
        "index_build_s": builds,
        "warm_up_answers_differing": differ,
        "hosts_seen_by_database": seen,
        "distinct": {"hosts": distinct_phases, "all": _together(distinct_phases)},
        "cycled": {"hosts": cycled_phases, "all": _together(cycled_phases)},
        "database": "given (--dsn)" if dsn else "private PostgreSQL (tests/_postgres.py)",
        "machine": machine(),
    }


def report(r: dict[str, Any]) -> None:
    print(
        f"gateway load, {r['hosts']} hosts x {r['clients_per_host']} clients, one PostgreSQL "
        f"({r['database']}); [state] backend = \"postgresql\"; {r['chunks']} chunks; "
        f"{r['seconds']:g} s a phase; load = 1-minute load average at the end of the phase"
    )
    rows = []
    for name in ("distinct", "cycled"):
        for p in r[name]["hosts"]:
            rows.append([
                f"{name}, host {p['host']}", p["requests_per_s"], p["p50_ms"], p["p99_ms"],
                p["answered"], p["wrong"], p["lost"], p["server_cpu_us_per_request"], "-",
                p["load"],
            ])
        a = r[name]["all"]
        rows.append([
            f"{name}, all hosts", a["requests_per_s"], "-", "-", a["answered"], a["wrong"],
            a["lost"], a["server_cpu_us_per_request"], a["loadgen_cpu_us_per_request"],
            a["load"],
        ])
    print(table(
        ["phase", "requests/s", "p50 ms", "p99 ms", "answered", "wrong", "lost",
         "server CPU us/req", "loadgen CPU us/req", "load"],
        rows,
    ))
    builds = ", ".join(f"{b:.1f}" for b in r["index_build_s"])
    print(
        f"wrong (distinct: verified on another host; cycled: against host 1) and lost: "
        f"{r['distinct']['all']['wrong'] + r['distinct']['all']['lost']} + "
        f"{r['cycled']['all']['wrong'] + r['cycled']['all']['lost']}; warm-up answers "
        f"differing between hosts: {r['warm_up_answers_differing']}; hosts the database saw "
        f"alive: {r['hosts_seen_by_database']}; index builds {builds} s"
    )


def main(args: Any) -> dict[str, Any]:
    """``gateway_load --hosts N``: run, print, and return the figures."""
    result = run(
        hosts=args.hosts, chunks=args.chunks, clients=args.clients, seconds=args.seconds,
        abort_fraction=args.abort_fraction, dsn=args.dsn,
    )
    report(result)
    return result

