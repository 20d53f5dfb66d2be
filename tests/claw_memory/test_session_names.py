"""A grown session's settled turns are named from its last cut, not cut again.

What a group's pieces are depends on its turns and the chunk budget alone, so a sync of
a grown session names the groups whose turns are those of its last cut from the hashes
kept then (:class:`claw_memory._transcripts.SessionNames`). These tests pin that the
names are exactly what a full cut gives, whatever changed, and that the settled turns
are not rendered again.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claw_memory import _transcripts
from claw_memory._transcripts import (
    SessionCut,
    SessionNames,
    TranscriptSession,
    TranscriptTurn,
    cut_session,
)

_SESSION = TranscriptSession("a", "agent:a:s1", "s1", "3:s1-2")
_LONG = " ".join(f"word{i:03d} of a long reply," for i in range(60))


def _cut(
    turns: list[TranscriptTurn],
    *,
    settled: int = 0,
    names: SessionNames | None = None,
    turns_per_chunk: int = 1,
    tombstones: frozenset[str] = frozenset(),
) -> SessionCut:
    return cut_session(
        _SESSION,
        turns,
        turns_per_chunk=turns_per_chunk,
        context_turns=2,
        max_tokens=40,
        chars_per_token=4,
        tombstones=tombstones,
        settled_through=settled,
        names=names,
    )


def _turn(i: int, text: str) -> TranscriptTurn:
    role = "user" if i % 2 == 0 else "assistant"
    return TranscriptTurn(f"s1-{i}", role, role, text, 1_700_000_000.0 + 60 * i)


def _session(n: int) -> list[TranscriptTurn]:
    texts = ["hello there", _LONG, "   ", "hello there", "what is the plan", _LONG]
    return [_turn(i, texts[i % len(texts)]) for i in range(n)]


def _same(a: SessionCut, b: SessionCut) -> None:
    assert a.settled_ids == b.settled_ids
    assert a.settled_keys == b.settled_keys
    assert [(c.record, c.context, c.embed_text) for c in a.chunks] == [
        (c.record, c.context, c.embed_text) for c in b.chunks
    ]


@pytest.mark.parametrize("turns_per_chunk", [1, 2, 3])
def test_a_grown_session_is_named_as_a_full_cut_names_it(turns_per_chunk: int) -> None:
    names = SessionNames()
    turns = _session(11)
    _cut(turns, names=names, turns_per_chunk=turns_per_chunk)
    for grown in (12, 13, 17):
        turns = _session(grown)
        settled = grown - 3
        with_names = _cut(turns, settled=settled, names=names, turns_per_chunk=turns_per_chunk)
        without = _cut(turns, settled=settled, turns_per_chunk=turns_per_chunk)
        _same(with_names, without)


def test_the_settled_turns_of_a_grown_session_are_not_rendered_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = SessionNames()
    _cut(_session(40), names=names)
    rendered: list[str] = []
    real = _transcripts.render_turn

    def counting(turn: TranscriptTurn) -> str:
        rendered.append(turn.entry_id)
        return real(turn)

    monkeypatch.setattr(_transcripts, "render_turn", counting)
    grown = _cut(_session(41), settled=38, names=names)
    # The three groups past turn 38 and the two turns of context before them: five
    # turns, not the 41 a cut without the kept names renders.
    assert sorted(rendered) == sorted(f"s1-{i}" for i in range(36, 41))
    assert grown.settled_ids == _cut(_session(41), settled=38).settled_ids
    rendered.clear()
    _cut(_session(41), settled=38)
    assert len(rendered) == 41


def test_a_changed_turn_is_cut_again_where_it_changed() -> None:
    names = SessionNames()
    turns = _session(20)
    _cut(turns, names=names)
    edited = [*turns[:5], _turn(5, "a different reply now"), *turns[6:], _turn(20, "next")]
    _same(_cut(edited, settled=18, names=names), _cut(edited, settled=18))


def test_with_a_forgotten_chunk_every_group_is_cut_as_before() -> None:
    names = SessionNames()
    turns = _session(20)
    first = _cut(turns, names=names)
    gone = frozenset({first.chunks[3].record.chunk_id})
    grown = _session(21)
    kept = _cut(grown, settled=18, names=names, tombstones=gone)
    _same(kept, _cut(grown, settled=18, tombstones=gone))
    (forgotten,) = gone
    assert forgotten not in kept.settled_ids
    assert forgotten in _cut(grown, settled=18, names=names).settled_ids


def test_the_kept_names_are_bounded_the_least_recently_cut_session_going_first() -> None:
    other = TranscriptSession("a", "agent:a:s2", "s2", "1:s2-1")

    def cut(names: SessionNames, session: TranscriptSession, n: int) -> int:
        """Cut ``session`` of ``n`` turns whole; the entries its names take."""
        chunks = cut_session(
            session,
            _session(n),
            turns_per_chunk=1,
            context_turns=2,
            max_tokens=40,
            chars_per_token=4,
            tombstones=frozenset(),
            names=names,
        ).chunks
        return n + len(chunks)  # a group each, and each of their pieces

    sizes = {n: cut(SessionNames(), _SESSION, n) for n in (8, 12, 20, 40)}
    # The long replies' pieces count: the bound follows memory, not the turn count.
    assert sizes[20] > 2 * 20
    names = SessionNames(limit=sizes[20] + sizes[8])
    cut(names, _SESSION, 20)
    cut(names, other, 8)
    assert names.entries() == sizes[20] + sizes[8]
    cut(names, other, 12)  # the first session's names go to keep the second's
    assert names.entries() == sizes[12]
    assert sizes[40] > names.limit
    cut(names, _SESSION, 40)  # more than the limit alone: not kept
    assert names.entries() == sizes[12]


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(
        st.sampled_from(["hi", "hello there", _LONG, "", "  ", "the plan is set", "hi"]),
        min_size=1,
        max_size=16,
    ),
    extra=st.integers(min_value=0, max_value=4),
    turns_per_chunk=st.integers(min_value=1, max_value=3),
    settled_back=st.integers(min_value=0, max_value=6),
)
def test_names_kept_from_any_cut_give_the_full_cut(
    texts: list[str], extra: int, turns_per_chunk: int, settled_back: int
) -> None:
    names = SessionNames()
    before = [_turn(i, t) for i, t in enumerate(texts)]
    _cut(before, names=names, turns_per_chunk=turns_per_chunk)
    after = before + [_turn(len(before) + i, "more words here") for i in range(extra)]
    settled = max(0, len(after) - settled_back)
    _same(
        _cut(after, settled=settled, names=names, turns_per_chunk=turns_per_chunk),
        _cut(after, settled=settled, turns_per_chunk=turns_per_chunk),
    )
