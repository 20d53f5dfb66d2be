"""Workspace memory files: discovery, cheap change checks, reading and chunking.

The sources are ``MEMORY.md``, ``memory.md``, ``DREAMS.md``, ``USER.md``,
``memory/**/*.md`` and configured extra paths (files, or directories searched for
``*.md``). Symlinks are never followed: a link could point anywhere on the machine.
Everything here is blocking and runs on the worker pool.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import attrs

from claw.plugin_sdk.search import chunk_id_for, chunk_key, entry_windows, sha256_hex, split_lines

from ._lexical import LexicalContext
from ._records import ChunkRecord, PreparedChunk

ROOT_FILES = ("MEMORY.md", "memory.md", "DREAMS.md", "USER.md")
_BINARY_SNIFF_BYTES = 8192

# Why a source is skipped: the words a user reads in ``claw memory index`` and doctor.
SYMLINK = "symlink (not followed)"
BINARY = "binary (contains NUL bytes)"
NOT_UTF8 = "not UTF-8 text"


def too_large(max_bytes: int, size: int | None = None) -> str:
    """The skip reason of a file over ``max_file_bytes`` (``size`` when known)."""
    found = f"{size} bytes" if size is not None else "more"
    return f"too large ({found} > max_file_bytes = {max_bytes})"


def unreadable(exc: OSError) -> str:
    """The skip reason of a file that could not be read."""
    return f"unreadable ({exc.strerror or exc})"


@attrs.frozen(slots=True)
class FileEntry:
    """A discovered source file: its virtual path, real path and cheap stat.

    ``real`` is a plain string: a sync discovers every file before each change check,
    and a ``Path`` per file cost more than the scan itself.
    """

    vpath: str
    real: str
    size: int
    mtime_ns: int
    symlink: bool = False

    @property
    def provenance(self) -> str:
        return f"memory:{self.vpath}"


Stat = tuple[str, int, int, bool]
"""``(real path, size, mtime_ns, is_symlink)`` of one source file."""


def _scan_markdown(root: str, prefix: str, out: dict[str, Stat]) -> None:
    """Add ``*.md`` files under ``root`` to ``out`` as ``prefix + relative path``.

    ``os.scandir`` with string paths: the cheap check runs before searches, so it avoids
    a ``Path`` and an ``lstat`` call per file (the directory entry carries the type, and
    one ``stat`` per file is all it costs). Directory symlinks are not followed; file
    symlinks are reported (flagged), never followed.
    """
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                _scan_markdown(entry.path, f"{prefix}{entry.name}/", out)
                continue
            if not entry.name.endswith(".md"):
                continue
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        is_link = stat.S_ISLNK(st.st_mode)
        if is_link or stat.S_ISREG(st.st_mode):
            out.setdefault(
                f"{prefix}{entry.name}", (entry.path, st.st_size, st.st_mtime_ns, is_link)
            )


def _stat_one(path: str) -> Stat | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    is_link = stat.S_ISLNK(st.st_mode)
    if not is_link and not stat.S_ISREG(st.st_mode):
        return None
    return (path, st.st_size, st.st_mtime_ns, is_link)


def scan_stats(workspace: Path, extra_paths: tuple[str, ...]) -> dict[str, Stat]:
    """The cheap stat of every source file present now, keyed by virtual path.

    Files inside the workspace are named by their workspace-relative path; files of an
    extra path outside it by ``extra<i>/<path relative to that extra path>``.
    """
    found: dict[str, Stat] = {}
    for name in ROOT_FILES:
        item = _stat_one(os.fspath(workspace / name))
        if item is None:
            continue
        # On case-insensitive file systems MEMORY.md and memory.md are one file.
        if name == "memory.md" and "MEMORY.md" in found:
            try:
                if Path(found["MEMORY.md"][0]).samefile(item[0]):
                    continue
            except OSError:
                pass
        found[name] = item
    mem = workspace / "memory"
    if mem.is_dir() and not mem.is_symlink():
        _scan_markdown(os.fspath(mem), "memory/", found)
    for i, raw in enumerate(extra_paths):
        p = Path(raw).expanduser()
        if not p.is_absolute():
            p = workspace / p
        inside = p.is_relative_to(workspace)

        def name_of(path: Path, base: Path, i: int = i, inside: bool = inside) -> str:
            if inside:
                return path.relative_to(workspace).as_posix()
            return f"extra{i}/{path.relative_to(base).as_posix()}"

        if p.is_symlink() or p.is_file():
            item = _stat_one(os.fspath(p))
            if item is not None:
                found.setdefault(name_of(p, p.parent), item)
        elif p.is_dir():
            prefix = f"{p.relative_to(workspace).as_posix()}/" if inside else f"extra{i}/"
            _scan_markdown(os.fspath(p), prefix, found)
    return found


def discover(workspace: Path, extra_paths: tuple[str, ...]) -> dict[str, FileEntry]:
    """Every source file present now, keyed by virtual path (symlinks flagged, not followed)."""
    return {
        vpath: FileEntry(vpath, real, size, mtime, link)
        for vpath, (real, size, mtime, link) in scan_stats(workspace, extra_paths).items()
    }


@attrs.frozen
class ReadOutcome:
    """The bytes of a source file, or the reason it is skipped."""

    text: str | None
    file_hash: str | None
    reason: str | None


def read_source(entry: FileEntry, max_bytes: int) -> ReadOutcome:
    """Read a source file unless it is a symlink, too large, unreadable or not text."""
    if entry.symlink:
        return ReadOutcome(None, None, SYMLINK)
    if entry.size > max_bytes:
        return ReadOutcome(None, None, too_large(max_bytes, entry.size))
    try:
        fd = os.open(entry.real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        return ReadOutcome(None, None, unreadable(exc))
    if len(data) > max_bytes:
        return ReadOutcome(None, None, too_large(max_bytes))
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        return ReadOutcome(None, None, BINARY)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return ReadOutcome(None, None, NOT_UTF8)
    return ReadOutcome(text, sha256_hex(data), None)


#: How memory files are cut into chunks (part of the index identity: a change rebuilds
#: the index on the next open). ``entries``: an entry at a time (:func:`entry_windows`).
MEMORY_CHUNKING = "entries/1"


def prepare_file_chunks(
    vpath: str,
    text: str,
    file_hash: str,
    *,
    max_tokens: int,
    overlap_tokens: int,
    chars_per_token: int,
    tombstones: frozenset[str] | set[str],
) -> list[PreparedChunk]:
    """Chunk one memory file an entry at a time (:func:`entry_windows`: each list item,
    paragraph, table or code block, cut into windows when longer than ``max_tokens``),
    each with the headings it lies under as lexical context; whitespace-only windows
    and tombstoned chunks are dropped."""
    prov = f"memory:{vpath}"
    out: list[PreparedChunk] = []
    seen: dict[str, int] = {}
    windows = entry_windows(
        split_lines(text),
        max_tokens=max_tokens,
        overlap_tokens=overlap_tokens,
        chars_per_token=chars_per_token,
    )
    for w in windows:
        if not w.text.strip():
            continue
        content_hash = sha256_hex(w.text)
        occurrence = seen.get(content_hash, 0)
        seen[content_hash] = occurrence + 1
        cid = chunk_id_for("memory", prov, content_hash, occurrence)
        if cid in tombstones:
            continue
        record = ChunkRecord(
            chunk_id=cid,
            key=chunk_key(cid),
            source="memory",
            provenance=prov,
            path=vpath,
            start_line=w.start,
            end_line=w.end,
            content_hash=content_hash,
            revision=file_hash,
            text=w.text,
        )
        context = LexicalContext(near=w.context).encode() if w.context else ""
        out.append(
            PreparedChunk(
                record=record, context=context, embed_text=w.text, embed_hash=content_hash
            )
        )
    return out
