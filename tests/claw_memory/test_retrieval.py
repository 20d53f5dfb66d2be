"""Retrieval behaviour: query analysis, transcript documents and their field weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given

from claw.plugin_sdk import ConfigError, InlineWorkerPool
from claw.plugin_sdk.search import QUERY_STOPWORDS
from claw_memory import _lexical
from claw_memory import _ranking as ranking_module
from claw_memory._index import open_memory_index
from claw_memory._lexical import LexicalContext, LexicalIndex
from claw_memory._ranking import asks_when, coverage
from claw_memory._settings import MemoryCoreSettings
from claw_memory._transcripts import (
    InMemoryTranscriptSource,
    TranscriptSession,
    TranscriptTurn,
    date_text,
    prepare_session_chunks,
)
from claw_memory._types import SearchFilter
from claw_memory._when import says_when

from ._sessions import SESSIONS_ONLY, sessions_index


def _turns(speakers_and_texts: list[tuple[str, str]], sid: str = "s1") -> list[TranscriptTurn]:
    return [
        TranscriptTurn(f"{sid}-{i}", "user", speaker, text, 1_700_000_000.0 + i)
        for i, (speaker, text) in enumerate(speakers_and_texts)
    ]


def _terms(index: LexicalIndex, text: str) -> list[str]:
    # The analyser a query is analysed with (every index shares it).
    return list(_lexical._QUERY_ANALYZER.analyze(text))


def test_queries_drop_function_words_but_keep_content_words(tmp_path: Path) -> None:
    index = LexicalIndex(tmp_path / "lex")
    try:
        assert _terms(index, "What did she do when they went hiking?") == ["went", "hike"]
        assert _terms(index, "Why isn't Bob's garden growing") == ["bob", "garden", "grow"]
    finally:
        index.close()


def test_a_query_of_only_function_words_still_has_terms(tmp_path: Path) -> None:
    index = LexicalIndex(tmp_path / "lex")
    try:
        q = index.build_query(
            "what did you do",
            context_boost=0.5,
            path_boost=0.5,
            sources=None,
            agent_ids=None,
            session_keys=None,
        )
        assert q is not None
    finally:
        index.close()


def test_stopwords_are_lowercase_single_tokens() -> None:
    assert all(w == w.lower() and " " not in w for w in QUERY_STOPWORDS)
    # Words that carry meaning in a question stay searchable.
    assert not {"first", "last", "before", "after", "likely", "never"} & (
        QUERY_STOPWORDS - {"before", "after"}
    )


@given(st.text(), st.text(), st.text(), st.text())
def test_lexical_context_round_trips(speakers: str, near: str, far: str, date: str) -> None:
    ctx = LexicalContext(
        speakers=speakers.replace("\x1e", ""),
        near=near.replace("\x1e", ""),
        far=far.replace("\x1e", ""),
        date=date.replace("\x1e", ""),
    )
    decoded = LexicalContext.decode(ctx.encode())
    if ctx.speakers or ctx.near or ctx.far or ctx.date:
        assert decoded == ctx
    else:
        assert ctx.encode() == "" and decoded == LexicalContext()


def test_a_plain_context_string_is_near_context() -> None:
    assert LexicalContext.decode("the turn before") == LexicalContext(near="the turn before")


def test_a_context_without_a_date_part_decodes_with_an_empty_date() -> None:
    # What a store written before the date field holds: three parts.
    old = "\x1eAnn\x1ethe turn before\x1etwo away"
    assert LexicalContext.decode(old) == LexicalContext("Ann", "the turn before", "two away")


@given(st.text(alphabet="May 09\u0661stndrh,\n", max_size=30))
def test_date_rewriting_skips_a_query_without_digits_and_changes_nothing(text: str) -> None:
    """Both date patterns need a digit; a query without one skips them, same terms."""
    from claw_memory._lexical import _MAY_TOKEN, _MONTH_MAY, _ORDINAL, _date_aware

    assert _date_aware(text) == _ORDINAL.sub("", _MONTH_MAY.sub(" " + _MAY_TOKEN + " ", text))


def test_a_query_date_keeps_the_month_may_and_the_day_of_an_ordinal(tmp_path: Path) -> None:
    index = LexicalIndex(tmp_path / "lex")
    try:
        assert index.query_terms("What did Gina do on May 23, 2023?") == [
            "gina",
            "may",
            "23",
            "2023",
        ]
        assert index.query_terms("on 8 May") == ["8", "may"]
        assert index.query_terms("the weekend before 4th October") == ["weekend", "4", "octob"]
        # The modal verb is still a function word.
        assert index.query_terms("May I ask what Ann cooked?") == ["ask", "ann", "cook"]
    finally:
        index.close()


def test_transcript_chunks_split_context_into_near_and_far_turns() -> None:
    session = TranscriptSession("a", "agent:a:main", "s1", "5:x")
    turns = _turns([("Ann", f"turn {w}") for w in ("zero", "one", "two", "three", "four")])
    chunks = prepare_session_chunks(
        session,
        turns,
        turns_per_chunk=1,
        context_turns=2,
        max_tokens=400,
        chars_per_token=4,
        tombstones=frozenset(),
    )
    middle = LexicalContext.decode(chunks[2].context)
    assert middle.speakers == "Ann"
    assert middle.date == date_text(turns[2].timestamp) == "14 November 2023"
    assert middle.near == "Ann: turn one\nAnn: turn three"
    assert middle.far == "Ann: turn zero\nAnn: turn four"
    # The embedder sees the turn's own text: its neighbours reach ranking through the
    # lexical context fields (TURN_VECTORS).
    assert chunks[2].embed_text == "Ann: turn two"


def _session_index(tmp_path: Path, turns: list[tuple[str, str]]) -> Any:
    """An index over one transcript session of ``(speaker, text)`` turns."""
    return sessions_index(tmp_path, {"s1": _turns(turns)})


async def test_a_query_naming_a_speaker_prefers_what_that_speaker_said(
    tmp_path: Path,
) -> None:
    async with _session_index(
        tmp_path,
        [
            ("Ann", "we adopted a puppy last week"),
            ("Bob", "a puppy is a lot of work, my puppy chewed everything"),
            ("Ann", "lovely weather today"),
            ("Bob", "indeed"),
        ],
    ) as index:
        hits = (await index.search("When did Ann get a puppy?", mode="lexical")).hits
        assert hits[0].entry_ids == ("s1-0",)
        bob = (await index.search("Did Bob's puppy chew things?", mode="lexical")).hits
        assert bob[0].entry_ids == ("s1-1",)


async def test_an_adjacent_turn_outweighs_a_farther_one(tmp_path: Path) -> None:
    async with _session_index(
        tmp_path,
        [
            ("Ann", "filler one"),
            ("Ann", "filler two"),
            ("Bob", "which colours did you use"),
            ("Ann", "mostly orange and violet"),
            ("Ann", "filler three"),
            ("Ann", "filler four"),
        ],
    ) as index:
        hits = (await index.search("colours", mode="lexical", max_results=10)).hits
        order = [h.entry_ids[0] for h in hits]
        # The turn itself, then its neighbours by distance.
        assert order[0] == "s1-2"
        assert set(order[1:3]) == {"s1-1", "s1-3"}
        assert set(order[3:5]) == {"s1-0", "s1-4"}


def test_fusion_weights_follow_the_settings_then_the_embedders_hint() -> None:
    from claw.plugin_sdk.search import HashEmbedder

    assert MemoryCoreSettings().fusion_weights(HashEmbedder()) == (0.3, 0.7)
    assert MemoryCoreSettings().fusion_weights(object()) == (0.5, 0.5)
    assert MemoryCoreSettings(vector_weight=0.8).fusion_weights(HashEmbedder()) == (
        0.8,
        pytest.approx(0.2),
    )
    assert MemoryCoreSettings(text_weight=0.25).fusion_weights(None) == (0.75, 0.25)
    explicit = MemoryCoreSettings(vector_weight=0.7, text_weight=0.3)
    assert explicit.fusion_weights(HashEmbedder()) == (0.7, 0.3)


_NO_SECOND_STAGE = {"coverage_weight": 0.0, "near_coverage_weight": 0.0, "far_coverage_weight": 0.0}
_CHATTER = "and then we talked for a while about work and the weather and what to cook for dinner"


_sessions_index = sessions_index


@pytest.mark.parametrize("second_stage", [True, False])
async def test_the_turn_that_says_it_outranks_the_neighbour_its_context_lifts(
    tmp_path: Path, second_stage: bool
) -> None:
    # "yes" matches nothing itself but sits between the question and the (long) answer:
    # the context fields alone put it first; the second stage puts the answer first.
    turns = _turns(
        [
            ("Bob", "lighthouse?"),
            ("Ann", "yes"),
            ("Ann", "I finished the lighthouse painting " + " ".join([_CHATTER] * 3)),
            ("Bob", "painting it must be hard"),
            ("Ann", "it was"),
        ]
    )
    settings = {} if second_stage else _NO_SECOND_STAGE
    async with _sessions_index(tmp_path, {"s1": turns}, **settings) as index:
        hits = (await index.search("What did Ann say about the lighthouse painting?")).hits
    top = hits[0].entry_ids[0]
    assert top == ("s1-2" if second_stage else "s1-1")


async def test_a_question_naming_a_session_date_prefers_that_sessions_turn(
    tmp_path: Path,
) -> None:
    may_8, june_3 = 1_683_504_000.0, 1_685_750_400.0  # 2023, midnight UTC
    same = [("Ann", "we went hiking"), ("Bob", "nice")]
    sessions = {
        "s1": [
            TranscriptTurn(f"s1-{i}", "user", s, t, may_8 + 3600) for i, (s, t) in enumerate(same)
        ],
        "s2": [
            TranscriptTurn(f"s2-{i}", "user", s, t, june_3 + 3600) for i, (s, t) in enumerate(same)
        ],
    }
    async with _sessions_index(tmp_path, sessions) as index:
        june = (await index.search("Where did Ann go hiking on 3 June, 2023?")).hits
        may = (await index.search("Where did Ann go hiking on 8 May, 2023?")).hits
    assert june[0].entry_ids == ("s2-0",)
    assert may[0].entry_ids == ("s1-0",)


_MAY_8, _JUNE_3 = 1_683_504_000.0, 1_685_750_400.0  # 2023, midnight UTC


def _dated_sessions() -> dict[str, list[TranscriptTurn]]:
    same = [("Ann", "we went hiking"), ("Bob", "nice")]
    return {
        sid: [
            TranscriptTurn(f"{sid}-{i}", "user", s, t, day + 3600) for i, (s, t) in enumerate(same)
        ]
        for sid, day in (("s1", _MAY_8), ("s2", _JUNE_3))
    }


@pytest.mark.parametrize("date_boost", [0.6, 0.0])
async def test_the_date_field_finds_a_sessions_turns_by_a_date_the_text_lacks(
    tmp_path: Path, date_boost: float
) -> None:
    # No turn says "May": the first stage alone (no second stage) finds the session
    # of 8 May 2023 through the date field, and nothing without it.
    async with _sessions_index(
        tmp_path, _dated_sessions(), date_boost=date_boost, **_NO_SECOND_STAGE
    ) as index:
        hits = (await index.search("What happened on 8 May?", mode="lexical")).hits
    if date_boost:
        assert {h.entry_ids[0] for h in hits} == {"s1-0", "s1-1"}
    else:
        assert hits == ()


def test_a_negative_date_boost_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="memory_core.date_boost"):
        MemoryCoreSettings(date_boost=-1.0)


async def test_an_index_built_before_the_date_field_rebuilds_and_then_matches_dates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tantivy

    import claw_memory._index as index_module
    import claw_memory._lexical as lexical_module

    real_schema = lexical_module._schema

    def schema_without_dates() -> tantivy.Schema:
        # Document version 2: the same fields but no date (tantivy ignores the value).
        sb = tantivy.SchemaBuilder()
        sb.add_text_field("cid", stored=True, tokenizer_name="raw")
        sb.add_unsigned_field("key", stored=False, indexed=False, fast=True)
        for raw in ("prov", "source", "agent", "skey"):
            sb.add_text_field(raw, tokenizer_name="raw", index_option="basic")
        for text in ("text", "context", "far", "speaker", "path"):
            sb.add_text_field(text, tokenizer_name="claw_en", index_option="freq")
        sb.add_text_field("grams", tokenizer_name="whitespace", index_option="freq")
        return sb.build()

    monkeypatch.setattr(lexical_module, "_schema", schema_without_dates)
    monkeypatch.setattr(index_module, "DOCUMENT_VERSION", 2)
    # That version had no date field to query either.
    before = {"date_boost": 0.0, **_NO_SECOND_STAGE}
    async with _sessions_index(tmp_path, _dated_sessions(), **before) as index:
        old = index.status()
        assert (await index.search("What happened on 8 May?", mode="lexical")).hits == ()
    monkeypatch.undo()
    assert lexical_module._schema is real_schema
    async with _sessions_index(tmp_path, _dated_sessions(), **_NO_SECOND_STAGE) as index:
        new = index.status()
        hits = (await index.search("What happened on 8 May?", mode="lexical")).hits
    assert new.index_generation == old.index_generation + 1
    assert new.chunks == old.chunks
    assert {h.entry_ids[0] for h in hits} == {"s1-0", "s1-1"}


def test_session_dates_are_words_of_the_utc_day() -> None:
    assert date_text(1_685_750_400.0 + 23 * 3600) == "3 June 2023"
    assert date_text(None) == ""
    assert date_text(float("nan")) == ""


async def test_coverage_counts_own_then_adjacent_then_two_away_turns(tmp_path: Path) -> None:
    turns = _turns(
        [
            ("Ann", "violet"),
            ("Ann", "orange"),
            ("Ann", "paint"),
            ("Ann", "filler"),
            ("Ann", "filler again"),
        ]
    )
    async with _session_index_turns(tmp_path, turns) as index:
        gen, lexical = index._view.generation, index._view.lexical
        row = {rec.entry_ids[0]: i for i, rec in enumerate(gen.records)}
        terms = lexical.query_terms("paint orange violet")
        own, near, far = coverage(gen, lexical, [row["s1-2"], row["s1-4"]], terms)
    # Each term is in one turn: s1-2 has one itself, one adjacent and one two away.
    third = 1.0 / 3.0
    assert own.tolist() == pytest.approx([third, 0.0], abs=0.05)
    assert near.tolist() == pytest.approx([2 * third, 0.0], abs=0.05)
    assert far.tolist() == pytest.approx([1.0, third], abs=0.05)


async def test_coverage_of_rare_terms_reads_the_lexical_index_not_each_rows_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Analysing every head row's text cost more than the rest of a search on a fresh
    # index; a term in few documents has its rows from one term query instead.
    turns = _turns([("Ann", "violet"), ("Ann", "orange"), ("Ann", "paint")])
    async with _session_index_turns(tmp_path, turns) as index:
        gen, lexical = index._view.generation, index._view.lexical
        analysed: list[str] = []
        real = LexicalIndex.document_terms

        def counting(self: LexicalIndex, text: str) -> list[str]:
            analysed.append(text)
            return real(self, text)

        monkeypatch.setattr(LexicalIndex, "document_terms", counting)
        terms = lexical.query_terms("paint orange")
        own, _, _ = coverage(gen, lexical, list(range(len(gen.records))), terms)
    assert sorted(own.tolist()) == pytest.approx([0.0, 0.5, 0.5], abs=0.05)
    # At most the turns' date (one day) was analysed, never a turn's text.
    assert set(analysed) <= {date_text(turns[0].timestamp)}


def _many_turns() -> dict[str, list[TranscriptTurn]]:
    words = ["violet", "orange", "paint", "brush", "canvas", "easel", "filler"]
    return {
        sid: [
            TranscriptTurn(
                f"{sid}-{i}",
                "user",
                "Ann",
                " ".join(words[(i * k + j) % len(words)] for j in range(1 + i % 3)),
                day + 3600 * i,
            )
            for i in range(9)
        ]
        for k, (sid, day) in enumerate((("s1", _MAY_8), ("s2", _JUNE_3)), start=1)
    }


@pytest.mark.parametrize(
    "query", ["paint orange violet", "brush on 8 May", "June canvas easel filler", "nothing"]
)
async def test_coverage_from_the_lexical_index_equals_coverage_from_analysed_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, query: str
) -> None:
    # The two ways agree exactly, for own text, dates and both neighbour rings.
    async with _sessions_index(tmp_path, _many_turns()) as index:
        gen, lexical = index._view.generation, index._view.lexical
        rows = list(range(len(gen.records)))[::-1]
        terms = lexical.query_terms(query)
        from_index = coverage(gen, lexical, rows, terms)
        monkeypatch.setattr(ranking_module, "TERM_ROWS_MAX_DF", -1)
        from_rows = coverage(gen, lexical, rows, terms)
    assert [part.tolist() for part in from_index] == [part.tolist() for part in from_rows]
    assert any(part.any() for part in from_index) == (query != "nothing")


@pytest.mark.parametrize("query", ["paint orange violet", "brush canvas easel filler"])
async def test_a_terms_rows_among_an_agents_are_those_whose_text_holds_it(
    tmp_path: Path, query: str
) -> None:
    """Read from tantivy (the term's postings within the agent's, unscored), a term's
    rows are exactly the agent's rows whose analysed text holds it, and alike unfiltered."""
    src = InMemoryTranscriptSource()
    for agent in "abcde":
        for sid, turns in _many_turns().items():
            src.put(agent, f"agent:{agent}:{sid}", sid, turns[: 3 + "abcde".index(agent)])
    (tmp_path / "ws").mkdir()
    async with open_memory_index(
        workspace_dir=tmp_path / "ws",
        index_dir=tmp_path / "idx",
        workers=InlineWorkerPool(),
        settings=SESSIONS_ONLY,
        transcripts=src,
    ) as index:
        gen, lexical = index._view.generation, index._view.lexical
        f = ranking_module.narrow_filter(gen, SearchFilter(agent_ids=frozenset({"c"})))
        reach = ranking_module.reachable_rows(gen, f)
        assert reach is not None and 0 < len(reach) < len(gen.records)
        within = ranking_module._Within(f, reach)
        searcher = gen.searcher
        assert searcher is not None
        for term in lexical.query_terms(query):
            df = int(searcher.doc_freq("text", term))
            holding = [
                r
                for r in range(len(gen.records))
                if term in lexical.document_terms(gen.records[r].text)
            ]
            memo = ranking_module._TermRows()
            got = ranking_module._term_rows(gen, lexical, memo, term, df, within=within)
            assert got.tolist() == [r for r in holding if r in set(reach.tolist())]
            assert ranking_module._term_rows(gen, lexical, memo, term, df).tolist() == holding
            assert holding


def _session_index_turns(tmp_path: Path, turns: list[TranscriptTurn]) -> Any:
    return _sessions_index(tmp_path, {"s1": turns})


@pytest.mark.parametrize(
    "name", ["coverage_weight", "near_coverage_weight", "far_coverage_weight", "when_weight"]
)
def test_a_negative_coverage_weight_is_refused_by_name(name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        MemoryCoreSettings(**{name: -0.1})


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("When did Ann go to the pottery class?", True),
        ("In what year did Bob move?", True),
        ("How long ago was the trip?", True),
        ("What did Ann paint?", False),
        ("Whenever Ann paints, what colour does she use?", False),
    ],
)
def test_a_question_asks_when_by_its_question_words(question: str, expected: bool) -> None:
    assert asks_when(question) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I went to a pottery class yesterday", True),
        ("Last Fri I finally took the kids out", True),
        ("we are moving next month", True),
        ("we met in June, 2021", True),
        ("I may go to a pottery class", False),
        ("the pottery class was lovely", False),
    ],
)
def test_a_turn_says_when_by_a_relative_day_a_weekday_a_month_or_a_year(
    text: str, expected: bool
) -> None:
    assert says_when(text) is expected


@pytest.mark.parametrize("when_weight", [0.3, 0.0])
async def test_a_question_asking_when_prefers_the_turn_that_says_when(
    tmp_path: Path, when_weight: float
) -> None:
    # Both turns speak of the pottery class; the one that says when is the answer to
    # "when", though the other matches the question's words more often.
    turns = _turns(
        [
            ("Ann", "the pottery class was fun, I love the pottery class"),
            ("Bob", _CHATTER),
            ("Bob", _CHATTER + " again"),
            ("Ann", "I went to a pottery class yesterday"),
        ]
    )
    async with _sessions_index(tmp_path, {"s1": turns}, when_weight=when_weight) as index:
        when = (await index.search("When did Ann go to the pottery class?")).hits
        what = (await index.search("What did Ann think of the pottery class?")).hits
    assert when[0].entry_ids == (("s1-3",) if when_weight else ("s1-0",))
    # A question that does not ask when is ranked as before.
    assert what[0].entry_ids == ("s1-0",)
