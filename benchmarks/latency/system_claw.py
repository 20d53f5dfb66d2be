"""claw: Memory Core through the host's memory provider handle (``host.memory.open``
then ``handle.search``; the full path a caller pays), hybrid and lexical only, with an
embedding provider that serves the corpus vectors. Also its top 10 at several candidate
counts, a second reader, and what a change to one file costs the searches around it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks._common import load, peak_rss_mb, percentile

from ._shared import (
    BASELINE_TAG,
    DURING_SYNC_GAP,
    OPTIONS,
    _dir_bytes,
    _text_lines,
    claw_candidates,
    fastest,
)
from ._vectors import StoredCorpusVectors
from ._worker import send, serve_commands_async
from .claw_config import _claw_config, _hit_row, _request, _write_workspace
from .claw_second_reader import _second_reader


def run_claw(
    root: Path,
    work: Path,
    *,
    reindex_runs: int,
    sweep: Sequence[int],
    shipped: bool = False,
    baseline: bool = False,
) -> None:
    """claw through the provider handle; ``shipped``: the shipped ranking defaults (its
    own index and process), hybrid only, without the sweep and the change runs;
    ``baseline``: the claw of ``--baseline`` (this process imports it), hybrid and
    lexical as for ``claw``, without the second reader, the sweep and the change runs."""
    import contextlib

    import trio

    import claw
    import claw_memory
    from claw.plugin_sdk import Plugin, PluginContracts

    qs = (root / "queries.txt").read_text(encoding="utf-8").splitlines()
    vectors = StoredCorpusVectors(root)
    bench_plugin = Plugin(
        id="bench-vectors",
        name="benchmark vectors",
        version="0",
        register=lambda api: api.register_embedding_provider(vectors),
        contracts=PluginContracts(embedding_providers=("bench-vectors",)),
    )
    ws = work / "workspace"
    files = _write_workspace(ws, _text_lines(root))
    total = len(files) and sum(1 for _ in _text_lines(root))
    default = claw_candidates(total)
    hybrid: dict[str, Any] = {"candidates": default}
    name = "claw hybrid shipped" if shipped else "claw hybrid"
    lexical = "claw lexical"
    if baseline:
        name, lexical = f"{name} {BASELINE_TAG}", f"{lexical} {BASELINE_TAG}"

    @contextlib.asynccontextmanager
    async def handle_of(candidates: int | None) -> Any:
        config = _claw_config(ws, work / "state", candidates, shipped)
        plugins = [claw_memory.plugin, bench_plugin]
        async with claw.open_host(config, plugins=plugins) as host, host.open_scope("b") as scope:
            ctx = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
            async with host.memory.open(ctx) as handle:
                yield handle

    async def main() -> None:
        async with handle_of(None) as handle:
            t0 = time.perf_counter()
            cpu0 = _cpu_s()
            first = await handle.search(_request(qs[0]))
            build = time.perf_counter() - t0
            hybrid["build_cpu_s"] = _cpu_s() - cpu0
            assert first.hits, "claw found nothing for a corpus query"
            chunks = _chunk_count(await handle.health(), total)
            requests = {name: [_request(q) for q in qs]}
            if not shipped:
                requests[lexical] = [_request(q, lexical=True) for q in qs]

            def searcher(kind: str) -> Callable[[int], Awaitable[Any]]:
                async def search(i: int) -> Any:
                    return await handle.search(requests[kind][i])

                return search

            results = await serve_commands_async(
                {kind: searcher(kind) for kind in requests},
                len(qs),
                {"build_s": build, "chunks": chunks},
                convert=lambda res: [_hit_row(h) for h in res.hits],
            )
            if not shipped and not baseline:
                # While this process holds the index open (its matrix mapped).
                hybrid.update(
                    await trio.to_thread.run_sync(_second_reader, root, work / "state", ws)
                )
        hybrid["top"] = results.get(name, [])
        if shipped or baseline:
            return
        hybrid["sweep"] = await _sweep(handle_of, qs, sweep)
        if reindex_runs:
            async with handle_of(None) as handle:
                hybrid.update(await _change_costs(handle, files, qs, reindex_runs))

    trio.run(main)
    common = {"index_mb": _dir_bytes(work / "state") / 2**20, "rss_mb": peak_rss_mb()}
    extra = {name: {**hybrid, **common}}
    if not shipped:
        extra[lexical] = common
    send({"extra": extra})


def _cpu_s() -> float:
    """CPU seconds this process used so far, every thread (on a loaded machine the
    build's wall time mostly measures waiting for a core or the disk)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _chunk_count(health: Any, default: int) -> int:
    """The chunk count a provider's health reports, if it reports one."""
    for source in (getattr(health, "details", None), getattr(health, "index", None)):
        if isinstance(source, dict) and isinstance(source.get("chunks"), int):
            return int(source["chunks"])
    return default


async def _sweep(
    handle_of: Callable[[int | None], Any], qs: Sequence[str], counts: Sequence[int]
) -> list[dict[str, Any]]:
    """claw's hybrid latency and top rows at each candidate count.

    Each count, the default too, gets a freshly opened index for each of
    ``OPTIONS["passes"]`` rounds, the counts interleaved, and reports its best pass.
    """
    requests = [_request(q) for q in qs]
    passes: dict[int, list[list[float]]] = {c: [] for c in counts}
    loads: dict[int, list[float]] = {c: [] for c in counts}
    tops: dict[int, list[list[int]]] = {}
    reopen: list[float] = []
    for _ in range(OPTIONS["passes"]):
        for c in counts:
            t = time.perf_counter()
            async with handle_of(c) as handle:
                await handle.search(requests[0])
                reopen.append(time.perf_counter() - t)
                for r in requests[:20]:
                    await handle.search(r)
                lat, top = [], []
                for r in requests:
                    t = time.perf_counter()
                    res = await handle.search(r)
                    lat.append((time.perf_counter() - t) * 1000.0)
                    top.append([_hit_row(h) for h in res.hits])
            passes[c].append(lat)
            loads[c].append(load())
            tops[c] = top
    out = []
    for c in counts:
        lat = fastest(passes[c])
        out.append(
            {
                "candidates": c,
                "p50_ms": percentile(lat, 50),
                "p95_ms": percentile(lat, 95),
                "load": max(loads[c]),
                "top": tops[c],
                "reopen_s": percentile(reopen, 50),
            }
        )
    return out


async def _change_costs(
    handle: Any, files: Sequence[Path], qs: Sequence[str], runs: int
) -> dict[str, Any]:
    """What one changed file costs the searches around it.

    Each run changes one line of one file, then issues a hybrid search (the one that
    notices the change; it starts the sync), then a hybrid search every
    ``DURING_SYNC_GAP`` (a client searching now and then). A search that carries the
    provider's warning answered from the generation before the change: it arrived
    during the sync. The first without one is the next search after the publication;
    a lexical search for the new word then finds it (the time from the write until
    then is when the change was searchable). With a sync that runs inline the noticing
    search carries no warning and the next search comes at once.
    """
    import trio

    for q in qs[:10]:
        await handle.search(_request(q))  # primes the freshness watch of this handle
    notice: list[float] = []
    warned: list[bool] = []
    during: list[float] = []
    after: list[float] = []
    searchable: list[float] = []
    for run in range(runs):
        path = files[(run * 7919) % len(files)]
        lines = path.read_text(encoding="utf-8").splitlines()
        marker = f"zqxmarker{run}"
        lines[run % len(lines)] = lines[run % len(lines)] + " " + marker
        t_write = time.perf_counter()
        await trio.to_thread.run_sync(path.write_text, "\n".join(lines) + "\n", "utf-8")
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000 * (run + 1)))
        t = time.perf_counter()
        res = await handle.search(_request(qs[(3 * run) % len(qs)]))
        notice.append((time.perf_counter() - t) * 1000.0)
        warned.append(res.warning is not None)
        behind = res.warning is not None
        i = 3 * run + 1
        deadline = time.perf_counter() + 120.0
        while behind:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"the change to {path.name} was never published")
            await trio.sleep(DURING_SYNC_GAP)
            t = time.perf_counter()
            res = await handle.search(_request(qs[i % len(qs)]))
            elapsed = (time.perf_counter() - t) * 1000.0
            i += 1
            behind = res.warning is not None
            if behind:
                during.append(elapsed)
            else:
                after.append(elapsed)
        if not warned[-1]:
            t = time.perf_counter()
            await handle.search(_request(qs[i % len(qs)]))
            after.append((time.perf_counter() - t) * 1000.0)
        found = await handle.search(_request(marker, lexical=True, results=1))
        if not found.hits:
            raise RuntimeError(f"the next search after the sync missed the change to {path.name}")
        searchable.append((time.perf_counter() - t_write) * 1000.0)
    return {
        "change_search_ms": percentile(notice, 50),
        "change_search_max_ms": max(notice),
        # Kept for the acceptance checks: every run now has searches during the sync.
        "change_search_with_traffic_ms": percentile(notice, 50),
        "change_search_warned": sum(warned) / len(warned),
        "during_sync_p50_ms": percentile(during, 50),
        "during_sync_max_ms": max(during, default=float("nan")),
        "during_sync_searches": len(during),
        "next_search_ms": percentile(after, 50),
        "next_search_max_ms": max(after, default=float("nan")),
        "reindex_ms": percentile(searchable, 50),
        "change_load": load(),
    }
