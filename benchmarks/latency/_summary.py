"""The run's summary (the JSON keys) and its human report, one line per target."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from benchmarks._common import machine, table

from ._shared import BASELINE_TAG, OPTIONS, RESULTS


def overlap_at10(tops: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> float:
    """Mean share of each query's reference top 10 that ``tops`` also has in its top 10."""
    shares = []
    for got, want in zip(tops, reference, strict=True):
        ref = set(want[:RESULTS])
        if ref:
            shares.append(len(ref & set(got[:RESULTS])) / len(ref))
    return sum(shares) / len(shares) if shares else float("nan")


def summarise(rows: Sequence[dict[str, Any]], chunks: int) -> dict[str, Any]:
    by = {r["system"]: r for r in rows}
    hybrid = by.get("claw hybrid", {})
    shipped = by.get("claw hybrid shipped", {})
    base_hybrid = by.get(f"claw hybrid {BASELINE_TAG}", {})
    base_lexical = by.get(f"claw lexical {BASELINE_TAG}", {})
    lexical = by.get("claw lexical", {})
    floor = by.get("floor", {})
    exact_floor = by.get("floor exact", {})
    old = by.get("floor-old", {})
    peers = [by[p] for p in ("fts5+vec", "fts5+scan") if p in by and "p50_ms" in by[p]]
    peer = min(peers, key=lambda r: r["p50_ms"]) if peers else {}
    nan = float("nan")
    n = hybrid.get("chunks", chunks)
    exhaustive = floor.get("exhaustive")
    sweep = []
    points = hybrid.get("sweep", ())
    default_p50 = next(
        (p["p50_ms"] for p in points if p["candidates"] == hybrid.get("candidates")),
        hybrid.get("p50_ms", nan),
    )
    for point in hybrid.get("sweep", ()):
        sweep.append(
            {
                "candidates": point["candidates"],
                "p50_ms": point["p50_ms"],
                "overlap_exhaustive_at10": overlap_at10(point["top"], exhaustive)
                if exhaustive
                else nan,
                "p50_over_default": point["p50_ms"] / default_p50,
                "load": point.get("load", hybrid.get("load", nan)),
            }
        )
    out: dict[str, Any] = {
        "chunks": n,
        "claw_hybrid_p50_ms": hybrid.get("p50_ms", nan),
        # What a caller waited (the least disturbed pass, load included).
        "claw_hybrid_p95_ms": hybrid.get("p95_pass_ms", nan),
        "claw_hybrid_p95_fastest_ms": hybrid.get("p95_ms", nan),
        "claw_hybrid_qps": hybrid.get("qps_8", nan),
        "claw_lexical_p50_ms": lexical.get("p50_ms", nan),
        "claw_candidates": hybrid.get("candidates"),
        "floor_p50_ms": floor.get("p50_ms", nan),
        "floor_qps": floor.get("qps_8", nan),
        "floor_old_p50_ms": old.get("p50_ms", nan),
        "bare_lexical_p50_ms": floor.get("bare_lexical_p50_ms", nan),
        "bare_lexical_candidates": floor.get("bare_lexical_candidates"),
        "bare_lexical_full_p50_ms": floor.get("bare_lexical_full_p50_ms", nan),
        "peer_p50_ms": peer.get("p50_ms", nan),
        "peer": peer.get("system"),
        "reindex_ms": hybrid.get("reindex_ms", nan),
        "change_search_ms": hybrid.get("change_search_ms", nan),
        "change_search_max_ms": hybrid.get("change_search_max_ms", nan),
        "change_search_with_traffic_ms": hybrid.get("change_search_with_traffic_ms", nan),
        "during_sync_p50_ms": hybrid.get("during_sync_p50_ms", nan),
        "during_sync_max_ms": hybrid.get("during_sync_max_ms", nan),
        "during_sync_searches": hybrid.get("during_sync_searches", 0),
        "next_search_ms": hybrid.get("next_search_ms", nan),
        "next_search_max_ms": hybrid.get("next_search_max_ms", nan),
        "change_search_warned": hybrid.get("change_search_warned", nan),
        "claw_shipped_p50_ms": shipped.get("p50_ms", nan),
        "claw_shipped_p95_ms": shipped.get("p95_pass_ms", nan),
        "claw_shipped_qps": shipped.get("qps_8", nan),
        "claw_shipped_peak_rss_mib": shipped.get("rss_mb", nan),
        "claw_baseline_hybrid_p50_ms": base_hybrid.get("p50_ms", nan),
        "claw_baseline_hybrid_qps": base_hybrid.get("qps_8", nan),
        "claw_baseline_lexical_p50_ms": base_lexical.get("p50_ms", nan),
        "overlap_exhaustive_at10": overlap_at10(hybrid["top"], exhaustive)
        if exhaustive and "top" in hybrid
        else nan,
        "floor_overlap_exhaustive_at10": overlap_at10(floor["top"], exhaustive)
        if exhaustive
        else nan,
        # Above claw's row threshold the fair floor scans the same sketch as claw; the
        # exact floor (the full product) is then its own row.
        "vector_stage_approximate": floor.get("approximate", False),
        "rescored_rows": floor.get("rescored_rows", nan),
        "vector_recall_at10": floor.get("vector_recall_at10", nan),
        "vector_recall_at_candidates": floor.get("vector_recall_at_candidates", nan),
        "exact_floor_p50_ms": exact_floor.get("p50_ms", floor.get("p50_ms", nan)),
        "exact_floor_overlap_exhaustive_at10": overlap_at10(exact_floor["top"], exhaustive)
        if exhaustive and "top" in exact_floor
        else nan,
        "candidate_sweep": sweep,
        "claw_peak_rss_mib": hybrid.get("rss_mb", nan),
        "floor_peak_rss_mib": floor.get("rss_mb", nan),
        "build_us_per_chunk": hybrid.get("build_s", nan) * 1e6 / n,
        "index_bytes_per_chunk": hybrid.get("index_mb", nan) * 2**20 / n,
        "rss_bytes_per_chunk": hybrid.get("rss_mb", nan) * 2**20 / n,
        "claw_build_s": hybrid.get("build_s", nan),
        "claw_build_cpu_s": hybrid.get("build_cpu_s", nan),
        "second_reader_rss_mib": hybrid.get("second_reader_rss_mib", nan),
        "second_reader_vmrss_mib": hybrid.get("second_reader_vmrss_mib", nan),
        "second_reader_shared_mib": hybrid.get("second_reader_shared_mib", nan),
        "second_reader_open_s": hybrid.get("second_reader_open_s", nan),
        "second_reader_p50_ms": hybrid.get("second_reader_p50_ms", nan),
        "second_reader_load": hybrid.get("second_reader_load", nan),
        "hybrid_us_per_1k_chunks": hybrid.get("p50_ms", nan) * 1e6 / n,
        "load": {r["system"]: r.get("load", nan) for r in rows},
        "machine": machine(),
    }
    out["systems"] = [
        {k: v for k, v in r.items() if k not in ("top", "exhaustive", "sweep")} for r in rows
    ]
    out["claw_over_fair_floor"] = out["claw_hybrid_p50_ms"] / out["floor_p50_ms"]
    out["claw_over_exact_floor"] = out["claw_hybrid_p50_ms"] / out["exact_floor_p50_ms"]
    out["claw_shipped_over_fair_floor"] = out["claw_shipped_p50_ms"] / out["floor_p50_ms"]
    out["fair_floor_over_claw_shipped_qps"] = out["floor_qps"] / out["claw_shipped_qps"]
    out["fair_floor_over_claw_qps"] = out["floor_qps"] / out["claw_hybrid_qps"]
    out["claw_over_floor"] = out["claw_hybrid_p50_ms"] / out["floor_old_p50_ms"]
    out["peer_over_claw"] = out["peer_p50_ms"] / out["claw_hybrid_p50_ms"]
    out["claw_lexical_over_bare"] = out["claw_lexical_p50_ms"] / out["bare_lexical_p50_ms"]
    out["claw_lexical_over_bare_full"] = (
        out["claw_lexical_p50_ms"] / out["bare_lexical_full_p50_ms"]
    )
    # This checkout against --baseline's, in the same run (below 1: this one is faster).
    out["claw_over_baseline"] = out["claw_hybrid_p50_ms"] / out["claw_baseline_hybrid_p50_ms"]
    out["claw_lexical_over_baseline"] = (
        out["claw_lexical_p50_ms"] / out["claw_baseline_lexical_p50_ms"]
    )
    out["baseline_over_claw_qps"] = out["claw_baseline_hybrid_qps"] / out["claw_hybrid_qps"]
    out["baseline_over_fair_floor"] = out["claw_baseline_hybrid_p50_ms"] / out["floor_p50_ms"]
    # The baseline's lexical search asked tantivy for every candidate of the merge.
    out["baseline_lexical_over_bare"] = (
        out["claw_baseline_lexical_p50_ms"] / out["bare_lexical_full_p50_ms"]
    )
    out["change_search_over_plain"] = out["change_search_ms"] / out["claw_hybrid_p50_ms"]
    return out


def _approximate_rows() -> int:
    from claw_memory._ranking import APPROXIMATE_ROWS

    return APPROXIMATE_ROWS


def _verdict(value: float, limit: float, *, at_least: bool = False) -> str:
    if math.isnan(value):
        return "not measured"
    ok = value >= limit if at_least else value <= limit
    return f"target {'>=' if at_least else '<='} {limit:g}: {'met' if ok else 'missed'}"


def _at_1m(summary: dict[str, Any], value: float, limit: float) -> str:
    """The verdict of a target of issue 16 that is set for an index of 1M chunks."""
    if summary["chunks"] < 1_000_000:
        return f"the 1M target is <= {limit:g}"
    return _verdict(value, limit)


def report(summary: dict[str, Any], rows: Sequence[dict[str, Any]], queries: int) -> None:
    """The human part of the output: the table, then one line per target."""
    s = summary
    headers = [
        "system",
        "p50 ms",
        "p95 ms",
        "p95 pass",
        "QPS x8",
        "build s",
        "RSS MiB",
        "index MiB",
        "load",
    ]
    body = []
    for r in rows:
        if "error" in r:
            body.append([r["system"], "error: " + str(r["error"]), *[""] * 7])
            continue
        body.append(
            [
                r["system"],
                r["p50_ms"],
                r["p95_ms"],
                r["p95_pass_ms"],
                r["qps_8"],
                r["build_s"],
                r["rss_mb"],
                r["index_mb"],
                r.get("load", float("nan")),
            ]
        )
    print(
        f"search latency: {s['chunks']} chunks, {queries} queries, top {RESULTS}, "
        f"claw's default {s['claw_candidates']} candidates "
        "(each system in a fresh process; p50/p95 of each query's fastest of "
        f"{OPTIONS['passes']} interleaved passes, p95 pass = p95 of the least disturbed pass; "
        "load = highest 1-minute load average seen during the passes)"
    )
    print(table(headers, body))
    print(
        f"fair floor: claw_over_fair_floor {s['claw_over_fair_floor']:.2f} (p50, "
        f"{_verdict(s['claw_over_fair_floor'], 1.1)}), fair_floor_over_claw_qps "
        f"{s['fair_floor_over_claw_qps']:.2f} ({_verdict(s['fair_floor_over_claw_qps'], 1.1)}); "
        f"old floor: claw_over_floor {s['claw_over_floor']:.2f}; "
        f"peer_over_claw {s['peer_over_claw']:.1f} ({s['peer']})"
    )
    print(
        "as shipped (the second, coverage stage on; not the floor's ranking function): "
        f"claw_shipped_over_fair_floor {s['claw_shipped_over_fair_floor']:.2f} (p50 "
        f"{s['claw_shipped_p50_ms']:.2f} ms), fair_floor_over_claw_shipped_qps "
        f"{s['fair_floor_over_claw_shipped_qps']:.2f}"
    )
    print(
        f"candidate cut: overlap_exhaustive_at10 {s['overlap_exhaustive_at10']:.3f} "
        f"({_verdict(s['overlap_exhaustive_at10'], 0.97, at_least=True)}); "
        f"the fair floor {s['floor_overlap_exhaustive_at10']:.3f}"
    )
    if s["vector_stage_approximate"]:
        print(
            f"vector stage (>= {_approximate_rows():,} rows): a sign-bit sketch scan, then the "
            f"exact cosine of its nearest {s['rescored_rows']} rows (claw and the fair floor "
            f"alike); its recall of the exact vector top {RESULTS}: "
            f"{s['vector_recall_at10']:.3f}, of the exact top {s['claw_candidates']}: "
            f"{s['vector_recall_at_candidates']:.3f}; the exact floor (full product) "
            f"p50 {s['exact_floor_p50_ms']:.2f} ms, overlap_exhaustive_at10 "
            f"{s['exact_floor_overlap_exhaustive_at10']:.3f}, claw_over_exact_floor "
            f"{s['claw_over_exact_floor']:.2f}"
        )
    if s["candidate_sweep"]:
        print(
            table(
                ["candidates", "p50 ms", "overlap@10", "p50 / default", "load"],
                [
                    [
                        p["candidates"],
                        p["p50_ms"],
                        p["overlap_exhaustive_at10"],
                        p["p50_over_default"],
                        p["load"],
                    ]
                    for p in s["candidate_sweep"]
                ],
            )
        )
    print(
        f"lexical: claw {s['claw_lexical_p50_ms']:.3f} ms, bare tantivy call "
        f"{s['bare_lexical_p50_ms']:.3f} ms ({s['bare_lexical_candidates']} candidates, as "
        f"claw's lexical search asks), claw_lexical_over_bare "
        f"{s['claw_lexical_over_bare']:.1f} ({_verdict(s['claw_lexical_over_bare'], 3.0)}); "
        f"the bare call as deep as the merge ({s['claw_candidates']} candidates) "
        f"{s['bare_lexical_full_p50_ms']:.3f} ms, claw_lexical_over_bare_full "
        f"{s['claw_lexical_over_bare_full']:.1f}"
    )
    if not math.isnan(s["claw_baseline_hybrid_p50_ms"]):
        print(
            f"against --baseline in the same run: claw_over_baseline "
            f"{s['claw_over_baseline']:.3f} (hybrid p50 {s['claw_hybrid_p50_ms']:.3f} vs "
            f"{s['claw_baseline_hybrid_p50_ms']:.3f} ms), claw_lexical_over_baseline "
            f"{s['claw_lexical_over_baseline']:.3f} ({s['claw_lexical_p50_ms']:.3f} vs "
            f"{s['claw_baseline_lexical_p50_ms']:.3f} ms), baseline_over_claw_qps "
            f"{s['baseline_over_claw_qps']:.3f}; the baseline's baseline_over_fair_floor "
            f"{s['baseline_over_fair_floor']:.2f}, baseline_lexical_over_bare "
            f"{s['baseline_lexical_over_bare']:.1f}"
        )
    print(
        f"one changed file: the search that notices it {s['change_search_ms']:.1f} ms median "
        f"(max {s['change_search_max_ms']:.1f}), change_search_over_plain "
        f"{s['change_search_over_plain']:.1f} ({_verdict(s['change_search_over_plain'], 2.0)}); "
        f"{s['change_search_warned']:.0%} of them warned they answered from the current index; "
        f"{s['during_sync_searches']} searches during the sync: p50 "
        f"{s['during_sync_p50_ms']:.1f} ms, max {s['during_sync_max_ms']:.1f} ms; the next search "
        f"after the publication {s['next_search_ms']:.1f} ms (max {s['next_search_max_ms']:.1f}); "
        f"searchable {s['reindex_ms']:.1f} ms after the write "
        f"(load {s['load'].get('claw hybrid', float('nan')):.2f})"
    )
    print(
        f"peak RSS (fresh process each): claw {s['claw_peak_rss_mib']:.0f} MiB "
        f"({_at_1m(s, s['claw_peak_rss_mib'], 3072)}), fair floor "
        f"{s['floor_peak_rss_mib']:.0f} MiB; claw build {s['claw_build_s']:.1f} s "
        f"({_at_1m(s, s['claw_build_s'], 120)}; {s['claw_build_cpu_s']:.1f} s of CPU), "
        f"hybrid p50 {s['claw_hybrid_p50_ms']:.1f} ms ({_at_1m(s, s['claw_hybrid_p50_ms'], 60)})"
    )
    print(
        "a second reader (a fresh process opening the published index read-only while "
        f"the first holds it): second_reader_rss_mib {s['second_reader_rss_mib']:.0f} MiB "
        f"above its baseline, private pages ({_verdict(s['second_reader_rss_mib'], 300)}); "
        f"VmRSS +{s['second_reader_vmrss_mib']:.0f} MiB of which "
        f"{s['second_reader_shared_mib']:.0f} MiB shared with the first (the matrix, one copy "
        f"in the page cache); opened in {s['second_reader_open_s']:.1f} s, hybrid p50 "
        f"{s['second_reader_p50_ms']:.1f} ms (load {s['second_reader_load']:.2f})"
    )
    print(
        f"cost per chunk: build {s['build_us_per_chunk']:.0f} us, index "
        f"{s['index_bytes_per_chunk'] / 1024:.2f} KiB, RSS {s['rss_bytes_per_chunk'] / 1024:.2f} "
        f"KiB; per query: hybrid p50 {s['claw_hybrid_p50_ms']:.2f} ms = "
        f"{s['hybrid_us_per_1k_chunks']:.1f} us per 1k chunks"
    )
