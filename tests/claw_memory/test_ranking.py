"""Ranking building blocks: exact top-k, filters that cost nothing when they exclude
nothing, and BM25 scores that filters never shift."""

from __future__ import annotations

import math
from pathlib import Path

import attrs
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claw.plugin_sdk import ConfigError, InlineWorkerPool
from claw.plugin_sdk.search import HashEmbedder, has_cjk, is_cjk, lexical_search
from claw_memory._index import open_memory_index
from claw_memory._ranking import meaning_scores, narrow_filter, top_k
from claw_memory._settings import MemoryCoreSettings
from claw_memory._types import SearchFilter


def _reference_top(scores: npt.NDArray[np.float32], k: int) -> list[float]:
    return sorted(scores.tolist(), reverse=True)[:k]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=6000),
    k=st.integers(min_value=1, max_value=500),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    masked=st.floats(min_value=0.0, max_value=1.0),
    sorted_input=st.booleans(),
)
def test_top_k_is_exact_on_any_input(
    n: int, k: int, seed: int, masked: float, sorted_input: bool
) -> None:
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal(n).astype(np.float32)
    # Filtered rows are -inf; ascending input defeats a strided sample's estimate.
    scores[rng.random(n) < masked] = -np.inf
    if sorted_input:
        scores.sort()
    got = top_k(scores, k)
    assert len(got) == min(k, n)
    assert len(set(got.tolist())) == len(got)
    assert scores[got].tolist() == _reference_top(scores, k)


def test_top_k_falls_back_to_a_full_partition_when_the_sample_misleads() -> None:
    # Only the sampled positions hold large values: the threshold the sample suggests
    # is reached by fewer than k rows, and the answer must still be exact.
    scores = np.zeros(100_000, dtype=np.float32)
    scores[0::32] = np.arange(1, len(scores[0::32]) + 1, dtype=np.float32)
    got = top_k(scores, 50)
    assert scores[got].tolist() == _reference_top(scores, 50)


@given(st.text(max_size=40))
def test_has_cjk_agrees_with_is_cjk(text: str) -> None:
    assert has_cjk(text) == any(is_cjk(ch) for ch in text)


def test_hash_embedder_features_are_pinned() -> None:
    # Stored vectors stay valid only while the features of a text never change: this is
    # what the embedder produced before its per-word cache existed.
    features = HashEmbedder()._features("Running otters, the otter's den 東京")
    otter = 0.35 * (1.0 + math.log(2))
    assert features == pytest.approx(
        {
            "c:東京": 1.0,
            "w:run": 1.0,
            "w:ott": 1.0 + math.log(2),
            "w:den": 1.0,
            "b:run ott": 0.3,
            "b:ott ott": 0.3,
            "b:ott den": 0.3,
            **dict.fromkeys(
                ["g3:<ru", "g3:run", "g3:unn", "g3:nni", "g3:nin", "g3:ing", "g3:ng>"], 0.35
            ),
            **dict.fromkeys(
                ["g4:<run", "g4:runn", "g4:unni", "g4:nnin", "g4:ning", "g4:ing>"], 0.35
            ),
            **dict.fromkeys(["g3:<ot", "g3:ott", "g3:tte", "g3:ter"], otter),
            **dict.fromkeys(["g4:<ott", "g4:otte", "g4:tter"], otter),
            **dict.fromkeys(["g3:ers", "g3:rs>", "g4:ters", "g4:ers>", "g3:er>", "g4:ter>"], 0.35),
        }
    )


async def _index_with(tmp_path: Path):  # type: ignore[no-untyped-def]
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("the walrus colony sleeps on the ice\n", "utf-8")
    (ws / "memory" / "b.md").write_text("a walrus and an otter share the bay\n", "utf-8")
    (ws / "memory" / "c.md").write_text("the heron fishes alone\n", "utf-8")
    return open_memory_index(
        workspace_dir=ws,
        index_dir=tmp_path / "idx",
        workers=InlineWorkerPool(),
        settings=MemoryCoreSettings(min_score=0.0),
        embedder=HashEmbedder(),
    )


async def test_a_filter_that_excludes_nothing_is_dropped_and_one_that_does_is_kept(
    tmp_path: Path,
) -> None:
    async with await _index_with(tmp_path) as index:
        gen = index._view.generation
        everything = SearchFilter(
            sources=frozenset({"memory", "sessions"}), agent_ids=frozenset({"main"})
        )
        assert narrow_filter(gen, everything) == SearchFilter()
        only_sessions = SearchFilter(sources=frozenset({"sessions"}))
        assert narrow_filter(gen, only_sessions) == only_sessions
        assert (await index.search("walrus", filter=only_sessions)).hits == ()


async def test_filters_never_shift_bm25_scores(tmp_path: Path) -> None:
    async with await _index_with(tmp_path) as index:
        lexical, searcher = index._view.lexical, index._view.generation.searcher
        assert searcher is not None

        def scores(**filters: frozenset[str] | None) -> list[float]:
            query = lexical.build_query(
                "walrus otter",
                context_boost=0.0,
                path_boost=0.0,
                **{"sources": None, "agent_ids": None, "session_keys": None, **filters},
            )
            assert query is not None
            return sorted(s for _, s in lexical_search(searcher, query, 10))

        plain = scores()
        assert len(plain) == 2
        assert scores(sources=frozenset({"memory"})) == plain
        assert scores(sources=frozenset({"memory", "sessions"})) == plain
        assert scores(agent_ids=frozenset({"main"}), session_keys=frozenset({"k"})) == plain
        assert scores(sources=frozenset({"sessions"})) == []


def test_the_candidate_depth_stops_growing_past_the_growth_rows() -> None:
    from claw_memory._ranking import GROWTH_ROWS, candidate_count

    assert candidate_count(10, 4, 4.0, 100_000) == 400
    assert candidate_count(10, 4, 4.0, GROWTH_ROWS) == 4 * GROWTH_ROWS // 1000
    assert candidate_count(10, 4, 4.0, 1_000_000) == 4 * GROWTH_ROWS // 1000
    assert candidate_count(10, 4, 0.0, 1_000_000) == 40
    assert candidate_count(100, 4, 4.0, 1_000_000) == max(400, 4 * GROWTH_ROWS // 1000)


async def test_the_candidate_depth_grows_with_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fixed cut (the page times the multiplier) agrees less and less with exhaustive
    fusion as the index grows; each retriever's depth grows with it instead."""
    from claw_memory import _ranking

    limits: list[int] = []

    def recording(searcher: object, query: object, limit: int) -> list[tuple[int, float]]:
        limits.append(limit)
        return lexical_search(searcher, query, limit)  # type: ignore[arg-type]

    monkeypatch.setattr(_ranking, "lexical_search", recording)
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i in range(256):
        (ws / "memory" / f"n{i:03d}.md").write_text(f"kiwi note number {i}\n", encoding="utf-8")
    for growth, expected in ((40.0, math.ceil(40.0 * 256 / 1000)), (0.0, 4)):
        settings = MemoryCoreSettings(min_score=0.0, candidate_growth=growth)
        async with open_memory_index(
            workspace_dir=ws,
            index_dir=tmp_path / "index",
            workers=InlineWorkerPool(),
            settings=settings,
            embedder=HashEmbedder(),
        ) as index:
            assert index.status().chunks == 256
            limits.clear()
            result = await index.search("kiwi note", max_results=1)
            assert len(result.hits) == 1
            assert limits == [expected]


async def test_tied_hits_are_ordered_by_chunk_id(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for name in ("d", "b", "e", "a", "c"):
        (ws / "memory" / f"{name}.md").write_text("kiwi fruit\n", "utf-8")
    (ws / "memory" / "z.md").write_text("kiwi kiwi kiwi bird\n", "utf-8")
    async with open_memory_index(
        workspace_dir=ws,
        index_dir=tmp_path / "idx",
        workers=InlineWorkerPool(),
        settings=MemoryCoreSettings(min_score=0.0),
        embedder=HashEmbedder(),
    ) as index:
        hits = (await index.search("kiwi fruit", mode="lexical", max_results=10)).hits
        tied = [h for h in hits if h.path != "memory/z.md"]
        assert len(tied) == 5
        assert len({h.score for h in tied}) == 1
        assert [h.chunk_id for h in tied] == sorted(h.chunk_id for h in tied)
        # A page boundary inside the tie: each page continues the same order.
        first = (await index.search("kiwi fruit", mode="lexical", max_results=3)).hits
        rest = (await index.search("kiwi fruit", mode="lexical", max_results=3, offset=3)).hits
        assert [h.chunk_id for h in (*first, *rest)] == [h.chunk_id for h in hits]


async def test_ranking_reads_the_records_of_tied_candidates_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record is decoded from the publication log when read: ranking reads those of
    candidates whose scores tie (to order them by chunk id), the search those of its
    hits, and nothing else."""
    from claw_memory._published import RowRecords

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i, name in enumerate("abc"):
        words = ["kiwi"] * (i + 1) + ["filler"] * (3 - i)
        (ws / "memory" / f"{name}.md").write_text(" ".join(words) + "\n", "utf-8")
    async with open_memory_index(
        workspace_dir=ws,
        index_dir=tmp_path / "idx",
        workers=InlineWorkerPool(),
        settings=MemoryCoreSettings(min_score=0.0),
        embedder=HashEmbedder(),
    ) as index:
        assert isinstance(index._view.generation.records, RowRecords)
        reads: list[int] = []
        real = RowRecords.__getitem__

        def counting(self: RowRecords, row: int) -> object:
            reads.append(row)
            return real(self, row)

        monkeypatch.setattr(RowRecords, "__getitem__", counting)
        hits = (await index.search("kiwi", mode="lexical", max_results=10)).hits
        assert [h.path for h in hits] == ["memory/c.md", "memory/b.md", "memory/a.md"]
        assert len(reads) == len(hits)


def test_a_cosine_alone_scores_nothing_to_its_floor_and_half_at_its_match() -> None:
    cos = np.array([-0.5, 0.0, 0.25, 0.325, 0.4, 0.7, 1.0])
    out = meaning_scores(cos, 0.25, 0.4)
    np.testing.assert_allclose(out, [0.0, 0.0, 0.0, 0.25, 0.5, 0.75, 1.0], atol=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0.0, 0.9),
    st.floats(0.01, 0.99),
    st.lists(st.floats(-1.0, 1.0), min_size=2, max_size=20),
)
def test_a_cosine_alone_is_monotone_and_within_zero_and_one(
    floor: float, gap: float, cosines: list[float]
) -> None:
    match = floor + gap * (1.0 - floor)
    if not floor < match < 1.0:
        return
    ordered = np.sort(np.array(cosines))
    out = meaning_scores(ordered, floor, match)
    assert (np.diff(out) >= -1e-12).all()
    assert ((out >= 0.0) & (out <= 1.0)).all()


def test_the_similarity_calibration_comes_from_the_settings_or_the_embedder() -> None:
    class Calibrated:
        similarity_floor = 0.2
        similarity_match = 0.5

    assert MemoryCoreSettings().similarity_calibration(Calibrated()) == (0.2, 0.5)
    assert MemoryCoreSettings(similarity_match=0.6).similarity_calibration(Calibrated()) == (
        0.2,
        0.6,
    )
    # An embedder without one (hash, HTTP, a plugin's) gets none: fusion alone decides.
    assert MemoryCoreSettings().similarity_calibration(HashEmbedder()) is None
    assert MemoryCoreSettings().similarity_calibration(None) is None
    with pytest.raises(ConfigError, match="similarity_floor"):
        MemoryCoreSettings(similarity_floor=0.5, similarity_match=0.4)


_WORDS = ["otter", "heron", "kiwi", "walrus", "plover", "badger", "lynx", "stoat", "ibis"]


def _many_agents(tmp_path: Path, src: object = None):  # type: ignore[no-untyped-def]
    """An index of 16 agents' sessions (12 turns each, a day apart, user and assistant
    in turns, sharing words) and a memory file (sessions put in ``src`` when given)."""
    from claw_memory._transcripts import InMemoryTranscriptSource, TranscriptTurn

    src = src if isinstance(src, InMemoryTranscriptSource) else InMemoryTranscriptSource()
    for a in range(16):
        turns = [
            TranscriptTurn(
                f"a{a}-{i}",
                "user" if i % 2 else "assistant",
                "",
                f"{_WORDS[(a + i) % 9]} {_WORDS[(a * i) % 9]} seen near the {_WORDS[i % 9]}",
                1_700_000_000.0 + 86_400.0 * i,
            )
            for i in range(12)
        ]
        src.put(f"agent{a}", f"agent:agent{a}:main", f"s{a}", turns)
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "notes.md").write_text("- an otter and a heron\n- a kiwi\n", "utf-8")
    return open_memory_index(
        workspace_dir=ws,
        index_dir=tmp_path / "idx",
        workers=InlineWorkerPool(),
        settings=MemoryCoreSettings(min_score=0.0, sources=("memory", "sessions")),
        embedder=HashEmbedder(),
        transcripts=src,
    )


async def test_a_search_filtered_to_one_agent_reads_only_that_agents_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index of many agents: a search restricted to one scores the cosines of that
    agent's rows (and the memory files') only, and ranks exactly as scoring every row
    and masking the others does."""
    from claw_memory import _ranking

    gathered: list[int] = []
    exact = _ranking.row_cosines

    def counting(matrix: object, rows: npt.NDArray[np.intp], query: object) -> object:
        gathered.append(len(rows))
        return exact(matrix, rows, query)  # type: ignore[arg-type]

    monkeypatch.setattr(_ranking, "row_cosines", counting)
    async with _many_agents(tmp_path) as index:
        total = index.status().chunks
        assert total == 16 * 12 + 2
        for query, agents in (
            ("otter heron", {"agent3"}),
            ("kiwi walrus lynx", {"agent7", "agent9"}),
            ("badger", {"agent0"}),
        ):
            f = SearchFilter(agent_ids=frozenset(agents))
            for mode in ("hybrid", "vector"):
                gathered.clear()
                sliced = await index.search(query, mode=mode, max_results=20, filter=f)
                # The agents' rows and the memory file's, for the stage and the page.
                assert gathered and max(gathered) <= 12 * len(agents) + 2
                assert {h.agent_id for h in sliced.hits} <= {*agents, None}
                monkeypatch.setattr(_ranking, "REACH_SHARE", 0.0)
                masked = await index.search(query, mode=mode, max_results=20, filter=f)
                monkeypatch.setattr(_ranking, "REACH_SHARE", 0.25)
                # (The same cosines, to the float rounding of a gathered product.)
                assert [h.chunk_id for h in sliced.hits] == [h.chunk_id for h in masked.hits]
                assert [h.score for h in sliced.hits] == pytest.approx(
                    [h.score for h in masked.hits], abs=1e-6
                )
        # A filter that reaches most of the index scores every row, as before.
        gathered.clear()
        wide = frozenset(f"agent{a}" for a in range(1, 16))
        await index.search("otter", filter=SearchFilter(agent_ids=wide))
        assert not gathered or max(gathered) < total // 4


async def test_a_lexical_search_filtered_to_one_agent_reads_only_that_agents_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In an index of many agents, a search restricted to one finds its candidates'
    query terms among that agent's rows (and the memory files') only: no row of
    another agent is looked up, decoded or analysed, and the hits and scores are
    exactly those of reading each term's rows across the whole index."""
    from claw_memory import _ranking
    from claw_memory._generation import Generation, KeyIndex
    from claw_memory._published import RowRecords

    async with _many_agents(tmp_path) as index:
        gen = index._view.generation
        assert isinstance(gen.records, RowRecords)
        read: list[int] = []
        lookup, get, analyse = KeyIndex.lookup, RowRecords.__getitem__, Generation.rows_terms

        def looked_up(self: KeyIndex, keys: list[int]) -> list[int]:
            found = lookup(self, keys)
            read.extend(r for r in found if r >= 0)
            return found

        def decoded(self: RowRecords, row: int) -> object:
            read.append(row)
            return get(self, row)

        def analysed(self: Generation, rows: list[int], fn: object) -> object:
            read.extend(rows)
            return analyse(self, rows, fn)  # type: ignore[arg-type]

        for query, agents in (
            ("otter heron", {"agent3"}),
            ("kiwi walrus lynx near", {"agent7", "agent9"}),
            ("badger seen", {"agent0"}),
        ):
            codes = [gen.agent_index[a] for a in agents]
            theirs = set(np.flatnonzero(np.isin(gen.agent_codes, codes) | ~gen.is_session).tolist())
            f = SearchFilter(agent_ids=frozenset(agents))
            for mode in ("lexical", "hybrid"):
                read.clear()
                with monkeypatch.context() as spy:
                    spy.setattr(KeyIndex, "lookup", looked_up)
                    spy.setattr(RowRecords, "__getitem__", decoded)
                    spy.setattr(Generation, "rows_terms", analysed)
                    sliced = await index.search(query, mode=mode, max_results=20, filter=f)
                assert sliced.hits and read
                assert set(read) <= theirs
                # Unfiltered, a term's rows come from the whole index, or (a common
                # term) from the candidates' analysed text: the same hits either way.
                for common in (_ranking.TERM_ROWS_MAX_DF, 3):
                    with monkeypatch.context() as whole:
                        whole.setattr(_ranking, "REACH_SHARE", 0.0)
                        whole.setattr(_ranking, "TERM_ROWS_MAX_DF", common)
                        masked = await index.search(query, mode=mode, max_results=20, filter=f)
                    assert [h.chunk_id for h in sliced.hits] == [h.chunk_id for h in masked.hits]
                    if mode == "lexical":
                        assert [h.score for h in sliced.hits] == [h.score for h in masked.hits]
                    else:  # (the same cosines, to the float rounding of a gathered product)
                        assert [h.score for h in sliced.hits] == pytest.approx(
                            [h.score for h in masked.hits], abs=1e-6
                        )


async def test_a_generation_derived_by_appending_inherits_only_what_it_would_find_afresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live host derives a generation for every change and searches it at once: what
    it inherits from the generation before (each term's rows, each agent's rows, the
    memory rows, neighbours, analysed terms) is exactly what it would find afresh,
    through appended turns, new agents, removed and forgotten sessions and
    compactions."""
    import random

    from claw_memory import _ranking
    from claw_memory._generation import Generation
    from claw_memory._transcripts import InMemoryTranscriptSource, TranscriptTurn

    rng = random.Random(26)
    src = InMemoryTranscriptSource()
    queries = ["otter heron", "kiwi walrus lynx near", "badger seen", "the stoat and the ibis"]
    carried_steps = 0
    async with _many_agents(tmp_path, src) as index:
        sessions = {f"s{a}": f"agent{a}" for a in range(16)}
        for step in range(40):
            agents = sorted(set(sessions.values()))
            filters = [None, *(SearchFilter(agent_ids=frozenset({a})) for a in agents[:4])]
            for query in queries:
                for f in filters:
                    await index.search(query, mode="lexical", max_results=10, filter=f)
            parent = index._view.generation
            kind = rng.choice(["append", "append", "new", "remove", "forget"])
            if kind == "append" or len(sessions) < 4:
                sid = rng.choice(sorted(sessions))
                agent = sessions[sid]
                turns = list(
                    await src.read_turns(
                        next(s for s in await src.list_sessions() if s.session_id == sid)
                    )
                )
                turns.append(
                    TranscriptTurn(
                        f"{sid}-{step}",
                        "user",
                        "",
                        f"{rng.choice(_WORDS)} and the {rng.choice(_WORDS)} at step {step}",
                        1_700_000_000.0 + 86_400.0 * len(turns),
                    )
                )
                src.put(agent, f"agent:{agent}:main", sid, turns)
            elif kind == "new":
                sid, agent = f"n{step}", f"agent{rng.randrange(20)}"
                words = " ".join(rng.choice(_WORDS) for _ in range(4))
                src.put(
                    agent,
                    f"agent:{agent}:main",
                    sid,
                    [TranscriptTurn(f"{sid}-0", "user", "", words, 1_800_000_000.0)],
                )
                sessions[sid] = agent
            elif kind == "remove":
                sid = rng.choice(sorted(sessions))
                src.remove(sessions.pop(sid), sid)
            else:
                sid = rng.choice(sorted(sessions))
                await index.forget(session_id=sid, agent_id=sessions.pop(sid))
            await index.sync()
            gen = index._view.generation
            assert gen is not parent
            inherited = gen.inherited("term_rows")
            if inherited is None:
                continue  # (compacted: nothing inherited)
            carried_steps += 1
            lexical = index._view.lexical
            start, before = inherited
            assert start == len(parent.records)
            for (term, f), _ in list(before.rows.items()):
                within = None
                if f is not None:
                    reach = _ranking.reachable_rows(gen, f)
                    if reach is None:
                        continue
                    within = _ranking._Within(f, reach)
                found = _ranking._carried_rows(gen, lexical, _ranking._TermRows(), term, within)
                assert found is not None
                with monkeypatch.context() as few:
                    # Past the bound of added rows to analyse, tantivy is read instead.
                    few.setattr(_ranking, "_CARRY_MAX_ADDED", 0)
                    bounded = _ranking._carried_rows(
                        gen, lexical, _ranking._TermRows(), term, within
                    )
                    assert bounded is None or bounded.tolist() == found.tolist()
                afresh = _ranking._searched_rows(gen, lexical, term, len(gen.records), within)
                assert found.tolist() == afresh.tolist(), (step, term, f)
            live = (
                np.flatnonzero(gen.alive) if gen.alive is not None else np.arange(len(gen.records))
            )
            for code in gen.agent_index.values():
                expected = np.flatnonzero(gen.agent_codes == code)
                assert gen.rows_of_agent(code).tolist() == expected.tolist()
            assert gen.memory_rows().tolist() == np.flatnonzero(~gen.is_session).tolist()
            rows = live.tolist()
            assert gen.neighbour_rows(rows).tolist() == _neighbours_from_records(gen, rows).tolist()

            def analyse(r: int, g: Generation = gen, lx: object = lexical) -> list[str]:
                return lx.document_terms(g.records[r].text)  # type: ignore[attr-defined,no-any-return]

            assert gen.rows_terms(rows, analyse) == [frozenset(analyse(r)) for r in rows]
        assert carried_steps >= 10


async def test_a_search_lists_no_session_while_the_transcript_version_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In an index of many agents' sessions, a search whose transcript source keeps a
    listing version lists (and compares) no session while that version stands, sees a
    changed session once it moves, and ranks exactly as listing every time does."""
    from claw_memory._transcripts import InMemoryTranscriptSource, TranscriptTurn

    src = InMemoryTranscriptSource()
    listed: list[int] = []
    listing = InMemoryTranscriptSource.list_sessions

    async def counted(self: InMemoryTranscriptSource) -> object:
        sessions = await listing(self)
        listed.append(len(sessions))
        return sessions

    monkeypatch.setattr(InMemoryTranscriptSource, "list_sessions", counted)
    only3 = SearchFilter(agent_ids=frozenset({"agent3"}))
    async with _many_agents(tmp_path, src) as index:
        await index.search("otter heron", filter=only3)
        listed.clear()
        pages = []
        for query in ("otter heron", "kiwi walrus lynx", "badger seen"):
            for mode in ("lexical", "hybrid"):
                pages.append(await index.search(query, mode=mode, max_results=20, filter=only3))
        assert listed == []
        # A changed session moves the version: the next search lists and finds it.
        src.put(
            "agent3",
            "agent:agent3:main",
            "s3b",
            [TranscriptTurn("a3-q", "user", "", "a quokka by the plover", 1_800_000_000.0)],
        )
        found = await index.search("quokka", mode="lexical", filter=only3)
        assert listed and [h.agent_id for h in found.hits] == ["agent3"]
        # The sync that search ran leaves its listing as the one searches check
        # against: the next search lists nothing.
        listed.clear()
        again = await index.search("quokka", mode="lexical", filter=only3)
        assert listed == [] and again.hits == found.hits
        # An explicit sync after a change does the same.
        src.put(
            "agent3",
            "agent:agent3:main",
            "s3c",
            [TranscriptTurn("a3-r", "user", "", "a quokka by the heron", 1_800_000_100.0)],
        )
        await index.sync()
        listed.clear()
        synced = await index.search("quokka", mode="lexical", filter=only3)
        assert listed == [] and len(synced.hits) == 2
        src.remove("agent3", "s3c")
        await index.sync()
        # Without a version (a source that keeps none), every search lists: same pages.
        src.remove("agent3", "s3b")
        await index.search("otter", filter=only3)
        monkeypatch.delattr(InMemoryTranscriptSource, "sessions_version")
        listed.clear()
        i = 0
        for query in ("otter heron", "kiwi walrus lynx", "badger seen"):
            for mode in ("lexical", "hybrid"):
                old = await index.search(query, mode=mode, max_results=20, filter=only3)
                assert [(h.chunk_id, h.score) for h in old.hits] == [
                    (h.chunk_id, h.score) for h in pages[i].hits
                ]
                i += 1
        assert len(listed) == 6


async def test_a_sync_keeps_its_listing_for_searches_only_when_it_named_each_session_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync hands the sessions it left the index holding to the searches after it,
    which then list nothing; a listing that named a session twice is not kept (the
    index holds one source for both), so the next search lists and compares again."""
    from claw_memory._transcripts import InMemoryTranscriptSource, TranscriptTurn

    src = InMemoryTranscriptSource()
    listed: list[int] = []
    doubled = False
    listing = InMemoryTranscriptSource.list_sessions

    async def counted(self: InMemoryTranscriptSource) -> object:
        sessions = list(await listing(self))
        if doubled:
            sessions.append(sessions[0])
        listed.append(len(sessions))
        return sessions

    monkeypatch.setattr(InMemoryTranscriptSource, "list_sessions", counted)
    only3 = SearchFilter(agent_ids=frozenset({"agent3"}))
    turn = TranscriptTurn("a3-x", "user", "", "a quokka by the plover", 1_800_000_000.0)
    async with _many_agents(tmp_path, src) as index:
        src.put("agent3", "agent:agent3:main", "s3x", [turn])
        await index.sync()
        listed.clear()
        found = await index.search("quokka", mode="lexical", filter=only3)
        assert listed == [] and len(found.hits) == 1
        doubled = True
        src.put("agent3", "agent:agent3:main", "s3y", [attrs.evolve(turn, entry_id="a3-y")])
        await index.sync()
        listed.clear()
        again = await index.search("quokka", mode="lexical", filter=only3)
        assert listed != [] and len(again.hits) == 2


def _adjacent_from_records(gen: object, row: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """What adjacency was before the start-line column: each provenance's rows sorted
    by their decoded records' start lines (the reference the column must match)."""
    from claw_memory._generation import Generation

    assert isinstance(gen, Generation)
    ordered = sorted(
        gen.rows_of_provenance.get(gen.records[row].provenance, ()),
        key=lambda r: (gen.records[r].start_line, r),
    )
    if row not in ordered:
        return (), ()
    p = ordered.index(row)
    return (
        tuple(ordered[i] for i in (p - 1, p + 1) if 0 <= i < len(ordered)),
        tuple(ordered[i] for i in (p - 2, p + 2) if 0 <= i < len(ordered)),
    )


def _neighbours_from_records(gen: object, rows: list[int]) -> npt.NDArray[np.intp]:
    """Generation.neighbour_rows from :func:`_adjacent_from_records` (what coverage
    reads: the rows one and two places before and after each row, -1 for none)."""
    out = np.full((len(rows), 4), -1, dtype=np.intp)
    for i, row in enumerate(rows):
        one, two = _adjacent_from_records(gen, row)
        ordered = sorted(
            gen.rows_of_provenance.get(gen.records[row].provenance, ()),  # type: ignore[attr-defined]
            key=lambda r: (gen.records[r].start_line, r),  # type: ignore[attr-defined]
        )
        if row not in ordered:
            continue
        p = ordered.index(row)
        for j, place in enumerate((p - 1, p + 1, p - 2, p + 2)):
            if 0 <= place < len(ordered):
                out[i, j] = ordered[place]
        assert set(out[i, :2].tolist()) - {-1} == set(one)
        assert set(out[i, 2:].tolist()) - {-1} == set(two)
    return out


def _priors_from_records(
    gen: object,
    lexical: object,
    rows: list[int],
    params: object,
    query_terms: object,
    *,
    reply_wanted: bool = False,
) -> npt.NDArray[np.float64]:
    """What the priors on turns were before the speaker and question columns: each
    row's record read (the reference the columns must match)."""
    from claw_memory._ranking import is_echo

    out = np.ones(len(rows), dtype=np.float64)
    for i, r in enumerate(rows):
        rec = gen.records[r]  # type: ignore[attr-defined]
        if rec.source != "sessions":
            continue
        if rec.text.startswith("assistant: ") != reply_wanted:
            out[i] *= params.assistant_weight  # type: ignore[attr-defined]
        if not rec.text.startswith("assistant: ") and is_echo(lexical, rec.text, query_terms):  # type: ignore[arg-type]
            out[i] *= params.echo_weight  # type: ignore[attr-defined]
    return out


async def test_a_search_reads_no_record_of_the_neighbouring_turns_it_scores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second stage scores a candidate with its neighbouring turns (their terms and
    their dates) and weighs who speaks from the index's columns: a search in long
    sessions reads the records of its page only, never every turn of its candidates'
    sessions, and ranks exactly as reading the records did."""
    from claw_memory import _ranking
    from claw_memory._generation import Generation
    from claw_memory._published import RowRecords
    from claw_memory._records import ChunkRecord
    from claw_memory._transcripts import InMemoryTranscriptSource, TranscriptTurn

    src = InMemoryTranscriptSource()
    for a in range(4):
        turns = [
            TranscriptTurn(
                f"a{a}-{i}",
                "user" if i % 2 else "assistant",
                "",
                # Zebra turns, and after each a user's question that only echoes them.
                f"{_WORDS[(a + i) % 9]} {'zebra crossing' if i % 40 == 7 else 'seen'} there"
                if i % 40 != 9
                else "zebra crossing?",
                1_700_000_000.0 + 86_400.0 * (i // 10),
            )
            for i in range(120)
        ]
        src.put(f"agent{a}", f"agent:agent{a}:main", f"s{a}", turns)
    ws = tmp_path / "ws"
    ws.mkdir()
    read: list[ChunkRecord] = []
    get = RowRecords.__getitem__

    def decoded(self: RowRecords, row: int) -> object:
        rec = get(self, row)
        read.append(rec)
        return rec

    async with open_memory_index(
        workspace_dir=ws,
        index_dir=tmp_path / "idx",
        workers=InlineWorkerPool(),
        settings=MemoryCoreSettings(min_score=0.0, sources=("sessions",)),
        embedder=HashEmbedder(),
        transcripts=src,
    ) as index:
        f = SearchFilter(agent_ids=frozenset({"agent1"}))
        # (The zebra turns fall on 14, 18 and 22 November 2023: a date in the query
        # counts the words of each turn's date, its neighbours' among them.)
        queries = ("zebra crossing", "otter zebra", "heron seen zebra", "zebra on 18 November")
        pages = []
        for query in queries:
            for mode in ("lexical", "hybrid"):
                read.clear()
                with monkeypatch.context() as spy:
                    spy.setattr(RowRecords, "__getitem__", decoded)
                    page = await index.search(query, mode=mode, max_results=3, filter=f)
                pages.append(page)
                assert page.hits and "zebra" in page.hits[0].excerpt
                if "November" in query:
                    assert page.hits[0].entry_ids == ("a1-47",)
                # The page's records, the questions among the candidates (an echo is
                # told by its terms) and candidates tied with the page (ties go by chunk
                # id): not every candidate's, not the 120 turns of the session.
                paged = {h.chunk_id for h in page.hits}
                assert read
                assert all(r.chunk_id in paged or "zebra" in r.text for r in read)
        # The reference: neighbours ordered by the records' start lines, every term's
        # rows (and so every date) analysed from the records themselves.
        with monkeypatch.context() as old:
            old.setattr(Generation, "adjacent_rows", _adjacent_from_records)
            old.setattr(Generation, "neighbour_rows", _neighbours_from_records)
            old.setattr(_ranking, "priors", _priors_from_records)
            old.setattr(_ranking, "REACH_SHARE", 0.0)
            old.setattr(_ranking, "TERM_ROWS_MAX_DF", 0)
            i = 0
            for query in queries:
                for mode in ("lexical", "hybrid"):
                    ref = await index.search(query, mode=mode, max_results=3, filter=f)
                    got = pages[i]
                    assert [h.chunk_id for h in got.hits] == [h.chunk_id for h in ref.hits]
                    if mode == "lexical":
                        assert [h.score for h in got.hits] == [h.score for h in ref.hits]
                    else:  # (the same cosines, to the float rounding of a gathered product)
                        assert [h.score for h in got.hits] == pytest.approx(
                            [h.score for h in ref.hits], abs=1e-6
                        )
                    i += 1
