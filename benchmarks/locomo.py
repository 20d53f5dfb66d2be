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

Every figure is reported for a fixed tuning split (conversations 0-4 in file order),
the held-out split (conversations 5-9) and the whole set. Ranking decisions are made
on the tuning split only; the held-out figures are the headline. Besides recall at
each k the report gives per-category figures, where the top hit lies relative to the
evidence (the evidence itself, an adjacent turn, a turn two away, elsewhere in the
same session, another session), an ablation of each field Memory Core ranks on, and
SQLite FTS5 BM25 baselines run in the same process on the same questions.

The data is read from ``../shared/data/locomo/locomo10.json`` (relative to the repo)
or ``--data``; it is CC BY-NC 4.0 and never copied into the repository.

    python -m benchmarks.locomo [--data PATH] [--json] [--configs default,lexical,hash,st]
                                [--no-ablation] [--no-fts5] [--index-dir DIR]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import trio

from benchmarks import _retrieval
from benchmarks._common import emit_json, machine, table
from benchmarks._retrieval import (
    Config,
    Rankings,
    configs_for,
    cost_figures,
    ranked_sessions,
)
from claw.plugin_sdk.search import lexical_search
from claw_memory._index import MemoryIndex
from claw_memory._settings import MemoryCoreSettings
from claw_memory._transcripts import TranscriptTurn

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "locomo" / "locomo10.json"
TURN_KS = (1, 5, 10, 20)
SESSION_KS = (5, 10)
CATEGORIES = (1, 2, 3, 4)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
# Enough hits to fill twenty turns and ten distinct sessions in nearly every case.
SEARCH_RESULTS = 60
# The fixed splits, by position of the conversation in the data file.
TUNING = range(0, 5)
HELDOUT = range(5, 10)
SPLITS = ("tuning", "heldout", "whole")
ACCEPTANCE_KEYS = (
    "turn_recall_any@1",
    "turn_recall_any@10",
    "session_recall_any@5",
    "session_recall_any@10",
)
# Where the top-ranked turn lies relative to the nearest evidence turn.
TOP1_CLASSES = ("evidence", "+-1", "+-2", "same session", "other session", "none")
_DIA = re.compile(r"D(\d+):(\d+)")
_SESSION = re.compile(r"^session_(\d+)$")


@attrs.frozen
class Question:
    conversation: str
    split: str
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
    for position, sample in enumerate(raw):
        sid = str(sample["sample_id"])
        split = "tuning" if position in TUNING else "heldout"
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
                questions.append(Question(sid, split, str(qa["question"]), category, evidence))
    return conversations, questions


def _turn_position(dia: str) -> tuple[int, int] | None:
    m = _DIA.fullmatch(dia)
    return (int(m[1]), int(m[2])) if m else None


def top1_class(question: Question, ranking: Sequence[str]) -> str:
    """Where the top-ranked turn lies relative to the nearest evidence turn."""
    if not ranking:
        return "none"
    top = ranking[0]
    if top in question.evidence:
        return "evidence"
    here = _turn_position(top)
    if here is None:
        return "other session"
    gaps = [
        abs(here[1] - pos[1])
        for pos in (_turn_position(e) for e in question.evidence)
        if pos is not None and pos[0] == here[0]
    ]
    if not gaps:
        return "other session"
    gap = min(gaps)
    return "+-1" if gap == 1 else "+-2" if gap == 2 else "same session"


# What each field contributes: ranking settings that switch one field off. Each
# variant searches the same built index (ranking settings need no rebuild).
ABLATIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("all fields", {}),
    ("without adjacent turns (context)", {"context_boost": 0.0}),
    ("without turns two away (far)", {"far_context_boost": 0.0}),
    ("without the speaker field", {"speaker_boost": 0.0}),
    ("without the session date field", {"date_boost": 0.0}),
    (
        "own text only",
        {"context_boost": 0.0, "far_context_boost": 0.0, "speaker_boost": 0.0, "date_boost": 0.0},
    ),
    ("without the when bonus", {"when_weight": 0.0}),
    (
        "without the second stage (coverage, when)",
        {
            "coverage_weight": 0.0,
            "near_coverage_weight": 0.0,
            "far_coverage_weight": 0.0,
            "when_weight": 0.0,
        },
    ),
    ("second stage on own text only", {"near_coverage_weight": 0.0, "far_coverage_weight": 0.0}),
)


def _agents(conversations: Sequence[Conversation]) -> dict[str, _retrieval.Sessions]:
    return {
        c.sample_id: [
            (f"{c.sample_id}/session-{n}", f"session_{n}", turns) for n, _, turns in c.sessions
        ]
        for c in conversations
    }


async def run_config(
    config: Config,
    conversations: Sequence[Conversation],
    questions: Sequence[Question],
    settings: MemoryCoreSettings,
    variants: Sequence[tuple[str, dict[str, Any]]] = (("all fields", {}),),
    *,
    keep: Path | None = None,
) -> list[Rankings]:
    """Index the conversations once and search every question under each variant
    (:func:`benchmarks._retrieval.run_claw`), a bare tantivy call timed beside each."""
    return await _retrieval.run_claw(
        config,
        _agents(conversations),
        [(q.conversation, q.text) for q in questions],
        settings,
        variants,
        results=SEARCH_RESULTS,
        keep=keep,
        beside=_bare_tantivy_ms,
    )


def _bare_tantivy_ms(index: MemoryIndex, agent: str, question: str) -> float:
    """Milliseconds of a bare tantivy search for ``question`` on ``index``'s generation.

    The floor the hash hybrid's latency is compared with in the same run (both see
    the same machine load): the question's terms as an OR over the text field, in its
    conversation, for the benchmark's page; no context fields, fusion or second stage.
    """
    searcher = index._view.generation.searcher
    if searcher is None:
        return math.nan
    t = time.perf_counter()
    query = index._view.lexical.build_query(
        question,
        context_boost=0.0,
        path_boost=0.0,
        sources=None,
        agent_ids=frozenset([agent]),
        session_keys=None,
    )
    if query is not None:
        lexical_search(searcher, query, SEARCH_RESULTS)
    return (time.perf_counter() - t) * 1000.0


def run_fts5(
    conversations: Sequence[Conversation],
    questions: Sequence[Question],
    *,
    speaker: bool,
    rows: int,
) -> Rankings:
    """SQLite FTS5 BM25 over the conversations' turns (:func:`benchmarks._retrieval.run_fts5`);
    the speaker variant reproduces the data README's reference figures to 0.003."""
    return _retrieval.run_fts5(
        _agents(conversations),
        [(q.conversation, q.text) for q in questions],
        speaker=speaker,
        rows=rows,
    )


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


def _split_figures(questions: Sequence[Question], rankings: Sequence[list[str]]) -> dict[str, Any]:
    figures: dict[str, Any] = {"questions": len(questions), **_recalls(questions, rankings)}
    per: dict[str, Any] = {}
    for c in CATEGORIES:
        idx = [i for i, q in enumerate(questions) if q.category == c]
        if idx:
            per[str(c)] = {
                "name": CATEGORY_NAMES[c],
                "questions": len(idx),
                **_recalls([questions[i] for i in idx], [rankings[i] for i in idx]),
            }
    figures["per_category"] = per
    classes = [top1_class(q, r) for q, r in zip(questions, rankings, strict=True)]
    n = len(classes) or 1
    figures["top1"] = {c: classes.count(c) / n for c in TOP1_CLASSES}
    return figures


def score(questions: Sequence[Question], run: Rankings) -> dict[str, Any]:
    """Every figure of one retrieval, per split (``tuning``, ``heldout``, ``whole``)."""
    result: dict[str, Any] = {"config": run.name, "mode": run.mode}
    for split in SPLITS:
        idx = [i for i, q in enumerate(questions) if split in ("whole", q.split)]
        result[split] = _split_figures([questions[i] for i in idx], [run.turns[i] for i in idx])
    result.update(cost_figures(run))
    return result


def _recall_table(runs: Sequence[dict[str, Any]], split: str, latency: bool) -> str:
    headers = ["retrieval", "@1", "@5", "@10", "@20", "sess@5", "sess@10"]
    if latency:
        headers += ["p50 ms", "p95 ms"]
    rows = []
    for r in runs:
        s = r[split]
        row = [
            r["config"],
            *(s[f"turn_recall_any@{k}"] for k in TURN_KS),
            *(s[f"session_recall_any@{k}"] for k in SESSION_KS),
        ]
        if latency:
            row += [r["latency_p50_ms"], r["latency_p95_ms"]]
        rows.append(row)
    return table(headers, rows)


def report(main_runs: Sequence[dict[str, Any]], ablations: Sequence[dict[str, Any]] = ()) -> str:
    lines: list[str] = []
    for split, title in (
        ("heldout", "Held-out split (conversations 5-9): the headline"),
        ("tuning", "Tuning split (conversations 0-4): every ranking decision is made here"),
        ("whole", "Whole set"),
    ):
        if not main_runs or not main_runs[0][split]["questions"]:
            continue
        n = main_runs[0][split]["questions"]
        lines += [f"{title}, {n} questions", _recall_table(main_runs, split, split == "whole"), ""]
    for split in ("heldout", "tuning"):
        if not main_runs or not main_runs[0][split]["questions"]:
            continue
        cat_headers = [
            "retrieval",
            *(f"{CATEGORY_NAMES[c]} {k}" for c in CATEGORIES for k in ("@1", "@10")),
        ]
        cat_rows = [
            [
                r["config"],
                *(
                    r[split]["per_category"].get(str(c), {}).get(f"turn_recall_any{k}", math.nan)
                    for c in CATEGORIES
                    for k in ("@1", "@10")
                ),
            ]
            for r in main_runs
        ]
        lines += [f"Per category ({split})", table(cat_headers, cat_rows), ""]
        top_rows = [[r["config"], *(r[split]["top1"][c] for c in TOP1_CLASSES)] for r in main_runs]
        lines += [
            f"Where the top hit lies, share of questions ({split})",
            table(["retrieval", *TOP1_CLASSES], top_rows),
            "",
        ]
    timed = [r for r in main_runs if "bare_tantivy_p95_ms" in r]
    if timed:
        lines += [
            "Latency per search, whole set (hash hybrid bound: p95 <= 5 ms): wall clock,"
            " CPU time, and a bare tantivy call timed next to each search",
            table(
                [
                    "retrieval",
                    "p50 ms",
                    "p95 ms",
                    "cpu p50",
                    "cpu p95",
                    "tantivy p50",
                    "tantivy p95",
                    "p95 / tantivy p95",
                    "load before",
                    "load after",
                ],
                [
                    [
                        r["config"],
                        r["latency_p50_ms"],
                        r["latency_p95_ms"],
                        r["cpu_p50_ms"],
                        r["cpu_p95_ms"],
                        r["bare_tantivy_p50_ms"],
                        r["bare_tantivy_p95_ms"],
                        r["p95_over_bare_tantivy"],
                        r["load_before"],
                        r["load_after"],
                    ]
                    for r in timed
                ],
            ),
            "",
        ]
    if ablations:
        headers = ["variant"] + [
            f"{s} {k}" for s in ("tune", "held") for k in ("@1", "@10", "sess@5", "sess@10")
        ]
        rows = [
            [
                r["config"],
                *(
                    r[s][key]
                    for s in ("tuning", "heldout")
                    for key in (
                        "turn_recall_any@1",
                        "turn_recall_any@10",
                        "session_recall_any@5",
                        "session_recall_any@10",
                    )
                ),
            ]
            for r in ablations
        ]
        lines += ["Ablation: what each field contributes", table(headers, rows), ""]
    return "\n".join(lines).rstrip()


def _keys(figures: dict[str, Any]) -> dict[str, float | None]:
    if not figures["questions"]:
        return {k: None for k in ACCEPTANCE_KEYS}
    return {k: figures[k] for k in ACCEPTANCE_KEYS}


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.locomo", description=__doc__.split("\n")[0]
    )
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="path to locomo10.json")
    p.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    p.add_argument(
        "--configs",
        default="default,lexical,hash,st",
        help="comma-separated: default (the embedded default), lexical, hash, st",
    )
    p.add_argument("--conversations", type=int, default=None, help="only the first N")
    p.add_argument("--no-ablation", action="store_true", help="skip the field ablation")
    p.add_argument("--no-fts5", action="store_true", help="skip the SQLite FTS5 baselines")
    p.add_argument(
        "--index-dir",
        type=Path,
        default=None,
        help="build the indexes in DIR/<config> and keep them for the next run"
        " (default: a temporary directory)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Memory Core setting for every claw configuration (repeatable)",
    )
    args = p.parse_args(argv)
    overrides = _retrieval.setting_overrides(args.set)
    if not args.data.exists():
        raise SystemExit(f"LoCoMo data not found at {args.data}; pass --data PATH")
    conversations, questions = load(args.data, args.conversations)
    settings = MemoryCoreSettings(sources=("sessions",), **overrides)
    main_runs: list[dict[str, Any]] = []
    ablations: list[dict[str, Any]] = []
    fts5: dict[str, Any] | None = None
    if not args.no_fts5:
        main_runs.append(
            score(questions, run_fts5(conversations, questions, speaker=False, rows=20))
        )
        fts5 = score(
            questions, run_fts5(conversations, questions, speaker=True, rows=SEARCH_RESULTS)
        )
        main_runs.append(fts5)
    for config in configs_for(args.configs.split(",")):
        variants = ABLATIONS if not args.no_ablation else ABLATIONS[:1]
        runs = [
            score(questions, r)
            for r in trio.run(
                functools.partial(run_config, keep=args.index_dir),
                config,
                conversations,
                questions,
                settings,
                variants,
            )
        ]
        main_runs.append(runs[0])
        ablations.extend(runs if len(runs) > 1 else ())
    turns = sum(len(t) for c in conversations for _, _, t in c.sessions)
    print(
        f"LoCoMo: {len(conversations)} conversations, {turns} turns,"
        f" {len(questions)} questions (categories 1-4 with evidence)"
    )
    print(report(main_runs, ablations))
    if args.json:
        claw_runs = [r for r in main_runs if r["mode"] != "fts5"]
        headline = next(
            (r for r in claw_runs if r["config"] == _retrieval.DEFAULT_NAME),
            claw_runs[0] if claw_runs else main_runs[0],
        )
        out: dict[str, Any] = {
            **_keys(headline["whole"]),
            "heldout": _keys(headline["heldout"]),
            "tuning": _keys(headline["tuning"]),
            "per_category": headline["whole"]["per_category"],
            "headline": headline["config"],
            "runs": {r["config"]: r for r in main_runs},
            "ablation": {r["config"]: r for r in ablations},
            "questions": len(questions),
            "splits": {"tuning": list(TUNING), "heldout": list(HELDOUT)},
            "machine": machine(),
        }
        if fts5 is not None:
            out["fts5_speaker"] = _keys(fts5["whole"])
            out["fts5_speaker_heldout"] = _keys(fts5["heldout"])
        emit_json(out)


if __name__ == "__main__":
    main()
