"""Pure chunk preparation: token estimates, line windows, hashes, byte-limit splits.

Everything here is deterministic and free of I/O so that it can run on any worker
thread and be property-tested. Token counts are estimates: CJK ideographs, kana and
hangul count one token each (a CJK character carries roughly a word), everything else
counts ``chars_per_token`` characters per token.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

import attrs


def is_cjk(ch: str) -> bool:
    """Whether ``ch`` is a CJK ideograph, kana, hangul syllable or CJK punctuation."""
    o = ord(ch)
    return (
        0x3000 <= o <= 0x30FF  # CJK punctuation, hiragana, katakana
        or 0x3400 <= o <= 0x4DBF  # CJK extension A
        or 0x4E00 <= o <= 0x9FFF  # CJK unified ideographs
        or 0xAC00 <= o <= 0xD7AF  # hangul syllables
        or 0xF900 <= o <= 0xFAFF  # CJK compatibility ideographs
        or 0xFF00 <= o <= 0xFFEF  # half/full-width forms
        or 0x20000 <= o <= 0x2FA1F  # CJK extensions B..F and supplements
    )


# The ranges of :func:`is_cjk` as one character class: a whole string is tested in one
# regex call rather than a Python call per character.
_CJK = re.compile(
    "[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
    "\uff00-\uffef\U00020000-\U0002fa1f]"
)


def has_cjk(text: str) -> bool:
    """Whether any character of ``text`` is CJK in the sense of :func:`is_cjk`."""
    # ASCII text (most of it) has none: ``isascii`` is one C pass, the regex a slower one.
    return not text.isascii() and _CJK.search(text) is not None


def estimate_tokens(text: str, chars_per_token: int = 4) -> int:
    """Estimated tokens of ``text``: one per CJK character, else ``chars_per_token`` chars."""
    cjk = 0 if text.isascii() else len(_CJK.findall(text))
    return cjk + math.ceil((len(text) - cjk) / chars_per_token)


def sha256_hex(data: str | bytes) -> str:
    """SHA-256 of ``data`` (UTF-8 for text) as lowercase hex."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def chunk_id_for(source: str, provenance: str, chunk_hash: str, occurrence: int) -> str:
    """The stable id of a chunk.

    It depends on where the chunk comes from and on its text, not on line numbers, so
    prepending lines to a file keeps the ids of the unchanged chunks; ``occurrence``
    separates identical chunks within one source.
    """
    return sha256_hex(f"{source}\x1f{provenance}\x1f{chunk_hash}\x1f{occurrence}")[:32]


def chunk_key(chunk_id: str) -> int:
    """A 60-bit integer derived from a chunk id; stored in tantivy as a fast field."""
    return int(chunk_id[:15], 16)


@attrs.frozen
class LineWindow:
    """Lines ``start..end`` (1-based, inclusive) of a text, or a piece of one long line.

    ``text`` is the window's text. For a single line longer than the chunk budget, the
    line is cut into several windows with ``start == end`` and ``part`` counting up.
    ``context`` is what the window lies under, where the chunker knows it (a memory
    file's headings: :func:`~._entries.entry_windows`).
    """

    start: int
    end: int
    text: str
    part: int = 0
    context: str = ""


def split_lines(text: str) -> list[str]:
    """Lines of ``text`` without their terminators; a final newline ends the last line."""
    if not text:
        return []
    lines = text.splitlines()
    return lines if lines else [""]


def _cut_long_line(line: str, max_tokens: int, chars_per_token: int) -> list[str]:
    """Cut one line into pieces of at most ``max_tokens`` estimated tokens.

    Without a CJK character every character costs the same, so the pieces are slices
    of ``max_tokens * chars_per_token`` characters: what :func:`_cut_by_budget` finds
    a character at a time (1.3 ms for a reply of 2,400 characters, which a sync of its
    session paid for every long turn, settled or not).
    """
    if not has_cjk(line):
        step = max(1, max_tokens * chars_per_token)
        return [line[i : i + step] for i in range(0, len(line), step)]
    return _cut_by_budget(line, max_tokens, chars_per_token)


def _cut_by_budget(line: str, max_tokens: int, chars_per_token: int) -> list[str]:
    """:func:`_cut_long_line`, counting each character's cost (CJK: a token each)."""
    pieces: list[str] = []
    start = 0
    while start < len(line):
        budget = max_tokens
        end = start
        non_cjk = 0
        while end < len(line):
            ch = line[end]
            if is_cjk(ch):
                if budget - math.ceil(non_cjk / chars_per_token) < 1:
                    break
                budget -= 1
            else:
                if budget - math.ceil((non_cjk + 1) / chars_per_token) < 0:
                    break
                non_cjk += 1
            end += 1
        end = max(end, start + 1)
        pieces.append(line[start:end])
        start = end
    return pieces


def line_windows(
    lines: Sequence[str], *, max_tokens: int, overlap_tokens: int, chars_per_token: int
) -> list[LineWindow]:
    """Cover ``lines`` with windows of at most ``max_tokens`` estimated tokens.

    A window holds whole lines; consecutive windows share trailing lines worth at most
    ``overlap_tokens`` (never the whole previous window, so windows always advance).
    A line that alone exceeds the budget becomes its own run of windows, cut by the
    budget. Every line is in at least one window.
    """
    # Every line counts one extra token for its newline, so that windows of many empty
    # lines still have a finite size.
    costs = [estimate_tokens(line, chars_per_token) + 1 for line in lines]
    windows: list[LineWindow] = []
    i = 0
    n = len(lines)
    while i < n:
        if costs[i] > max_tokens:
            pieces = _cut_long_line(lines[i], max_tokens, chars_per_token)
            windows.extend(
                LineWindow(start=i + 1, end=i + 1, text=p, part=k) for k, p in enumerate(pieces)
            )
            i += 1
            continue
        total = 0
        j = i
        while j < n and costs[j] <= max_tokens and total + costs[j] <= max_tokens:
            total += costs[j]
            j += 1
        # lines[i:j] is the window.
        windows.append(LineWindow(start=i + 1, end=j, text="\n".join(lines[i:j])))
        if j >= n:
            break
        if costs[j] > max_tokens:
            # The next line is cut on its own; overlapping into it is meaningless.
            i = j
            continue
        # Step back over trailing lines that fit in the overlap, but always advance and
        # leave room for the next line, so that the next window is never a subset.
        back = j
        carried = 0
        while (
            back - 1 > i
            and carried + costs[back - 1] <= overlap_tokens
            and carried + costs[back - 1] + costs[j] <= max_tokens
        ):
            carried += costs[back - 1]
            back -= 1
        i = back
    return windows


def split_by_bytes(text: str, max_bytes: int) -> list[str]:
    """Split ``text`` into pieces whose UTF-8 encoding is at most ``max_bytes`` long.

    Cuts prefer a newline, then a space, in the second half of a piece, and never cut
    inside a character. Joining the pieces gives back ``text``.
    """
    if max_bytes < 4:
        raise ValueError(f"max_bytes must be at least 4 (one UTF-8 character), got {max_bytes}")
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return [text]
    pieces: list[str] = []
    start = 0
    while start < len(data):
        end = min(start + max_bytes, len(data))
        if end < len(data):
            # Back off to a character boundary (continuation bytes are 0b10xxxxxx).
            while end > start and (data[end] & 0xC0) == 0x80:
                end -= 1
            half = start + max_bytes // 2
            for sep in (b"\n", b" "):
                cut = data.rfind(sep, half, end)
                if cut != -1:
                    end = cut + 1
                    break
        pieces.append(data[start:end].decode("utf-8"))
        start = end
    return pieces
