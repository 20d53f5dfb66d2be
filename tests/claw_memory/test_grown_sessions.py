"""A session that grew keeps the chunks of its earlier turns, and ends up as if indexed
afresh: what a one-turn sync writes is the new turns and the context they changed."""

from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import Any

import pytest

from claw.plugin_sdk import InlineWorkerPool
from claw_memory._index import MemoryIndex, open_memory_index
from claw_memory._settings import MemoryCoreSettings
from claw_memory._sync import _session_change, turns_digest
from claw_memory._transcripts import (
    InMemoryTranscriptSource,
    TranscriptSession,
    TranscriptTurn,
    cut_session,
    prepare_session_chunks,
)

_WORDS = (
    "otter",
    "heron",
    "kiwi",
    "walrus",
    "lynx",
    "badger",
    "quokka",
    "plover",
    "zeppelin",
    "hangar",
)


def _open(root: Path, src: InMemoryTranscriptSource, **settings: Any) -> Any:
    (root / "ws").mkdir(parents=True, exist_ok=True)
    return open_memory_index(
        workspace_dir=root / "ws",
        index_dir=root / "idx",
        workers=InlineWorkerPool(),
        settings=MemoryCoreSettings(min_score=0.0, sources=("sessions",), **settings),
        transcripts=src,
    )


def _rows(index: MemoryIndex) -> set[tuple[object, ...]]:
    """Every stored chunk as a fresh index would write it (the revision aside: a kept
    row keeps the change token of the sync that wrote it, which nothing reads)."""
    return {
        (
            r.chunk_id,
            r.provenance,
            r.text,
            context,
            r.start_line,
            r.end_line,
            r.entry_ids,
            r.timestamp,
            r.content_hash,
        )
        for r, context in index._store.chunks_for(None)
    }


def _turn(rng: random.Random, n: int) -> TranscriptTurn:
    speaker = rng.choice(["user", "assistant"])
    words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 12)))
    if rng.random() < 0.05:
        words = "long " + "padding words " * 200  # longer than a chunk: cut in pieces
    return TranscriptTurn(f"e{n}", speaker, speaker, words, 1_700_000_000.0 + 3600.0 * n)


@pytest.mark.parametrize("per_chunk", [1, 2])
async def test_grown_sessions_end_up_as_a_fresh_index_would_hold_them(
    tmp_path: Path, per_chunk: int
) -> None:
    """With two turns a chunk, a grown session's last chunk of old turns takes in a new
    turn and changes its id: the rows it replaces must go, not only be added to."""
    rng = random.Random(11)
    src = InMemoryTranscriptSource()
    sessions: dict[tuple[str, str, str], list[TranscriptTurn]] = {}
    counter = 0

    def put(key: tuple[str, str, str]) -> None:
        src.put(*key, sessions[key])

    for a in range(3):
        key = (f"agent{a}", f"agent:agent{a}:main", f"s{a}")
        sessions[key] = [_turn(rng, counter + i) for i in range(rng.randint(1, 30))]
        counter += 40
        put(key)
    grown = 0
    settings = {"transcript_context_turns": 2, "transcript_turns_per_chunk": per_chunk}
    async with _open(tmp_path / "live", src, **settings) as live:
        await live.sync()
        for step in range(40):
            key = rng.choice(list(sessions))
            turns = sessions[key]
            roll = rng.random()
            if roll < 0.6:  # the common case: turns appended
                for _ in range(rng.randint(1, 3)):
                    counter += 1
                    turns.append(_turn(rng, counter))
                grown += 1
            elif roll < 0.7 and len(turns) > 2:  # an earlier turn changed (not a growth)
                i = rng.randrange(len(turns) - 1)
                turns[i] = TranscriptTurn(
                    turns[i].entry_id, "user", "user", "a kiwi changed", turns[i].timestamp
                )
            elif roll < 0.78 and len(turns) > 3:  # turns surfaced in the middle
                counter += 1
                turns.insert(rng.randrange(1, len(turns)), _turn(rng, counter))
            elif roll < 0.84 and len(turns) > 2:  # shorter than before
                del turns[rng.randrange(1, len(turns)) :]
            else:  # a new session
                counter += 100
                key = (f"agent{step}", f"agent:agent{step}:x", f"n{step}")
                sessions[key] = [_turn(rng, counter)]
            put(key)
            await live.sync()
            fresh_src = InMemoryTranscriptSource()
            for k, t in sessions.items():
                fresh_src.put(*k, t)
            async with _open(tmp_path / f"fresh{step}", fresh_src, **settings) as fresh:
                await fresh.sync()
                assert _rows(live) == _rows(fresh), f"step {step}"
                # Every chunk a word finds (scores may differ in their last digits: a
                # lexical index that replaced documents counts its deleted ones until a
                # merge, as it did before sessions kept their earlier chunks).
                for word in _WORDS[:4]:
                    a = await live.search(word, mode="lexical", max_results=100)
                    b = await fresh.search(word, mode="lexical", max_results=100)
                    if len(b.hits) < 100:
                        assert {h.chunk_id for h in a.hits} == {h.chunk_id for h in b.hits}
    assert grown >= 15


async def test_a_one_turn_sync_of_a_long_session_writes_only_what_the_turn_changed(
    tmp_path: Path,
) -> None:
    """Appending one turn to a session of 200 writes the new turn's chunk and rewrites
    the few before it whose context window it entered; the rest stay where they are."""
    src = InMemoryTranscriptSource()
    turns = [
        TranscriptTurn(f"e{i}", "user", "user", f"turn {i} about the otter", 1.7e9 + i)
        for i in range(200)
    ]
    src.put("main", "dm:owner", "s1", turns)
    async with _open(tmp_path, src, transcript_context_turns=2) as index:
        await index.sync()
        before = {r.chunk_id: row for row, r in enumerate(index._view.generation.records)}
        turns.append(TranscriptTurn("e200", "user", "user", "a new heron", 1.7e9 + 200))
        src.put("main", "dm:owner", "s1", turns)
        report = await index.sync()
        assert (report.chunks_added, report.chunks_removed) == (3, 2)
        gen = index._view.generation
        rows = [r for of_prov in gen.rows_of_provenance.values() for r in of_prov]
        live = {gen.records[r].chunk_id: r for r in rows}
        assert len(live) == 201
        assert sum(1 for cid, row in live.items() if before.get(cid) == row) == 198
        found = await index.search("heron", mode="lexical")
        assert found.hits[0].excerpt == "user: a new heron"


def test_the_turns_digest_tells_a_prefix_from_a_change() -> None:
    turns = [TranscriptTurn(f"e{i}", "user", "user", f"t{i}", float(i)) for i in range(5)]
    prefix, whole = turns_digest(turns[:3], 3)
    assert prefix == whole
    grown, _ = turns_digest(turns, 3)
    assert grown == whole
    changed = [*turns[:1], TranscriptTurn("e1", "user", "user", "other", 1.0), *turns[2:]]
    assert turns_digest(changed, 3)[0] != whole
    assert turns_digest(turns, 9)[0] is None


async def test_a_forgotten_session_that_grows_indexes_only_its_new_turns(tmp_path: Path) -> None:
    src = InMemoryTranscriptSource()
    turns = [TranscriptTurn(f"e{i}", "user", "user", f"otter {i}", 1.7e9 + i) for i in range(9)]
    src.put("main", "dm:owner", "s1", turns)
    async with _open(tmp_path, src, transcript_context_turns=2) as index:
        await index.sync()
        await index.forget(session_id="s1")
        assert (await index.search("otter", mode="lexical")).hits == ()
        turns.append(TranscriptTurn("e9", "user", "user", "otter and heron", 1.7e9 + 9))
        src.put("main", "dm:owner", "s1", turns)
        report = await index.sync()
        assert report.chunks_added == 1
        found = await index.search("otter", mode="lexical")
        assert [h.excerpt for h in found.hits] == ["user: otter and heron"]


@pytest.mark.parametrize("per_chunk", [1, 2, 3])
def test_a_settled_cut_names_the_chunks_a_whole_cut_makes(per_chunk: int) -> None:
    """Cutting the settled turns by id only names exactly the chunks a whole cut makes
    of them (identical turns counted from the session's start, long turns in pieces,
    tombstoned ones left out), and the rest in full as the whole cut makes them."""
    rng = random.Random(per_chunk)
    turns = [_turn(rng, n) for n in range(60)]
    session = TranscriptSession("main", "dm:owner", "s1", "tok")
    cut = functools.partial(
        cut_session,
        session,
        turns,
        turns_per_chunk=per_chunk,
        context_turns=2,
        max_tokens=64,
        chars_per_token=4,
    )
    whole = cut(tombstones=frozenset()).chunks
    ids = [c.record.chunk_id for c in whole]
    assert len(set(c.record.content_hash for c in whole)) < len(whole)  # repeats counted
    tombstones = frozenset(rng.sample(ids, 5))
    whole = cut(tombstones=tombstones).chunks
    for through in (0, 1, 7, 30, 59, 60, 99):
        part = cut(tombstones=tombstones, settled_through=through)
        settled = [c for c in whole if c.record.end_line <= through]
        assert part.settled_ids == [c.record.chunk_id for c in settled]
        assert part.settled_keys == [c.record.key for c in settled]
        assert part.chunks == whole[len(settled) :]


async def test_a_grown_session_whose_settled_rows_are_missing_writes_them(tmp_path: Path) -> None:
    """A settled chunk the index does not hold (here: an index that synced fewer turns
    than the state says) is written in full; the ones it holds are kept."""
    settings = MemoryCoreSettings(min_score=0.0, sources=("sessions",), transcript_context_turns=2)
    turns = [TranscriptTurn(f"e{i}", "user", "user", f"otter {i}", 1.7e9 + i) for i in range(12)]
    session = TranscriptSession("main", "dm:owner", "s1", "t12")
    prev_src, short_src = InMemoryTranscriptSource(), InMemoryTranscriptSource()
    prev_src.put("main", "dm:owner", "s1", turns[:10])
    short_src.put("main", "dm:owner", "s1", turns[:5])
    async with _open(tmp_path / "prev", prev_src, transcript_context_turns=2) as prev:
        await prev.sync()
        (prev_state,) = prev._view.sources.values()
    async with _open(tmp_path / "short", short_src, transcript_context_turns=2) as short:
        await short.sync()
        gen = short._view.generation
        state, chunks, kept = _session_change(
            session,
            turns,
            prev=prev_state,
            generation=gen,
            settings=settings,
            tombstones=frozenset(),
        )
    assert state.size == 12 and kept is not None
    # Turns 1-8 are settled by the state's count; the short index holds the chunks of
    # 1-5 (a chunk's id is its text's, whatever its context): kept. 6-8 it never held:
    # written in full, as the new turns are.
    assert [c.record.end_line for c in chunks] == list(range(6, 13))
    whole = prepare_session_chunks(
        session,
        turns,
        turns_per_chunk=1,
        context_turns=2,
        max_tokens=settings.chunk_tokens,
        chars_per_token=settings.chars_per_token,
        tombstones=frozenset(),
    )
    assert chunks == whole[5:]
    assert kept.dead_rows == () and kept.removed_ids == frozenset()
