"""Cut a memory file into its entries: list items, paragraphs, tables, code blocks.

A memory file is mostly a list of facts ("- 2026-10-02: we moved the production deploy
window to Friday"), each a line or two under a heading. Indexed as windows of a few
hundred tokens, one vector stands for a dozen facts and a fact found only by meaning
is a twelfth of it; BM25 likewise scores the window, not the line that matched. So a
memory file is indexed an entry at a time: each list item (nested ones too), each
paragraph, table and fenced code block is a chunk of its own, and an entry longer
than the budget is cut into windows as before (:func:`~._chunking.line_windows`).

Headings are not text of their own: each entry carries the headings it lies under
(and, for a nested list item, the items it lies under), outermost first, as its
``context``, which the index weighs below the entry's own words and which the entry's
vector sees. A heading that heads no entry is an entry itself, so no heading is lost.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from ._chunking import LineWindow, estimate_tokens, line_windows

_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t#]*$")
_ITEM = re.compile(r"^([ \t]*)(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
_TABLE = re.compile(r"^[ \t]*\|")
# The most characters of one heading or parent item a context keeps.
CONTEXT_PART_CHARS = 120
#: What joins the parts of an entry's context.
CONTEXT_SEPARATOR = " / "


@attrs.frozen
class Entry:
    """Lines ``start..end`` (0-based, end exclusive) of one entry, and its context."""

    start: int
    end: int
    context: str


@attrs.define
class _Heading:
    level: int
    text: str
    line: int
    context: str
    used: bool = False


def _indent(text: str) -> int:
    return len(text.expandtabs(4)) - len(text.expandtabs(4).lstrip())


def _part(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= CONTEXT_PART_CHARS else text[: CONTEXT_PART_CHARS - 1] + "…"


def markdown_entries(lines: Sequence[str]) -> list[Entry]:
    """The entries of a markdown text's ``lines``, in order (see the module docstring).

    An entry begins at a list item, at a line of text after a blank line or a heading,
    at the first row of a table or at a code fence; it runs over the lines that
    continue it (the next lines up to a blank line, a heading, another item; a fenced
    block up to its closing fence, blank lines included). Blank lines and headings
    belong to no entry, but a heading whose section holds no entry is one.
    """
    entries: list[Entry] = []
    # The open headings, outermost first: level, text, line, the context above it, and
    # whether its section holds an entry yet.
    headings: list[_Heading] = []
    items: list[tuple[int, str]] = []  # (indent, first line), the open list items
    start: int | None = None  # the first line of the entry being read
    kind = ""
    context = ""
    fence = ""

    def close(end: int) -> None:
        nonlocal start
        if start is not None:
            entries.append(Entry(start, end, context))
            start = None

    def open_entry(at: int, what: str) -> None:
        nonlocal start, kind, context
        close(at)
        start, kind = at, what
        for h in headings:
            h.used = True
        context = CONTEXT_SEPARATOR.join(
            [*(h.text for h in headings), *(text for _, text in items)]
        )

    def pop_heading() -> None:
        h = headings.pop()
        if not h.used:
            entries.append(Entry(h.line, h.line + 1, h.context))

    for i, line in enumerate(lines):
        if fence:
            # Inside a fenced block: everything is its text, up to the closing fence.
            m = _FENCE.match(line)
            if m is not None and m[1][0] == fence[0] and len(m[1]) >= len(fence):
                fence = ""
            continue
        if not line.strip():
            close(i)
            continue
        heading = _HEADING.match(line)
        if heading is not None:
            close(i)
            level = len(heading[1])
            while headings and headings[-1].level >= level:
                pop_heading()
            above = CONTEXT_SEPARATOR.join(h.text for h in headings)
            headings.append(_Heading(level, _part(heading[2] or ""), i, above))
            items.clear()
            continue
        fenced = _FENCE.match(line)
        if fenced is not None:
            if start is None:
                open_entry(i, "fence")
            fence = fenced[1]
            continue
        item = _ITEM.match(line)
        if item is not None:
            indent = _indent(item[1])
            while items and items[-1][0] >= indent:
                items.pop()
            open_entry(i, "item")
            items.append((indent, _part(line[item.end() :])))
            continue
        if _TABLE.match(line):
            if start is None or kind != "table":
                open_entry(i, "table")
            continue
        if start is None or kind == "table":
            if _indent(line) == 0:
                items.clear()
            open_entry(i, "text")
        # Otherwise the line continues the entry being read.
    close(len(lines))
    while headings:
        pop_heading()
    entries.sort(key=lambda e: e.start)
    return entries


def entry_windows(
    lines: Sequence[str], *, max_tokens: int, overlap_tokens: int, chars_per_token: int
) -> list[LineWindow]:
    """The windows of a memory file: one per entry (:func:`markdown_entries`), each
    with its ``context``; an entry over ``max_tokens`` estimated tokens is cut into
    :func:`~._chunking.line_windows` that share its context."""
    out: list[LineWindow] = []
    for e in markdown_entries(lines):
        body = lines[e.start : e.end]
        cost = sum(estimate_tokens(line, chars_per_token) + 1 for line in body)
        if cost <= max_tokens:
            out.append(LineWindow(e.start + 1, e.end, "\n".join(body), context=e.context))
            continue
        for w in line_windows(
            body,
            max_tokens=max_tokens,
            overlap_tokens=overlap_tokens,
            chars_per_token=chars_per_token,
        ):
            out.append(
                LineWindow(
                    e.start + w.start, e.start + w.end, w.text, part=w.part, context=e.context
                )
            )
    return out
