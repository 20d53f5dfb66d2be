"""Chunk records: the facts of a transcript turn found once, when it is indexed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from claw.plugin_sdk.search import sha256_hex
from claw_memory._generation import Generation
from claw_memory._lexical import query_terms
from claw_memory._published import POINTER, _decode, _encode, read_pointer
from claw_memory._records import SPEAKER, ChunkRecord, question_terms
from claw_memory._transcripts import TranscriptTurn
from claw_memory._when import says_when

from ._sessions import sessions_index


def _record(text: str, source: str = "sessions", key: int = 1) -> ChunkRecord:
    return ChunkRecord(
        chunk_id=f"c{key}",
        key=key,
        source=source,  # type: ignore[arg-type]
        provenance="p",
        path="sessions/a.jsonl" if source == "sessions" else "MEMORY.md",
        start_line=key,
        end_line=key,
        content_hash="h",
        revision="r",
        text=text,
    )


_TEXTS = [
    "user: I flew to Lisbon last Friday.",
    "user: We met in 2019, I think.",
    "assistant: Paris is lovely in spring!",
    "user: Who is the release manager?",
    "user: Who is the release manager again?  ",
    "assistant: Shall I list the options?",
    "Ann: what?",
    "user: the and of?",
    "user: Tell me about kiwis.",
    "user: Did I say that on 3 May 2023?",
]


@pytest.mark.parametrize("text", _TEXTS)
def test_a_turn_record_knows_whether_it_says_when_as_says_when_finds(text: str) -> None:
    assert _record(text).states_time is says_when(text)


@pytest.mark.parametrize("text", _TEXTS)
def test_a_question_turn_counts_the_terms_its_own_text_searches(text: str) -> None:
    record = _record(text)
    if text.rstrip().endswith("?"):
        own = query_terms(SPEAKER.sub("", text, count=1))
        assert record.question_terms == len(own) == question_terms(text)
        assert record.question_terms > 0 or not own
    else:
        assert record.question_terms == 0


def test_a_memory_file_chunk_has_no_turn_facts() -> None:
    record = _record("We ship on Friday. Who decides?", source="memory")
    assert record.states_time is False
    assert record.question_terms == 0


def test_a_question_of_function_words_counts_the_fallback_terms_an_echo_compares() -> None:
    # is_echo compares the fallback analysis of such a question: so does the count.
    assert question_terms("user: the and of?") == len(query_terms("the and of?"))


def test_the_publication_log_gives_back_the_facts_without_recomputing_them() -> None:
    record = _record("user: Where did I go yesterday?")
    assert (record.states_time, record.question_terms) == (True, 2)
    line = json.loads(_encode(record))
    assert line[-2:] == [True, 2]
    # Values read from the log are taken as they are (no analysis on open).
    line[-2:] = [False, 7]
    decoded = _decode(json.dumps(line).encode())
    assert (decoded.states_time, decoded.question_terms) == (False, 7)
    assert _decode(_encode(record)) == record


def test_a_generation_holds_the_facts_as_columns() -> None:
    records = [_record(t, key=i) for i, t in enumerate(_TEXTS)]
    records.append(_record("Next week, or when? Who knows?", source="memory", key=99))
    gen = Generation.build(
        number=1, index_generation=1, searcher=None, records=records, matrix=None
    )
    assert gen.states_time.tolist() == [r.states_time for r in records]
    assert gen.question_terms.tolist() == [r.question_terms for r in records]
    more = [_record("user: And in March, the kiwis?", key=200)]
    assert more[0].states_time and more[0].question_terms == 2
    later = gen.appended(number=2, searcher=None, dead=[0], added=more, matrix=None)
    assert later.states_time.tolist() == [*gen.states_time.tolist(), True]
    assert later.question_terms.tolist() == [*gen.question_terms.tolist(), 2]
    assert later.question_terms.dtype == np.int32


def _as_before_turn_facts(index_dir: Path) -> None:
    """Make ``index_dir`` what the code before the turn facts wrote: records without
    them in the publication log, and the identity without the record format."""
    db = sqlite3.connect(index_dir / "index.sqlite3")
    try:
        (identity,) = db.execute("SELECT value FROM meta WHERE key = 'identity'").fetchone()
        fields = json.loads(identity)
        fields.pop("records", None)
        old = json.dumps(fields, sort_keys=True)
        with db:
            db.execute("UPDATE meta SET value = ? WHERE key = 'identity'", (old,))
    finally:
        db.close()
    pointer = read_pointer(index_dir)
    assert pointer is not None
    log = index_dir / "published" / f"e{pointer.epoch}.log"
    lines = []
    for raw in log.read_bytes()[: pointer.log_bytes].splitlines():
        value = json.loads(raw)
        if isinstance(value, list):  # a record line: drop the two facts
            value = value[:-2]
        lines.append(json.dumps(value, ensure_ascii=False).encode() + b"\n")
    log.write_bytes(b"".join(lines))
    current = json.loads((index_dir / POINTER).read_text())
    current.update(identity=sha256_hex(old), log_bytes=sum(len(x) for x in lines))
    (index_dir / POINTER).write_text(json.dumps(current, sort_keys=True))


def _published(index_dir: Path) -> list[ChunkRecord]:
    pointer = read_pointer(index_dir)
    assert pointer is not None
    log = index_dir / "published" / f"e{pointer.epoch}.log"
    raw = log.read_bytes()[: pointer.log_bytes].splitlines()
    return [_decode(line) for line in raw if line.startswith(b"[")]


async def test_an_index_written_before_the_turn_facts_is_rebuilt_not_misread(
    tmp_path: Path,
) -> None:
    turns = [
        TranscriptTurn("t1", "user", "user", "I flew to Lisbon last Friday.", 1_700_000_000.0),
        TranscriptTurn("t2", "user", "user", "Where did I fly?", 1_700_000_001.0),
        TranscriptTurn("t3", "assistant", "assistant", "To Lisbon.", 1_700_000_002.0),
    ]
    async with sessions_index(tmp_path, {"s1": turns}) as index:
        first = index.status()
    _as_before_turn_facts(tmp_path / "idx")
    old = _published(tmp_path / "idx")
    assert old
    async with sessions_index(tmp_path, {"s1": turns}) as index:
        again = index.status()
        hits = (await index.search("When did I fly to Lisbon?", max_results=3)).hits
    assert again.index_generation == first.index_generation + 1
    assert hits and hits[0].entry_ids == ("t1",)
    records = _published(tmp_path / "idx")
    assert sorted(r.text for r in records) == sorted(r.text for r in old)
    for r in records:
        assert r.states_time is says_when(r.text)
        assert r.question_terms == question_terms(r.text)
    assert any(r.states_time for r in records) and any(r.question_terms for r in records)
