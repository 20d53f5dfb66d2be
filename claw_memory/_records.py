"""Chunk records: what the store persists and a search generation maps rows to."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import attrs

from ._settings import SourceKind

_DATED = re.compile(r"(?:^|/)memory/(?:.*/)?(\d{4})-(\d{2})-(\d{2})\.md$")


# The speaker the host gives an assistant's turns (claw/_transcript_reader.py): a
# transcript chunk starting so is an assistant's turn (ranking weighs those less).
ASSISTANT_PREFIX = "assistant: "


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


@attrs.frozen(slots=True)
class ChunkRecord:
    """One indexed chunk, as a generation keeps it in memory (text, no vector)."""

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
