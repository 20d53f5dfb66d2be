"""Workspace memory files: discovery, cheap change checks, reading and chunking.

The sources are ``MEMORY.md``, ``memory.md``, ``DREAMS.md``, ``USER.md``,
``memory/**/*.md`` and configured extra paths (files, or directories searched for
``*.md``). Symlinks are never followed: a link could point anywhere on the machine.
Everything here is blocking and runs on the worker pool.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import attrs

from ._chunking import chunk_id_for, chunk_key, line_windows, sha256_hex, split_lines
from ._records import ChunkRecord, PreparedChunk

ROOT_FILES = ("MEMORY.md", "memory.md", "DREAMS.md", "USER.md")
_BINARY_SNIFF_BYTES = 8192


@attrs.frozen
class FileEntry:
    """A discovered source file: its virtual path, real path and cheap stat."""

    vpath: str
    real: Path
    size: int
    mtime_ns: int
    symlink: bool = False

    @property
    def provenance(self) -> str:
        return f"memory:{self.vpath}"


def _walk_markdown(root: Path) -> Iterator[Path]:
    """``*.md`` files under ``root`` (sorted, not following directory symlinks)."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".md"):
                yield Path(dirpath) / name


def discover(workspace: Path, extra_paths: tuple[str, ...]) -> dict[str, FileEntry]:
    """Every source file present now, keyed by virtual path (symlinks flagged, not followed).

    Files inside the workspace are named by their workspace-relative path; files of an
    extra path outside it by ``extra<i>/<path relative to that extra path>``.
    """
    found: dict[str, FileEntry] = {}

    def add(path: Path, vpath: str) -> None:
        try:
            st = path.lstat()
        except OSError:
            return
        is_link = stat.S_ISLNK(st.st_mode)
        if not is_link and not stat.S_ISREG(st.st_mode):
            return
        found.setdefault(
            vpath,
            FileEntry(
                vpath=vpath, real=path, size=st.st_size, mtime_ns=st.st_mtime_ns, symlink=is_link
            ),
        )

    def name_of(path: Path, base: Path, i: int) -> str:
        try:
            return path.relative_to(workspace).as_posix()
        except ValueError:
            return f"extra{i}/{path.relative_to(base).as_posix()}"

    for name in ROOT_FILES:
        p = workspace / name
        if not (p.exists() or p.is_symlink()):
            continue
        # On case-insensitive file systems MEMORY.md and memory.md are one file.
        if name == "memory.md" and "MEMORY.md" in found:
            try:
                if (workspace / "MEMORY.md").samefile(p):
                    continue
            except OSError:
                pass
        add(p, name)
    mem = workspace / "memory"
    if mem.is_dir() and not mem.is_symlink():
        for p in _walk_markdown(mem):
            add(p, p.relative_to(workspace).as_posix())
    for i, raw in enumerate(extra_paths):
        p = Path(raw).expanduser()
        if not p.is_absolute():
            p = workspace / p
        if p.is_symlink():
            add(p, name_of(p, p.parent, i))
        elif p.is_dir():
            for q in _walk_markdown(p):
                add(q, name_of(q, p, i))
        elif p.is_file():
            add(p, name_of(p, p.parent, i))
    return found


@attrs.frozen
class ReadOutcome:
    """The bytes of a source file, or the reason it is skipped."""

    text: str | None
    file_hash: str | None
    reason: str | None


def read_source(entry: FileEntry, max_bytes: int) -> ReadOutcome:
    """Read a source file unless it is a symlink, too large, unreadable or binary."""
    if entry.symlink:
        return ReadOutcome(None, None, "symlink (not followed)")
    if entry.size > max_bytes:
        return ReadOutcome(None, None, f"too large ({entry.size} bytes > {max_bytes})")
    try:
        fd = os.open(entry.real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        return ReadOutcome(None, None, f"unreadable ({exc.strerror or exc})")
    if len(data) > max_bytes:
        return ReadOutcome(None, None, f"too large (more than {max_bytes} bytes)")
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        return ReadOutcome(None, None, "binary (contains NUL bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return ReadOutcome(None, None, "binary (not UTF-8 text)")
    return ReadOutcome(text, sha256_hex(data), None)


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
    """Chunk one memory file; whitespace-only windows and tombstoned chunks are dropped."""
    prov = f"memory:{vpath}"
    out: list[PreparedChunk] = []
    seen: dict[str, int] = {}
    windows = line_windows(
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
        out.append(PreparedChunk(record=record, context="", embed_text=w.text))
    return out
