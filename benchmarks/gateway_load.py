"""Gateway load: ``claw serve`` on loopback, C concurrent clients issuing memory.search v2.

A workspace of synthetic memory files (``--chunks``, 10k by default; see
:mod:`benchmarks._corpus`) is indexed with ``claw memory index``, then ``claw serve``
runs in its own process on 127.0.0.1. Each client connects with a token and issues
``memory.search`` v2 requests back to back for ``--seconds``; a fraction of requests
(``--abort-fraction``) is abandoned mid-flight, half by cancelling (the client sends a
cancel frame) and half by disconnecting and reconnecting. Afterwards:

* every answered request is checked against the answer the same query got in a
  sequential warm-up (same hit references in the same order): a mismatch is *wrong*;
* a request with neither an answer nor an error within 10 s is *lost*;
* the server must still answer ``memory.status``.

    python -m benchmarks.gateway_load --clients C --seconds S [--json]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from benchmarks._common import emit_json, machine, percentile, table
from benchmarks._corpus import Corpus

REQUEST_TIMEOUT = 10.0


def _write_workspace(ws: Path, chunks: int) -> list[str]:
    corpus = Corpus()
    texts = corpus.chunk_texts(chunks)
    (ws / "memory").mkdir(parents=True)
    for f, start in enumerate(range(0, len(texts), 100)):
        (ws / "memory" / f"notes-{f:05d}.md").write_text(
            "\n\n".join(texts[start : start + 100]) + "\n", encoding="utf-8"
        )
    return corpus.queries(texts, 200)


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


async def _load(
    url: str,
    token: str,
    *,
    queries: Sequence[str],
    clients: int,
    seconds: float,
    abort_fraction: float,
) -> dict[str, Any]:
    from claw.gateway import GatewayConnectionError, GatewayRequestError, open_gateway_client

    def params(q: str) -> dict[str, Any]:
        return {"version": 2, "query": q, "maxResults": 6}

    expected: dict[str, tuple[str, ...]] = {}
    async with open_gateway_client(url, token) as c:
        for q in queries:
            expected[q] = _ids(await c.request("memory.search", params(q)))

    latencies: list[float] = []
    errors: collections.Counter[str] = collections.Counter()
    counts = {"ok": 0, "wrong": 0, "lost": 0, "cancelled": 0, "disconnected": 0}
    stop = time.perf_counter() + seconds

    async def client(slot: int) -> None:
        rng = __import__("random").Random(slot)
        i = slot
        while time.perf_counter() < stop:
            try:
                async with open_gateway_client(url, token) as c:
                    while time.perf_counter() < stop:
                        q = queries[i % len(queries)]
                        i += clients
                        roll = rng.random()
                        if roll < abort_fraction / 2:
                            # Cancel mid-request: the client sends a cancel frame.
                            with trio.move_on_after(rng.uniform(0.0, 0.002)):
                                try:
                                    await c.request("memory.search", params(q))
                                except GatewayRequestError as exc:
                                    errors[exc.code] += 1
                            counts["cancelled"] += 1
                            continue
                        if roll < abort_fraction:
                            # Disconnect mid-request, then reconnect.
                            async with trio.open_nursery() as n:
                                n.start_soon(_swallow, c.request, "memory.search", params(q))
                                await trio.sleep(rng.uniform(0.0, 0.002))
                                n.cancel_scope.cancel()
                            counts["disconnected"] += 1
                            break
                        t = time.perf_counter()
                        with trio.move_on_after(REQUEST_TIMEOUT) as scope:
                            try:
                                payload = await c.request("memory.search", params(q))
                            except GatewayRequestError as exc:
                                errors[exc.code] += 1
                                continue
                        if scope.cancelled_caught:
                            counts["lost"] += 1
                            continue
                        latencies.append((time.perf_counter() - t) * 1000.0)
                        if _ids(payload) == expected[q]:
                            counts["ok"] += 1
                        else:
                            counts["wrong"] += 1
            except GatewayConnectionError as exc:
                errors["connection: " + str(exc)[:60]] += 1

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for s in range(clients):
            nursery.start_soon(client, s)
    elapsed = time.perf_counter() - t0
    alive = False
    with trio.move_on_after(REQUEST_TIMEOUT):
        async with open_gateway_client(url, token) as c:
            await c.request("memory.status", {})
            alive = True
    return {
        "clients": clients,
        "requests_per_s": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "answered": len(latencies),
        "wrong_or_lost": counts["wrong"] + counts["lost"],
        "wrong": counts["wrong"],
        "lost": counts["lost"],
        "cancelled": counts["cancelled"],
        "disconnected": counts["disconnected"],
        "errors": dict(errors),
        "server_alive_after": alive,
    }


async def _swallow(fn: Any, *args: Any) -> None:
    from claw.gateway import GatewayConnectionError, GatewayRequestError

    with contextlib.suppress(GatewayConnectionError, GatewayRequestError):
        await fn(*args)


def run(chunks: int, clients: int, seconds: float, abort_fraction: float) -> dict[str, Any]:
    token = secrets.token_urlsafe(16)
    with tempfile.TemporaryDirectory(prefix="claw-gateway-load-") as tmp:
        ws = Path(tmp) / "ws"
        queries = _write_workspace(ws, chunks)
        t0 = time.perf_counter()
        subprocess.run(
            [*_claw("memory", "index", "--workspace", str(ws))],
            check=True,
            capture_output=True,
        )
        build = time.perf_counter() - t0
        env = dict(os.environ, CLAW_GATEWAY_TOKEN=token)
        server = subprocess.Popen(
            [*_claw("serve", "--workspace", str(ws), "--host", "127.0.0.1", "--port", "0")],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        try:
            assert server.stdout is not None
            line = server.stdout.readline()
            if "listening on" not in line:
                raise SystemExit(f"claw serve did not start: {line!r}")
            url = line.rsplit(" ", 1)[-1].strip()
            result = trio.run(
                functools.partial(
                    _load,
                    url,
                    token,
                    queries=queries,
                    clients=clients,
                    seconds=seconds,
                    abort_fraction=abort_fraction,
                )
            )
        finally:
            if server.stdout is not None:
                server.stdout.close()
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    result["chunks"] = chunks
    result["index_build_s"] = build
    result["machine"] = machine()
    return result


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gateway_load")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--chunks", type=int, default=10_000)
    p.add_argument("--abort-fraction", type=float, default=0.05)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    r = run(args.chunks, args.clients, args.seconds, args.abort_fraction)
    print(f"gateway load: {r['chunks']} chunks, {r['clients']} clients, {args.seconds:.0f} s")
    print(
        table(
            [
                "requests/s",
                "p50 ms",
                "p99 ms",
                "answered",
                "wrong",
                "lost",
                "cancelled",
                "disconnected",
                "alive after",
            ],
            [
                [
                    r["requests_per_s"],
                    r["p50_ms"],
                    r["p99_ms"],
                    r["answered"],
                    r["wrong"],
                    r["lost"],
                    r["cancelled"],
                    r["disconnected"],
                    str(r["server_alive_after"]),
                ]
            ],
        )
    )
    print(f"errors by code: {r['errors'] or 'none'}")
    if args.json:
        emit_json(r)


if __name__ == "__main__":
    main()
