"""A memory file is cut an entry at a time, each entry under the headings it lies in."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from claw.plugin_sdk.search import entry_windows, markdown_entries, split_lines

SAMPLE = """# Memory

## Decisions
- 2026-10-02: we moved the production deploy window to Friday.
- 2026-11-05: the on-call rotation switched
  from weekly to fortnightly.
  - nested: Carol agreed

A paragraph
over two lines.

```
code

still code
```
| a | b |
|---|---|

## Nothing here
### Deeper
text under deeper
## Empty at the end
"""


def _entries(text: str) -> list[tuple[list[str], str]]:
    lines = split_lines(text)
    return [(lines[e.start : e.end], e.context) for e in markdown_entries(lines)]


def test_each_item_paragraph_block_and_table_is_an_entry_under_its_headings() -> None:
    assert _entries(SAMPLE) == [
        (["- 2026-10-02: we moved the production deploy window to Friday."], "Memory / Decisions"),
        (
            ["- 2026-11-05: the on-call rotation switched", "  from weekly to fortnightly."],
            "Memory / Decisions",
        ),
        (
            ["  - nested: Carol agreed"],
            "Memory / Decisions / 2026-11-05: the on-call rotation switched",
        ),
        (["A paragraph", "over two lines."], "Memory / Decisions"),
        (["```", "code", "", "still code", "```"], "Memory / Decisions"),
        (["| a | b |", "|---|---|"], "Memory / Decisions"),
        (["text under deeper"], "Memory / Nothing here / Deeper"),
        (["## Empty at the end"], "Memory"),
    ]


def test_a_heading_over_no_entry_is_kept_as_one() -> None:
    assert _entries("# Only a title\n") == [(["# Only a title"], "")]


def test_a_long_entry_is_cut_into_windows_that_share_its_context() -> None:
    lines = split_lines("# Notes\n- " + "word " * 200 + "\n" + "  more " * 200)
    windows = entry_windows(lines, max_tokens=60, overlap_tokens=10, chars_per_token=4)
    assert len(windows) > 2
    assert {w.context for w in windows} == {"Notes"}
    assert all(2 <= w.start <= w.end <= 3 for w in windows)


_LINE = st.one_of(
    st.sampled_from(["", "# H1", "## H2", "### H3", "```", "~~~", "| x |", "  - sub", "1. n"]),
    st.builds(lambda p, w: p + w, st.sampled_from(["", "- ", "* ", "    ", "## "]), st.text("ab ")),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE, max_size=40))
def test_entries_are_ordered_disjoint_and_lose_no_line_of_text(lines: list[str]) -> None:
    entries = markdown_entries(lines)
    covered: set[int] = set()
    last = 0
    for e in entries:
        assert last <= e.start < e.end <= len(lines)
        last = e.end
        covered.update(range(e.start, e.end))
    for i, line in enumerate(lines):
        heading = line.lstrip().startswith("#") and not line.startswith("    ")
        if line.strip() and not heading:
            assert i in covered, (i, line)
    windows = entry_windows(lines, max_tokens=20, overlap_tokens=4, chars_per_token=4)
    assert {i for w in windows for i in range(w.start - 1, w.end)} >= covered - {
        i for i, line in enumerate(lines) if not line.strip()
    }
