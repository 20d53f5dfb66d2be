"""A lexical-only search asks tantivy for the head of the ranking only, and ranks the
same pages as with every candidate (``claw_memory._ranking._lexical_head``)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from claw.plugin_sdk import InlineWorkerPool
from claw.plugin_sdk.search import HashEmbedder, lexical_search
from claw_memory import _ranking
from claw_memory._index import open_memory_index
from claw_memory._settings import MemoryCoreSettings

WORDS = [f"w{i}" for i in range(40)]


def _write_notes(ws: Path, count: int, seed: int = 3) -> None:
    """Notes of a few words each from a small vocabulary (many shared terms, BM25 scores
    of every depth) and a run of identical notes (a long tie)."""
    rng = random.Random(seed)
    (ws / "memory").mkdir(parents=True)
    for i in range(count):
        words = rng.choices(WORDS[: 5 + i % 35], k=rng.randint(3, 12))
        (ws / "memory" / f"n{i:03d}.md").write_text(" ".join(words) + "\n", encoding="utf-8")
    for i in range(60):
        (ws / "memory" / f"same{i:02d}.md").write_text("kiwi fruit\n", encoding="utf-8")


def _recording(limits: list[int]):  # type: ignore[no-untyped-def]
    def search(searcher: object, query: object, limit: int) -> list[tuple[int, float]]:
        limits.append(limit)
        return lexical_search(searcher, query, limit)  # type: ignore[arg-type]

    return search


async def test_a_lexical_search_asks_tantivy_for_the_head_and_one_more_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limits: list[int] = []
    monkeypatch.setattr(_ranking, "lexical_search", _recording(limits))
    ws = tmp_path / "ws"
    _write_notes(ws, 300)
    settings = MemoryCoreSettings(min_score=0.0, candidate_growth=400.0)
    async with open_memory_index(
        workspace_dir=ws,
        index_dir=tmp_path / "idx",
        workers=InlineWorkerPool(),
        settings=settings,
        embedder=HashEmbedder(),
    ) as index:
        limits.clear()
        await index.search("w1 w2 w3", mode="lexical", max_results=5)
        assert limits == [33]  # the head (32 rows: twice the page, at least 32) and one
        limits.clear()
        await index.search("w1 w2 w3", mode="hybrid", max_results=5)
        assert limits == [144]  # a hybrid search merges every candidate of both stages
        # A tie across the edge of the head: every candidate after all.
        limits.clear()
        hits = (await index.search("kiwi fruit", mode="lexical", max_results=5)).hits
        assert limits == [33, 144]
        assert len({h.score for h in hits}) == 1


@pytest.mark.parametrize("coverage", [0.0, 0.5])
async def test_the_head_ranks_the_same_pages_as_every_candidate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, coverage: float
) -> None:
    """Every page (hits, scores, where the next page starts) of many queries, page sizes,
    offsets and minimum scores, with the second stage on and off, is the same when the
    search asks tantivy for every candidate."""
    ws = tmp_path / "ws"
    _write_notes(ws, 300)
    rng = random.Random(11)
    queries = [" ".join(rng.sample(WORDS, rng.randint(1, 4))) for _ in range(60)] + [
        "kiwi fruit",
        "kiwi w3",
    ]
    settings = MemoryCoreSettings(min_score=0.0, candidate_growth=400.0, coverage_weight=coverage)
    async with open_memory_index(
        workspace_dir=ws,
        index_dir=tmp_path / "idx",
        workers=InlineWorkerPool(),
        settings=settings,
        embedder=HashEmbedder(),
    ) as index:

        async def pages() -> list[object]:
            out: list[object] = []
            for i, q in enumerate(queries):
                limit, offset = 1 + i % 7, (i * 3) % 11
                for cut in (0.0, 0.3):
                    page = await index.search_page(
                        q, mode="lexical", max_results=limit, offset=offset, min_score=cut
                    )
                    out.append(
                        (
                            q,
                            [(rec.chunk_id, r.score, r.text_score) for rec, r in page.hits],
                            page.next_offset,
                        )
                    )
            return out

        headed = await pages()
        monkeypatch.setattr(_ranking, "_lexical_head", lambda *args: None)
        assert await pages() == headed


async def test_a_tie_at_the_heads_edge_that_cannot_reach_the_page_keeps_the_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BM25 scores tie often (fieldnorms are quantised): a run of equal scores across
    the edge of the head costs every candidate only when it reaches the page. Below the
    page's last score, the rows past the head cannot reach the page (the second stage
    re-scores the same head rows, tantivy returning equal scores in one order at every
    depth), so the page, its scores and whether more follow are the same."""
    ws = tmp_path / "ws"
    _write_notes(ws, 300)
    # Ten notes naming both words (distinct lengths: distinct scores), then sixty
    # that name one (equal scores, past the head of a page of five).
    for i in range(10):
        text = " ".join(["plum", "pear", *WORDS[:i]])
        (ws / "memory" / f"both{i}.md").write_text(text + "\n", encoding="utf-8")
    for i in range(60):
        (ws / "memory" / f"plum{i:02d}.md").write_text("plum\n", encoding="utf-8")
    limits: list[int] = []
    monkeypatch.setattr(_ranking, "lexical_search", _recording(limits))
    for coverage in (0.0, 0.5):
        settings = MemoryCoreSettings(
            min_score=0.0, candidate_growth=400.0, coverage_weight=coverage
        )
        async with open_memory_index(
            workspace_dir=ws,
            index_dir=tmp_path / f"idx{coverage}",
            workers=InlineWorkerPool(),
            settings=settings,
            embedder=HashEmbedder(),
        ) as index:
            limits.clear()
            page = await index.search_page("plum pear", mode="lexical", max_results=5)
            assert limits == [33]
            scores = [r.score for _, r in page.hits]
            assert len(set(scores)) == 5 and page.next_offset == 5
            with monkeypatch.context() as every:
                every.setattr(_ranking, "_lexical_head", lambda *args: None)
                full = await index.search_page("plum pear", mode="lexical", max_results=5)
            assert [(rec.chunk_id, r.score) for rec, r in page.hits] == [
                (rec.chunk_id, r.score) for rec, r in full.hits
            ]
            assert page.next_offset == full.next_offset
