"""The approximate vector stage of a large generation: a sign-bit sketch, then exact scores.

The sketch must agree with the exact product's top rows, follow the matrix through
appends, dead rows and compaction, and be used only above the row threshold.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from claw.plugin_sdk import ConfigError, InlineWorkerPool
from claw.plugin_sdk.search import HashEmbedder
from claw_memory import _generation, _ranking
from claw_memory._generation import Generation, SignSketch, _sign_words, normalise_rows
from claw_memory._index import open_memory_index
from claw_memory._records import ChunkRecord
from claw_memory._settings import MemoryCoreSettings

from .test_generation import _record

DIMS = 96  # not a multiple of 64: the last word of each row is padded


def _corpus(rows: int, seed: int = 5) -> npt.NDArray[np.float32]:
    """Rows around 40 topics, all sharing a common direction (as real embeddings do:
    uncentred sign bits would then say little)."""
    rng = np.random.default_rng(seed)
    common = rng.standard_normal(DIMS).astype(np.float32) * 2.0
    topics = rng.standard_normal((40, DIMS)).astype(np.float32)
    noise = rng.standard_normal((rows, DIMS)).astype(np.float32) * 0.6
    return normalise_rows(common + topics[rng.integers(0, 40, rows)] + noise)


def _queries(matrix: npt.NDArray[np.float32], count: int) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(9)
    picks = matrix[rng.integers(0, matrix.shape[0], count)]
    return normalise_rows(picks + rng.standard_normal(picks.shape).astype(np.float32) * 0.02)


def _exact_top(matrix: npt.NDArray[np.float32], q: npt.NDArray[np.float32], k: int) -> set[int]:
    return set(np.argsort(-(matrix @ q), kind="stable")[:k].tolist())


def test_the_sketch_holds_the_exact_products_top_rows_on_a_seeded_corpus() -> None:
    matrix = _corpus(4000)
    sketch = SignSketch.of(matrix)
    assert sketch.words.shape == (2, 4000) and sketch.rows == 4000
    found = []
    for q in _queries(matrix, 30):
        pool = sketch.nearest(q, 100)  # a 40th of the rows
        assert len(pool) == 100 and np.all(np.diff(pool) > 0)
        found.append(len(_exact_top(matrix, q, 10) & set(pool.tolist())) / 10)
    assert np.mean(found) >= 0.97
    # The centre is what makes the sketch informative here: the signs of raw rows and
    # queries, all dominated by the common direction, keep fewer of the top rows.
    zero = np.zeros(DIMS, dtype=np.float32)
    raw = SignSketch(zero, _sign_words(matrix, zero, 0, 4000))
    raw_found = [
        len(_exact_top(matrix, q, 10) & set(raw.nearest(q, 100).tolist())) / 10
        for q in _queries(matrix, 30)
    ]
    assert np.mean(raw_found) < np.mean(found) - 0.08


def test_the_nearest_rows_are_those_of_smallest_distance_and_respect_the_mask() -> None:
    matrix = _corpus(2000)
    sketch = SignSketch.of(matrix)
    q = _queries(matrix, 1)[0]
    dist = sketch.distances(q)
    mask = np.random.default_rng(1).random(2000) < 0.5
    pool = sketch.nearest(q, 100, mask)
    assert len(pool) == 100 and mask[pool].all()
    allowed = dist[mask]
    # Every row left out (and allowed) is at least as far as every row taken.
    assert dist[pool].max() <= np.sort(allowed)[100]
    assert dist[pool].max() == np.sort(allowed)[99]
    assert len(sketch.nearest(q, 5000, mask)) == int(mask.sum())
    assert len(sketch.nearest(q, 10, np.zeros(2000, dtype=np.bool_))) == 0


def test_distances_without_numpy_bitwise_count_are_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    matrix = _corpus(500)
    sketch = SignSketch.of(matrix)
    q = _queries(matrix, 1)[0]
    with_count = sketch.distances(q)
    monkeypatch.delattr(np, "bitwise_count", raising=False)
    np.testing.assert_array_equal(sketch.distances(q), with_count)
    # And both are the Hamming distance of the bits, counted one dimension at a time.
    bits = matrix > sketch.centre
    expected = (bits != (q > sketch.centre)).sum(axis=1)
    np.testing.assert_array_equal(with_count, expected)


def _generation_of(count: int) -> tuple[Generation, list[ChunkRecord]]:
    records = [_record(f"memory/f{i % 50}.md", i) for i in range(count)]
    gen = Generation.build(
        number=1, index_generation=1, searcher=None, records=records, matrix=_corpus(count)
    )
    return gen, records


def test_an_appended_generation_extends_its_parents_sketch() -> None:
    gen, _ = _generation_of(1500)
    first = gen.sketch()
    assert first is not None and first is gen.sketch()
    added = [_record("memory/new.md", i) for i in range(40)]
    vectors = _corpus(40, seed=8)
    child = gen.derive(
        number=2,
        searcher=None,  # type: ignore[arg-type]
        replaced=frozenset({"memory/f0.md"}),
        added=added,
        added_vectors=vectors,
    )
    grandchild = child.derive(
        number=3,
        searcher=None,  # type: ignore[arg-type]
        replaced=frozenset({"memory/f1.md"}),
        added=[a := _record("memory/f1.md", 0)],
        added_vectors=_corpus(1, seed=11),
    )
    assert len(grandchild.records) == 1541 and grandchild.alive is not None
    sketch = grandchild.sketch()  # the child was never searched: from the first sketch
    assert sketch is not None and child._memo.get("sketch") is None
    assert grandchild.matrix is not None
    assert sketch.centre is first.centre
    np.testing.assert_array_equal(
        sketch.words, _sign_words(grandchild.matrix, first.centre, 0, 1541)
    )
    np.testing.assert_array_equal(sketch.words[:, :1500], first.words)
    # Dead rows are in the sketch but never among the nearest under the live mask.
    q = grandchild.matrix[grandchild.row_of_key[a.key]]
    pool = sketch.nearest(q, 1541, grandchild.alive)
    assert grandchild.alive is not None and grandchild.alive[pool].all()
    assert grandchild.row_of_key[a.key] in pool.tolist()


def test_a_compacted_generation_makes_its_sketch_again() -> None:
    gen, _ = _generation_of(64)
    assert gen.sketch() is not None
    compacted = gen.derive(
        number=2,
        searcher=None,  # type: ignore[arg-type]
        replaced=frozenset({f"memory/f{i}.md" for i in range(20)}),
    )
    assert compacted.alive is None and len(compacted.records) < 64
    assert "sketch_base" not in compacted._memo
    sketch = compacted.sketch()
    assert sketch is not None and compacted.matrix is not None
    assert sketch.rows == len(compacted.records)
    np.testing.assert_array_equal(sketch.words, SignSketch.of(compacted.matrix).words)


def test_a_follower_extends_the_sketch_over_the_rows_the_writer_appended() -> None:
    gen, _ = _generation_of(300)
    base = gen.sketch()
    assert base is not None and gen.matrix is not None
    added = [_record("memory/more.md", i) for i in range(30)]
    mapped = np.concatenate([gen.matrix, _corpus(30, seed=3)])
    follower = gen.appended(number=2, searcher=None, dead=[0, 1], added=added, matrix=mapped)
    sketch = follower.sketch()
    assert sketch is not None and sketch.rows == 330
    np.testing.assert_array_equal(sketch.words, _sign_words(mapped, base.centre, 0, 330))


def _params(**overrides: object) -> _ranking.RankParams:
    values: dict[str, object] = {
        "mode": "vector",
        "offset": 0,
        "limit": 10,
        "vector_weight": 0.7,
        "text_weight": 0.3,
        "context_boost": 0.0,
        "far_context_boost": 0.0,
        "speaker_boost": 0.0,
        "date_boost": 0.0,
        "path_boost": 0.0,
        "coverage_weight": 0.0,
        "near_coverage_weight": 0.0,
        "far_coverage_weight": 0.0,
        "candidate_multiplier": 4,
        "min_score": 0.0,
        "temporal_decay": False,
        "half_life_days": 30.0,
        "now": 0.0,
        "mmr": False,
        "mmr_lambda": 0.7,
        "filter": _ranking.SearchFilter(),
    }
    values.update(overrides)
    return _ranking.RankParams(**values)  # type: ignore[arg-type]


def _rank(gen: Generation, q: npt.NDArray[np.float32]) -> list[tuple[int, float]]:
    hits, _ = _ranking.rank(
        gen, None, query="", query_vector=q, params=_params(), tombstones=frozenset()
    )
    assert all(h.vector_score is not None for h in hits)
    return [(h.row, h.vector_score or 0.0) for h in hits]


def test_below_the_threshold_the_vector_stage_is_exact_and_makes_no_sketch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gen, _ = _generation_of(3000)
    monkeypatch.setattr(_ranking, "APPROXIMATE_ROWS", 3001)
    assert not _ranking.approximate(gen)
    assert gen.matrix is not None
    for q in _queries(gen.matrix, 5):
        got = _rank(gen, q)
        exact = np.argsort(-(gen.matrix @ q), kind="stable")[:10].tolist()
        assert [r for r, _ in got] == exact
    assert "sketch" not in gen._memo


def test_above_the_threshold_the_vector_stage_agrees_with_the_exact_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gen, _ = _generation_of(3000)
    assert gen.matrix is not None
    queries = _queries(gen.matrix, 20)
    exact = [_rank(gen, q) for q in queries]
    monkeypatch.setattr(_ranking, "APPROXIMATE_ROWS", 3000)
    monkeypatch.setattr(_ranking, "SKETCH_RESCORE_MIN", 300)  # a tenth of the rows
    assert _ranking.approximate(gen)
    shares = []
    for q, want in zip(queries, exact, strict=True):
        got = _rank(gen, q)
        assert "sketch" in gen._memo
        # Scores are exact cosines: a row found has its exact score.
        score_of = dict(want)
        for row, score in got:
            if row in score_of:
                assert score == pytest.approx(score_of[row], abs=1e-6)
            assert score == pytest.approx(float(gen.matrix[row] @ q), abs=1e-6)
        shares.append(len({r for r, _ in got} & set(score_of)) / 10)
    assert np.mean(shares) >= 0.95


def _animal_notes(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    words = ["walrus", "otter", "heron", "badger", "lynx", "marten"]
    for i, w in enumerate(words):
        (ws / "memory" / f"{i}.md").write_text(f"notes about the {w} colony\n", "utf-8")
    return ws


async def test_an_index_above_the_threshold_finds_appended_rows_by_vector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_generation, "_SKETCH_BLOCK", 2)  # several blocks per sketch
    ws = _animal_notes(tmp_path)
    # The threshold comes from the settings: approximate from the first row.
    settings = MemoryCoreSettings(min_score=0.0, approximate_rows=1)
    async with open_memory_index(
        workspace_dir=ws,
        index_dir=tmp_path / "idx",
        workers=InlineWorkerPool(),
        settings=settings,
        embedder=HashEmbedder(),
    ) as index:
        first = await index.search("heron", max_results=1, mode="vector")
        assert [h.path for h in first.hits] == ["memory/2.md"]
        assert index._view.generation._memo.get("sketch") is not None
        (ws / "memory" / "9.md").write_text("notes about the quokka colony\n", "utf-8")
        (ws / "memory" / "2.md").unlink()
        await index.sync()
        found = await index.search("quokka", max_results=1, mode="vector")
        assert [h.path for h in found.hits] == ["memory/9.md"]
        gone = await index.search("heron", max_results=6, mode="vector")
        assert "memory/2.md" not in [h.path for h in gone.hits]
        sketch = index._view.generation.sketch()
        assert sketch is not None and sketch.rows == len(index._view.generation.records)


@pytest.mark.parametrize("rows", [0, 7])
async def test_approximate_rows_of_zero_or_above_the_index_keeps_its_vector_stage_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: int
) -> None:
    # Even where the module default would approximate, the setting decides.
    monkeypatch.setattr(_ranking, "APPROXIMATE_ROWS", 1)
    ws = _animal_notes(tmp_path)
    settings = MemoryCoreSettings(min_score=0.0, approximate_rows=rows)
    async with open_memory_index(
        workspace_dir=ws,
        index_dir=tmp_path / "idx",
        workers=InlineWorkerPool(),
        settings=settings,
        embedder=HashEmbedder(),
    ) as index:
        found = await index.search("heron", max_results=1, mode="vector")
        assert [h.path for h in found.hits] == ["memory/2.md"]
        assert "sketch" not in index._view.generation._memo


@pytest.mark.parametrize("bad", [-1, True, 2.5, "many"])
def test_approximate_rows_must_be_a_whole_number_of_rows(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"memory_core\.approximate_rows"):
        MemoryCoreSettings(approximate_rows=bad)  # type: ignore[arg-type]


def _reference_nearest(dist: npt.NDArray[np.uint16], count: int, far: int) -> list[int]:
    order = np.argsort(dist, kind="stable")  # by distance, then row
    return sorted(r for r in order[:count].tolist() if dist[r] < far)


@pytest.mark.parametrize("seed", range(6))
def test_the_cut_from_a_sample_is_the_cut_from_every_row(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(600, 20_000))
    far = 97
    dist = rng.integers(0, 40 + 50 * (seed % 2), n).astype(np.uint16)
    if seed >= 4:
        # The sampled rows are all far, the near ones hide between them: the sample
        # underestimates how many are near, and every row must be taken instead.
        dist[:] = 90
        dist[::16] = 96
        dist[rng.integers(0, n, 50)] = 3
    dist[rng.random(n) < 0.2] = far  # excluded rows
    for count in (1, 17, 100, n // 5, n):
        got = _generation._nearest_rows(dist.copy(), count, far)
        assert got.tolist() == _reference_nearest(dist, count, far)
