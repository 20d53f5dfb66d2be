"""Retrieval quality on LongMemEval_S: session- and turn-level recall of Memory Core search.

Each question's haystack is indexed the way Memory Core indexes a host's transcripts:
one agent per question, one transcript session per haystack session, each message a
turn (``user: ...`` / ``assistant: ...``) with the session's date as its timestamp.
Every non-abstention question is searched, restricted to its own agent, and scored
against its ``answer_session_ids`` (session level) and its turns marked ``has_answer``
(turn level). Abstention questions are left out, as LongMemEval's paper does.

Ranks are counted as :mod:`benchmarks.locomo` counts them (:mod:`benchmarks._retrieval`):
the turns of the ranked hits in order, each once, cut at k; sessions in the order of
their first ranked turn. Figures: session ``recall_any@1/3/5/10``, ``recall_all@5/10``
and ``ndcg@10`` (LongMemEval's discount: positions 1 and 2 undiscounted, then
``1/log2(p)``), turn ``recall_any@1/5/10``; per question type, with the latency, build
time and throughput of each configuration, and SQLite FTS5 BM25 over the same turns
(``speaker: text``, the same query words, depth and counting) in the same run.

The data is ``../shared/data/longmemeval/longmemeval_s_tuning.json.gz`` (relative to
the repository) or ``--data``: the tuning half, the only one any ranking decision is
made on. It is MIT-licensed and never copied into the repository.

    python -m benchmarks.longmemeval [--data FILE] [--json] [--configs default,lexical,hash]
                                     [--questions N] [--index-dir DIR]
                                     [--agent-cost [--baseline CHECKOUT] [--alone K | --live]]

With ``--json`` the last line is one JSON object: the embedded default's figures at
the top level (``session_recall_any@1`` ... ``turn_recall_any@10``), ``fts5`` (an object
with the same keys), and every run in full under ``runs``.

``--agent-cost`` measures cost instead of quality (:mod:`benchmarks._agent_cost`): p50
and p95 per filtered search of each configuration in the index of every question's
agent, beside FTS5 on a table per question, and with ``--baseline CHECKOUT`` the same
searches through an earlier checkout's code over the same index, in the same run.
With ``--alone K`` it also sets every K-th question's filtered search against the same
search in an index holding only that agent's chunks (``filtered_p50_ms``,
``alone_p50_ms``, ``filtered_over_alone``): what issue 26 asks of a filtered search is to
cost in proportion to its agent's share.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import json
import math
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import trio

from benchmarks import _agent_cost, _retrieval
from benchmarks._common import emit_json, machine, percentile, table
from benchmarks._retrieval import Config, Rankings, configs_for, cost_figures, ranked_sessions
from claw_memory._settings import MemoryCoreSettings
from claw_memory._transcripts import TranscriptTurn

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "longmemeval" / "longmemeval_s_tuning.json.gz"
FORMAT = "longmemeval-compact/1"
SESSION_ANY_KS = (1, 3, 5, 10)
SESSION_ALL_KS = (5, 10)
TURN_KS = (1, 5, 10)
NDCG_K = 10
# Hits fetched per question, by claw and FTS5 alike: enough that ten distinct sessions
# are ranked in nearly every question (the report says how many got fewer).
SEARCH_RESULTS = 100
KEYS = (
    *(f"session_recall_any@{k}" for k in SESSION_ANY_KS),
    *(f"session_recall_all@{k}" for k in SESSION_ALL_KS),
    f"session_ndcg@{NDCG_K}",
    *(f"turn_recall_any@{k}" for k in TURN_KS),
)
QUESTION_TYPES = (
    "knowledge-update",
    "multi-session",
    "single-session-assistant",
    "single-session-preference",
    "single-session-user",
    "temporal-reasoning",
)


@attrs.frozen
class Question:
    """A scored question: its agent (the question id), text and relevant sessions and turns."""

    question_id: str
    question_type: str
    text: str
    answer_sessions: frozenset[str]
    answer_turns: frozenset[str]
    #: When the question is asked (its ``question_date``), epoch seconds.
    asked_at: float | None = None


def parse_date(text: str) -> float | None:
    """LongMemEval's ``"2023/05/20 (Sat) 02:21"`` as epoch seconds (UTC), else ``None``."""
    day, _, rest = text.partition(" (")
    clock = rest.partition(") ")[2]
    try:
        return datetime.strptime(f"{day} {clock}", "%Y/%m/%d %H:%M").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def turn_id(session_id: str, n: int) -> str:
    """The entry id of the ``n``-th turn (from 1) of a session."""
    return f"{session_id}:{n}"


def load(
    path: Path, limit: int | None = None, every: int = 1
) -> tuple[dict[str, _retrieval.Sessions], list[Question]]:
    """Every question's haystack as its agent's sessions, and the scored questions.

    ``every`` keeps every n-th scored question (a subset spread over the file) and
    ``limit`` at most that many of them. A session listed twice in one haystack is
    indexed once.
    """
    with gzip.open(path, "rt", encoding="utf-8") as f:
        raw = json.load(f)
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise SystemExit(f"{path}: not a {FORMAT} file (see the data README)")
    sessions: dict[str, list[dict[str, Any]]] = raw["sessions"]
    agents: dict[str, _retrieval.Sessions] = {}
    questions: list[Question] = []
    scored = 0
    for q in raw["questions"]:
        if q.get("abstention") or str(q["question_id"]).endswith("_abs"):
            continue
        scored += 1
        if (scored - 1) % every:
            continue
        if limit is not None and len(questions) >= limit:
            break
        qid = str(q["question_id"])
        haystack: list[tuple[str, str, tuple[TranscriptTurn, ...]]] = []
        answer_turns: set[str] = set()
        seen: set[str] = set()
        for sid, date in q["haystack"]:
            if sid in seen:
                continue
            seen.add(sid)
            when = parse_date(str(date))
            turns = []
            for n, t in enumerate(sessions[sid], start=1):
                eid = turn_id(sid, n)
                if t.get("has_answer"):
                    answer_turns.add(eid)
                role = str(t["role"])
                turns.append(TranscriptTurn(eid, role, role, str(t["content"]), when))
            haystack.append((f"{qid}/{sid}", sid, tuple(turns)))
        agents[qid] = haystack
        questions.append(
            Question(
                qid,
                str(q["question_type"]),
                str(q["question"]),
                frozenset(str(s) for s in q["answer_session_ids"]),
                frozenset(answer_turns),
                parse_date(str(q.get("question_date", ""))),
            )
        )
    return agents, questions


def ndcg(ranked: Sequence[str], relevant: frozenset[str], k: int = NDCG_K) -> float:
    """NDCG@k with LongMemEval's discount (``rel_1 + sum_{p>=2} rel_p / log2(p)``)."""

    def dcg(gains: Sequence[float]) -> float:
        return sum(g if p == 1 else g / math.log2(p) for p, g in enumerate(gains, start=1))

    ideal = dcg([1.0] * min(k, len(relevant)))
    if ideal <= 0:
        return 0.0
    return dcg([1.0 if s in relevant else 0.0 for s in ranked[:k]]) / ideal


def question_figures(q: Question, turns: Sequence[str]) -> dict[str, float]:
    """Every figure of one question's ranked turns."""
    sessions = ranked_sessions(turns)
    out: dict[str, float] = {}
    for k in SESSION_ANY_KS:
        out[f"session_recall_any@{k}"] = float(bool(q.answer_sessions & set(sessions[:k])))
    for k in SESSION_ALL_KS:
        out[f"session_recall_all@{k}"] = float(q.answer_sessions <= set(sessions[:k]))
    out[f"session_ndcg@{NDCG_K}"] = ndcg(sessions, q.answer_sessions)
    for k in TURN_KS:
        out[f"turn_recall_any@{k}"] = float(bool(q.answer_turns & set(turns[:k])))
    return out


def _mean(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    n = len(rows) or 1
    return {k: sum(r[k] for r in rows) / n for k in KEYS}


def score(
    questions: Sequence[Question], run: Rankings, assistant: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """Every figure of one retrieval: overall, per question type, and its costs.

    ``assistant`` holds the assistant turns: the share of questions whose top turn is
    one is reported (the evidence is mostly in what the user said).
    """
    rows = [question_figures(q, r) for q, r in zip(questions, run.turns, strict=True)]
    result: dict[str, Any] = {"config": run.name, "mode": run.mode, "questions": len(questions)}
    result.update(_mean(rows))
    result["per_type"] = {
        t: {"questions": len(idx), **_mean([rows[i] for i in idx])}
        for t in QUESTION_TYPES
        if (idx := [i for i, q in enumerate(questions) if q.question_type == t])
    }
    result["fewer_than_10_sessions"] = sum(1 for r in run.turns if len(ranked_sessions(r)) < 10)
    # Where the top-ranked turn came from: who said it.
    result["top1_assistant"] = sum(1 for r in run.turns if r and r[0] in assistant) / (
        len(run.turns) or 1
    )
    result.update(cost_figures(run))
    return result


def fts5_run(agents: dict[str, _retrieval.Sessions], questions: Sequence[Question]) -> Rankings:
    """SQLite FTS5 BM25, ``speaker: text`` per turn, as the data README measured it."""
    return _retrieval.run_fts5(
        agents,
        [(q.question_id, q.text) for q in questions],
        speaker=True,
        rows=SEARCH_RESULTS,
    )


def claw_runs(
    config: Config,
    agents: dict[str, _retrieval.Sessions],
    questions: Sequence[Question],
    keep: Path | None,
    overrides: dict[str, Any] | None = None,
) -> Rankings:
    settings = MemoryCoreSettings(sources=("sessions",), **(overrides or {}))
    (run,) = trio.run(
        functools.partial(
            _retrieval.run_claw,
            results=SEARCH_RESULTS,
            keep=keep,
            asked_at=[q.asked_at for q in questions],
        ),
        config,
        agents,
        [(q.question_id, q.text) for q in questions],
        settings,
    )
    return run


def _keys(figures: dict[str, Any]) -> dict[str, float]:
    return {k: figures[k] for k in KEYS}


def report(runs: Sequence[dict[str, Any]]) -> str:
    """The tables: overall figures, per question type, costs."""
    short = {
        **{f"session_recall_any@{k}": f"s@{k}" for k in SESSION_ANY_KS},
        **{f"session_recall_all@{k}": f"all@{k}" for k in SESSION_ALL_KS},
        f"session_ndcg@{NDCG_K}": "ndcg@10",
        **{f"turn_recall_any@{k}": f"t@{k}" for k in TURN_KS},
    }
    lines = [
        "Session recall_any (s@k), recall_all (all@k), NDCG@10; turn recall_any (t@k)",
        table(
            ["retrieval", *short.values(), "<10 sess", "top1 asst"],
            [
                [
                    r["config"],
                    *(r[k] for k in short),
                    r["fewer_than_10_sessions"],
                    r["top1_assistant"],
                ]
                for r in runs
            ],
        ),
        "",
    ]
    for t in QUESTION_TYPES:
        rows = [
            [r["config"], r["per_type"][t]["questions"], *(r["per_type"][t][k] for k in short)]
            for r in runs
            if t in r["per_type"]
        ]
        if rows:
            lines += [t, table(["retrieval", "n", *short.values()], rows), ""]
    lines += [
        "Cost: build (wall and CPU), throughput, latency per search (wall, CPU), machine load",
        table(
            [
                "retrieval",
                "chunks",
                "build s",
                "build cpu s",
                "chunks/s",
                "p50 ms",
                "p95 ms",
                "cpu p50",
                "load before",
                "load after",
            ],
            [
                [
                    r["config"],
                    r["chunks"],
                    r["build_s"],
                    r["build_cpu_s"],
                    r["chunks_per_s"],
                    r["latency_p50_ms"],
                    r["latency_p95_ms"],
                    r.get("cpu_p50_ms", math.nan),
                    r["load_before"],
                    r["load_after"],
                ]
                for r in runs
            ],
        ),
    ]
    return "\n".join(lines)


def agent_cost(
    data: Path, configs: str, limit: int | None, every: int, args: argparse.Namespace
) -> None:
    """``--agent-cost``: the cost of a search restricted to one agent (see
    :mod:`benchmarks._agent_cost`), printed beside FTS5 on a table per question."""
    agents, questions = load(data, limit, every)
    fts5 = fts5_run(agents, questions)
    with contextlib.ExitStack() as stack:
        index_dir = args.index_dir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="claw-agent-cost-"))
        )
        rows = _agent_cost.measure(
            data=data,
            configs=[n for n in configs.split(",") if n],
            questions=len(questions),
            index_dir=index_dir,
            every=every,
            limit=limit,
            baseline=args.baseline,
            alone=args.alone,
            live=args.live,
        )
    if args.live:
        print(
            f"Filtered search of an unchanged generation against one right after a turn"
            f" was appended and synced (every second question), {len(questions)} questions"
        )
        keys = ["unchanged_p50_ms", "after_append_p50_ms", "after_append_over_unchanged"]
        keys += ["unchanged_cpu_p50_ms", "after_append_cpu_p50_ms", "sync_cpu_p50_ms"]
        print(
            table(
                ["config", "system", "chunks", *keys, "load before", "load after"],
                [
                    [
                        *(r[k] for k in ("config", "system", "chunks", *keys)),
                        r["load_before"],
                        r["load_after"],
                    ]
                    for r in rows
                ],
            )
        )
        if args.json:
            emit_json({"agent_cost": rows, "questions": len(questions), "machine": machine()})
        return
    rows.append(
        {
            "config": "fts5",
            "system": "SQLite FTS5, a table per question",
            "chunks": fts5.chunks,
            "searches": len(fts5.latencies),
            "p50_ms": percentile(fts5.latencies, 50),
            "p95_ms": percentile(fts5.latencies, 95),
            "cpu_p50_ms": math.nan,
            "load_before": fts5.load[0],
            "load_after": fts5.load[1],
        }
    )
    print(
        f"Per filtered search, {len(questions)} questions, each restricted to its own agent"
        f" in one index of all {len(agents)}"
    )
    columns = ["config", "system", "chunks", "searches", "p50_ms", "p95_ms", "cpu_p50_ms"]
    print(
        table(
            [*columns, "load before", "load after"],
            [[r[c] for c in (*columns, "load_before", "load_after")] for r in rows],
        )
    )
    proportion = [r for r in rows if r["system"] == "alone"]
    if proportion:
        print(
            f"Filtered search in the shared index against the same agent's index alone"
            f" (every {args.alone}th question, warm, alternating)"
        )
        keys = ["filtered_p50_ms", "alone_p50_ms", "filtered_over_alone"]
        keys += ["filtered_cpu_p50_ms", "alone_cpu_p50_ms"]
        print(
            table(
                ["config", "agents", *keys],
                [[r["config"], r["agents"], *(r[k] for k in keys)] for r in proportion],
            )
        )
    if args.json:
        emit_json({"agent_cost": rows, "questions": len(questions), "machine": machine()})


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.longmemeval", description=__doc__.split("\n")[0]
    )
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="path to the gzip JSON file")
    p.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    p.add_argument(
        "--configs",
        default="default,lexical,hash",
        help="comma-separated claw configurations: default, lexical, hash, st",
    )
    p.add_argument("--questions", type=int, default=None, help="at most N questions")
    p.add_argument(
        "--every", type=int, default=1, help="every K-th question only (a spread-out subset)"
    )
    p.add_argument(
        "--index-dir",
        type=Path,
        default=None,
        help="build the indexes in DIR/<config> and keep them for the next run",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Memory Core setting for every claw configuration (repeatable), e.g."
        " --set context_boost=0.4",
    )
    p.add_argument(
        "--agent-cost",
        action="store_true",
        help="time each configuration's filtered searches (p50/p95) beside FTS5 instead of"
        " scoring them",
    )
    p.add_argument(
        "--alone",
        type=int,
        default=0,
        metavar="K",
        help="with --agent-cost: also search every K-th question's agent in an index of its"
        " own against the shared index (filtered_over_alone)",
    )
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="with --agent-cost: also time the searches through this checkout's claw",
    )
    p.add_argument(
        "--live",
        action="store_true",
        help="with --agent-cost: append a turn and sync before every second question, on"
        " a copy of the index per worker (after_append_p50_ms against unchanged_p50_ms)",
    )
    args = p.parse_args(argv)
    overrides = _retrieval.setting_overrides(args.set)
    if not args.data.exists():
        raise SystemExit(f"LongMemEval data not found at {args.data}; pass --data FILE")
    if args.baseline is not None and not args.agent_cost:
        raise SystemExit("--baseline needs --agent-cost")
    if args.alone and not args.agent_cost:
        raise SystemExit("--alone needs --agent-cost")
    if args.live and (not args.agent_cost or args.alone):
        raise SystemExit("--live needs --agent-cost, without --alone")
    if args.agent_cost:
        if args.set:
            raise SystemExit("--agent-cost times the settings as they are: drop --set")
        agent_cost(args.data, args.configs, args.questions, args.every, args)
        return
    t0 = time.perf_counter()
    if args.every < 1:
        raise SystemExit("--every must be at least 1")
    agents, questions = load(args.data, args.questions, args.every)
    assistant = frozenset(
        t.entry_id
        for sessions in agents.values()
        for _, _, turns in sessions
        for t in turns
        if t.role == "assistant"
    )
    turns = sum(len(t) for s in agents.values() for _, _, t in s)
    print(
        f"LongMemEval: {len(questions)} questions (abstention excluded), {turns} turns"
        f" in their haystacks, read in {time.perf_counter() - t0:.1f} s"
    )
    fts5 = score(questions, fts5_run(agents, questions), assistant)
    runs = [fts5]
    names = [n for n in args.configs.split(",") if n]
    default_name: str | None = None
    for config in configs_for(names):
        run = score(
            questions, claw_runs(config, agents, questions, args.index_dir, overrides), assistant
        )
        runs.append(run)
        if config.key == "default":
            default_name = run["config"]
    print(report(runs))
    if args.json:
        claw = [r for r in runs if r["mode"] != "fts5"]
        headline = next((r for r in claw if r["config"] == default_name), claw[0] if claw else fts5)
        emit_json(
            {
                **_keys(headline),
                "headline": headline["config"],
                "fts5": _keys(fts5),
                "runs": {r["config"]: r for r in runs},
                "questions": len(questions),
                "every": args.every,
                "machine": machine(),
            }
        )


if __name__ == "__main__":
    main()
