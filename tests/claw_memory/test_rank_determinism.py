"""A search ranks alike alone and batched with others: no product's rounding reaches
its page or its scores.

Concurrent searches share one matrix product (``rank_batch``), and a BLAS product
rounds a row's cosine differently with the number of queries in it and the query's
column (seen: 1.5e-7 apart on this project's machines). Before, those cosines were the
hits' vector scores, so a near-tie could order one way alone and the other under load:
the gateway benchmark's re-check found an answer that differed from the same query
asked again alone. The candidates are now chosen with a margin and scored exactly, the
same way whatever the product was.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path

import numpy as np
import pytest

from claw.plugin_sdk import InlineWorkerPool
from claw.plugin_sdk.search import HashEmbedder, normalise_rows
from claw_memory import _schedule
from claw_memory._index import open_memory_index
from claw_memory._ranking import cosine_slack, exact_cosines, rank
from claw_memory._schedule import BatchItem, rank_batch
from claw_memory._search import _rank_params
from claw_memory._settings import MemoryCoreSettings
from claw_memory._types import SearchFilter

SETTINGS = MemoryCoreSettings(min_score=0.0)
VOCABULARY = [
    "walrus", "otter", "heron", "badger", "lynx", "marten", "ibex", "okapi", "colony",
    "river", "winter", "harbour", "deploy", "friday", "release", "manager", "budget",
    "invoice", "server", "cloud", "garden", "tomato", "violin", "lesson",
]  # fmt: skip
QUERIES = [
    "walrus colony in winter",
    "who is the release manager",
    "deploy on friday",
    "otter river harbour",
    "budget invoice",
    "tomato garden",
    "violin lesson friday",
    "cloud server budget",
]


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    rng = random.Random(7)
    for i in range(240):
        words = rng.choices(VOCABULARY, k=rng.randint(3, 9))
        (ws / "memory" / f"{i:03}.md").write_text(" ".join(words) + "\n", "utf-8")
    return ws


def _index(tmp_path: Path, embedder: HashEmbedder):  # type: ignore[no-untyped-def]
    return open_memory_index(
        workspace_dir=_workspace(tmp_path),
        index_dir=tmp_path / "idx",
        workers=InlineWorkerPool(),
        settings=SETTINGS,
        embedder=embedder,
    )


async def test_a_search_ranks_the_same_alone_and_batched_with_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The dense product for every batch (a tiny index would take the sparse one).
    monkeypatch.setattr(_schedule, "_SPARSE_PRODUCT_CELLS", -1)
    embedder = HashEmbedder()
    async with _index(tmp_path, embedder) as index:
        gen, lexical = index._view.generation, index._view.lexical
        assert gen.matrix is not None and gen.matrix.shape[0] == 240
        params = _rank_params(SETTINGS, embedder)(
            mode="hybrid", offset=0, limit=20, min_score=0.0, now=0.0, filter=SearchFilter()
        )
        vectors = normalise_rows(embedder.embed_sync(QUERIES))

        def items(n: int) -> list[BatchItem]:
            return [
                BatchItem(
                    gen=gen,
                    query=q,
                    query_vector=v,
                    params=params,
                    tombstones=frozenset(),
                    check=None,
                )
                for q, v in zip(QUERIES[:n], vectors[:n], strict=True)
            ]

        alone = [rank_batch([item], lexical)[0] for item in items(len(QUERIES))]
        assert all(ranked is not None and len(ranked[0]) == 20 for ranked in alone)
        for n in (2, 3, 5, 8):
            assert rank_batch(items(n), lexical) == alone[:n], n
        # A small batch's product computed in row blocks (here of 32 rows, so the 240
        # rows take eight blocks, the last one short) ranks alike too.
        monkeypatch.setattr(_schedule, "_BLOCK_CELLS", 1)
        for n in (2, 3, 5, 8):
            assert rank_batch(items(n), lexical) == alone[:n], n


@pytest.mark.parametrize("queries", [1, 2, 3, 5, 8, 9, 12])
@pytest.mark.parametrize("rows", [1, 31, 1000, 1027])
def test_the_similarities_of_a_batch_are_its_product_within_rounding(
    queries: int, rows: int
) -> None:
    """Whatever way the batch's product is computed (one gemv, row blocks, one GEMM),
    each query gets one contiguous row of cosines, every one within the rounding
    bound of the plain product's."""
    rng = np.random.default_rng(queries * 10_000 + rows)
    matrix = normalise_rows(rng.standard_normal((rows, 64)).astype(np.float32))
    vectors = normalise_rows(rng.standard_normal((queries, 64)).astype(np.float32))
    got = _schedule.similarities(matrix, vectors)
    assert got.shape == (queries, rows) and got.dtype == np.float32
    for q, row in zip(vectors, got, strict=True):
        assert row.flags.c_contiguous
        assert np.abs(row - matrix @ q).max() <= cosine_slack(q)


async def test_the_rounding_of_a_shared_product_never_reaches_a_page(tmp_path: Path) -> None:
    """Whatever product gave the cosines (within its rounding bound), the same page and
    the same scores: the cosines a batch hands over are perturbed here on purpose."""
    embedder = HashEmbedder()
    async with _index(tmp_path, embedder) as index:
        gen, lexical = index._view.generation, index._view.lexical
        assert gen.matrix is not None
        rng = np.random.default_rng(3)
        vectors = normalise_rows(embedder.embed_sync(QUERIES))
        for query, vector in zip(QUERIES, vectors, strict=True):
            for mode in ("hybrid", "vector"):
                ranked = functools.partial(
                    rank,
                    gen,
                    lexical,
                    query=query,
                    query_vector=vector,
                    params=_rank_params(SETTINGS, embedder)(
                        mode=mode, offset=0, limit=20, min_score=0.0, now=0.0,
                        filter=SearchFilter(),
                    ),
                    tombstones=frozenset(),
                )
                slack = cosine_slack(vector)
                product = gen.matrix @ vector
                for _ in range(3):
                    noise = rng.uniform(-slack, slack, product.shape[0])
                    assert ranked(sims=(product + noise).astype(np.float32)) == ranked(sims=None)


@pytest.mark.parametrize("mode", ["hybrid", "vector"])
@pytest.mark.parametrize("forgotten", [0, 3])
async def test_every_hits_vector_score_is_its_own_rows_exact_cosine(
    tmp_path: Path, mode: str, forgotten: int
) -> None:
    """The vector candidates' cosines come from choosing them, the lexical ones' are
    computed beside: either way a hit's vector score is its row's exact cosine (as
    :func:`exact_cosines` gives it for that row alone), tombstoned chunks left out."""
    embedder = HashEmbedder()
    async with _index(tmp_path, embedder) as index:
        gen, lexical = index._view.generation, index._view.lexical
        assert gen.matrix is not None
        vectors = normalise_rows(embedder.embed_sync(QUERIES))
        # A page of 100: 400 candidates from each side, so every row of the 240 is one
        # (those sharing no word with the query from the vector side only).
        params = _rank_params(SETTINGS, embedder)(
            mode=mode, offset=0, limit=100, min_score=0.0, now=0.0, filter=SearchFilter()
        )
        kinds: set[bool] = set()
        for query, vector in zip(QUERIES, vectors, strict=True):
            first, _ = rank(
                gen, lexical, query=query, query_vector=vector, params=params,
                tombstones=frozenset(),
            )  # fmt: skip
            gone = frozenset(gen.records[r.row].chunk_id for r in first[:forgotten])
            rows, _ = rank(
                gen, lexical, query=query, query_vector=vector, params=params, tombstones=gone
            )
            assert rows
            assert not {gen.records[r.row].chunk_id for r in rows} & gone
            for r in rows:
                alone = exact_cosines(gen.matrix, np.array([r.row], dtype=np.intp), vector)
                assert r.vector_score == max(float(alone[0]), 0.0)
                kinds.add(bool(r.text_score))
        assert kinds == ({True, False} if mode == "hybrid" else {False})
