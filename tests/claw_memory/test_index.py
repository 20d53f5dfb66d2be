from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import attrs
import pytest
import trio
import trio.testing

from claw.plugin_sdk import InlineWorkerPool, WorkerPoolStatistics
from claw.plugin_sdk.search import HashEmbedder
from claw_memory._errors import IndexClosedError, InvalidSearchError, SourcePathError
from claw_memory._index import MemoryIndex, open_memory_index
from claw_memory._settings import MemoryCoreSettings
from claw_memory._transcripts import InMemoryTranscriptSource, TranscriptTurn
from claw_memory._types import SearchFilter

T = TypeVar("T")

NO_CUT = MemoryCoreSettings(min_score=0.0, sync_on_search=True)


def _write(ws: Path, rel: str, text: str) -> None:
    p = ws / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")


def _bump(ws: Path, rel: str, text: str) -> None:
    """Rewrite a file and move its mtime, so the cheap check sees the change."""
    _write(ws, rel, text)
    st = (ws / rel).stat()
    os.utime(ws / rel, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


class GatedPool:
    """Runs inline, but parks a named function until its gate opens."""

    def __init__(self) -> None:
        self.inner = InlineWorkerPool()
        self.gates: dict[str, trio.Event] = {}
        self.parked: dict[str, trio.Event] = {}
        self.calls: list[str] = []

    def gate(self, name: str) -> tuple[trio.Event, trio.Event]:
        self.gates[name] = trio.Event()
        self.parked[name] = trio.Event()
        return self.parked[name], self.gates[name]

    async def run_sync(self, fn: Callable[..., T], *args: object) -> T:
        name = getattr(getattr(fn, "func", fn), "__name__", "")
        self.calls.append(name)
        if name in self.gates:
            gate = self.gates.pop(name)
            self.parked.pop(name).set()
            await gate.wait()
        return await self.inner.run_sync(fn, *args)

    def statistics(self) -> WorkerPoolStatistics:
        return self.inner.statistics()


FIRST_STAGE_ONLY: dict[str, Any] = {
    "coverage_weight": 0.0,
    "near_coverage_weight": 0.0,
    "far_coverage_weight": 0.0,
}


def _open(ws: Path, idx: Path, workers: Any, **kw: Any) -> Any:
    kw.setdefault("settings", NO_CUT)
    return open_memory_index(workspace_dir=ws, index_dir=idx, workers=workers, **kw)


async def test_memory_index_has_no_public_constructor() -> None:
    with pytest.raises(TypeError, match="open_memory_index"):
        MemoryIndex(object())


async def test_sources_are_the_memory_files_and_symlinks_are_skipped(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool, tmp_path: Path
) -> None:
    _write(workspace, "MEMORY.md", "alpha fact")
    _write(workspace, "USER.md", "bravo fact")
    _write(workspace, "DREAMS.md", "charlie fact")
    _write(workspace, "memory/notes/deep.md", "delta fact")
    _write(workspace, "memory/ignored.txt", "echo fact")
    _write(workspace, "other.md", "foxtrot fact")
    _write(tmp_path / "outside", "secret.md", "golf fact")
    (workspace / "memory" / "link.md").symlink_to(tmp_path / "outside" / "secret.md")
    async with _open(workspace, index_dir, workers) as index:
        hits = (await index.search("fact", max_results=20)).hits
        assert sorted(h.path for h in hits) == [
            "DREAMS.md",
            "MEMORY.md",
            "USER.md",
            "memory/notes/deep.md",
        ]
        assert [s.reason for s in index.status().skipped] == ["symlink (not followed)"]


async def test_extra_paths_are_indexed_under_a_virtual_name(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool, tmp_path: Path
) -> None:
    _write(tmp_path / "notes", "a/b.md", "hotel booking in Porto")
    settings = MemoryCoreSettings(min_score=0.0, extra_paths=(str(tmp_path / "notes"),))
    async with _open(workspace, index_dir, workers, settings=settings) as index:
        (hit,) = (await index.search("porto")).hits
        assert hit.path == "extra0/a/b.md"
        assert (await index.read("extra0/a/b.md")).text == "hotel booking in Porto"


async def test_unreadable_binary_and_huge_files_are_skipped_with_a_reason(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    _write(workspace, "MEMORY.md", "fine content")
    (workspace / "memory").mkdir()
    (workspace / "memory" / "bin.md").write_bytes(b"abc\x00def")
    (workspace / "memory" / "latin1.md").write_bytes("caf\xe9".encode("latin-1"))
    _write(workspace, "memory/huge.md", "x" * 5000)
    _write(workspace, "memory/locked.md", "secret")
    (workspace / "memory" / "locked.md").chmod(0)
    settings = MemoryCoreSettings(min_score=0.0, max_file_bytes=4096)
    try:
        async with _open(workspace, index_dir, workers, settings=settings) as index:
            reasons = {s.path: s.reason for s in index.status().skipped}
            assert reasons["memory/bin.md"].startswith("binary")
            assert reasons["memory/latin1.md"] == "not UTF-8 text"
            assert reasons["memory/huge.md"] == "too large (5000 bytes > max_file_bytes = 4096)"
            if os.geteuid() != 0:  # root reads anything
                assert reasons["memory/locked.md"].startswith("unreadable")
            assert [h.path for h in (await index.search("fine")).hits] == ["MEMORY.md"]
            # Every sync reports what is still skipped, not only the one that found it.
            again = await index.sync()
            assert {s.path for s in again.skipped} == set(reasons)
            _bump(workspace, "MEMORY.md", "fine content, changed")
            changed = await index.sync()
            assert changed.indexed == ("MEMORY.md",)
            assert {s.path for s in changed.skipped} == set(reasons)
    finally:
        (workspace / "memory" / "locked.md").chmod(0o644)


async def test_reindexing_a_changed_file_touches_only_its_chunks(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    _write(workspace, "memory/a.md", "apple orchard notes")
    _write(workspace, "memory/b.md", "banana plantation notes")
    async with _open(workspace, index_dir, workers, embedder=HashEmbedder()) as index:
        before = {h.path: h for h in (await index.search("notes", max_results=10)).hits}
        _bump(workspace, "memory/b.md", "banana plantation notes, now with cherries")
        report = await index.sync()
        assert report.indexed == ("memory/b.md",)
        assert report.chunks_added == 1 and report.chunks_removed == 1
        assert report.embedded == 1  # a.md was not re-embedded
        after = {h.path: h for h in (await index.search("notes", max_results=10)).hits}
        assert after["memory/a.md"].chunk_id == before["memory/a.md"].chunk_id
        assert after["memory/b.md"].content_hash != before["memory/b.md"].content_hash
        # Touching a file without changing its bytes re-reads it but re-indexes nothing.
        st = (workspace / "memory/a.md").stat()
        os.utime(workspace / "memory/a.md", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        assert (await index.sync()).indexed == ()
        (workspace / "memory/a.md").unlink()
        assert (await index.sync()).removed == ("memory/a.md",)
        assert {h.path for h in (await index.search("notes")).hits} == {"memory/b.md"}


async def test_search_syncs_first_when_sources_changed(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    async with _open(workspace, index_dir, workers) as index:
        assert (await index.search("zebra")).hits == ()
        _write(workspace, "MEMORY.md", "a zebra crossed")
        assert [h.path for h in (await index.search("zebra")).hits] == ["MEMORY.md"]


def _excerpts(result: Any) -> list[str]:
    return [h.excerpt for h in result.hits]


@contextlib.asynccontextmanager
async def _background_index(ws: Path, idx: Path, pool: Any) -> AsyncIterator[MemoryIndex]:
    """An index syncing in a background nursery; a test that would hang fails instead
    (under the autojump clock the deadline comes as soon as every task waits)."""
    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            async with _open(ws, idx, pool, background=nursery) as index:
                yield index


async def _until_synced(index: MemoryIndex) -> None:
    await trio.testing.wait_all_tasks_blocked()  # inline workers: the sync ran to its end
    assert not index.syncing()


async def test_a_search_noticing_a_change_answers_at_once_and_the_sync_runs_in_the_background(
    workspace: Path, index_dir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    pool = GatedPool()
    _write(workspace, "MEMORY.md", "an old walrus fact")
    async with _background_index(workspace, index_dir, pool) as index:
        await index.search("walrus")
        before = index.status().generation
        parked, release = pool.gate("apply_changes")
        _bump(workspace, "MEMORY.md", "an old walrus fact\na zebra crossed")
        # The sync is held at its commit until released below: a search that
        # waited for it would never return (the clock jumps to the deadline).
        with trio.fail_after(60):
            noticing = await index.search("zebra walrus")
        assert _excerpts(noticing) == ["an old walrus fact"]
        assert noticing.generation == before
        assert noticing.warning is not None and "background" in noticing.warning
        await parked.wait()
        during = await index.search("zebra walrus")
        assert _excerpts(during) == ["an old walrus fact"]
        assert during.warning is not None
        release.set()
        await _until_synced(index)
        after = await index.search("zebra walrus")
        assert after.warning is None
        assert after.generation > before
        assert any("zebra" in e for e in _excerpts(after))


async def test_a_change_noticed_while_the_background_sync_runs_is_synced_after_it(
    workspace: Path, index_dir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    pool = GatedPool()
    _write(workspace, "MEMORY.md", "an old walrus fact")
    async with _background_index(workspace, index_dir, pool) as index:
        await index.search("walrus")
        parked, release = pool.gate("apply_changes")
        _bump(workspace, "MEMORY.md", "a zebra crossed")
        await index.search("zebra")
        await parked.wait()  # this sync scanned the files before the next change
        _bump(workspace, "memory/later.md", "a yak grazed")
        assert (await index.search("yak")).warning is not None
        release.set()
        await _until_synced(index)
        after = await index.search("yak zebra")
        assert after.warning is None
        assert sorted(h.path for h in after.hits) == ["MEMORY.md", "memory/later.md"]


class FailingOncePool(GatedPool):
    """Inline, but the first call of one named function raises an OSError."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.fail = name

    async def run_sync(self, fn: Callable[..., T], *args: object) -> T:
        if getattr(getattr(fn, "func", fn), "__name__", "") == self.fail:
            self.fail = ""
            raise OSError("disk full")
        return await super().run_sync(fn, *args)


async def test_a_failed_background_sync_is_logged_and_the_next_search_tries_again(
    workspace: Path,
    index_dir: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = FailingOncePool("")
    _write(workspace, "MEMORY.md", "an old walrus fact")
    async with _background_index(workspace, index_dir, pool) as index:
        await index.search("walrus")
        pool.fail = "apply_changes"
        _bump(workspace, "MEMORY.md", "a zebra crossed")
        assert (await index.search("zebra")).warning is not None
        await _until_synced(index)
        assert "background sync" in caplog.text and "disk full" in caplog.text
        # Nothing was published; the next search looks at the files again.
        retry = await index.search("zebra")
        assert retry.warning is not None
        await _until_synced(index)
        after = await index.search("zebra")
        assert after.warning is None
        assert _excerpts(after) == ["a zebra crossed"]


async def test_closing_the_index_cancels_its_background_sync(
    workspace: Path, index_dir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    pool = GatedPool()
    _write(workspace, "MEMORY.md", "an old walrus fact")
    async with _background_index(workspace, index_dir, pool) as index:
        await index.search("walrus")
        parked, _never = pool.gate("apply_changes")
        _bump(workspace, "MEMORY.md", "a zebra crossed")
        await index.search("zebra")
        await parked.wait()
        assert index.syncing()
    assert not index.syncing()
    # The change was not committed: the next open syncs it.
    async with _open(workspace, index_dir, InlineWorkerPool()) as index:
        assert _excerpts(await index.search("zebra")) == ["a zebra crossed"]


async def test_chunk_ids_and_hashes_survive_a_rebuild(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool, tmp_path: Path
) -> None:
    _write(workspace, "MEMORY.md", "\n".join(f"fact number {i} about kiwis" for i in range(300)))
    async with _open(workspace, index_dir, workers) as index:
        first = (await index.search("kiwis", max_results=50)).hits
    async with _open(workspace, tmp_path / "other-index", workers) as index:
        second = (await index.search("kiwis", max_results=50)).hits
    assert len(first) > 3
    assert {(h.chunk_id, h.content_hash, h.start_line) for h in first} == {
        (h.chunk_id, h.content_hash, h.start_line) for h in second
    }


async def test_reopening_reuses_the_index_and_a_changed_identity_rebuilds_it(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    _write(workspace, "MEMORY.md", "\n".join(f"line {i} about llamas" for i in range(200)))
    async with _open(workspace, index_dir, workers, embedder=HashEmbedder()) as index:
        first = index.status()
    async with _open(workspace, index_dir, workers, embedder=HashEmbedder()) as index:
        same = index.status()
        assert (await index.sync()).chunks_added == 0
    assert same.index_generation == first.index_generation and same.chunks == first.chunks
    smaller = MemoryCoreSettings(min_score=0.0, chunk_tokens=100, chunk_overlap=10)
    async with _open(
        workspace, index_dir, workers, embedder=HashEmbedder(), settings=smaller
    ) as index:
        rebuilt = index.status()
        assert (await index.search("llamas")).hits
    assert rebuilt.index_generation == first.index_generation + 1
    assert rebuilt.chunks > first.chunks
    async with _open(
        workspace, index_dir, workers, embedder=HashEmbedder(dims=64), settings=smaller
    ) as index:
        assert index.status().index_generation == rebuilt.index_generation + 1
        assert index.status().dims == 64
        assert (await index.search("llamas", mode="vector")).hits
    assert [p.name for p in (index_dir / "lexical").iterdir()] == [
        f"g{rebuilt.index_generation + 1}"
    ]


@pytest.mark.parametrize(
    "query",
    [
        'AND OR NOT "unbalanced',
        "title:(budget -draft) ~2 ^3 [a TO b] {x}",
        "*?/\\:!+-&&||<>=",
        "c++ & c# vs. f#?",
        "",
        "   ",
        "the and of",
        "東京",
        "'; DROP TABLE chunks; --",
    ],
)
async def test_queries_with_operators_and_punctuation_never_raise(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool, query: str
) -> None:
    _write(workspace, "MEMORY.md", "budget draft for title c++ and c# in 東京タワー")
    async with _open(workspace, index_dir, workers, embedder=HashEmbedder()) as index:
        for mode in ("hybrid", "lexical", "vector"):
            result = await index.search(query, mode=mode)
            assert all(h.path == "MEMORY.md" for h in result.hits)


async def test_cjk_text_is_found_by_a_part_of_a_run(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    _write(workspace, "MEMORY.md", "去年東京タワーに行った\n猫が好きです")
    async with _open(workspace, index_dir, workers) as index:
        (hit,) = (await index.search("東京タワー")).hits
        assert hit.text_score == 1.0


async def test_hybrid_scores_are_the_weighted_components_and_min_score_cuts(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    _write(workspace, "memory/a.md", "the espresso machine needs descaling monthly")
    _write(workspace, "memory/b.md", "espresso")
    _write(workspace, "memory/c.md", "the garden shed roof leaks")
    # The first stage alone: test_retrieval pins what the second stage adds.
    first_stage = attrs.evolve(NO_CUT, **FIRST_STAGE_ONLY)
    async with _open(
        workspace, index_dir, workers, embedder=HashEmbedder(), settings=first_stage
    ) as index:
        result = await index.search("espresso machine descaling", max_results=10)
        assert result.mode == "hybrid"
        for h in result.hits:
            assert h.text_score is not None and h.vector_score is not None
            # The hash embedder's own fusion hint: vectors 0.3, BM25 0.7.
            assert h.score == pytest.approx(0.3 * h.vector_score + 0.7 * h.text_score)
        assert result.hits[0].path == "memory/a.md"
        scores = [h.score for h in result.hits]
        assert scores == sorted(scores, reverse=True)
        cut = (scores[0] + scores[1]) / 2
        strict = await index.search("espresso machine descaling", min_score=cut)
        assert [h.path for h in strict.hits] == ["memory/a.md"]
        lexical = await index.search("espresso machine descaling", mode="lexical")
        assert lexical.hits[0].score == 1.0 and lexical.hits[0].vector_score is None
        vector = await index.search("espresso machine descaling", mode="vector")
        assert vector.hits[0].text_score is None
        assert vector.hits[0].score == vector.hits[0].vector_score


async def test_default_min_score_drops_weak_matches(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    _write(workspace, "memory/a.md", "quarterly revenue forecast")
    _write(workspace, "memory/b.md", "completely unrelated words about gardening")
    settings = MemoryCoreSettings()  # min_score 0.35
    async with _open(
        workspace, index_dir, workers, embedder=HashEmbedder(), settings=settings
    ) as index:
        hits = (await index.search("revenue forecast")).hits
        assert [h.path for h in hits] == ["memory/a.md"]
        assert all(h.score >= 0.35 for h in hits)


async def test_without_an_embedder_search_is_lexical_and_vector_mode_is_refused(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    _write(workspace, "MEMORY.md", "lexical only")
    async with _open(workspace, index_dir, workers) as index:
        result = await index.search("lexical")
        assert result.mode == "lexical" and index.status().default_mode == "lexical"
        with pytest.raises(InvalidSearchError, match="embedding provider"):
            await index.search("lexical", mode="vector")
        with pytest.raises(InvalidSearchError, match="max_results"):
            await index.search("x", max_results=0)


async def test_temporal_decay_ages_dated_notes_but_never_evergreen_files(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    text = "standup notes about the deployment pipeline"
    _write(workspace, "memory/2024-01-01.md", text)
    _write(workspace, "memory/2024-03-01.md", text + " ")
    _write(workspace, "MEMORY.md", text + "  ")
    now = datetime(2024, 3, 1, tzinfo=UTC).timestamp()
    settings = MemoryCoreSettings(min_score=0.0, temporal_decay=True)
    async with _open(workspace, index_dir, workers, settings=settings) as index:
        hits = {
            h.path: h.score
            for h in (await index.search("deployment", now=now, max_results=10)).hits
        }
    assert hits["MEMORY.md"] == pytest.approx(1.0)
    assert hits["memory/2024-03-01.md"] == pytest.approx(1.0)
    # 60 days old with a 30-day half-life: a quarter.
    assert hits["memory/2024-01-01.md"] == pytest.approx(0.25)


async def test_mmr_promotes_a_diverse_hit_over_a_near_duplicate(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    dup = "kubernetes cluster upgrade checklist drain nodes first"
    _write(workspace, "memory/a.md", dup)
    _write(workspace, "memory/b.md", dup + " then cordon")
    _write(workspace, "memory/c.md", "kubernetes billing alert thresholds")
    # MMR's trade-off is pinned on first-stage scores (the second stage spreads them,
    # so the same lambda would trade differently).
    plain = MemoryCoreSettings(min_score=0.0, **FIRST_STAGE_ONLY)
    diverse = MemoryCoreSettings(min_score=0.0, mmr=True, mmr_lambda=0.5, **FIRST_STAGE_ONLY)
    async with _open(
        workspace, index_dir, workers, embedder=HashEmbedder(), settings=plain
    ) as index:
        ranked = [
            h.path for h in (await index.search("kubernetes cluster upgrade", max_results=3)).hits
        ]
    assert ranked[2] == "memory/c.md"
    async with _open(
        workspace, index_dir, workers, embedder=HashEmbedder(), settings=diverse
    ) as index:
        reranked = [
            h.path for h in (await index.search("kubernetes cluster upgrade", max_results=3)).hits
        ]
    assert reranked[1] == "memory/c.md"


async def test_offset_pagination_walks_the_ranking_without_gaps(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    for i in range(9):
        _write(workspace, f"memory/n{i}.md", "pagination " * (i + 1) + f"filler {i}")
    async with _open(workspace, index_dir, workers, embedder=HashEmbedder()) as index:
        full = await index.search("pagination", max_results=9)
        seen = []
        offset: int | None = 0
        while offset is not None:
            page = await index.search("pagination", max_results=4, offset=offset)
            seen.extend(h.chunk_id for h in page.hits)
            offset = page.next_offset
    assert seen == [h.chunk_id for h in full.hits] and len(seen) == 9


@attrs.frozen
class _CountingEmbedder:
    """A hash embedder that counts the texts it embeds (no ``embed_sync``)."""

    inner: HashEmbedder = attrs.field(factory=HashEmbedder)
    texts: list[str] = attrs.field(factory=list)
    id: str = "counting"
    model: str = "hash"
    dims: int = 384
    max_input_bytes: int = 64 * 1024

    async def embed(self, texts: Any) -> Any:
        self.texts.extend(texts)
        return await self.inner.embed(texts)


async def test_a_repeated_query_is_embedded_once_and_ranks_the_same(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    for i in range(5):
        _write(workspace, f"memory/n{i}.md", "repeat " * (i + 1) + f"filler {i}")
    embedder = _CountingEmbedder()
    async with _open(workspace, index_dir, workers, embedder=embedder) as index:
        embedder.texts.clear()
        first = await index.search("repeat filler")
        again = await index.search("repeat filler", max_results=2, offset=1)
        other = await index.search("filler")
        third = await index.search("repeat filler")
    assert embedder.texts == ["repeat filler", "filler"]
    assert [h.chunk_id for h in again.hits] == [h.chunk_id for h in first.hits][1:3]
    assert third.hits == first.hits and other.hits


def _session(src: InMemoryTranscriptSource, agent: str, sid: str, lines: list[str]) -> None:
    turns = [
        TranscriptTurn(
            f"{sid}-{i}",
            "user" if i % 2 == 0 else "assistant",
            "Mel" if i % 2 == 0 else "Bot",
            text,
            1_700_000_000.0 + i,
        )
        for i, text in enumerate(lines)
    ]
    src.put(agent, f"agent:{agent}:main", sid, turns)


async def test_transcript_hits_carry_session_identity_and_entry_ids(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    src = InMemoryTranscriptSource()
    _session(
        src,
        "a1",
        "s1",
        ["I painted a sunrise last week", "Lovely! Which colours?", "Mostly orange"],
    )
    _session(src, "a2", "s2", ["I painted my fence", "Nice"])
    settings = MemoryCoreSettings(min_score=0.0, sources=("memory", "sessions"))
    async with _open(
        workspace, index_dir, workers, settings=settings, transcripts=src, embedder=HashEmbedder()
    ) as index:
        hits = (await index.search("painted sunrise")).hits
        top = hits[0]
        assert (top.source, top.agent_id, top.session_key, top.session_id) == (
            "sessions",
            "a1",
            "agent:a1:main",
            "s1",
        )
        assert top.entry_ids == ("s1-0",) and top.excerpt == "Mel: I painted a sunrise last week"
        assert top.path == "sessions/a1/s1" and top.start_line == 1
        # The neighbouring turn is findable through its context.
        colours = (await index.search("sunrise colours", mode="lexical")).hits
        assert colours[0].entry_ids in {("s1-0",), ("s1-1",)}
        only_a2 = await index.search("painted", filter=SearchFilter(agent_ids=frozenset({"a2"})))
        assert {h.agent_id for h in only_a2.hits} == {"a2"}
        memory_only = await index.search(
            "painted", filter=SearchFilter(sources=frozenset({"memory"}))
        )
        assert memory_only.hits == ()
        read = await index.read("sessions/a1/s1", from_line=2, lines=1)
        assert read.text == "Bot: Lovely! Which colours?" and read.total_lines == 3
        # Appending a turn re-indexes that session only; earlier chunk ids stay.
        _session(
            src,
            "a1",
            "s1",
            [
                "I painted a sunrise last week",
                "Lovely! Which colours?",
                "Mostly orange",
                "And a little violet",
            ],
        )
        report = await index.sync()
        assert report.indexed == ("sessions/a1/s1",)
        again = (await index.search("painted sunrise")).hits[0]
        assert again.chunk_id == top.chunk_id


async def test_read_is_bounded_and_refuses_paths_outside_the_sources(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool, tmp_path: Path
) -> None:
    _write(workspace, "MEMORY.md", "\n".join(f"row {i}" for i in range(1, 101)))
    _write(workspace, "notes.md", "not a source")
    (tmp_path / "secret.md").write_text("secret")
    settings = MemoryCoreSettings(read_max_chars=30)
    async with _open(workspace, index_dir, workers, settings=settings) as index:
        part = await index.read("MEMORY.md", from_line=10, lines=3)
        assert part.text == "row 10\nrow 11\nrow 12" and part.to_line == 12
        assert part.total_lines == 100 and not part.truncated
        capped = await index.read("MEMORY.md")
        assert len(capped.text) <= 30 and capped.truncated
        beyond = await index.read("MEMORY.md", from_line=500)
        assert beyond.text == ""
        for bad in (
            "notes.md",
            "../secret.md",
            str(tmp_path / "secret.md"),
            "memory/../../secret.md",
            "sessions/x/y",
        ):
            with pytest.raises(SourcePathError):
                await index.read(bad)
        with pytest.raises(InvalidSearchError):
            await index.read("MEMORY.md", from_line=0)


async def test_forget_by_path_with_dry_run_and_no_resurrection(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    _write(workspace, "memory/a.md", "the locker code is 4711")
    _write(workspace, "memory/b.md", "the locker is in the basement")
    async with _open(workspace, index_dir, workers, embedder=HashEmbedder()) as index:
        dry = await index.forget(path="memory/a.md", dry_run=True)
        assert dry.dry_run and dry.paths == ("memory/a.md",) and len(dry.chunk_ids) == 1
        assert len((await index.search("locker")).hits) == 2
        done = await index.forget(path="memory/a.md")
        assert done.chunk_ids == dry.chunk_ids
        assert [h.path for h in (await index.search("locker code 4711")).hits] == ["memory/b.md"]
        assert (await index.sync(force=True)).chunks_added == 1  # b.md only
        assert all(h.path != "memory/a.md" for h in (await index.search("4711")).hits)
        assert (workspace / "memory/a.md").read_text() == "the locker code is 4711"
        # New content in the forgotten file is indexed again.
        _bump(
            workspace,
            "memory/a.md",
            "the locker code is 4711\n\n" + "x " * 900 + "\nnew: bike lock",
        )
    async with _open(workspace, index_dir, workers, embedder=HashEmbedder()) as index:
        assert index.status().tombstones == 1
        hits = (await index.search("bike lock")).hits
        assert hits and hits[0].path == "memory/a.md"


async def test_forget_by_session_and_by_source(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    src = InMemoryTranscriptSource()
    _session(src, "a1", "s1", ["we talked about sailing"])
    _session(src, "a1", "s2", ["more about sailing"])
    _write(workspace, "MEMORY.md", "sailing club membership")
    settings = MemoryCoreSettings(min_score=0.0, sources=("memory", "sessions"))
    async with _open(workspace, index_dir, workers, settings=settings, transcripts=src) as index:
        await index.forget(session_id="s1")
        assert {h.session_id for h in (await index.search("sailing")).hits} == {None, "s2"}
        await index.forget(source="sessions")
        assert [h.source for h in (await index.search("sailing")).hits] == ["memory"]
        with pytest.raises(InvalidSearchError):
            await index.forget()


async def test_a_search_keeps_its_generation_while_a_sync_publishes(
    workspace: Path, index_dir: Path, worker_ranking: None
) -> None:
    pool = GatedPool()
    _write(workspace, "MEMORY.md", "old walrus fact")
    settings = MemoryCoreSettings(min_score=0.0, sync_on_search=False)
    async with _open(workspace, index_dir, pool, settings=settings) as index:
        parked, release = pool.gate("_rank_one")
        results: list[Any] = []

        async def search() -> None:
            results.append(await index.search("walrus"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(search)
            await parked.wait()
            _bump(workspace, "MEMORY.md", "new walrus fact")
            await index.sync()
            assert [h.excerpt for h in (await index.search("walrus")).hits] == ["new walrus fact"]
            release.set()
        (held,) = results
        assert [h.excerpt for h in held.hits] == ["old walrus fact"]
        assert held.generation < index.status().generation


async def test_a_search_never_sees_a_half_published_index(workspace: Path, index_dir: Path) -> None:
    pool = GatedPool()
    _write(workspace, "memory/a.md", "ocelot one")
    _write(workspace, "memory/b.md", "ocelot two")
    settings = MemoryCoreSettings(min_score=0.0, sync_on_search=False)
    async with _open(workspace, index_dir, pool, settings=settings) as index:
        # Park the sync after its publication is written but before the pointer flips.
        parked, release = pool.gate("flip_pointer")
        async with trio.open_nursery() as nursery:
            _bump(workspace, "memory/a.md", "ocelot three")
            (workspace / "memory/b.md").unlink()
            nursery.start_soon(index.sync)
            await parked.wait()
            during = {h.excerpt for h in (await index.search("ocelot", max_results=10)).hits}
            release.set()
        after = {h.excerpt for h in (await index.search("ocelot", max_results=10)).hits}
    assert during == {"ocelot one", "ocelot two"}
    assert after == {"ocelot three"}


async def test_forgotten_chunks_vanish_from_generations_searches_already_hold(
    workspace: Path, index_dir: Path, worker_ranking: None
) -> None:
    pool = GatedPool()
    _write(workspace, "MEMORY.md", "the wifi password is hunter2")
    settings = MemoryCoreSettings(min_score=0.0, sync_on_search=False)
    async with _open(workspace, index_dir, pool, settings=settings) as index:
        parked, release = pool.gate("_rank_one")
        results: list[Any] = []

        async def search() -> None:
            results.append(await index.search("wifi password"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(search)
            await parked.wait()
            await index.forget(path="MEMORY.md")
            release.set()
    assert results[0].hits == ()


async def test_watch_syncs_once_after_a_burst_of_writes(
    workspace: Path,
    index_dir: Path,
    workers: InlineWorkerPool,
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with _open(
        workspace,
        index_dir,
        workers,
        settings=MemoryCoreSettings(min_score=0.0, sync_on_search=False),
    ) as index:
        async with trio.open_nursery() as nursery:
            await nursery.start(index.watch)
            before = index.status().generation
            _write(workspace, "memory/a.md", "heron sighting")
            await trio.sleep(2.1)  # the watcher sees the change, then debounces
            _write(workspace, "memory/b.md", "another heron")
            await trio.sleep(5)
            hits = (await index.search("heron", max_results=5)).hits
            assert {h.path for h in hits} == {"memory/a.md", "memory/b.md"}
            assert index.status().generation == before + 1
            nursery.cancel_scope.cancel()


async def test_closed_index_refuses_use(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    async with _open(workspace, index_dir, workers) as index:
        pass
    with pytest.raises(IndexClosedError):
        await index.search("x")


async def test_a_first_sync_reports_every_stage_and_a_quiet_one_reports_only_the_scan(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    _write(workspace, "MEMORY.md", "alpha notes")
    _write(workspace, "memory/a.md", "beta notes")
    settings = attrs.evolve(NO_CUT, sync_on_open=False)
    seen: list[tuple[str, int, int]] = []
    async with _open(
        workspace, index_dir, workers, settings=settings, embedder=HashEmbedder()
    ) as index:
        await index.sync(progress=lambda *event: seen.append(event))
        stages = list(dict.fromkeys(stage for stage, _, _ in seen))
        assert stages == ["scan", "chunk", "embed", "publish"]
        assert ("scan", 2, 2) in seen and ("chunk", 2, 2) in seen
        assert seen[-1] == ("publish", 3, 3)
        embeds = [e for e in seen if e[0] == "embed"]
        assert embeds[-1][1] == embeds[-1][2] > 0
        seen.clear()
        await index.sync(progress=lambda *event: seen.append(event))
        assert seen == [("scan", 2, 2)]


async def test_the_generation_number_survives_a_reopen(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    """Two processes (claw memory index, then status) report the same generation."""
    _write(workspace, "MEMORY.md", "alpha notes")
    async with _open(workspace, index_dir, workers) as index:
        first = index.status().generation
        _bump(workspace, "MEMORY.md", "alpha notes, changed")
        report = await index.sync()
        assert report.generation == index.status().generation == first + 1
    async with _open(workspace, index_dir, workers) as index:
        assert index.status().generation == first + 1


async def test_a_search_checks_an_unchanged_session_listing_without_rebuilding_its_keys(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every search checks whether a transcript session changed. Once a listing was
    found unchanged, the next searches compare theirs with it (no session's provenance
    key is built again, which in an index of many agents' sessions was most of the
    check) until the sources change; a changed, added or removed session is still
    noticed and synced before the search ranks."""
    from claw_memory import _freshness

    src = InMemoryTranscriptSource()
    for a in range(3):
        _session(src, f"a{a}", f"s{a}", [f"the otter number {a} swims", "nice"])
    built: list[object] = []
    real = _freshness.session_provenance

    def counting(session: object) -> str:
        built.append(session)
        return real(session)  # type: ignore[arg-type]

    monkeypatch.setattr(_freshness, "session_provenance", counting)
    settings = MemoryCoreSettings(min_score=0.0, sources=("sessions",))
    async with _open(workspace, index_dir, workers, settings=settings, transcripts=src) as index:
        await index.search("otter")
        built.clear()
        for _ in range(3):
            found = (await index.search("otter", mode="lexical")).hits
            assert {h.session_id for h in found} == {"s0", "s1", "s2"}
        assert built == []
        # A changed session is noticed (and synced) by the next search.
        _session(src, "a1", "s1", ["the otter number 1 swims", "nice", "a heron too"])
        assert {h.session_id for h in (await index.search("heron")).hits} == {"s1"}
        # An added one, and a removed one.
        _session(src, "a3", "s3", ["a kiwi was here"])
        assert {h.session_id for h in (await index.search("kiwi")).hits} == {"s3"}
        src.remove("a3", "s3")
        assert (await index.search("kiwi")).hits == ()
