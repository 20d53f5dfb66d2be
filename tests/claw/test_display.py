"""Results people can read: the HTML a notebook draws and the table form behind it."""

from __future__ import annotations

import attrs
import pytest

import claw
import claw_memory
from claw.jupyter import Table, table
from claw.memory import (
    Citation,
    MemoryGetResult,
    MemoryHealth,
    MemoryProvenance,
    MemoryReference,
    MemoryRemoval,
    MemorySearchHit,
    MemorySearchResult,
    SearchCoverage,
)
from claw.sessions import SessionRow


def _hit(path: str, score: float, excerpt: str) -> MemorySearchHit:
    return MemorySearchHit(
        reference=MemoryReference("memory-core", path, fragment="L2-L3"),
        excerpt=excerpt,
        score=score,
        citation=Citation(path, 2, 3),
    )


def test_a_search_result_is_a_table_of_ranked_hits_with_its_notes() -> None:
    result = MemorySearchResult(
        hits=[_hit("MEMORY.md", 0.91234, "Alice <prefers> green tea"), _hit("USER.md", 0.5, "x")],
        next_cursor="6",
        coverage=SearchCoverage(sources=("memory",), complete=False),
        warning="behind the sources",
    )
    rows = list(result.table())
    assert rows[0] == {
        "rank": 1,
        "score": 0.91234,
        "source": "memory",
        "citation": "MEMORY.md#L2-L3",
        "excerpt": "Alice <prefers> green tea",
        "reference": "MEMORY.md#L2-L3",
    }
    assert [r["rank"] for r in rows] == [1, 2]
    # Who wrote the hit's entries, when the provider knows (issue 24's provenance).
    written = attrs.evolve(
        result.hits[0],
        provenance=(
            MemoryProvenance(kind="operator", connection_id="cli"),
            MemoryProvenance(kind="run", session_key="agent:main:main", tool="memory_add"),
        ),
    )
    assert written.row()["provenance"] == "operator cli; run agent:main:main via memory_add"
    page = result._repr_html_()
    assert page.startswith('<table class="claw"><caption style="text-align:left">2 hit(s)')
    assert "&lt;prefers&gt;" in page and "<prefers>" not in page  # escaped
    assert ">0.912<" in page  # scores to three decimals, right-aligned
    for note in ("behind the sources", "coverage incomplete: memory", "more: cursor 6"):
        assert f"<p>{note}</p>" in page


def test_hits_health_sessions_and_events_draw_themselves() -> None:
    hit = _hit("MEMORY.md", 0.5, "tea")
    assert "memory search hit" in hit._repr_html_() and "MEMORY.md#L2-L3" in hit._repr_html_()
    health = MemoryHealth(status="ready", details={"chunks": 12})
    assert health.row() == {"status": "ready", "message": None, "chunks": 12}
    assert ">ready<" in health._repr_html_()
    row = SessionRow("main", "dm:alice", "0" * 8 + "-0000-0000-0000-" + "0" * 12, 3, "direct")
    assert row.row()["revision"] == 3 and row.row()["created"] == "1970-01-01 00:00:00"
    assert "session dm:alice" in row._repr_html_()
    event = claw.HostEvent(
        seq=4, kind="turn.committed", session_key="dm:alice", data={"status": "ok"}
    )
    assert event.row() == {
        "seq": 4,
        "kind": "turn.committed",
        "session": "dm:alice",
        "status": "ok",
    }
    sessions = table([row, row], caption="sessions")
    assert len(sessions) == 2 and sessions.columns[0] == "key"
    assert "<caption" in sessions._repr_html_()


def test_a_table_has_a_plain_form_and_cuts_long_cells() -> None:
    long = "word " * 200
    shown = Table.of([{"a": 1.0, "b": None, "c": long, "d": True}], caption="t")
    text = str(shown)
    assert text.splitlines()[:2] == ["t", "a  b  c  d"]
    assert text.splitlines()[2].startswith("1.000  -  word word")
    assert text.splitlines()[2].endswith("…  yes")
    assert repr(shown) == text
    with pytest.raises(AttributeError):
        shown.rows = ()  # type: ignore[misc]


def test_memory_core_results_rank_from_their_page_offset() -> None:
    hit = claw_memory.SearchHit(
        chunk_id="c", path="MEMORY.md", source="memory", start_line=1, end_line=4,
        excerpt="tea", score=0.8, text_score=0.7, vector_score=None,
        content_hash="h", revision="r",
    )  # fmt: skip
    page = claw_memory.SearchResult(
        query="tea", mode="hybrid", hits=(hit, hit), offset=6, next_offset=8, generation=3
    )
    assert [r["rank"] for r in page.table()] == [7, 8]
    assert page.table().rows[0]["where"] == "MEMORY.md#L1-L4"
    assert "more from offset 8" in page._repr_html_()


def test_provenance_draws_itself_and_hits_gets_and_removals_show_who_wrote_them() -> None:
    """Issue 28's provenance display: each entry a row, only the fields some row has."""
    by_cli = MemoryProvenance(kind="operator", connection_id="cli", at=0.0, start_line=2)
    by_run = MemoryProvenance(
        kind="run", agent_id="main", session_key="dm:alice", session_id="s-1",
        lifecycle_revision=3, owner=True, tool="memory_add", plugin_id="memory-core",
        at=86400.0, start_line=3, end_line=4,
    )  # fmt: skip
    assert by_run.row() == {
        "who": "run dm:alice via memory_add",
        "kind": "run",
        "lines": "L3-L4",
        "written": "1970-01-02 00:00:00",
        "agent": "main",
        "connection": None,
        "session": "dm:alice",
        "session id": "s-1",
        "revision": 3,
        "owner": True,
        "flush": None,
        "tool": "memory_add",
        "plugin": "memory-core",
    }
    assert by_cli.row()["lines"] == "L2-L2"
    page = by_run._repr_html_()
    assert "memory provenance" in page and ">dm:alice<" in page
    assert ">flush<" not in page  # a field that does not apply is left out of the record

    hit = attrs.evolve(_hit("MEMORY.md", 0.5, "tea"), provenance=(by_cli, by_run))
    who = hit.provenance_table()
    assert [r["who"] for r in who] == ["operator cli", "run dm:alice via memory_add"]
    assert who.columns == (
        "who", "kind", "lines", "written", "agent", "connection", "session",
        "session id", "revision", "owner", "tool", "plugin",
    )  # fmt: skip  (no row has a flush id: its column is left out)
    assert who.rows[0]["agent"] is None and who.rows[1]["connection"] is None
    shown = hit._repr_html_()
    assert shown.count('<table class="claw">') == 2 and "who wrote it" in shown
    assert _hit("USER.md", 0.5, "x")._repr_html_().count("<table") == 1  # none known: no table

    got = MemoryGetResult(
        status="ok", reference=MemoryReference("memory-core", "MEMORY.md", fragment="L2-L4"),
        text="- a\n- b\n- c", from_line=2, lines=3, total_lines=9, provenance=(by_cli, by_run),
    )  # fmt: skip
    assert got.row()["lines"] == "L2-L4" and got.row()["of lines"] == 9
    assert got.row()["provenance"] == "operator cli; run dm:alice via memory_add"
    assert len(got.provenance_table()) == 2 and "memory get" in got._repr_html_()

    removal = MemoryRemoval(
        id="r-1", path="MEMORY.md", start_line=3, end_line=3, text="- b", at=0.0,
        status="forgotten", by=by_cli, provenance=(by_run,),
    )  # fmt: skip
    assert removal.row() == {
        "id": "r-1",
        "status": "forgotten",
        "where": "MEMORY.md#L3-L3",
        "forgotten": "1970-01-01 00:00:00",
        "by": "operator cli",
        "written by": "run dm:alice via memory_add",
        "text": "- b",
    }
    assert "memory removal r-1" in removal._repr_html_()
    assert table([removal, removal]).columns[0] == "id"
