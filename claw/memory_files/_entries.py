"""Entries of a memory file, and the revision of cited lines.

**An entry** is the unit a person means when they say "forget that": one top-level
markdown list item with everything nested under it (indented lines, sub-items,
indented paragraphs after a blank line), one heading line, or one paragraph (non-blank
lines up to a blank line or the next item or heading). Blank lines belong to no entry.
A fenced code block is an entry of its own (indented under an item, it is the
item's). Memory Core writes each memory as
one list item (``- [2026-12-01 09:30:12 UTC] text``, continuation lines indented), so
an added memory is one entry.

**The revision of cited lines** is the SHA-256 (hex) of the lines joined with ``\\n``,
without their terminators: the same hash Memory Core gives a chunk of exactly those
lines. A reference may carry any prefix of at least :data:`MIN_REVISION_CHARS`
characters of it, or of the whole file's SHA-256 (the file has not changed at all).
Lines cited by revision are the same lines exactly when their hash still matches;
where they moved (an entry inserted above them), a unique match elsewhere finds them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from ._errors import BadRevisionError

_ITEM = re.compile(r"^ {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")
_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")
_FENCE = re.compile(r"^ {0,3}(?:```|~~~)")

MIN_REVISION_CHARS = 8


def entry_spans(lines: Sequence[str]) -> list[tuple[int, int]]:
    """The entries of ``lines`` (without terminators) as 1-based inclusive line spans."""
    spans: list[tuple[int, int]] = []
    start: int | None = None
    kind = ""
    last = -1
    gap = False
    fenced = False
    for i, line in enumerate(lines):
        if fenced:
            last = i
            if _FENCE.match(line):
                fenced = False
            continue
        if not line.strip():
            gap = True
            continue
        indented = line.startswith(("  ", "\t"))
        if start is not None and kind == "item" and indented:
            new = False  # nested under the item, even after a blank line
        elif _HEADING.match(line) or _ITEM.match(line) or _FENCE.match(line):
            new = True
        else:
            new = start is None or gap or kind == "heading"
        if new:
            if start is not None:
                spans.append((start + 1, last + 1))
            start = i
            kind = "heading" if _HEADING.match(line) else "item" if _ITEM.match(line) else "para"
        last = i
        gap = False
        if _FENCE.match(line):
            fenced = True
    if start is not None:
        spans.append((start + 1, last + 1))
    return spans


def entries_within(lines: Sequence[str], start: int, end: int) -> list[tuple[int, int]]:
    """The entries of ``lines`` that have a line in ``start..end`` (1-based, inclusive)."""
    return [(a, b) for a, b in entry_spans(lines) if a <= end and b >= start]


def lines_revision(lines: Sequence[str]) -> str:
    """The revision of cited lines (see the module docstring)."""
    return hashlib.sha256("\n".join(lines).encode("utf-8", "surrogatepass")).hexdigest()


def check_revision(revision: str) -> str:
    """``revision`` lower-cased; :class:`BadRevisionError` names what is wrong with it."""
    if not isinstance(revision, str):
        raise BadRevisionError(f"a revision is a hex string, got {type(revision).__name__}")
    value = revision.strip().lower()
    if (
        len(value) < MIN_REVISION_CHARS
        or len(value) > 64
        or re.fullmatch("[0-9a-f]+", value) is None
    ):
        raise BadRevisionError(
            f"revision {revision[:80]!r} is not a revision: {MIN_REVISION_CHARS} to 64 hex digits"
        )
    return value
