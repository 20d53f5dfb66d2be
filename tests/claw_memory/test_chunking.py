from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from claw.plugin_sdk.search import (
    chunk_id_for,
    estimate_tokens,
    line_windows,
    sha256_hex,
    split_by_bytes,
    split_lines,
)
from claw_memory._sources import prepare_file_chunks

_CHARS = st.characters(
    codec="utf-8", exclude_categories=("Cs", "Zl", "Zp", "Cc"), include_characters="\t"
)
_LINE = st.one_of(
    st.text(_CHARS, max_size=30),
    st.text(st.sampled_from("東京タワー行った한국어"), max_size=40),
    st.text(st.sampled_from("ab "), min_size=50, max_size=400),
)
_LINES = st.lists(_LINE, max_size=60)


def _windows(lines: list[str], max_tokens: int, overlap: int) -> list:
    return line_windows(lines, max_tokens=max_tokens, overlap_tokens=overlap, chars_per_token=4)


@settings(max_examples=150, deadline=None)
@given(_LINES, st.integers(8, 120), st.data())
def test_windows_cover_every_line_in_order(
    lines: list[str], max_tokens: int, data: st.DataObject
) -> None:
    overlap = data.draw(st.integers(0, max_tokens - 1))
    windows = _windows(lines, max_tokens, overlap)
    covered = set()
    for w in windows:
        assert 1 <= w.start <= w.end <= len(lines)
        covered.update(range(w.start, w.end + 1))
    assert covered == set(range(1, len(lines) + 1))
    starts = [(w.start, w.part) for w in windows]
    assert starts == sorted(starts)


@settings(max_examples=150, deadline=None)
@given(_LINES, st.integers(8, 120), st.data())
def test_windows_respect_the_budget_and_the_overlap_bound(
    lines: list[str], max_tokens: int, data: st.DataObject
) -> None:
    overlap = data.draw(st.integers(0, max_tokens - 1))
    windows = _windows(lines, max_tokens, overlap)
    cost = [estimate_tokens(line) + 1 for line in lines]
    for w in windows:
        if w.start == w.end and cost[w.start - 1] > max_tokens:
            # A long line is cut into pieces that each fit and rebuild the line.
            assert estimate_tokens(w.text) <= max_tokens
            continue
        assert sum(cost[w.start - 1 : w.end]) <= max_tokens
        assert w.text == "\n".join(lines[w.start - 1 : w.end])
    for a, b in itertools.pairwise(windows):
        shared = range(max(a.start, b.start), min(a.end, b.end) + 1)
        if a.start == a.end == b.start == b.end:
            continue  # pieces of one long line
        assert sum(cost[i - 1] for i in shared) <= overlap
        assert b.end > a.end, "every window advances past the previous one"


@settings(max_examples=100, deadline=None)
@given(st.text(st.sampled_from("東京タワーに行った"), min_size=1, max_size=2000))
def test_cjk_text_counts_one_token_per_character_and_is_cut_by_it(text: str) -> None:
    assert estimate_tokens(text) == len(text)
    windows = _windows([text], 50, 10)
    assert "".join(w.text for w in windows) == text
    assert all(len(w.text) <= 50 for w in windows)


def test_latin_text_counts_four_characters_per_token() -> None:
    assert estimate_tokens("abcdefgh") == 2
    assert estimate_tokens("abcdefghi") == 3
    assert estimate_tokens("東京abcd") == 3


@settings(max_examples=150, deadline=None)
@given(st.text(_CHARS, max_size=600), st.integers(4, 64))
def test_split_by_bytes_fits_the_limit_and_loses_nothing(text: str, limit: int) -> None:
    pieces = split_by_bytes(text, limit)
    assert "".join(pieces) == text
    assert all(len(p.encode("utf-8")) <= limit for p in pieces)
    assert all(p for p in pieces) or text == ""


def test_split_lines_ignores_a_final_newline() -> None:
    assert split_lines("a\nb\n") == ["a", "b"]
    assert split_lines("") == []


def test_chunk_ids_are_stable_and_independent_of_line_shifts() -> None:
    body = "\n".join(f"line {i} " + "x" * 40 for i in range(60))
    first = prepare_file_chunks(
        "MEMORY.md",
        body,
        "h1",
        max_tokens=100,
        overlap_tokens=20,
        chars_per_token=4,
        tombstones=set(),
    )
    again = prepare_file_chunks(
        "MEMORY.md",
        body,
        "h1",
        max_tokens=100,
        overlap_tokens=20,
        chars_per_token=4,
        tombstones=set(),
    )
    assert [c.record.chunk_id for c in first] == [c.record.chunk_id for c in again]
    assert len({c.record.chunk_id for c in first}) == len(first)
    # Appending lines keeps every earlier full window and its id.
    grown = prepare_file_chunks(
        "MEMORY.md",
        body + "\nappended",
        "h2",
        max_tokens=100,
        overlap_tokens=20,
        chars_per_token=4,
        tombstones=set(),
    )
    assert {c.record.chunk_id for c in first[:-1]} <= {c.record.chunk_id for c in grown}
    assert first[0].record.content_hash == grown[0].record.content_hash


def test_identical_windows_in_one_file_get_distinct_ids() -> None:
    assert chunk_id_for("memory", "memory:a.md", "h", 0) != chunk_id_for(
        "memory", "memory:a.md", "h", 1
    )


@settings(max_examples=60, deadline=None)
@given(_LINES)
def test_a_memory_chunk_carries_the_hash_of_what_it_embeds(lines: list[str]) -> None:
    """The embedding cache is keyed by the SHA-256 of a chunk's embedding input; a
    memory chunk hands it over (its content hash) so a sync does not hash twice."""
    chunks = prepare_file_chunks(
        "memory/a.md",
        "\n".join(lines),
        "h",
        max_tokens=40,
        overlap_tokens=5,
        chars_per_token=4,
        tombstones=set(),
    )
    for c in chunks:
        assert c.embed_hash == sha256_hex(c.embed_text) == c.record.content_hash


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.text(_CHARS, min_size=1, max_size=900),
        st.text(st.sampled_from("ab .é"), min_size=1, max_size=900),
        st.text(st.sampled_from("ab 東京"), min_size=1, max_size=900),
    ),
    st.integers(-2, 80),
    st.integers(1, 6),
)
def test_a_long_line_is_cut_as_the_budget_counts_character_by_character(
    line: str, max_tokens: int, chars_per_token: int
) -> None:
    # A line without CJK is cut in slices; the character-by-character count is the
    # rule, and every line (with CJK or not) is cut exactly as it would cut it.
    from claw.plugin_sdk.search._chunking import _cut_by_budget, _cut_long_line

    assert _cut_long_line(line, max_tokens, chars_per_token) == _cut_by_budget(
        line, max_tokens, chars_per_token
    )
