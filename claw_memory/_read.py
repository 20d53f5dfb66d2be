"""Reading a source of an index: a line range of a memory file, or turns of a transcript.

A read is bounded by ``read_max_chars`` and refuses anything that is not a current
source of the index (:class:`~claw_memory.SourcePathError`). A memory file is read as a
stream (:func:`read_line_range`): only the requested lines are kept, the rest counted
and hashed on the way through, so a get costs memory for what it returns.
"""

from __future__ import annotations

import codecs
import hashlib
import os

import attrs

from claw.plugin_sdk import WorkerPool

from ._errors import InvalidSearchError, SourcePathError
from ._listing import SourceListing
from ._settings import MemoryCoreSettings, SourceKind
from ._sources import BINARY, NOT_UTF8, SYMLINK, FileEntry, too_large, unreadable
from ._transcripts import render_turn, session_path, speaker_label
from ._types import ReadResult
from ._view import IndexView


@attrs.define(eq=False)
class SourceReader:
    """Reads the sources :attr:`listing` lists, as search hits name them."""

    view: IndexView
    settings: MemoryCoreSettings
    workers: WorkerPool
    listing: SourceListing

    async def read(self, path: str, *, from_line: int = 1, lines: int | None = None) -> ReadResult:
        """Lines ``from_line..from_line+lines-1`` of a source (turns, for a transcript).

        ``path`` is a virtual path as search hits and status report it. Anything
        that is not a current source of this index is refused with
        :class:`SourcePathError`; the read is bounded by ``read_max_chars``.
        """
        self.view.check_open()
        if from_line < 1:
            raise InvalidSearchError(f"from_line starts at 1, got {from_line}")
        if lines is not None and lines < 1:
            raise InvalidSearchError(f"lines must be at least 1, got {lines}")
        vpath = path.removeprefix("./")
        if vpath.startswith("sessions/") and "sessions" in self.settings.sources:
            view = self.view
            if not view.sessions:
                view.sessions = {session_path(s): s for s in await self.listing.list_sessions()}
            session = view.sessions.get(vpath)
            if session is None or self.listing.transcripts is None:
                raise SourcePathError(
                    f"{path!r} is not a session transcript of this index;"
                    " use a path from a search hit"
                )
            turns = await self.listing.read_turns(session)
            all_lines = [render_turn(t) for t in turns]
            all_labels = [speaker_label(t) for t in turns]
            source: SourceKind = "sessions"
        else:
            if "\x00" in vpath:
                raise InvalidSearchError("a source path must not contain NUL")
            entries = await self.listing.scan_memory()
            entry = entries.get(vpath)
            if entry is None or entry.symlink:
                raise SourcePathError(
                    f"{path!r} is not a memory source of this index; read MEMORY.md,"
                    " memory/*.md or a path returned by search"
                )
            budget = self.settings.read_max_chars
            span = await self.workers.run_sync(
                read_line_range,
                entry,
                self.settings.max_file_bytes,
                from_line,
                lines,
                budget,
            )
            if span.reason is not None:
                raise SourcePathError(f"cannot read {path!r}: {span.reason}")
            return ReadResult(
                path=vpath,
                source="memory",
                from_line=from_line,
                to_line=from_line - 1 + len(span.lines),
                total_lines=span.total,
                text="\n".join(span.lines),
                truncated=span.truncated,
                revision=span.revision,
            )
        total = len(all_lines)
        end = total if lines is None else min(total, from_line - 1 + lines)
        selected = all_lines[from_line - 1 : end]
        labels = all_labels[from_line - 1 : end]
        text = "\n".join(selected)
        truncated = end < total if lines is None else False
        budget = self.settings.read_max_chars
        if len(text) > budget:
            text = text[:budget]
            kept = text.count("\n") + 1
            end = from_line - 1 + kept
            labels = labels[:kept]
            truncated = True
        return ReadResult(
            path=vpath,
            source=source,
            from_line=from_line,
            to_line=max(from_line - 1, end),
            total_lines=total,
            text=text,
            truncated=truncated,
            labels=tuple(labels),
        )


@attrs.frozen
class _LineSpan:
    """What :func:`read_line_range` kept of one file."""

    lines: list[str]
    total: int
    truncated: bool
    revision: str | None
    reason: str | None


_READ_BLOCK = 64 * 1024
_SNIFF_BYTES = 8192
# Line ends str.splitlines() knows that are one character long; "\r" may be the start
# of "\r\n", so a block ending with it waits for the next one.
_LINE_ENDS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")


def read_line_range(
    entry: FileEntry, max_bytes: int, from_line: int, lines: int | None, max_chars: int
) -> _LineSpan:
    """Lines ``from_line..from_line+lines-1`` of a memory file, read as a stream.

    Only the requested lines are kept (at most ``max_chars`` characters of them); the
    rest is counted and hashed on the way through, so a get costs memory for what it
    returns, not for the file. Lines are those of ``str.splitlines`` (as chunking
    counts them); the same files are refused as by a sync (symlink, larger than
    ``max_bytes``, NUL bytes, not UTF-8), with ``reason`` saying why.
    """

    def refused(reason: str) -> _LineSpan:
        return _LineSpan([], 0, False, None, reason)

    if entry.symlink:
        return refused(SYMLINK)
    if entry.size > max_bytes:
        return refused(too_large(max_bytes, entry.size))
    last = None if lines is None else from_line - 1 + lines
    kept: list[str] = []
    chars = 0
    truncated = False
    total = 0
    size = 0
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")()
    pending = ""

    def take(complete: list[str]) -> None:
        nonlocal total, chars, truncated
        for line in complete:
            total += 1
            if total < from_line or (last is not None and total > last) or truncated:
                continue
            room = max_chars - chars - (1 if kept else 0)
            if len(line) > room:
                if room > 0:
                    kept.append(line[:room])
                truncated = True
                continue
            kept.append(line)
            chars += len(line) + (1 if len(kept) > 1 else 0)

    try:
        fd = os.open(entry.real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            while block := f.read(_READ_BLOCK):
                if size < _SNIFF_BYTES and b"\x00" in block[: _SNIFF_BYTES - size]:
                    return refused(BINARY)
                size += len(block)
                if size > max_bytes:
                    return refused(too_large(max_bytes))
                digest.update(block)
                pending += decoder.decode(block)
                parts = pending.splitlines(keepends=True)
                pending = ""
                if parts and (parts[-1][-1] not in _LINE_ENDS or parts[-1][-1] == "\r"):
                    pending = parts.pop()
                take([p.rstrip("\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029") for p in parts])
            pending += decoder.decode(b"", final=True)
    except OSError as exc:
        return refused(unreadable(exc))
    except UnicodeDecodeError:
        return refused(NOT_UTF8)
    take(pending.splitlines())
    if lines is None and total > from_line - 1 + len(kept):
        truncated = True
    return _LineSpan(kept, total, truncated, digest.hexdigest(), None)
