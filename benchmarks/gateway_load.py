"""Gateway load: ``claw serve`` on loopback, C concurrent clients issuing memory.search v2.

A workspace of synthetic memory files (``--chunks``, 10k by default; see
:mod:`benchmarks._corpus`) is indexed with ``claw memory index``, then ``claw serve``
runs in its own process on 127.0.0.1. Each client connects with a token and issues
``memory.search`` v2 requests back to back for ``--seconds``; a fraction of requests
(``--abort-fraction``) is abandoned mid-flight, half by cancelling (the client sends a
cancel frame) and half by disconnecting and reconnecting. Three phases, one run:

* **distinct**: every request a query no request of the run asked before (so no cache
  holds its answer); afterwards each answer is checked against the answer the same
  query gets when asked again alone (same hit references in the same order);
* **cycled**: 200 queries in turn (warm caches, the earlier benchmark's load), each
  answer checked against the answer of a sequential warm-up;
* **echo**: the same load generator against a bare trio-websocket server answering the
  same frames with a recorded ``memory.search`` answer (:mod:`benchmarks._echo`), the
  ceiling of the transport on this machine: ``claw_over_echo`` is the ratio of
  requests per second.

A mismatch is *wrong*; a request with neither an answer nor an error within 10 s is
*lost*; the server must still answer ``memory.status`` afterwards. Each phase reports
the server's CPU time and the load generator's per answered request, and the machine's
load average at its end. The server's CPU is that of its whole process tree (the
``claw serve`` supervisor and every worker, from ``/proc``).

``--workers 1,2`` adds a scaling run: for each count N in turn, ``claw serve --workers
N`` over the same index answers a distinct-query phase of the same length (queries no
other phase asked). It reports requests/s and server CPU per request for each N and
their ratios; the target is >= 1.6x the requests/s of 1 worker with 2, at equal CPU
per request. The load generator is one process on the same machine: on 2 cores it
competes with the workers for CPU, so its CPU per request is printed beside them.

    python -m benchmarks.gateway_load --clients C --seconds S [--workers 1,2] [--json]
    python -m benchmarks.gateway_load --hosts 2 --clients 16 [--dsn DSN]   # one PostgreSQL
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import os
import resource
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import trio

from benchmarks._common import emit_json, load, machine, percentile, table
from benchmarks._corpus import Corpus

REQUEST_TIMEOUT = 10.0
CYCLED = 200
WARM_UP = 50
# Distinct queries generated per second of the distinct phase: above the rate reached.
DISTINCT_PER_SECOND = 3_000
VERIFIERS = 4


def _write_workspace(
    ws: Path, chunks: int, distinct: int
) -> tuple[list[str], list[str], list[str]]:
    """Write the memory files; return the cycled, warm-up and distinct queries."""
    corpus = Corpus()
    texts = corpus.chunk_texts(chunks)
    (ws / "memory").mkdir(parents=True)
    for f, start in enumerate(range(0, len(texts), 100)):
        (ws / "memory" / f"notes-{f:05d}.md").write_text(
            "\n\n".join(texts[start : start + 100]) + "\n", encoding="utf-8"
        )
    queries = list(dict.fromkeys(corpus.queries(texts, CYCLED + WARM_UP + distinct)))
    return (
        queries[:CYCLED],
        queries[CYCLED : CYCLED + WARM_UP],
        queries[CYCLED + WARM_UP :],
    )


def process_cpu_s(pid: int) -> float:
    """CPU time (user + system, every thread) process ``pid`` has used, in seconds.

    Read from ``/proc/PID/stat``; NaN where there is no ``/proc``.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return float("nan")
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    """CPU time of process ``pid``, its reaped children and its live children, in seconds.

    ``claw serve --workers N`` is a supervisor and N worker processes; a worker that
    exited and was reaped is in the supervisor's ``cutime``/``cstime``. NaN without
    ``/proc``.
    """
    tick = os.sysconf("SC_CLK_TCK")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    total = sum(int(f) for f in fields[11:15]) / tick
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == pid:
            continue
        try:
            child = (entry / "stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(child[1]) == pid:
            total += (int(child[11]) + int(child[12])) / tick
    return total


def _own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _claw(*args: str) -> list[str]:
    """The ``claw`` command of this interpreter."""
    return [sys.executable, "-c", "import sys; from claw._cli import main; sys.exit(main())", *args]


def _ids(payload: dict[str, Any]) -> tuple[str, ...]:
    return tuple(
        str(h.get("reference", {}).get("id", ""))
        + "#"
        + str(h.get("reference", {}).get("fragment"))
        for h in payload.get("hits", ())
    )


def _params(q: str) -> dict[str, Any]:
    return {"version": 2, "query": q, "maxResults": 6}


Check = Literal["inline", "after", "none"]


async def _load(
    url: str,
    token: str,
    *,
    queries: Sequence[str],
    clients: int,
    seconds: float,
    abort_fraction: float,
    server_pid: int,
    check: Check,
    expected: dict[str, tuple[str, ...]] | None = None,
) -> tuple[dict[str, Any], list[tuple[str, tuple[str, ...]]]]:
    """One phase: ``clients`` clients for ``seconds``; its figures and the answers to check.

    ``check="inline"`` compares each answer with ``expected`` as it arrives; ``"after"``
    returns the answers for :func:`_verify`; ``"none"`` (the echo server) checks nothing.
    """
    from claw.gateway import GatewayConnectionError, GatewayRequestError, open_gateway_client

    latencies: list[float] = []
    answers: list[tuple[str, tuple[str, ...]]] = []
    errors: collections.Counter[str] = collections.Counter()
    counts = {"ok": 0, "wrong": 0, "lost": 0, "cancelled": 0, "disconnected": 0}
    issued = [0]
    stop = time.perf_counter() + seconds
    # A phase shorter than a connection takes on a loaded machine would measure nothing:
    # past ``stop`` a client goes on until it has one answer (for at most a request
    # timeout more). The rates divide by the time the phase really took.
    hard_stop = stop + REQUEST_TIMEOUT

    async def client(slot: int) -> None:
        rng = __import__("random").Random(slot)
        i = slot
        answered_here = 0

        def going() -> bool:
            now = time.perf_counter()
            return now < stop or (answered_here == 0 and now < hard_stop)

        while going():
            try:
                async with open_gateway_client(url, token) as c:
                    while going():
                        q = queries[i % len(queries)]
                        i += clients
                        issued[0] += 1
                        roll = rng.random()
                        if roll < abort_fraction / 2:
                            # Cancel mid-request: the client sends a cancel frame.
                            with trio.move_on_after(rng.uniform(0.0, 0.002)):
                                try:
                                    await c.request("memory.search", _params(q))
                                except GatewayRequestError as exc:
                                    errors[exc.code] += 1
                            counts["cancelled"] += 1
                            continue
                        if roll < abort_fraction:
                            # Disconnect mid-request, then reconnect.
                            async with trio.open_nursery() as n:
                                n.start_soon(_swallow, c.request, "memory.search", _params(q))
                                await trio.sleep(rng.uniform(0.0, 0.002))
                                n.cancel_scope.cancel()
                            counts["disconnected"] += 1
                            break
                        t = time.perf_counter()
                        with trio.move_on_after(REQUEST_TIMEOUT) as scope:
                            try:
                                payload = await c.request("memory.search", _params(q))
                            except GatewayRequestError as exc:
                                errors[exc.code] += 1
                                continue
                        if scope.cancelled_caught:
                            counts["lost"] += 1
                            continue
                        latencies.append((time.perf_counter() - t) * 1000.0)
                        answered_here += 1
                        if check == "inline":
                            assert expected is not None
                            counts["ok" if _ids(payload) == expected[q] else "wrong"] += 1
                        elif check == "after":
                            answers.append((q, _ids(payload)))
            except GatewayConnectionError as exc:
                errors["connection: " + str(exc)[:60]] += 1

    server_cpu = tree_cpu_s(server_pid)
    own_cpu = _own_cpu_s()
    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for s in range(clients):
            nursery.start_soon(client, s)
    elapsed = time.perf_counter() - t0
    server_cpu = tree_cpu_s(server_pid) - server_cpu
    own_cpu = _own_cpu_s() - own_cpu
    answered = len(latencies)
    per = 1e6 / answered if answered else float("nan")
    return {
        "requests_per_s": answered / elapsed,
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "answered": answered,
        "wrong": counts["wrong"],
        "lost": counts["lost"],
        "cancelled": counts["cancelled"],
        "disconnected": counts["disconnected"],
        "errors": dict(errors),
        "server_cpu_us_per_request": server_cpu * per,
        "loadgen_cpu_us_per_request": own_cpu * per,
        "server_cores_busy": server_cpu / elapsed,
        "queries_issued": issued[0],
        "distinct_queries": min(issued[0], len(queries)),
        "load": load(),
    }, answers


async def _expected(url: str, token: str, queries: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each query's answer, asked alone, one after the other."""
    from claw.gateway import open_gateway_client

    out: dict[str, tuple[str, ...]] = {}
    async with open_gateway_client(url, token) as c:
        for q in queries:
            out[q] = _ids(await c.request("memory.search", _params(q)))
    return out


async def _verify(url: str, token: str, answers: Sequence[tuple[str, tuple[str, ...]]]) -> int:
    """How many of ``answers`` differ from the answer their query gets when asked again."""
    from claw.gateway import open_gateway_client

    wrong = [0]

    async def verifier(part: Sequence[tuple[str, tuple[str, ...]]]) -> None:
        async with open_gateway_client(url, token) as c:
            for q, ids in part:
                if _ids(await c.request("memory.search", _params(q))) != ids:
                    wrong[0] += 1

    async with trio.open_nursery() as nursery:
        for k in range(VERIFIERS):
            nursery.start_soon(verifier, answers[k::VERIFIERS])
    return wrong[0]


async def _alive(url: str, token: str) -> bool:
    from claw.gateway import open_gateway_client

    with trio.move_on_after(REQUEST_TIMEOUT):
        async with open_gateway_client(url, token) as c:
            await c.request("memory.status", {})
            return True
    return False


async def _claw_phases(
    url: str,
    token: str,
    pid: int,
    *,
    cycled: Sequence[str],
    warm: Sequence[str],
    distinct: Sequence[str],
    clients: int,
    seconds: float,
    abort_fraction: float,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], bool]:
    """The distinct and cycled phases; also a recorded answer for the echo server."""
    from claw.gateway import open_gateway_client

    load_args = {
        "clients": clients,
        "seconds": seconds,
        "abort_fraction": abort_fraction,
        "server_pid": pid,
    }
    await _expected(url, token, warm)
    first, answers = await _load(url, token, queries=distinct, check="after", **load_args)
    first["wrong"] = await _verify(url, token, answers)
    expected = await _expected(url, token, cycled)
    second, _ = await _load(
        url, token, queries=cycled, check="inline", expected=expected, **load_args
    )
    async with open_gateway_client(url, token) as c:
        recorded = await c.request("memory.search", _params(cycled[0]))
    return first, second, recorded, await _alive(url, token)


async def _swallow(fn: Any, *args: Any) -> None:
    from claw.gateway import GatewayConnectionError, GatewayRequestError

    with contextlib.suppress(GatewayConnectionError, GatewayRequestError):
        await fn(*args)


@contextlib.contextmanager
def _server(args: Sequence[str], env: dict[str, str]) -> Iterator[tuple[str, int]]:
    """Start a server process printing ``... listening on URL``; yield its URL and pid."""
    server = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if "listening on" not in line:
            raise SystemExit(f"{args[-1]!r} server did not start: {line!r}")
        yield line.rsplit(" ", 1)[-1].strip(), server.pid
    finally:
        if server.stdout is not None:
            server.stdout.close()
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _serve_command(ws: Path, workers: int) -> list[str]:
    return _claw(
        *("serve", "--workspace", str(ws), "--host", "127.0.0.1", "--port", "0"),
        *("--workers", str(workers)),
    )


def _scaling(
    ws: Path,
    env: dict[str, str],
    token: str,
    counts: Sequence[int],
    *,
    warm: Sequence[str],
    distinct: Sequence[str],
    clients: int,
    seconds: float,
    abort_fraction: float,
) -> dict[str, dict[str, Any]]:
    """A distinct-query phase per worker count, one after the other, over one index."""
    phases: dict[str, dict[str, Any]] = {}
    share = len(distinct) // len(counts)
    for k, workers in enumerate(counts):
        with _server(_serve_command(ws, workers), env) as (url, pid):
            load_args: dict[str, Any] = {
                "clients": clients,
                "abort_fraction": abort_fraction,
                "server_pid": pid,
                "check": "none",
            }
            # Warm every worker (connections spread over them) before measuring.
            trio.run(functools.partial(_load, url, token, queries=warm, seconds=2.0, **load_args))
            phase, _ = trio.run(
                functools.partial(
                    _load,
                    url,
                    token,
                    queries=distinct[k * share : (k + 1) * share],
                    seconds=seconds,
                    **load_args,
                )
            )
            phase["alive_after"] = trio.run(_alive, url, token)
        phase["workers"] = workers
        phases[str(workers)] = phase
    return phases


def run(
    chunks: int,
    clients: int,
    seconds: float,
    abort_fraction: float,
    workers: Sequence[int] = (1,),
) -> dict[str, Any]:
    token = secrets.token_urlsafe(16)
    scaling = list(workers) != [1]
    with tempfile.TemporaryDirectory(prefix="claw-gateway-load-") as tmp:
        ws = Path(tmp) / "ws"
        distinct_count = max(1_000, int(DISTINCT_PER_SECOND * seconds))
        phases = 1 + (len(workers) if scaling else 0)
        cycled, warm, every_distinct = _write_workspace(ws, chunks, distinct_count * phases)
        distinct = every_distinct[:distinct_count]
        t0 = time.perf_counter()
        subprocess.run(
            [*_claw("memory", "index", "--workspace", str(ws))],
            check=True,
            capture_output=True,
        )
        build = time.perf_counter() - t0
        env = dict(os.environ, CLAW_GATEWAY_TOKEN=token)
        with _server(_serve_command(ws, 1), env) as (url, pid):
            result, cycled_result, recorded, alive = trio.run(
                functools.partial(
                    _claw_phases,
                    url,
                    token,
                    pid,
                    cycled=cycled,
                    warm=warm,
                    distinct=distinct,
                    clients=clients,
                    seconds=seconds,
                    abort_fraction=abort_fraction,
                )
            )
        payload_file = Path(tmp) / "payload.json"
        payload_file.write_text(json.dumps(recorded), encoding="utf-8")
        echo_cmd = [sys.executable, "-m", "benchmarks._echo", str(payload_file)]
        with _server(echo_cmd, dict(os.environ)) as (url, pid):
            echo, _ = trio.run(
                functools.partial(
                    _load,
                    url,
                    token,
                    queries=distinct,
                    clients=clients,
                    seconds=seconds,
                    abort_fraction=abort_fraction,
                    server_pid=pid,
                    check="none",
                )
            )
        if scaling:
            result["workers"] = _scaling(
                ws,
                env,
                token,
                workers,
                warm=cycled,
                distinct=every_distinct[distinct_count:],
                clients=clients,
                seconds=seconds,
                abort_fraction=abort_fraction,
            )
            first = result["workers"][str(workers[0])]
            last = result["workers"][str(workers[-1])]
            result["workers_requests_per_s_ratio"] = (
                last["requests_per_s"] / first["requests_per_s"]
            )
            first_cpu = first["server_cpu_us_per_request"]
            result["workers_cpu_per_request_ratio"] = (
                last["server_cpu_us_per_request"] / first_cpu if first_cpu > 0 else float("nan")
            )
    result["clients"] = clients
    result["wrong_or_lost"] = (
        result["wrong"] + result["lost"] + cycled_result["wrong"] + cycled_result["lost"]
    )
    result["server_alive_after"] = alive
    result["cycled"] = cycled_result
    result["echo"] = echo
    result["claw_over_echo"] = result["requests_per_s"] / echo["requests_per_s"]
    result["cycled_over_echo"] = cycled_result["requests_per_s"] / echo["requests_per_s"]
    # Requests per second of server CPU, claw over echo: the ratio a starved server
    # (a loaded machine, or a load generator short of CPU) still measures.
    # CPU is read in clock ticks (10 ms): a phase of a few requests can measure none.
    claw_cpu = result["server_cpu_us_per_request"]
    result["claw_over_echo_per_core"] = (
        echo["server_cpu_us_per_request"] / claw_cpu if claw_cpu > 0 else float("nan")
    )
    result["chunks"] = chunks
    result["index_build_s"] = build
    result["machine"] = machine()
    return result


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gateway_load")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=float, default=10.0, help="duration of each phase")
    p.add_argument("--chunks", type=int, default=10_000)
    p.add_argument("--abort-fraction", type=float, default=0.05)
    p.add_argument(
        "--workers",
        type=_worker_counts,
        default=[1],
        help="comma-separated worker counts for the scaling run (e.g. 1,2; default 1: none)",
    )
    p.add_argument("--hosts", type=int, default=1,
                   help="N > 1: N claw serve hosts on one PostgreSQL, --clients each "
                        "(benchmarks/gateway_hosts.py)")
    p.add_argument("--dsn", help="with --hosts: this database (default: a private server)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.hosts > 1:
        from benchmarks import gateway_hosts

        hosts = gateway_hosts.main(args)
        if args.json:
            emit_json(hosts)
        return
    r = run(args.chunks, args.clients, args.seconds, args.abort_fraction, args.workers)
    print(
        f"gateway load: {r['chunks']} chunks, {r['clients']} clients, {args.seconds:g} s a phase "
        "(load = 1-minute load average at the end of the phase)"
    )
    rows = []
    for name, phase in (
        ("claw, distinct queries", r),
        ("claw, 200 cycled queries", r["cycled"]),
        ("bare echo server", r["echo"]),
    ):
        rows.append(
            [
                name,
                phase["requests_per_s"],
                phase["p50_ms"],
                phase["p99_ms"],
                phase["answered"],
                phase["wrong"] if name.startswith("claw") else "-",
                phase["lost"],
                phase["cancelled"],
                phase["disconnected"],
                phase["server_cpu_us_per_request"],
                phase["server_cores_busy"],
                phase["loadgen_cpu_us_per_request"],
                phase["load"],
            ]
        )
    print(
        table(
            [
                "phase",
                "requests/s",
                "p50 ms",
                "p99 ms",
                "answered",
                "wrong",
                "lost",
                "cancelled",
                "disconnected",
                "server CPU us/req",
                "server cores",
                "loadgen CPU us/req",
                "load",
            ],
            rows,
        )
    )
    print(
        f"claw_over_echo {r['claw_over_echo']:.2f} (distinct; cycled "
        f"{r['cycled_over_echo']:.2f}; target >= 0.6; per core of server CPU "
        f"{r['claw_over_echo_per_core']:.2f}); server_cpu_us_per_request "
        f"{r['server_cpu_us_per_request']:.0f} (target <= 400); p99 {r['p99_ms']:.1f} ms "
        f"(target <= 30); wrong_or_lost {r['wrong_or_lost']}; "
        f"{r['distinct_queries']} distinct queries of {r['queries_issued']} issued; "
        f"server answering afterwards: {r['server_alive_after']}"
    )
    print(f"errors by code: {r['errors'] or 'none'} (cycled: {r['cycled']['errors'] or 'none'})")
    if "workers" in r:
        _print_scaling(r, args.workers)
    if args.json:
        emit_json(r)


def _worker_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected worker counts like 1,2, got {text!r}") from None
    if not counts or any(n < 1 for n in counts):
        raise argparse.ArgumentTypeError(f"worker counts must be >= 1, got {text!r}")
    return counts


def _print_scaling(r: dict[str, Any], counts: Sequence[int]) -> None:
    print(
        f"\nscaling: claw serve --workers N, distinct queries, {r['clients']} clients, "
        f"{r['machine']['cpus']} cores; the load generator runs on the same cores"
    )
    rows = []
    for n in counts:
        phase = r["workers"][str(n)]
        rows.append(
            [
                n,
                phase["requests_per_s"],
                phase["p50_ms"],
                phase["p99_ms"],
                phase["answered"],
                phase["lost"],
                phase["server_cpu_us_per_request"],
                phase["server_cores_busy"],
                phase["loadgen_cpu_us_per_request"],
                phase["load"],
            ]
        )
    print(
        table(
            [
                "workers",
                "requests/s",
                "p50 ms",
                "p99 ms",
                "answered",
                "lost",
                "server CPU us/req",
                "server cores",
                "loadgen CPU us/req",
                "load",
            ],
            rows,
        )
    )
    ratio = r["workers_requests_per_s_ratio"]
    cpu = r["workers_cpu_per_request_ratio"]
    met = ratio >= 1.6 and cpu <= 1.1
    print(
        f"workers {counts[-1]} over {counts[0]}: requests/s x{ratio:.2f} (target >= 1.6) at "
        f"server CPU per request x{cpu:.2f} (target: equal, <= 1.1); "
        f"{'met' if met else 'not met'}"
    )


if __name__ == "__main__":
    main()
