"""Chunk records: what the store persists and a search generation maps rows to."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import attrs

from ._settings import SourceKind
from ._when import says_when

_DATED = re.compile(r"(?:^|/)memory/(?:.*/)?(\d{4})-(\d{2})-(\d{2})\.md$")

# What a record holds besides its chunk: the facts of a transcript turn found when it
# is indexed (:attr:`ChunkRecord.states_time`, :attr:`ChunkRecord.question_terms`).
# Part of the index identity: an index whose records lack them is rebuilt on open,
# never read with their defaults.
RECORD_FORMAT = "turn-facts/1"


# The speaker the host gives an assistant's turns (claw/_transcript_reader.py): a
# transcript chunk starting so is an assistant's turn (ranking weighs those less).
ASSISTANT_PREFIX = "assistant: "
# The speaker prefix of a rendered transcript turn ("assistant: ", "Ann: ").
SPEAKER = re.compile(r"^[^:\n]{1,80}: ")


def dated_epoch(path: str) -> float | None:
    """The UTC midnight of a dated daily note (``memory/YYYY-MM-DD.md``), else ``None``.

    Only dated daily notes decay with age; every other memory file is evergreen.
    """
    m = _DATED.search(path)
    if m is None:
        return None
    try:
        day = datetime(int(m[1]), int(m[2]), int(m[3]), tzinfo=UTC)
    except ValueError:
        return None
    return day.timestamp()


def _states_time(record: ChunkRecord) -> bool:
    return record.source == "sessions" and says_when(record.text)


def _question_terms(record: ChunkRecord) -> int:
    return question_terms(record.text) if record.source == "sessions" else 0


def question_terms(text: str) -> int:
    """How many distinct terms a transcript turn's ``text`` searches for as a query
    (its speaker left out) when it asks a question (ends in ``?``); else 0.

    An echo of a query (:func:`claw_memory._ranking.is_echo`) holds at most one term
    the query lacks: a question with more terms than the query's and one can be
    none, and ranking skips it without reading it.
    """
    if not text.rstrip().endswith("?"):
        return 0
    from ._lexical import query_terms  # noqa: PLC0415  (a cycle if eager)

    return len(query_terms(SPEAKER.sub("", text, count=1)))


@attrs.frozen(slots=True)
class ChunkRecord:
    """One indexed chunk, as a generation keeps it in memory (text, no vector).

    ``states_time`` and ``question_terms`` depend on the chunk alone: found once when
    the record is made (from its text, unless given, as the publication log gives
    them back), so that a search reads them from the generation's columns instead of
    analysing each candidate's text again. (``attrs.evolve`` copies them: a record of
    other text is made anew.)
    """

    chunk_id: str
    key: int
    source: SourceKind
    provenance: str
    path: str
    start_line: int
    end_line: int
    content_hash: str
    revision: str
    text: str
    agent_id: str | None = None
    session_key: str | None = None
    session_id: str | None = None
    entry_ids: tuple[str, ...] = ()
    timestamp: float | None = None
    #: A transcript turn whose text says when (:func:`claw_memory._when.says_when`):
    #: what a question asking when favours.
    states_time: bool = attrs.field(default=attrs.Factory(_states_time, takes_self=True))
    #: A transcript turn asking a question: its terms (:func:`question_terms`); else 0.
    question_terms: int = attrs.field(default=attrs.Factory(_question_terms, takes_self=True))


@attrs.frozen(slots=True)
class PreparedChunk:
    """A chunk ready to store and index: its record plus what only indexing needs.

    ``context`` is lexical context indexed in a lower-weighted field (neighbouring
    turns of a transcript); ``embed_text`` is what the embedder sees, and
    ``embed_hash`` its SHA-256 hex (the embedding cache's key) when the chunker has it
    already (a memory file's chunk embeds its text, whose hash is its content hash).
    """

    record: ChunkRecord
    context: str
    embed_text: str
    embed_hash: str | None = None
