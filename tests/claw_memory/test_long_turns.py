"""A turn longer than a chunk is cut into pieces that each say who speaks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from claw.plugin_sdk.search import estimate_tokens, line_windows, sha256_hex
from claw_memory._transcripts import (
    SessionCut,
    TranscriptSession,
    TranscriptTurn,
    cut_session,
    names_a_turn_piece,
    render_turn,
    speaker_label,
    turn_pieces,
)

from ._sessions import sessions_index

_SESSION = TranscriptSession("a", "agent:a:s1", "s1", "3:s1-2")
_BUDGET = 40  # tokens a chunk (4 characters a token): 160 characters


def _session_cut(
    turns: list[TranscriptTurn],
    *,
    turns_per_chunk: int = 1,
    tombstones: frozenset[str] | set[str] = frozenset(),
    settled: int = 0,
) -> SessionCut:
    return cut_session(
        _SESSION,
        turns,
        turns_per_chunk=turns_per_chunk,
        context_turns=1,
        max_tokens=_BUDGET,
        chars_per_token=4,
        tombstones=tombstones,
        settled_through=settled,
    )


def _cut(turns: list[TranscriptTurn], turns_per_chunk: int = 1) -> list[str]:
    return [c.record.text for c in _session_cut(turns, turns_per_chunk=turns_per_chunk).chunks]


_LONG = " ".join(f"word{i:03d} of a long reply," for i in range(60))


@pytest.mark.parametrize("turns_per_chunk", [1, 2])
def test_every_piece_of_a_long_turn_starts_with_its_speaker(turns_per_chunk: int) -> None:
    turns = [
        TranscriptTurn("s1-1", "user", "user", "tell me everything"),
        TranscriptTurn("s1-2", "assistant", "assistant", _LONG),
    ]
    pieces = _cut(turns, turns_per_chunk)
    reply = [p for p in pieces if not p.startswith("user: ")]
    assert len(reply) > 3
    assert all(p.startswith("assistant: ") for p in reply)
    assert all(estimate_tokens(p, 4) <= _BUDGET for p in reply)
    # Nothing of the reply is lost or repeated: the pieces' bodies are its text.
    assert "".join(p.removeprefix("assistant: ") for p in reply) == _LONG


def test_a_long_turn_without_a_speaker_is_cut_by_the_budget_alone() -> None:
    turn = TranscriptTurn("s1-1", "", "", _LONG)
    pieces = _cut([turn])
    assert len(pieces) > 3
    assert "".join(pieces) == _LONG
    assert speaker_label(turn) == ""


def test_a_speaker_label_too_long_for_the_budget_is_not_repeated() -> None:
    name = "x" * 120  # 30 of the 40 tokens
    turn = TranscriptTurn("s1-1", "user", name, _LONG)
    pieces = _cut([turn])
    assert pieces[0].startswith(f"{name}: ")
    assert not pieces[1].startswith(name)
    assert "".join(pieces) == render_turn(turn)


def test_a_later_pieces_hash_names_a_piece_of_the_cited_turns() -> None:
    turn = TranscriptTurn("s1-2", "assistant", "assistant", _LONG)
    lines, labels = [render_turn(turn)], [speaker_label(turn)]
    pieces = turn_pieces(lines, labels, _BUDGET, 4)
    for piece in pieces:
        assert names_a_turn_piece(
            lines, labels, sha256_hex(piece), max_tokens=_BUDGET, chars_per_token=4
        )
    assert not names_a_turn_piece(
        lines, labels, sha256_hex(lines[0]), max_tokens=_BUDGET, chars_per_token=4
    )


def test_a_piece_cut_before_labels_were_repeated_still_names_its_turn() -> None:
    # A reference an agent kept from an index cut the old way (the label on the first
    # piece only) cites the same, unchanged turn: it still reads back.
    turn = TranscriptTurn("s1-2", "assistant", "assistant", _LONG)
    lines, labels = [render_turn(turn)], [speaker_label(turn)]
    old = line_windows(lines, max_tokens=_BUDGET, overlap_tokens=0, chars_per_token=4)
    assert len(old) > 2 and not old[1].text.startswith("assistant: ")
    for w in old:
        assert names_a_turn_piece(
            lines, labels, sha256_hex(w.text), max_tokens=_BUDGET, chars_per_token=4
        )


# The user said what they bought once; the assistant's long reply talks of it at
# length, its later pieces more densely than the user's turn. Those pieces are still
# the assistant's, and the speaker prior counts them so.
_FILLER = " ".join(f"tip{i:02d} about cooking outdoors," for i in range(30))
_TURNS = [
    ("user", "I just bought a smoker today, excited to try some brisket"),
    (
        "assistant",
        f"Congratulations! {_FILLER} and now the smoker: a smoker for brisket wants"
        " low heat, so keep the smoker steady and let the brisket rest; buy a good"
        " probe thermometer for it.",
    ),
    ("user", "thanks, that helps"),
]


def _index(tmp_path: Path, **settings: Any) -> Any:
    turns = [
        TranscriptTurn(f"s1-{i}", role, role, text, 1_700_000_000.0 + i)
        for i, (role, text) in enumerate(_TURNS)
    ]
    return sessions_index(tmp_path, {"s1": turns}, chunk_tokens=60, chunk_overlap=0, **settings)


_QUERY = "When did I buy the smoker for brisket?"


async def _hits(tmp_path: Path, **settings: Any) -> list[Any]:
    async with _index(tmp_path, **settings) as index:
        return list((await index.search(_QUERY, mode="lexical")).hits)


async def test_a_later_piece_of_a_long_reply_counts_as_the_assistants(tmp_path: Path) -> None:
    hits = await _hits(tmp_path)
    assert hits[0].entry_ids == ("s1-0",)
    reply = [h for h in hits if h.entry_ids == ("s1-1",)]
    assert len(reply) >= 3
    assert all(h.excerpt.startswith("assistant: ") for h in reply)


async def test_the_prior_weighs_every_piece_of_a_reply_alike(tmp_path: Path) -> None:
    weighted = await _hits(tmp_path / "weighted", assistant_weight=0.5)
    flat = await _hits(tmp_path / "flat", assistant_weight=1.0)
    by_chunk = {h.chunk_id: h.score for h in flat}
    reply = [h for h in weighted if h.entry_ids == ("s1-1",)]
    assert len(reply) >= 3
    for h in reply:
        assert h.score == pytest.approx(0.5 * by_chunk[h.chunk_id])


async def test_without_a_speaker_prior_the_replys_denser_piece_wins(tmp_path: Path) -> None:
    # The fixture's premise: it is the prior, not the words, that puts the user first.
    hits = await _hits(tmp_path, assistant_weight=1.0)
    assert hits[0].entry_ids == ("s1-1",)


# A forget made before every piece said who speaks tombstoned a piece of the old cut,
# whose id the new cut no longer makes: its text must stay out all the same.
_PROV = "sessions:a\x1fagent:a:s1\x1fs1"


def _old_ids(turns: list[TranscriptTurn], turns_per_chunk: int = 1) -> list[tuple[str, str]]:
    """(id, text) of every piece as the cut before TURN_PIECES made them."""
    from claw.plugin_sdk.search import chunk_id_for

    seen: dict[str, int] = {}
    out = []
    lines = [render_turn(t) for t in turns]
    for g in range(0, len(lines), turns_per_chunk):
        group = lines[g : g + turns_per_chunk]
        for w in line_windows(group, max_tokens=_BUDGET, overlap_tokens=0, chars_per_token=4):
            h = sha256_hex(w.text)
            occurrence = seen.get(h, 0)
            seen[h] = occurrence + 1
            out.append((chunk_id_for("sessions", _PROV, h, occurrence), w.text))
    return out


def _cut_forgetting(
    turns: list[TranscriptTurn], tombstones: set[str], turns_per_chunk: int = 1
) -> list[str]:
    whole = _session_cut(turns, turns_per_chunk=turns_per_chunk, tombstones=tombstones)
    # Naming the turns as settled leaves out the same pieces.
    settled = _session_cut(
        turns, turns_per_chunk=turns_per_chunk, tombstones=tombstones, settled=len(turns)
    )
    assert settled.settled_ids == [c.record.chunk_id for c in whole.chunks]
    return [c.record.text for c in whole.chunks]


def test_a_piece_forgotten_under_the_old_cut_keeps_its_text_out() -> None:
    turns = [
        TranscriptTurn("s1-1", "user", "user", "tell me everything"),
        TranscriptTurn("s1-2", "assistant", "assistant", _LONG),
    ]
    line = render_turn(turns[1])
    old = _old_ids(turns)
    forgotten_id, forgotten_text = old[3]  # the reply's third piece
    start = line.index(forgotten_text)
    gone = range(start, start + len(forgotten_text))
    texts = _cut_forgetting(turns, {forgotten_id})
    reply = [t for t in texts if t.startswith("assistant: ")]
    # No kept piece holds any of the forgotten text; only the pieces it reaches went.
    for k, piece in enumerate(reply):
        body = piece if line.startswith(piece) else piece.removeprefix("assistant: ")
        at = line.index(body)
        assert at + len(body) <= gone.start or at >= gone.stop, k
    assert 0 < len(reply) < len(_cut(turns)) - 1
    assert "user: tell me everything" in texts


def test_a_piece_forgotten_under_the_old_cut_of_several_turns_drops_their_group() -> None:
    turns = [
        TranscriptTurn("s1-1", "user", "user", "tell me everything"),
        TranscriptTurn("s1-2", "assistant", "assistant", _LONG),
        TranscriptTurn("s1-3", "user", "user", "thanks"),
        TranscriptTurn("s1-4", "assistant", "assistant", "you are welcome"),
    ]
    old = _old_ids(turns, turns_per_chunk=2)
    texts = _cut_forgetting(turns, {old[2][0]}, turns_per_chunk=2)
    assert not any("word" in t for t in texts)
    assert texts == ["user: thanks\nassistant: you are welcome"]


def test_a_forget_of_a_short_turn_is_unchanged_by_the_new_cut() -> None:
    turns = [
        TranscriptTurn("s1-1", "user", "user", "tell me everything"),
        TranscriptTurn("s1-2", "assistant", "assistant", _LONG),
        TranscriptTurn("s1-3", "user", "user", "thanks"),
    ]
    old = _old_ids(turns)
    texts = _cut_forgetting(turns, {old[-1][0]})
    assert "user: thanks" not in texts
    assert sum(t.startswith("assistant: ") for t in texts) == len(_cut(turns)) - 2


async def test_a_session_forgotten_before_the_new_cut_stays_forgotten_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An index built and a session forgotten with the old cut (the label on the first
    # piece only); then the upgrade: the identity changes, the index is rebuilt with
    # the new cut, and none of the forgotten session's turns may come back.
    import claw_memory._index
    import claw_memory._transcripts as transcripts

    def long_session(word: str, prefix: str) -> list[TranscriptTurn]:
        reply = " ".join(f"{word}{i:03d} hangar note," for i in range(60))
        return [
            TranscriptTurn(f"{prefix}-0", "user", "user", f"where is the {word} kept", 1.7e9),
            TranscriptTurn(f"{prefix}-1", "assistant", "assistant", reply, 1.7e9 + 1),
        ]

    sessions = {"forgotten": long_session("zeppelin", "f"), "kept": long_session("airship", "k")}

    def index() -> Any:
        return sessions_index(tmp_path, sessions, chunk_tokens=60, chunk_overlap=0)

    def old_cut(lines: Any, labels: Any, max_tokens: int, chars_per_token: int) -> list[str]:
        windows = line_windows(
            list(lines), max_tokens=max_tokens, overlap_tokens=0, chars_per_token=chars_per_token
        )
        return [w.text for w in windows]

    async def reply_pieces(idx: Any, word: str) -> list[Any]:
        hits = (await idx.search(f"{word} hangar note", mode="lexical")).hits
        return [h for h in hits if h.entry_ids[0].endswith("-1")]

    with monkeypatch.context() as m:
        m.setattr(transcripts, "turn_pieces", old_cut)
        m.setattr(claw_memory._index, "TURN_PIECES", "before")
        async with index() as idx:
            old = await reply_pieces(idx, "zeppelin")
            assert len(old) > 2
            assert not all(h.excerpt.startswith("assistant: ") for h in old)  # the old cut
            await idx.forget(session_id="forgotten")
            assert await reply_pieces(idx, "zeppelin") == []
    async with index() as idx:
        kept = await reply_pieces(idx, "airship")
        assert len(kept) > 2
        assert all(h.excerpt.startswith("assistant: ") for h in kept)  # rebuilt, cut anew
        hits = (await idx.search("zeppelin hangar note kept", mode="lexical")).hits
        assert hits and all(h.entry_ids[0].startswith("k-") for h in hits)
