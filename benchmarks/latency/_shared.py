"""What every system's worker shares: the constants, the corpus on disk, the merge.

The orchestrator writes one seeded corpus (:func:`prepare`: texts, their vectors, the
queries and theirs) to a directory every worker reads; each system then builds its own
index of it. :data:`OPTIONS` carries the command line's settings to every module of
the run (the driver sets them, in the orchestrator and in each worker alike).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks._common import percentile
from benchmarks._corpus import Corpus

OLD_CANDIDATES = 40
RESULTS = 10
VECTOR_WEIGHT = 0.7
TEXT_WEIGHT = 0.3
CHUNKS_PER_FILE = 100
CONCURRENCY = 8
FLOOR_THREADS = 2
SYSTEMS = ("claw", "claw-shipped", "floor", "floor-old", "fts5+vec", "fts5+scan")
SWEEP = (40, 160, 400)
# The pause between two searches arriving during a sync: a client searching now and
# then, not one saturating the event loop the sync needs too.
DURING_SYNC_GAP = 0.005
# Sequential passes over the queries per measurement (see fastest); set by --passes.
# approximate_rows: claw's row threshold of the approximate vector stage, when
# --approximate-rows sets it (0: claw's own), in every worker alike.
OPTIONS: dict[str, Any] = {"passes": 5, "approximate_rows": 0, "corpus": None}
# The suffix of the baseline's rows ("claw hybrid (baseline)").
BASELINE_TAG = "(baseline)"


def claw_candidates(rows: int) -> int:
    """How many candidates each retriever gives claw's merge by default (top ``RESULTS``)
    over an index of ``rows`` chunks (the depth grows with the index)."""
    from claw_memory import MemoryCoreSettings
    from claw_memory._ranking import candidate_count

    settings = MemoryCoreSettings()
    return candidate_count(RESULTS, settings.candidate_multiplier, settings.candidate_growth, rows)


def claw_lexical_candidates(rows: int) -> int:
    """How many BM25 candidates claw's lexical-only search of the top ``RESULTS`` asks
    tantivy for: the head its second stage re-scores and one more row (see
    ``claw_memory._ranking._lexical_head``), never more than :func:`claw_candidates`."""
    from claw_memory._ranking import _SECOND_STAGE_MIN

    return min(claw_candidates(rows), max(2 * RESULTS, _SECOND_STAGE_MIN) + 1)


# -- corpus on disk -------------------------------------------------------------------
def prepare(root: Path, chunks: int, queries: int) -> None:
    """Texts, vectors and queries for the workers (one line per chunk or query)."""
    corpus = Corpus()
    texts = corpus.chunk_texts(chunks)
    qs = corpus.queries(texts, queries)
    (root / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    (root / "queries.txt").write_text("\n".join(qs) + "\n", encoding="utf-8")
    vecs = np.concatenate(
        [corpus.embed(texts[i : i + 20_000]) for i in range(0, len(texts), 20_000)]
    )
    np.save(root / "vectors.npy", vecs)
    np.save(root / "qvectors.npy", corpus.embed(qs))


def _prepared(root: Path, chunks: int, queries: int) -> bool:
    """Whether ``root`` already holds the corpus :func:`prepare` makes for these sizes."""
    try:
        shape = np.load(root / "vectors.npy", mmap_mode="r").shape
        with (root / "queries.txt").open(encoding="utf-8") as f:
            asked = sum(1 for _ in f)
    except (OSError, ValueError):
        return False
    return bool(shape[0] == chunks and asked == queries and (root / "qvectors.npy").exists())


def _load(
    root: Path,
) -> tuple[list[str], list[str], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    texts = (root / "texts.txt").read_text(encoding="utf-8").splitlines()
    qs = (root / "queries.txt").read_text(encoding="utf-8").splitlines()
    return texts, qs, np.load(root / "vectors.npy"), np.load(root / "qvectors.npy")


def _text_lines(root: Path) -> Iterator[str]:
    """The corpus texts one at a time (``texts.txt`` is never read whole)."""
    with (root / "texts.txt").open(encoding="utf-8") as f:
        for line in f:
            yield line.rstrip("\n")


def _dir_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _top(scores: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.intp]:
    k = min(k, scores.shape[0])
    idx = np.argpartition(-scores, k - 1)[:k]
    return idx[np.argsort(-scores[idx])]


def _merge(text: list[tuple[int, float]], vec: list[tuple[int, float]]) -> list[int]:
    """The weighted merge every system does: BM25 relative to the best, cosine as is."""
    best = max((s for _, s in text), default=0.0) or 1.0
    scores: dict[int, float] = {}
    for i, s in text:
        scores[i] = TEXT_WEIGHT * s / best
    for i, c in vec:
        scores[i] = scores.get(i, 0.0) + VECTOR_WEIGHT * max(c, 0.0)
    return sorted(scores, key=lambda i: -scores[i])[:RESULTS]


def best_pass(passes: Sequence[list[float]]) -> int:
    """The index of the pass with the lowest median latency."""
    return min(range(len(passes)), key=lambda k: percentile(passes[k], 50))


def fastest(passes: Sequence[list[float]]) -> list[float]:
    """Each query's fastest latency over the passes.

    On a shared machine other processes only ever add time, in bursts of a few
    milliseconds: the fastest of a few runs of the same search, spread over minutes and
    interleaved with the other systems', is the best estimate of what it costs.
    """
    return [min(times) for times in zip(*passes, strict=True)]


def _summary(name: str, passes: Sequence[list[float]], qps: float, **extra: Any) -> dict[str, Any]:
    """A system's row: p50/p95 over each query's fastest run, and the p95 of the least
    disturbed pass (what a caller waited, load included)."""
    lat = fastest(passes)
    best = passes[best_pass(passes)]
    return {
        "system": name,
        "p50_ms": percentile(lat, 50),
        "p95_ms": percentile(lat, 95),
        "p95_pass_ms": percentile(best, 95),
        "qps_8": qps,
        **extra,
    }
