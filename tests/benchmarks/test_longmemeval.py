"""benchmarks.longmemeval on a small synthetic file in the data's format.

Checks what the benchmark counts and that it runs end to end as the acceptance checks
run it; the figures on the real data come from the benchmark itself.
"""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import longmemeval

REPO = Path(__file__).resolve().parents[2]


def _session(*turns: tuple[str, str, bool]) -> list[dict[str, Any]]:
    out = []
    for role, content, answer in turns:
        t: dict[str, Any] = {"role": role, "content": content}
        if answer:
            t["has_answer"] = True
        out.append(t)
    return out


def _question(qid: str, text: str, answers: list[str], haystack: list[str]) -> dict[str, Any]:
    return {
        "question_id": qid,
        "question_type": "single-session-user",
        "question": text,
        "question_date": "2023/05/30 (Tue) 23:40",
        "answer": "x",
        "answer_session_ids": answers,
        "abstention": qid.endswith("_abs"),
        "split": "tuning",
        "haystack": [[s, f"2023/05/{20 + i:02d} (Sat) 02:21"] for i, s in enumerate(haystack)],
    }


def _write(path: Path) -> Path:
    filler = [f"s{i}" for i in range(12)]
    sessions = {
        s: _session(
            ("user", f"Let us talk about topic number {i} and the weather {i}.", False),
            ("assistant", f"Sure, topic {i} is interesting.", False),
        )
        for i, s in enumerate(filler)
    }
    sessions["answer_a"] = _session(
        ("user", "I just adopted a greyhound named Biscuit from the shelter.", True),
        ("assistant", "Congratulations on adopting a dog!", False),
    )
    sessions["answer_b"] = _session(
        ("user", "My sister lives in Lisbon and teaches violin.", True),
        ("assistant", "Lisbon is lovely.", False),
    )
    data = {
        "format": longmemeval.FORMAT,
        "dataset": "LongMemEval_S",
        "split": "tuning",
        "questions": [
            _question(
                "q1",
                "What is the name of the greyhound from the shelter?",
                ["answer_a"],
                ["answer_a", *filler],
            ),
            _question(
                "q2", "What instrument does my sister teach?", ["answer_b"], [*filler, "answer_b"]
            ),
            # Abstention: left out of every figure.
            _question("q2_abs", "What instrument does my brother teach?", ["answer_b"], filler),
        ],
        "sessions": sessions,
    }
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(data, f)
    return path


def test_longmemeval_ndcg_uses_longmemeval_discount() -> None:
    # Positions 1 and 2 are undiscounted, position p > 2 divides by log2(p).
    assert longmemeval.ndcg(["a", "x"], frozenset({"a"})) == 1.0
    assert longmemeval.ndcg(["x", "a"], frozenset({"a"})) == 1.0
    assert longmemeval.ndcg(["x", "y", "a"], frozenset({"a"})) == pytest.approx(1 / math.log2(3))
    # Two answer sessions, one found at 4: DCG 1/2 over an ideal of 1 + 1.
    assert longmemeval.ndcg(["x", "y", "z", "b"], frozenset({"a", "b"})) == pytest.approx(0.25)
    assert longmemeval.ndcg(["x"] * 10 + ["a"], frozenset({"a"})) == 0.0


def test_longmemeval_counts_turns_and_sessions_in_rank_order() -> None:
    q = longmemeval.Question("q", "t", "text", frozenset({"A", "B"}), frozenset({"A:1", "B:3"}))
    figures = longmemeval.question_figures(q, ["C:1", "A:2", "C:2", "A:1", "B:3"])
    assert figures["session_recall_any@1"] == 0.0
    assert figures["session_recall_any@3"] == 1.0
    # Sessions in order of their first turn: C, A, B.
    assert figures["session_recall_all@5"] == 1.0
    assert figures["turn_recall_any@1"] == 0.0
    assert figures["turn_recall_any@5"] == 1.0
    assert figures["session_ndcg@10"] == pytest.approx((1 + 1 / math.log2(3)) / 2)
    assert longmemeval.parse_date("2023/05/20 (Sat) 02:21") == pytest.approx(1684549260.0)
    assert longmemeval.parse_date("someday") is None


def test_longmemeval_loads_haystacks_as_agents_and_skips_abstention(tmp_path: Path) -> None:
    agents, questions = longmemeval.load(_write(tmp_path / "lme.json.gz"))
    assert [q.question_id for q in questions] == ["q1", "q2"]
    assert set(agents) == {"q1", "q2"}
    key, sid, turns = agents["q1"][0]
    assert (key, sid) == ("q1/answer_a", "answer_a")
    assert [t.entry_id for t in turns] == ["answer_a:1", "answer_a:2"]
    assert [t.speaker for t in turns] == ["user", "assistant"]
    assert questions[0].answer_turns == frozenset({"answer_a:1"})


def test_longmemeval_refuses_a_file_of_another_format(tmp_path: Path) -> None:
    path = tmp_path / "other.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump({"questions": []}, f)
    with pytest.raises(SystemExit, match="longmemeval-compact/1"):
        longmemeval.load(path)


@pytest.mark.slow
def test_longmemeval_runs_as_the_acceptance_checks_run_it(tmp_path: Path) -> None:
    data = _write(tmp_path / "lme.json.gz")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.longmemeval", "--data", str(data), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert last["questions"] == 2
    keys = (
        "session_recall_any@1",
        "session_recall_any@5",
        "session_recall_any@10",
        "session_ndcg@10",
        "turn_recall_any@1",
        "turn_recall_any@10",
    )
    for key in keys:
        assert 0.0 <= last[key] <= 1.0
        assert 0.0 <= last["fts5"][key] <= 1.0
    # Both questions name words of their evidence turn: every retrieval finds it first.
    assert last["fts5"]["turn_recall_any@1"] == 1.0
    assert last["turn_recall_any@1"] == 1.0
    assert "embedded default" in last["headline"]
    for run in last["runs"].values():
        for key in ("build_s", "chunks_per_s", "latency_p50_ms", "load_after"):
            assert key in run
        assert set(run["per_type"]) == {"single-session-user"}


def _agent_cost(
    tmp_path: Path, *options: str
) -> tuple[subprocess.CompletedProcess[str], dict[tuple[str, str], dict[str, Any]]]:
    """Run ``--agent-cost`` with ``options`` over :func:`_write`'s data: the process and
    its rows by (config, system)."""
    data = _write(tmp_path / "lme.json.gz")
    argv = [sys.executable, "-m", "benchmarks.longmemeval", "--data", str(data), "--json"]
    argv += ["--agent-cost", *options, "--index-dir", str(tmp_path / "idx")]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, check=True)
    last = json.loads(done.stdout.strip().splitlines()[-1])
    return done, {(r["config"], r["system"]): r for r in last["agent_cost"]}


def test_longmemeval_agent_cost_times_filtered_searches_beside_fts5_and_a_baseline(
    tmp_path: Path,
) -> None:
    """``--agent-cost`` times each question's search restricted to its agent, in one index
    of every agent, for each configuration and (``--baseline``) an earlier checkout's
    code over the same index; this checkout stands in for the earlier one here."""
    done, rows = _agent_cost(tmp_path, "--configs", "lexical,default", "--baseline", str(REPO))
    assert set(rows) == {
        ("lexical", "this"),
        ("lexical", "baseline"),
        ("default", "this"),
        ("default", "baseline"),
        ("fts5", "SQLite FTS5, a table per question"),
    }
    for row in rows.values():
        assert row["searches"] == 2
        assert row["chunks"] == 2 * 13 * 2  # each question's 13 sessions of two turns
        assert 0 < row["p50_ms"] <= row["p95_ms"]
    assert "per filtered search" in done.stdout.lower()
    # The index of each configuration was built once and kept.
    assert {p.name for p in (tmp_path / "idx").iterdir()} == {"lexical", "default"}


def test_longmemeval_agent_cost_sets_a_filtered_search_against_its_agent_alone(
    tmp_path: Path,
) -> None:
    """``--alone K``: every K-th question's agent also gets an index of its own, and the
    same searches in both give the proportionality figures (new keys only)."""
    done, rows = _agent_cost(tmp_path, "--configs", "lexical", "--alone", "1")
    assert set(rows) == {
        ("lexical", "this"),
        ("lexical", "alone"),
        ("fts5", "SQLite FTS5, a table per question"),
    }
    alone = rows["lexical", "alone"]
    assert alone["agents"] == alone["searches"] == 2
    assert alone["chunks"] == rows["lexical", "this"]["chunks"]  # both agents, apart
    assert alone["filtered_over_alone"] == alone["filtered_p50_ms"] / alone["alone_p50_ms"]
    assert "filtered_over_alone" in done.stdout
    assert {p.name for p in (tmp_path / "idx" / "alone-lexical").iterdir()} == {"q1", "q2"}


def test_longmemeval_agent_cost_live_searches_right_after_an_appended_turn(
    tmp_path: Path,
) -> None:
    """``--live``: every second question is searched right after a turn was appended
    and synced, in each worker's own copy of the index (the kept index is not
    written), against searches of an unchanged generation (new keys only)."""
    done, rows = _agent_cost(tmp_path, "--configs", "lexical", "--live", "--baseline", str(REPO))
    assert set(rows) == {("lexical", "this"), ("lexical", "baseline")}
    for row in rows.values():
        assert row["mode"] == "live" and row["searches"] == 2
        assert row["chunks"] == 2 * 13 * 2
        assert row["sync_cpu_p50_ms"] > 0
        ratio = row["after_append_p50_ms"] / row["unchanged_p50_ms"]
        assert row["after_append_over_unchanged"] == ratio
    assert "after_append_over_unchanged" in done.stdout
    assert {p.name for p in (tmp_path / "idx").iterdir()} == {"lexical"}


def test_embedders_benchmark_times_a_first_index_and_query_embedding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks import embedders

    data = _write(tmp_path / "lme.json.gz")
    embedders.main(["--data", str(data), "--chunks", "3", "--json"])
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(last["runs"]) == {"claw-static", "claw-hash", "lexical"}
    for name in ("claw-static", "claw-hash"):
        run = last["runs"][name]
        assert run["chunks"] >= 1 and run["first_index_s"] > 0
        assert 0 < run["query_embed_p50_ms"] <= run["query_embed_p95_ms"]
    assert last["static_table_mib"] > 1
