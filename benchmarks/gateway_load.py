"""Gateway load: ``claw serve`` on loopback, C concurrent clients issuing memory.search v2.

A workspace of synthetic memory files (``--chunks``, 10k by default; see
:mod:`benchmarks._corpus`) is indexed with ``claw memory index``, then ``claw serve``
runs in its own process on 127.0.0.1, beside a bare trio-websocket server answering the
same frames with a recorded ``memory.search`` answer (:mod:`benchmarks._echo`: the
ceiling of WebSocket framing, sockets and JSON on this machine) and, with ``--baseline
DIR``, the ``claw serve`` of another checkout over its own copy of the workspace. Each
client connects with a token and issues ``memory.search`` v2 requests back to back; a
fraction of requests (``--abort-fraction``) is abandoned mid-flight, half by cancelling
(the client sends a cancel frame) and half by disconnecting and reconnecting.

Every server gets the same warm-up (the same sequential queries, then a second of the
same concurrent load), then the phases, all from this one load generator:

* **distinct**: every request a query no request to that server asked before (so no
  cache holds its answer), every server asked the same queries; ``--rounds`` rounds in
  which each server takes its turn (in a rotated order), so a burst of load from
  elsewhere falls on all of them alike. Afterwards each claw answer is checked against
  the answer the same query gets when asked again alone;
* **cycled**: 200 queries in turn (warm caches), each claw answer checked against the
  answer of a sequential warm-up;
* **layers** (``--profile-seconds``, 0: none): one more distinct phase per server with
  the stack sampler of :mod:`benchmarks._layers` on, which charges the server's CPU to
  the layer each thread was in (transport, json, gateway, conversion, guard, provider,
  index, embedding, ranking, tantivy, numpy). Its own CPU is reported and left out of
  the shares; its overhead is the profiled phase's CPU per request over the distinct
  phase's. A layer's microseconds per request are its share times the distinct phase's
  CPU per request.

A mismatch is *wrong*; a request with neither an answer nor an error within 10 s is
*lost*; the server must still answer ``memory.status`` afterwards. Each phase reports
the server's CPU time and the load generator's per answered request, and the machine's
load average at its end. The server's CPU is that of its whole process tree (the
``claw serve`` supervisor and every worker, from ``/proc``). ``claw_over_echo`` is the
ratio of requests per second (distinct phase) and ``claw_over_echo_per_core`` that of
requests per second of server CPU.

``--workers 1,2`` adds a scaling run: for each count N in turn, ``claw serve --workers
N`` over the same index answers a distinct-query phase of the same length (queries no
other phase asked). It reports requests/s and server CPU per request for each N and
their ratios; the target is >= 1.6x the requests/s of 1 worker with 2, at equal CPU
per request. The load generator is one process on the same machine: on 2 cores it
competes with the workers for CPU, so its CPU per request is printed beside them.

    python -m benchmarks.gateway_load --clients C --seconds S [--rounds R]
        [--profile-seconds P] [--baseline DIR ...] [--workers 1,2] [--json]
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
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import trio

from benchmarks import _layers
from benchmarks._common import emit_json, load, machine, percentile, table
from benchmarks._corpus import Corpus

REQUEST_TIMEOUT = 10.0
CYCLED = 200
WARM_UP = 50
WARM_UP_LOAD_S = 1.0
# Distinct queries generated per second of a distinct phase: above the rate reached.
DISTINCT_PER_SECOND = 3_000
VERIFIERS = 4
ROOT = Path(__file__).resolve().parents[1]

# Issue 27's targets for the distinct phase (a quiet machine).
TARGET_CPU_US = 900.0
TARGET_OVER_ECHO = 0.4
TARGET_P99_MS = 60.0
TARGET_AROUND_US = 250.0


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


def _sampled(main: str, *args: str) -> list[str]:
    """``main`` (``module:function``) in this interpreter, with the layer sampler installed
    first (it samples only when the benchmark says so; see :mod:`benchmarks._layers`).
    Run in a directory whose ``benchmarks`` is this one."""
    module, function = main.split(":")
    code = (
        "import sys, benchmarks._layers as layers; layers.install(); "
        f"from {module} import {function}; sys.exit({function}())"
    )
    return [sys.executable, "-c", code, *args]


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


class _Raw:
    """What one phase (or several, merged) measured, before it becomes figures."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.answers: list[tuple[str, tuple[str, ...]]] = []
        self.errors: collections.Counter[str] = collections.Counter()
        self.counts = {"ok": 0, "wrong": 0, "lost": 0, "cancelled": 0, "disconnected": 0}
        self.issued = 0
        self.distinct = 0
        self.elapsed = 0.0
        self.server_cpu = 0.0
        self.own_cpu = 0.0
        self.loads: list[float] = []

    def add(self, other: _Raw) -> None:
        self.latencies += other.latencies
        self.answers += other.answers
        self.errors.update(other.errors)
        for key, n in other.counts.items():
            self.counts[key] += n
        self.issued += other.issued
        self.distinct += other.distinct
        self.elapsed += other.elapsed
        self.server_cpu += other.server_cpu
        self.own_cpu += other.own_cpu
        self.loads += other.loads

    def figures(self) -> dict[str, Any]:
        answered = len(self.latencies)
        per = 1e6 / answered if answered else float("nan")
        return {
            "requests_per_s": answered / self.elapsed if self.elapsed > 0 else float("nan"),
            "p50_ms": percentile(self.latencies, 50),
            "p99_ms": percentile(self.latencies, 99),
            "answered": answered,
            "wrong": self.counts["wrong"],
            "lost": self.counts["lost"],
            "cancelled": self.counts["cancelled"],
            "disconnected": self.counts["disconnected"],
            "errors": dict(self.errors),
            "server_cpu_us_per_request": self.server_cpu * per,
            "loadgen_cpu_us_per_request": self.own_cpu * per,
            "server_cores_busy": self.server_cpu / self.elapsed if self.elapsed > 0 else 0.0,
            "queries_issued": self.issued,
            "distinct_queries": self.distinct,
            "load": self.loads[-1] if self.loads else load(),
            "loads": list(self.loads),
        }


async def _measure(
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
) -> _Raw:
    """One phase: ``clients`` clients for ``seconds`` (see :func:`_load`)."""
    from claw.gateway import GatewayConnectionError, GatewayRequestError, open_gateway_client

    raw = _Raw()
    counts, errors, latencies = raw.counts, raw.errors, raw.latencies
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
                            raw.answers.append((q, _ids(payload)))
            except GatewayConnectionError as exc:
                errors["connection: " + str(exc)[:60]] += 1

    server_cpu = tree_cpu_s(server_pid)
    own_cpu = _own_cpu_s()
    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for s in range(clients):
            nursery.start_soon(client, s)
    raw.elapsed = time.perf_counter() - t0
    raw.server_cpu = tree_cpu_s(server_pid) - server_cpu
    raw.own_cpu = _own_cpu_s() - own_cpu
    raw.issued = issued[0]
    raw.distinct = min(issued[0], len(queries))
    raw.loads = [load()]
    return raw


async def _load(
    url: str, token: str, **phase: Any
) -> tuple[dict[str, Any], list[tuple[str, tuple[str, ...]]]]:
    """One phase (the arguments of :func:`_measure`): its figures and the answers to check.

    ``check="inline"`` compares each answer with ``expected`` as it arrives; ``"after"``
    returns the answers for :func:`_verify`; ``"none"`` (the echo server) checks nothing.
    """
    raw = await _measure(url, token, **phase)
    return raw.figures(), raw.answers


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


async def _record(url: str, token: str, query: str) -> Any:
    """One real ``memory.search`` answer (what the echo server answers with)."""
    from claw.gateway import open_gateway_client

    async with open_gateway_client(url, token) as c:
        return await c.request("memory.search", _params(query))


async def _swallow(fn: Any, *args: Any) -> None:
    from claw.gateway import GatewayConnectionError, GatewayRequestError

    with contextlib.suppress(GatewayConnectionError, GatewayRequestError):
        await fn(*args)


class Server:
    """A server process of the run: its name, URL, pid and the layer sampler's pipe."""

    def __init__(
        self, name: str, kind: str, url: str, pid: int, control: tuple[int, int] | None
    ) -> None:
        self.name = name
        self.kind = kind  # "claw" or "echo"
        self.url = url
        self.pid = pid
        self._control = control
        self._pending = b""

    @property
    def sampled(self) -> bool:
        return self._control is not None

    def _command(self, command: str) -> str:
        assert self._control is not None
        write, read = self._control
        os.write(write, command.encode() + b"\n")
        while b"\n" not in self._pending:
            chunk = os.read(read, 1 << 16)
            if not chunk:
                raise SystemExit(f"{self.name}: the layer sampler did not answer {command!r}")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode()

    def sample_layers(self) -> None:
        """Start charging the server's CPU to layers (see :mod:`benchmarks._layers`)."""
        self._command("start")

    def layers(self) -> dict[str, Any]:
        """Stop sampling; what each layer was charged since :meth:`sample_layers`."""
        report: dict[str, Any] = json.loads(self._command("stop"))
        return report


@contextlib.contextmanager
def _start(
    name: str,
    kind: str,
    args: Sequence[str],
    env: dict[str, str],
    *,
    cwd: Path | None = None,
    sampled: bool = False,
) -> Iterator[Server]:
    """Start a server process printing ``... listening on URL``; yield it, then stop it.

    ``sampled``: ``args`` installs :mod:`benchmarks._layers`; its command pipe is passed.
    """
    env = dict(env)
    pass_fds: tuple[int, ...] = ()
    control: tuple[int, int] | None = None
    theirs: tuple[int, ...] = ()
    if sampled:
        command_r, command_w = os.pipe()
        reply_r, reply_w = os.pipe()
        env[_layers.ENV] = f"{command_r},{reply_w}"
        pass_fds = theirs = (command_r, reply_w)
        control = (command_w, reply_r)
    server = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=cwd,
        pass_fds=pass_fds,
    )
    for fd in theirs:
        os.close(fd)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if "listening on" not in line:
            raise SystemExit(f"{name} server did not start: {line!r}")
        yield Server(name, kind, line.rsplit(" ", 1)[-1].strip(), server.pid, control)
    finally:
        if control is not None:
            for fd in control:
                os.close(fd)
        if server.stdout is not None:
            server.stdout.close()
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@contextlib.contextmanager
def _server(
    args: Sequence[str], env: dict[str, str], cwd: Path | None = None
) -> Iterator[tuple[str, int]]:
    """Start a server process printing ``... listening on URL``; yield its URL and pid."""
    with _start(str(args[-1]), "claw", args, env, cwd=cwd) as server:
        yield server.url, server.pid


def _serve_args(ws: Path, workers: int) -> list[str]:
    return ["serve", "--workspace", str(ws), "--host", "127.0.0.1", "--port", "0",
            "--workers", str(workers)]


def _serve_command(ws: Path, workers: int) -> list[str]:
    return _claw(*_serve_args(ws, workers))


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


def _baseline_name(checkout: Path, taken: Sequence[str]) -> str:
    name = f"baseline {checkout.name}"
    while name in taken:
        name += "'"
    return name


def _layer_figures(
    report: dict[str, Any], profiled: _Raw, plain: dict[str, Any]
) -> dict[str, Any]:
    """A sampler report as shares of the server's CPU and microseconds per request."""
    cpu = float(report["cpu_s"])
    sampler = float(report["sampler_cpu_s"])
    measured = max(cpu - sampler, 1e-12)
    shares = {layer: float(used) / measured for layer, used in report["layers"].items()}
    shares["unsampled"] = float(report["unsampled_cpu_s"]) / measured
    per_request = plain["server_cpu_us_per_request"]
    us = {layer: share * per_request for layer, share in shares.items()}
    phase = profiled.figures()
    overhead = (
        phase["server_cpu_us_per_request"] / per_request - 1.0 if per_request > 0 else float("nan")
    )
    return {
        "share": shares,
        "us_per_request": us,
        "around_search_us_per_request": sum(us[layer] for layer in _layers.AROUND_SEARCH),
        "profiled_server_cpu_us_per_request": phase["server_cpu_us_per_request"],
        "profiled_requests_per_s": phase["requests_per_s"],
        "overhead": overhead,
        "sampler_cpu_share": sampler / cpu if cpu > 0 else float("nan"),
        "samples": report["samples"],
        "interval_s": report["interval_s"],
        "top": report["top"],
    }


def _phases(
    servers: Sequence[Server],
    token: str,
    *,
    cycled: Sequence[str],
    warm: Sequence[str],
    rounds: Sequence[Sequence[str]],
    profiled_queries: Sequence[str],
    clients: int,
    seconds: float,
    profile_seconds: float,
    abort_fraction: float,
) -> dict[str, dict[str, Any]]:
    """Warm every server alike, then the distinct rounds (each its own queries), the
    cycled phases and the profiled phases; each server's figures by name."""
    args: dict[str, Any] = {"clients": clients, "abort_fraction": abort_fraction}
    for server in servers:
        trio.run(_expected, server.url, token, warm)
        if server.sampled and profile_seconds > 0:
            # The sampler reads each code object the first time it sees one: it does
            # that here, so that the profiled phase pays only for sampling.
            server.sample_layers()
        trio.run(
            functools.partial(
                _measure, server.url, token, queries=warm,
                seconds=min(WARM_UP_LOAD_S, seconds), server_pid=server.pid, check="none",
                **args,
            )
        )
        if server.sampled and profile_seconds > 0:
            server.layers()
    raws = {server.name: _Raw() for server in servers}
    for r, queries in enumerate(rounds):
        for server in [*servers[r % len(servers) :], *servers[: r % len(servers)]]:
            raws[server.name].add(
                trio.run(
                    functools.partial(
                        _measure, server.url, token, queries=queries, seconds=seconds / len(rounds),
                        server_pid=server.pid,
                        check="after" if server.kind == "claw" else "none", **args,
                    )
                )
            )
    out: dict[str, dict[str, Any]] = {}
    for server in servers:
        raw = raws[server.name]
        figures = raw.figures()
        if server.kind == "claw":
            figures["wrong"] = trio.run(_verify, server.url, token, raw.answers)
            expected = trio.run(_expected, server.url, token, cycled)
            figures["cycled"] = trio.run(
                functools.partial(
                    _measure, server.url, token, queries=cycled, seconds=seconds,
                    server_pid=server.pid, check="inline", expected=expected, **args,
                )
            ).figures()
        out[server.name] = figures
    if profile_seconds > 0:
        for server in servers:
            if not server.sampled:
                continue
            server.sample_layers()
            profiled = trio.run(
                functools.partial(
                    _measure, server.url, token, queries=profiled_queries,
                    seconds=profile_seconds,
                    server_pid=server.pid, check="none", **args,
                )
            )
            out[server.name]["layers"] = _layer_figures(
                server.layers(), profiled, out[server.name]
            )
    for server in servers:
        if server.kind == "claw":
            out[server.name]["server_alive_after"] = trio.run(_alive, server.url, token)
    return out


def _config(ws: Path, embedder: str | None) -> None:
    if embedder is not None:
        (ws / "claw.toml").write_text(
            f'[plugins.entries.memory-core.config]\nembedder = "{embedder}"\n', encoding="utf-8"
        )


def run(
    chunks: int,
    clients: int,
    seconds: float,
    abort_fraction: float,
    workers: Sequence[int] = (1,),
    *,
    rounds: int = 2,
    profile_seconds: float | None = None,
    baselines: Sequence[Path] = (),
    embedder: str | None = None,
) -> dict[str, Any]:
    from benchmarks.latency._orchestrate import _baseline_tree

    token = secrets.token_urlsafe(16)
    rounds = max(1, rounds)
    profile = seconds if profile_seconds is None else profile_seconds
    scaling = list(workers) != [1]
    with tempfile.TemporaryDirectory(prefix="claw-gateway-load-") as tmp:
        ws = Path(tmp) / "ws"
        per_round = max(1_000, int(DISTINCT_PER_SECOND * seconds / rounds))
        per_profile = max(1_000, int(DISTINCT_PER_SECOND * profile))
        distinct_count = per_round * rounds + per_profile
        scaling_count = max(1_000, int(DISTINCT_PER_SECOND * seconds)) * len(workers)
        cycled, warm, every_distinct = _write_workspace(
            ws, chunks, distinct_count + (scaling_count if scaling else 0)
        )
        _config(ws, embedder)
        distinct = every_distinct[:distinct_count]
        env = dict(os.environ, CLAW_GATEWAY_TOKEN=token)
        # Each claw indexes its own copy of the workspace (an earlier checkout may index
        # differently), in the directory whose packages it imports.
        systems: list[tuple[str, Path, Path]] = [("claw", ROOT, ws)]
        for checkout in baselines:
            name = _baseline_name(checkout, [s[0] for s in systems])
            tree = _baseline_tree(checkout.resolve(), Path(tmp) / f"tree-{len(systems)}")
            copy = Path(tmp) / f"ws-{len(systems)}"
            shutil.copytree(ws / "memory", copy / "memory")
            _config(copy, embedder)
            systems.append((name, tree, copy))
        builds: dict[str, float] = {}
        for name, cwd, where in systems:
            t0 = time.perf_counter()
            subprocess.run(
                _claw("memory", "index", "--workspace", str(where)),
                check=True, capture_output=True, cwd=cwd,
            )
            builds[name] = time.perf_counter() - t0
        payload_file = Path(tmp) / "payload.json"
        with contextlib.ExitStack() as stack:
            servers = [
                stack.enter_context(
                    _start(name, "claw", _sampled("claw._cli:main", *_serve_args(where, 1)), env,
                           cwd=cwd, sampled=True)
                )
                for name, cwd, where in systems
            ]
            recorded = trio.run(_record, servers[0].url, token, cycled[0])
            payload_file.write_text(json.dumps(recorded), encoding="utf-8")
            servers.append(
                stack.enter_context(
                    _start("echo", "echo", _sampled("benchmarks._echo:main", str(payload_file)),
                           dict(os.environ), cwd=ROOT, sampled=True)
                )
            )
            figures = _phases(
                servers, token, cycled=cycled, warm=warm,
                rounds=[distinct[k * per_round : (k + 1) * per_round] for k in range(rounds)],
                profiled_queries=distinct[rounds * per_round :], clients=clients,
                seconds=seconds, profile_seconds=profile,
                abort_fraction=abort_fraction,
            )
        result = figures["claw"]
        echo = figures["echo"]
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
    for name, _, _ in systems:
        _over_echo(figures[name], echo)
    result["baselines"] = {name: figures[name] for name, _, _ in systems[1:]}
    for base in result["baselines"].values():
        base["claw_cpu_over_baseline"] = _ratio(
            result["server_cpu_us_per_request"], base["server_cpu_us_per_request"]
        )
        base["claw_requests_over_baseline"] = _ratio(
            result["requests_per_s"], base["requests_per_s"]
        )
    result["clients"] = clients
    result["rounds"] = rounds
    result["seconds"] = seconds
    result["echo"] = echo
    result["chunks"] = chunks
    result["embedder"] = embedder or "default"
    result["index_build_s"] = builds["claw"]
    result["index_build_s_by_system"] = builds
    result["machine"] = machine()
    return result


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def _over_echo(r: dict[str, Any], echo: dict[str, Any]) -> None:
    cycled = r["cycled"]
    r["wrong_or_lost"] = r["wrong"] + r["lost"] + cycled["wrong"] + cycled["lost"]
    r["claw_over_echo"] = _ratio(r["requests_per_s"], echo["requests_per_s"])
    r["cycled_over_echo"] = _ratio(cycled["requests_per_s"], echo["requests_per_s"])
    # Requests per second of server CPU, claw over echo: the ratio a starved server
    # (a loaded machine, or a load generator short of CPU) still measures.
    # CPU is read in clock ticks (10 ms): a phase of a few requests can measure none.
    r["claw_over_echo_per_core"] = _ratio(
        echo["server_cpu_us_per_request"], r["server_cpu_us_per_request"]
    )


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gateway_load")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=float, default=10.0,
                   help="duration of each server's distinct phase (split over --rounds), "
                        "and of each cycled phase")
    p.add_argument("--rounds", type=int, default=2,
                   help="rounds of the distinct phase, the servers taking turns in each")
    p.add_argument("--profile-seconds", type=float, default=None,
                   help="length of the layer-sampled phase per server (default --seconds; "
                        "0: no layer figures)")
    p.add_argument("--baseline", type=Path, action="append", default=[],
                   help="another checkout (git worktree add --detach DIR COMMIT) whose claw "
                        "serve is measured in the same run (repeatable)")
    p.add_argument("--embedder", help="Memory Core's embedder for every claw (default: "
                                      "each checkout's default)")
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
    r = run(
        args.chunks, args.clients, args.seconds, args.abort_fraction, args.workers,
        rounds=args.rounds, profile_seconds=args.profile_seconds, baselines=args.baseline,
        embedder=args.embedder,
    )
    _print(r, args.seconds)
    if "workers" in r:
        _print_scaling(r, args.workers)
    if args.json:
        emit_json(r)


def _print(r: dict[str, Any], seconds: float) -> None:
    print(
        f"gateway load: {r['chunks']} chunks, {r['clients']} clients, {seconds:g} s of distinct "
        f"queries a server in {r['rounds']} rounds (servers taking turns), {seconds:g} s cycled; "
        "load = 1-minute load average at the end of the phase"
    )
    systems = [("claw", r), *r["baselines"].items()]
    rows = []
    for name, s in systems:
        for label, phase in ((f"{name}, distinct queries", s),
                             (f"{name}, 200 cycled queries", s["cycled"])):
            rows.append(_row(label, phase, phase["wrong"]))
    rows.append(_row("bare echo server", r["echo"], "-"))
    print(
        table(
            ["phase", "requests/s", "p50 ms", "p99 ms", "answered", "wrong", "lost",
             "cancelled", "disconnected", "server CPU us/req", "server cores",
             "loadgen CPU us/req", "load"],
            rows,
        )
    )
    for name, s in systems:
        print(
            f"{name}: claw_over_echo {s['claw_over_echo']:.2f} (target >= {TARGET_OVER_ECHO}; "
            f"cycled {s['cycled_over_echo']:.2f}; per core of server CPU "
            f"{s['claw_over_echo_per_core']:.2f}); server_cpu_us_per_request "
            f"{s['server_cpu_us_per_request']:.0f} (target <= {TARGET_CPU_US:.0f}); p99 "
            f"{s['p99_ms']:.1f} ms (target <= {TARGET_P99_MS:.0f}); wrong_or_lost "
            f"{s['wrong_or_lost']}; {s['distinct_queries']} distinct queries of "
            f"{s['queries_issued']} issued; answering afterwards: {s['server_alive_after']}; "
            f"errors: {s['errors'] or 'none'} (cycled: {s['cycled']['errors'] or 'none'})"
        )
    for name, base in r["baselines"].items():
        print(
            f"claw against {name}: server CPU per request x{base['claw_cpu_over_baseline']:.2f},"
            f" requests/s x{base['claw_requests_over_baseline']:.2f}"
        )
    _print_layers([*systems, ("echo", r["echo"])])


def _row(label: str, phase: dict[str, Any], wrong: object) -> list[object]:
    return [
        label, phase["requests_per_s"], phase["p50_ms"], phase["p99_ms"], phase["answered"],
        wrong, phase["lost"], phase["cancelled"], phase["disconnected"],
        phase["server_cpu_us_per_request"], phase["server_cores_busy"],
        phase["loadgen_cpu_us_per_request"], phase["load"],
    ]


def _print_layers(systems: Sequence[tuple[str, dict[str, Any]]]) -> None:
    profiled = [(name, s["layers"]) for name, s in systems if "layers" in s]
    if not profiled:
        return
    print(
        "\nserver CPU by layer (a profiled distinct phase, benchmarks/_layers.py): share of the "
        "server's CPU, and that share of the distinct phase's CPU per request in us"
    )
    headers = ["layer"]
    for name, _ in profiled:
        headers += [f"{name} %", f"{name} us/req"]
    rows = []
    for layer in (*_layers.LAYERS, "unsampled"):
        row: list[object] = [layer]
        for _, figures in profiled:
            row += [100.0 * figures["share"][layer], figures["us_per_request"][layer]]
        rows.append(row)
    around: list[object] = ["around the search: " + " + ".join(_layers.AROUND_SEARCH)]
    for _, figures in profiled:
        around += ["", figures["around_search_us_per_request"]]
    rows.append(around)
    print(table(headers, rows))
    for name, figures in profiled:
        print(
            f"{name}: {figures['samples']} samples every {1000 * figures['interval_s']:g} ms; "
            f"the sampler used {100 * figures['sampler_cpu_share']:.1f}% of the server's CPU "
            f"(left out of the shares); profiled phase "
            f"{figures['profiled_server_cpu_us_per_request']:.0f} us/req, "
            f"{100 * figures['overhead']:+.0f}% over the distinct phase"
        )
    name, figures = profiled[0]
    print(f"\n{name}: the functions charged the most CPU")
    print(
        table(
            ["layer", "function", "share %"],
            [
                [t["layer"], t["where"][:100], 100.0 * t["cpu_s"] / max(
                    sum(x["cpu_s"] for x in figures["top"]), 1e-12)]
                for t in figures["top"][:25]
            ],
        )
    )


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
