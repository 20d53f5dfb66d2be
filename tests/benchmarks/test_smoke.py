"""Each benchmark runs end to end on a tiny size and prints its JSON last line.

These check that the benchmarks work, not how fast anything is: speed figures come
from the benchmarks themselves (see benchmarks/README.md).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from benchmarks import _retrieval, gateway_load, locomo, long_session, search_latency
from benchmarks.latency import _orchestrate, _shared, _worker

LOCOMO = locomo.DEFAULT_DATA


def _last_json(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    out = capsys.readouterr().out.strip().splitlines()
    result: dict[str, object] = json.loads(out[-1])
    return result


def test_locomo_scores_turns_in_rank_order() -> None:
    assert _retrieval.ranked_turns([("D1:2", "D1:3"), ("D1:3", "D2:1")]) == ["D1:2", "D1:3", "D2:1"]
    assert _retrieval.ranked_sessions(["D1:2", "D2:1", "D1:3"]) == ["D1", "D2"]
    assert locomo.parse_date("1:56 pm on 8 May, 2023") == pytest.approx(1683554160.0)


def test_locomo_places_the_top_hit_relative_to_the_evidence() -> None:
    q = locomo.Question("c", "tuning", "q", 1, frozenset({"D2:5", "D3:1"}))
    assert locomo.top1_class(q, ["D2:5", "D1:1"]) == "evidence"
    assert locomo.top1_class(q, ["D2:4"]) == "+-1"
    assert locomo.top1_class(q, ["D2:7"]) == "+-2"
    assert locomo.top1_class(q, ["D3:9"]) == "same session"
    assert locomo.top1_class(q, ["D1:5"]) == "other session"
    assert locomo.top1_class(q, []) == "none"


def test_locomo_fts5_query_is_an_or_of_quoted_content_words() -> None:
    assert _retrieval.fts5_query('What did "Caroline" paint?') == '"caroline" OR "paint"'
    assert _retrieval.fts5_query("What is it?") == '"what" OR "is" OR "it"'
    assert _retrieval.fts5_query("?!") is None


@pytest.mark.skipif(not LOCOMO.exists(), reason="LoCoMo data not present beside the repo")
def test_locomo_benchmark_runs_on_one_conversation(capsys: pytest.CaptureFixture[str]) -> None:
    locomo.main(["--json", "--configs", "lexical", "--conversations", "1"])
    result = _last_json(capsys)
    assert 0.0 < float(result["turn_recall_any@10"]) <= 1.0  # type: ignore[arg-type]
    assert 0.0 < float(result["session_recall_any@10"]) <= 1.0  # type: ignore[arg-type]
    assert set(result["per_category"]) <= {"1", "2", "3", "4"}  # type: ignore[arg-type]
    # One conversation is all tuning split: the held-out figures exist but are empty.
    assert result["heldout"] == {k: None for k in locomo.ACCEPTANCE_KEYS}
    for key in locomo.ACCEPTANCE_KEYS:
        assert 0.0 < float(result["tuning"][key]) <= 1.0  # type: ignore[index]
        assert 0.0 < float(result["fts5_speaker"][key]) <= 1.0  # type: ignore[index]
    # The latency of each claw search comes with its CPU time, a bare tantivy call
    # timed beside it and the machine's load.
    claw = result["runs"]["claw lexical"]  # type: ignore[index]
    for key in ("cpu_p95_ms", "bare_tantivy_p95_ms", "p95_over_bare_tantivy", "load_after"):
        assert float(claw[key]) >= 0.0
    assert float(claw["bare_tantivy_p95_ms"]) > 0.0


async def test_locomo_embeds_each_distinct_text_once_across_variants() -> None:
    from claw.plugin_sdk import InlineWorkerPool
    from claw.plugin_sdk.search import HashEmbedder

    seen: list[str] = []

    class Counting(HashEmbedder):
        async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
            seen.extend(texts)
            return await super().embed(texts)

    inner = Counting(workers=InlineWorkerPool())
    embedder = _retrieval.RememberingEmbedder(inner)
    first = await embedder.embed(["a question", "another", "a question"])
    again = await embedder.embed(["another", "a question"])
    assert seen == ["a question", "another"]
    assert np.array_equal(first[0], again[1]) and np.array_equal(first[1], again[0])
    assert (await embedder.embed([])).shape == (0, inner.dims)
    assert (embedder.id, embedder.model, embedder.dims) == (inner.id, inner.model, inner.dims)


@pytest.mark.skipif(not LOCOMO.exists(), reason="LoCoMo data not present beside the repo")
def test_locomo_keeps_its_index_in_index_dir_and_reuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--json", "--configs", "lexical", "--conversations", "1", "--no-ablation"]
    argv += ["--no-fts5", "--index-dir", str(tmp_path)]
    locomo.main(argv)
    first = _last_json(capsys)
    store = tmp_path / "lexical" / "index" / "index.sqlite3"
    assert store.is_file()
    built = store.stat().st_mtime_ns
    locomo.main(argv)
    second = _last_json(capsys)
    assert first["tuning"] == second["tuning"]
    # Nothing was rebuilt: the store was opened, not written.
    assert store.stat().st_mtime_ns == built


def test_search_latency_benchmark_runs_on_a_tiny_corpus(
    capsys: pytest.CaptureFixture[str],
) -> None:
    search_latency.main(
        [
            "--json",
            "--chunks",
            "300",
            "--queries",
            "10",
            "--seconds",
            "0.2",
            "--reindex-runs",
            "2",
            "--sweep",
            "40,80",
            "--passes",
            "1",
        ]
    )
    result = _last_json(capsys)
    for key in (
        "claw_hybrid_p50_ms",
        "claw_hybrid_p95_ms",
        "floor_p50_ms",
        "peer_p50_ms",
        "claw_over_floor",
        "peer_over_claw",
        "chunks",
        "claw_over_fair_floor",
        "overlap_exhaustive_at10",
        "change_search_over_plain",
        "claw_peak_rss_mib",
    ):
        assert key in result
    assert result["chunks"] == 300
    for key in (
        "claw_over_fair_floor",
        "change_search_over_plain",
        "change_search_with_traffic_ms",
        "claw_peak_rss_mib",
        "claw_shipped_over_fair_floor",
        "next_search_ms",
        "second_reader_rss_mib",
        "second_reader_vmrss_mib",
        "claw_build_cpu_s",
    ):
        value = float(result[key])  # type: ignore[arg-type]
        assert value == value, key  # measured, not NaN
    # The search that notices a change answers from the current index and says so.
    assert result["change_search_warned"] == 1.0
    assert 0.0 < float(result["overlap_exhaustive_at10"]) <= 1.0  # type: ignore[arg-type]
    sweep = result["candidate_sweep"]
    assert [p["candidates"] for p in sweep] == [40, 80]  # type: ignore[union-attr, index]


def test_search_latency_runs_the_approximate_vector_stage_in_claw_and_the_floor(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tiny = ["--json", "--chunks", "300", "--queries", "10", "--seconds", "0.2", "--passes", "1"]
    only = ["--reindex-runs", "0", "--sweep", "", "--systems", "claw,floor"]
    search_latency.main([*tiny, *only, "--approximate-rows", "100"])
    result = _last_json(capsys)
    assert result["vector_stage_approximate"] is True
    names = [r["system"] for r in result["systems"]]  # type: ignore[union-attr, index]
    assert "floor exact" in names
    for key in (
        "exact_floor_p50_ms",
        "exact_floor_overlap_exhaustive_at10",
        "vector_recall_at10",
        "claw_over_exact_floor",
    ):
        value = float(result[key])  # type: ignore[arg-type]
        assert value == value, key
    # The rescored rows (4,096 at least) hold every row of this small corpus: the
    # approximate stage is then exact, for claw and the floor.
    assert result["vector_recall_at10"] == 1.0
    assert result["floor_overlap_exhaustive_at10"] == result["exact_floor_overlap_exhaustive_at10"]
    assert 0.0 < float(result["overlap_exhaustive_at10"]) <= 1.0  # type: ignore[arg-type]


async def test_search_latency_maps_claw_hits_to_rows_after_the_clock(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pass times the searches alone: the benchmark's own mapping of each result to
    corpus rows (``convert``) runs after the last search of the pass, not inside any
    search's timed span."""
    import io

    events: list[str] = []

    async def search(i: int) -> int:
        events.append(f"search {i}")
        return i

    def convert(result: int) -> list[int]:
        events.append(f"convert {result}")
        return [result * 10]

    monkeypatch.setattr(sys, "stdin", io.StringIO("pass s\nend\n"))
    results = await _worker.serve_commands_async({"s": search}, 3, {}, convert=convert)
    capsys.readouterr()
    assert results == {"s": [[0], [10], [20]]}
    passed = events[3:]  # after the three warm-up searches
    assert passed == [f"search {i}" for i in range(3)] + [f"convert {i}" for i in range(3)]


def test_search_latency_baseline_imports_the_checkouts_claw_and_this_benchmark(
    tmp_path: Path,
) -> None:
    """--baseline measures an earlier checkout's packages with this benchmark's code."""
    checkout = tmp_path / "old"
    for package in ("claw", "claw_memory", "benchmarks"):
        (checkout / package).mkdir(parents=True)
        (checkout / package / "__init__.py").write_text(f"WHERE = 'old {package}'\n")
    (checkout / "notes").mkdir()  # not a package: left out
    tree = _orchestrate._baseline_tree(checkout, tmp_path / "mixed")
    code = (
        "import benchmarks, claw, claw_memory; "
        "print(claw.WHERE, claw_memory.WHERE, benchmarks.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tree
    ).stdout.split()
    assert out[:4] == ["old", "claw", "old", "claw_memory"]
    assert Path(out[4]).resolve() == Path(search_latency.__file__).resolve().parent / "__init__.py"
    assert not (tree / "notes").exists()


def test_benchmark_workers_report_their_own_peak_rss_not_the_parents() -> None:
    """ru_maxrss of a child inherits the parent's high-water mark; the workers' figure must not."""
    import subprocess
    import sys

    import numpy as np

    ballast = np.ones(200 * 2**20 // 8)  # 200 MiB, touched
    code = "from benchmarks._common import peak_rss_mb; print(peak_rss_mb())"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    assert float(out.stdout) < 150.0
    del ballast


def test_gateway_load_benchmark_runs_briefly(capsys: pytest.CaptureFixture[str]) -> None:
    gateway_load.main(["--json", "--clients", "2", "--seconds", "0.5", "--chunks", "200"])
    result = _last_json(capsys)
    for key in (
        "requests_per_s",
        "p50_ms",
        "p99_ms",
        "wrong_or_lost",
        "clients",
        "server_cpu_us_per_request",
        "claw_over_echo",
        "claw_over_echo_per_core",
    ):
        assert key in result
    assert result["wrong_or_lost"] == 0
    assert result["server_alive_after"] is True
    # Every request of the distinct phase asked a query no other request asked.
    assert result["distinct_queries"] == result["queries_issued"]
    assert float(result["claw_over_echo"]) > 0.0  # type: ignore[arg-type]
    assert float(result["echo"]["server_cpu_us_per_request"]) > 0.0  # type: ignore[index]
    # The server's CPU by layer, from a profiled phase of its own (claw and the echo).
    for layers in (result["layers"], result["echo"]["layers"]):  # type: ignore[index]
        shares = layers["share"]  # type: ignore[index]
        assert set(shares) >= {"transport", "gateway", "guard", "provider", "tantivy", "numpy"}
        assert sum(shares.values()) == pytest.approx(1.0, abs=0.05)  # type: ignore[union-attr]
        assert layers["samples"] > 0  # type: ignore[index]
    assert result["layers"]["share"]["gateway"] > 0.0  # type: ignore[index]
    assert result["echo"]["layers"]["share"]["gateway"] == 0.0  # type: ignore[index]


def test_a_phase_shorter_than_a_connection_still_answers_every_client(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On a loaded machine a connection can take longer than a short phase; each client
    still gets one answer, so a brief run (the test suite's) always measures something."""
    gateway_load.main(
        ["--json", "--clients", "2", "--seconds", "0", "--chunks", "200", "--abort-fraction", "0"]
    )
    result = _last_json(capsys)
    for phase in (result, result["cycled"], result["echo"]):
        assert phase["answered"] >= 2  # type: ignore[index]
    assert result["wrong_or_lost"] == 0


def test_a_phase_that_measured_no_server_cpu_reports_no_ratio_instead_of_failing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """CPU is read in clock ticks, so a phase of a few requests can measure 0 s."""
    monkeypatch.setattr(gateway_load, "tree_cpu_s", lambda pid: 1.0)
    gateway_load.main(
        ["--json", "--clients", "2", "--seconds", "0", "--chunks", "200", "--abort-fraction", "0"]
    )
    result = _last_json(capsys)
    assert result["server_cpu_us_per_request"] == 0.0
    assert math.isnan(float(result["claw_over_echo_per_core"]))  # type: ignore[arg-type]
    assert result["wrong_or_lost"] == 0


def test_benchmarks_never_vendor_the_locomo_data() -> None:
    root = Path(__file__).resolve().parents[2]
    for folder in ("benchmarks", "tests", "claw", "claw_memory", "claw_testing"):
        assert not list((root / folder).glob("**/locomo10.json"))


def test_gateway_load_counts_the_cpu_of_a_servers_children() -> None:
    """A supervisor's figure includes its workers': here a parent that only waits."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys\n"
            f"child = subprocess.Popen([sys.executable, '-c', {burn!r}])\n"
            "sys.stdin.read()\nchild.wait()\n",
        ],
        stdin=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120  # a hang guard, not a measurement
        while gateway_load.tree_cpu_s(parent.pid) - gateway_load.process_cpu_s(parent.pid) < 0.25:
            assert time.monotonic() < deadline, "the child's CPU never showed in the tree"
            time.sleep(0.05)
    finally:
        assert parent.stdin is not None
        parent.stdin.close()
        parent.wait(timeout=120)


def test_gateway_load_measures_each_worker_count_in_one_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gateway_load.main(
        ["--json", "--clients", "4", "--seconds", "0.5", "--chunks", "200", "--workers", "1,2"]
    )
    out = capsys.readouterr().out
    assert "workers 2 over 1: requests/s x" in out
    result = json.loads(out.strip().splitlines()[-1])
    assert set(result["workers"]) == {"1", "2"}
    for phase in result["workers"].values():
        assert phase["answered"] > 0
        assert phase["lost"] == 0
        assert phase["alive_after"] is True
        assert phase["server_cpu_us_per_request"] > 0.0
    assert result["workers_requests_per_s_ratio"] > 0.0


def test_scaling_plot_draws_one_point_per_run_and_size(tmp_path: Path) -> None:
    from benchmarks import scaling_plot

    runs = []
    for label, chunks, rss in (("before", 10_000, 30_000), ("after", 10_000, 9_000)):
        path = tmp_path / f"{label}-{chunks}.json"
        path.write_text(
            "table line\n"
            + json.dumps(
                {"chunks": chunks, "rss_bytes_per_chunk": rss, "hybrid_us_per_1k_chunks": 250.0}
            )
            + "\n"
        )
        runs.append(f"{label}={path}")
    later = tmp_path / "after-100000.json"
    later.write_text(
        json.dumps(
            {"chunks": 100_000, "rss_bytes_per_chunk": 3_000, "hybrid_us_per_1k_chunks": 400.0}
        )
    )
    runs.append(f"after={later}")
    out = tmp_path / "plot.svg"
    scaling_plot.main(["--out", str(out), *runs])
    svg = out.read_text()
    assert svg.startswith("<svg") and svg.count("<circle") == 6  # 3 runs x 2 panels
    assert svg.count("<polyline") == 2  # the after series in each panel
    assert ">before<" in svg and ">after<" in svg


def test_search_latency_reuses_a_kept_corpus_only_when_it_matches(tmp_path: Path) -> None:
    assert not _shared._prepared(tmp_path, 50, 5)
    _shared.prepare(tmp_path, 50, 5)
    assert _shared._prepared(tmp_path, 50, 5)
    assert not _shared._prepared(tmp_path, 51, 5)
    assert not _shared._prepared(tmp_path, 50, 6)


@pytest.mark.slow
def test_bridge_measures_both_candidates_and_every_cancel_unwinds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from benchmarks import bridge

    bridge.main(["--calls", "30", "--searches", "6", "--json"])
    runs = _last_json(capsys)["runs"]
    assert set(runs) == {"trio", "thread", "guest", "blocking"}  # type: ignore[arg-type]
    for name in ("thread", "guest"):
        run = runs[name]  # type: ignore[index]
        assert run["cancel_unwound"] == "30/30"
        assert run["checkpoint"]["p50_us"] > 0 and run["close_ms"] > 0


def test_long_session_benchmark_measures_one_turn_syncs_per_length(
    capsys: pytest.CaptureFixture[str],
) -> None:
    long_session.main(["--json", "--turns", "20,5", "--appends", "2"])
    result = _last_json(capsys)
    assert result["turns"] == [5, 20]
    assert result["turns_ratio"] == 4.0
    chunks = result["chunks"]
    assert isinstance(chunks, list) and chunks[0] >= 5 and chunks[1] >= 20  # a chunk a turn
    for key in ("sync_cpu_p50_ms", "sync_wall_p50_ms", "search_cpu_p50_ms", "build_s"):
        assert all(v > 0 for v in result[key]), key  # type: ignore[attr-defined]
    assert float(result["sync_growth"]) > 0  # type: ignore[arg-type]
    with pytest.raises(SystemExit):
        long_session.main(["--turns", "many"])
    with pytest.raises(SystemExit):
        long_session.main(["--reply-chars", "-1"])


def test_long_session_benchmark_cuts_long_replies_into_pieces(
    capsys: pytest.CaptureFixture[str],
) -> None:
    long_session.main(["--json", "--turns", "8", "--appends", "1", "--reply-chars", "4000"])
    result = _last_json(capsys)
    assert result["reply_chars"] == 4000
    # Four replies of at least 4,000 characters: three pieces or more each.
    chunks = result["chunks"]
    assert isinstance(chunks, list) and chunks[0] >= 4 + 4 * 3


def test_long_session_benchmark_times_whole_turns_on_a_host(
    capsys: pytest.CaptureFixture[str],
) -> None:
    long_session.main(["--host", "--json", "--turns", "6,3", "--appends", "2"])
    result = _last_json(capsys)
    assert result["host"] is True and result["turns"] == [3, 6]
    for key in ("cycle_cpu_p50_ms", "turn_wall_p50_ms", "search_wall_p50_ms"):
        assert all(v > 0 for v in result[key]), key  # type: ignore[attr-defined]
    assert float(result["turn_growth"]) > 0  # type: ignore[arg-type]
