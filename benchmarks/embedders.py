"""The embedded default's budgets: query embedding latency and the first index of 10k chunks.

For each built-in embedder (``claw-static``, the default; ``claw-hash``) and lexical
only, this builds a fresh workspace of about 10,000 memory-file chunks of real chat
text (LongMemEval turns, ~1,500 characters a chunk), times Memory Core's first index of
it (wall clock and CPU time of the process, every thread), then times the embedding of
each question of the same file as a query, one at a time (p50, p95), and prints the
size of what the embedder installs. Budgets (issue 26): query embedding p50 <= 5 ms,
first index of a 10k-chunk workspace <= 60 s on 2 cores. The load average is printed
beside every figure: on a shared machine a time means little without it.

    python -m benchmarks.embedders [--data FILE] [--chunks N] [--json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio
from threadpoolctl import threadpool_limits

from benchmarks._common import emit_json, machine, percentile, table
from benchmarks._common import load as machine_load
from benchmarks.longmemeval import DEFAULT_DATA
from claw.plugin_sdk import EmbeddingProvider, ThreadWorkerPool
from claw.plugin_sdk.search import HashEmbedder, StaticEmbedder
from claw.plugin_sdk.search._static_embedder import PACKAGED_TABLE
from claw_memory import MemoryCoreSettings, open_memory_index

CHUNK_CHARS = 1500
CHUNKS_PER_FILE = 100


def corpus(path: Path, chunks: int) -> tuple[list[str], list[str]]:
    """``chunks`` paragraphs of about :data:`CHUNK_CHARS` characters of chat text, and the
    file's questions."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        raw = json.load(f)
    out: list[str] = []
    buf = ""
    for turns in raw["sessions"].values():
        for t in turns:
            buf += " " + " ".join(str(t["content"]).split())
            while len(buf) >= CHUNK_CHARS:
                out.append(buf[:CHUNK_CHARS].strip())
                buf = buf[CHUNK_CHARS:]
                if len(out) >= chunks:
                    return out, [str(q["question"]) for q in raw["questions"]]
    if buf.strip():
        out.append(buf.strip())  # a file with less text than asked for: all of it
    return out, [str(q["question"]) for q in raw["questions"]]


def write_workspace(root: Path, paragraphs: Sequence[str]) -> None:
    """Markdown files of :data:`CHUNKS_PER_FILE` paragraphs, one line each."""
    (root / "memory").mkdir(parents=True)
    for n in range(0, len(paragraphs), CHUNKS_PER_FILE):
        body = "\n\n".join(paragraphs[n : n + CHUNKS_PER_FILE])
        (root / "memory" / f"notes-{n // CHUNKS_PER_FILE:04d}.md").write_text(
            f"# Notes {n}\n\n{body}\n", encoding="utf-8"
        )


async def first_index(
    workspace: Path, index_dir: Path, embedder: EmbeddingProvider | None
) -> dict[str, Any]:
    """Open a fresh index over ``workspace`` (its first sync) and time it."""
    load_before = machine_load()
    t0, c0 = time.perf_counter(), time.process_time()
    async with open_memory_index(
        workspace_dir=workspace,
        index_dir=index_dir,
        workers=ThreadWorkerPool(max_workers=2),
        settings=MemoryCoreSettings(),
        embedder=embedder,
    ) as index:
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        chunks = index.status().chunks
    return {
        "chunks": chunks,
        "first_index_s": wall,
        "first_index_cpu_s": cpu,
        "chunks_per_s": chunks / wall if wall > 0 else float("nan"),
        "index_load_before": load_before,
        "index_load_after": machine_load(),
    }


def query_latency(embedder: Any, questions: Sequence[str]) -> dict[str, Any]:
    """Milliseconds to embed each question alone, on the calling thread."""
    embedder.embed_sync(questions[:5])  # the table is read on first use, not timed
    times = []
    load_before = machine_load()
    with threadpool_limits(limits=1, user_api="blas"):
        for q in questions:
            t = time.perf_counter()
            embedder.embed_sync([q])
            times.append((time.perf_counter() - t) * 1000.0)
    return {
        "query_embed_p50_ms": percentile(times, 50),
        "query_embed_p95_ms": percentile(times, 95),
        "query_load_before": load_before,
        "query_load_after": machine_load(),
    }


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.embedders", description=__doc__)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LongMemEval gzip JSON")
    p.add_argument("--chunks", type=int, default=10_000, help="chunks in the workspace")
    p.add_argument("--configs", default="claw-static,claw-hash,lexical")
    p.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    args = p.parse_args(argv)
    if not args.data.exists():
        raise SystemExit(f"LongMemEval data not found at {args.data}; pass --data FILE")
    paragraphs, questions = corpus(args.data, args.chunks)
    makers = {
        "claw-static": lambda: StaticEmbedder(workers=ThreadWorkerPool(max_workers=2)),
        "claw-hash": lambda: HashEmbedder(workers=ThreadWorkerPool(max_workers=2)),
        "lexical": lambda: None,
    }
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="claw-embedders-") as tmp:
        workspace = Path(tmp) / "ws"
        write_workspace(workspace, paragraphs)
        for name in args.configs.split(","):
            if name not in makers:
                raise SystemExit(f"unknown config {name!r}; use {', '.join(makers)}")
            embedder = makers[name]()
            run = trio.run(first_index, workspace, Path(tmp) / f"index-{name}", embedder)
            if embedder is not None:
                run.update(query_latency(embedder, questions))
            runs[name] = run
            shutil.rmtree(Path(tmp) / f"index-{name}", ignore_errors=True)
    table_mb = PACKAGED_TABLE.stat().st_size / 2**20
    print(
        f"First index of {len(paragraphs)} paragraphs of ~{CHUNK_CHARS} characters"
        f" (LongMemEval turns) and query embedding of {len(questions)} questions;"
        f" claw-static's table: {table_mb:.1f} MiB installed"
    )
    keys = [
        "chunks",
        "first_index_s",
        "first_index_cpu_s",
        "chunks_per_s",
        "index_load_before",
        "index_load_after",
        "query_embed_p50_ms",
        "query_embed_p95_ms",
        "query_load_after",
    ]
    print(
        table(
            ["config", *keys],
            [[name, *(r.get(k, float("nan")) for k in keys)] for name, r in runs.items()],
        )
    )
    if args.json:
        emit_json({"runs": runs, "static_table_mib": table_mb, "machine": machine()})


if __name__ == "__main__":
    main()
