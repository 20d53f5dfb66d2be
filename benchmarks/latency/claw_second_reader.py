"""A second reader: a fresh process opening the index the claw worker published (and
still holds) read-only, to measure what another process costs the machine."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs

from benchmarks._common import load, percentile

from ._shared import OPTIONS, RESULTS
from ._vectors import StoredCorpusVectors
from .claw_config import _memory_core_config

# How many queries the second reader searches (each once, hybrid).
SECOND_READER_QUERIES = 100


def _memory_status() -> dict[str, float]:
    """This process's memory now, MiB: ``VmRSS``/``VmHWM`` and their anonymous and
    file-backed parts, and from ``smaps_rollup`` the pages only this process maps
    (``private``) and those it shares with another (``shared``: the writer's matrix)."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) / 1024.0
    with contextlib.suppress(OSError):
        private = shared = 0
        for line in Path("/proc/self/smaps_rollup").read_text(encoding="ascii").splitlines():
            key, _, value = line.partition(":")
            if key in ("Private_Clean", "Private_Dirty"):
                private += int(value.split()[0])
            elif key in ("Shared_Clean", "Shared_Dirty"):
                shared += int(value.split()[0])
        out["private"], out["shared"] = private / 1024.0, shared / 1024.0
    return out


def run_second_reader(root: Path, index_dir: Path, workspace: Path) -> None:
    """A second process reading the index another process published and still holds:
    it opens it read-only (no sync, no writer lease) and searches; it reports its memory
    above its own baseline, taken after its imports and before the open."""
    import trio

    from claw.plugin_sdk import ThreadWorkerPool
    from claw_memory._index import open_memory_index
    from claw_memory._plugin import MemoryCoreConfig

    qs = (root / "queries.txt").read_text(encoding="utf-8").splitlines()
    vectors = StoredCorpusVectors(root, chunks=False)
    settings = attrs.evolve(
        MemoryCoreConfig.from_mapping(_memory_core_config(None)).settings,
        sync_on_open=False,
        sync_on_search=False,
    )

    async def main() -> dict[str, Any]:
        before = _memory_status()
        t = time.perf_counter()
        async with open_memory_index(
            workspace_dir=workspace,
            index_dir=index_dir,
            workers=ThreadWorkerPool(max_workers=2),
            settings=settings,
            embedder=vectors,
        ) as index:
            opened = time.perf_counter() - t
            lat = []
            for q in qs[:SECOND_READER_QUERIES]:
                t = time.perf_counter()
                res = await index.search(q, max_results=RESULTS, min_score=0.0)
                lat.append((time.perf_counter() - t) * 1000.0)
                assert res.hits, "the second reader found nothing for a corpus query"
            after = _memory_status()
            chunks = index.status().chunks
        return {
            "open_s": opened,
            "p50_ms": percentile(lat, 50),
            "chunks": chunks,
            "before": before,
            "after": after,
            "load": load(),
        }

    print(json.dumps(trio.run(main)), flush=True)


def _second_reader(root: Path, state: Path, workspace: Path) -> dict[str, Any]:
    """Run :func:`run_second_reader` in a fresh interpreter on the index under ``state``."""
    (pointer,) = list(state.glob("memory/*/CURRENT"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.search_latency",
            "--worker",
            "second-reader",
            "--root",
            str(root),
            "--index-dir",
            str(pointer.parent),
            "--workspace",
            str(workspace),
            "--approximate-rows",
            str(OPTIONS["approximate_rows"]),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
    )
    if done.returncode != 0:
        return {"second_reader_error": done.stderr.strip().splitlines()[-1:]}
    out = json.loads(done.stdout.strip().splitlines()[-1])
    before, after = out["before"], out["after"]
    return {
        # Memory the second process adds to the machine: pages only it maps (its
        # Python objects, columns, tantivy readers), above its own pre-open baseline.
        "second_reader_rss_mib": after["private"] - before["private"],
        # Its plain VmRSS growth, which also counts the pages of the writer's matrix
        # it maps (shared, one copy in the page cache).
        "second_reader_vmrss_mib": after["VmRSS"] - before["VmRSS"],
        "second_reader_shared_mib": after["shared"] - before["shared"],
        "second_reader_open_s": out["open_s"],
        "second_reader_p50_ms": out["p50_ms"],
        "second_reader_chunks": out["chunks"],
        "second_reader_load": out["load"],
    }
