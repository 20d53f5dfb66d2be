"""Memory Core's conversion of a ranked chunk into a provider-neutral hit."""

from __future__ import annotations

import pytest

from claw.plugin_sdk import Citation, MemoryProvenance, MemoryReference, MemorySearchHit
from claw_memory._ranking import RankedRow
from claw_memory._records import ChunkRecord
from claw_memory._runtime import neutral_hit


def _record(source: str) -> ChunkRecord:
    return ChunkRecord(
        chunk_id="c1",
        key=7,
        source=source,  # type: ignore[arg-type]
        provenance="",
        path="memory/2026-01-01.md" if source == "memory" else "sessions/main/s1",
        start_line=4,
        end_line=9,
        content_hash="ab" * 32,
        revision="cd" * 32,
        text="x" * 900,
        agent_id="main",
        session_key=None if source == "memory" else "dm:alice",
        session_id=None if source == "memory" else "s1",
        entry_ids=() if source == "memory" else ("e1", "e2"),
        timestamp=None,
    )


@pytest.mark.parametrize("source", ["memory", "sessions"])
def test_a_hit_is_built_field_by_field_as_named(source: str) -> None:
    """The hit is built with positional arguments (cheaper on every search); this pins
    each value to the field it belongs in."""
    rec = _record(source)
    ranked = RankedRow(row=3, score=0.123456789, text_score=0.5, vector_score=0.25)
    provenance = (MemoryProvenance(kind="operator", agent_id="main", start_line=4, end_line=5),)
    hit = neutral_hit(rec, ranked, provenance)
    assert hit == MemorySearchHit(
        reference=MemoryReference(
            provider_id="memory-core",
            id=rec.path,
            revision=rec.content_hash,  # the cited lines' hash, for both sources
            fragment="L4-L9",
        ),
        excerpt="x" * 700,
        score=0.123457,
        citation=Citation(path=rec.path, start_line=4, end_line=9, source=source),  # type: ignore[arg-type]
        source=source,  # type: ignore[arg-type]
        metadata={
            "chunk_id": "c1",
            "agent_id": "main",
            "session_key": rec.session_key,
            "session_id": rec.session_id,
            "entry_ids": list(rec.entry_ids),
            "text_score": 0.5,
            "vector_score": 0.25,
        },
        provenance=provenance,
    )
    assert type(hit.score) is float
    assert neutral_hit(rec, ranked).provenance == ()
