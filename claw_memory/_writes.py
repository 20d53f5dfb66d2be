"""Memory Core's write path: append a memory to a memory file, forget referenced lines.

An added memory is one markdown list item stamped with the UTC time it was written,
``- [2026-12-01 09:30:12 UTC] text`` (continuation lines indented), appended to a
memory file: by default today's ``memory/YYYY-MM-DD.md``, the file the pre-compaction
flush writes. With a ``section`` it goes under that heading (created at the end of the
file when missing).

Writes never tear a file. An entry that lands at the end of the file is one
``O_APPEND`` write (so a concurrent appender, such as the flush's ``write`` tool, is
never overwritten); an entry inside the file, and a forget, write the whole new file
to a temporary file in the same directory and rename it over the old one, so a reader
sees the old file or the new one. Memory Core's writers take one lock file (in the
state directory) so that two writers, in one process or two, do not interleave.

Only the workspace's own memory files are writable (``MEMORY.md``, ``memory.md``,
``USER.md``, ``DREAMS.md`` and ``memory/**/*.md``), never through a symlink. Everything
here is blocking and runs on the worker pool.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import attrs

from claw.plugin_sdk import (
    CapabilityDeniedError,
    Citation,
    ClawError,
    MemoryAddRequest,
    MemoryAddResult,
    MemoryCallerContext,
    MemoryForgetResult,
    MemoryReference,
    line_fragment,
    parse_line_fragment,
    writer_refusal,
)

from ._errors import InvalidSearchError, MemoryCoreError, SourcePathError
from ._sources import ROOT_FILES

if TYPE_CHECKING:
    from ._plugin import MemoryCoreService

PROVIDER_ID = "memory-core"

MAX_ENTRY_BYTES = 32 * 1024
MAX_SECTION_CHARS = 200
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")


class MemoryWriteError(MemoryCoreError):
    """A memory write could not be made (the message names the file and why)."""


class StaleReferenceError(InvalidSearchError):
    """A reference names a revision of a file that has changed since."""


@attrs.frozen
class Written:
    """Where an appended entry landed (1-based, inclusive lines) and the file's new hash."""

    path: str
    start_line: int
    end_line: int
    revision: str
    timestamp: str


@attrs.frozen
class Removed:
    """The lines a forget took out (or would take out) of a memory file."""

    path: str
    text: str
    revision: str | None


def memory_file_path(workspace: Path, vpath: str) -> Path:
    """The real path of writable memory file ``vpath``; raises naming what is wrong."""
    if not isinstance(vpath, str) or not vpath or "\\" in vpath or "\x00" in vpath:
        raise SourcePathError(f"{vpath!r} is not a memory file path")
    pure = PurePosixPath(vpath)
    parts = pure.parts
    if pure.is_absolute() or ".." in parts or "." in parts or vpath.endswith("/"):
        raise SourcePathError(f"{vpath!r} is not a path inside the workspace")
    if not (
        (len(parts) == 1 and parts[0] in ROOT_FILES)
        or (len(parts) >= 2 and parts[0] == "memory" and pure.suffix == ".md")
    ):
        raise SourcePathError(
            f"{vpath!r} is not a memory file: write to MEMORY.md, USER.md or memory/<name>.md"
        )
    target = workspace.joinpath(*parts)
    probe = workspace
    for part in parts:
        probe = probe / part
        if probe.is_symlink():
            raise SourcePathError(f"{vpath!r} goes through a symlink, which is never followed")
    return target


def entry_text(text: str, timestamp: str) -> str:
    """``text`` as one stamped markdown list item (ends with a newline)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").strip().split("\n")
    body = [f"- [{timestamp}] {lines[0].rstrip()}"]
    body.extend(f"  {line.rstrip()}" if line.strip() else "" for line in lines[1:])
    return "\n".join(body) + "\n"


def check_entry(text: str, section: str | None) -> None:
    """Refuse an entry Memory Core could not index or file (names the argument)."""
    if "\x00" in text:
        raise InvalidSearchError("text must not contain NUL characters")
    if len(text.encode("utf-8", errors="surrogatepass")) > MAX_ENTRY_BYTES:
        raise InvalidSearchError(f"text is longer than {MAX_ENTRY_BYTES} bytes")
    if section is not None:
        if "\n" in section or "\r" in section or "\x00" in section:
            raise InvalidSearchError("section must be one line of text")
        if len(section) > MAX_SECTION_CHARS:
            raise InvalidSearchError(f"section is longer than {MAX_SECTION_CHARS} characters")


def daily_note_path(now: float) -> str:
    """The dated memory file of ``now`` (local date): ``memory/YYYY-MM-DD.md``."""
    return time.strftime("memory/%Y-%m-%d.md", time.localtime(now))


def timestamp_of(now: float) -> str:
    """The UTC stamp of an entry: ``2026-12-01 09:30:12 UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))


@contextlib.contextmanager
def writer_lock(lock_path: Path) -> Iterator[None]:
    """Hold Memory Core's write lock (an ``flock`` on ``lock_path``) for the block."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read_current(target: Path, vpath: str) -> bytes:
    try:
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise MemoryWriteError(f"{vpath}: cannot read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _decode(data: bytes, vpath: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise MemoryWriteError(f"{vpath} is not UTF-8 text; it cannot be edited") from None


def _line_count(text: str) -> int:
    return len(text.splitlines())


def _section_end(lines: list[str], section: str) -> int | None:
    """The index of the line after ``section``'s last line, or ``None`` when absent."""
    wanted = section.strip().casefold()
    fenced = False
    level = 0
    start: int | None = None
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match is None:
            continue
        depth = len(match.group(1))
        if start is not None and depth <= level:
            return i
        if start is None and match.group(2).strip().casefold() == wanted:
            start, level = i, depth
    return None if start is None else len(lines)


def _replace_file(target: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``target`` and rename it over ``target``."""
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        tmp.chmod(target.stat().st_mode & 0o777 if target.exists() else 0o644)
        tmp.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(target.parent)


def _append_file(target: Path, data: bytes) -> None:
    """Append ``data`` with one ``O_APPEND`` write (retried only for a short write)."""
    fd = os.open(
        target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644
    )
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def append_entry(
    workspace: Path,
    vpath: str,
    text: str,
    *,
    section: str | None,
    now: float,
    max_file_bytes: int,
    lock_path: Path,
) -> Written:
    """Append ``text`` as a stamped entry to memory file ``vpath`` (see the module docs)."""
    check_entry(text, section)
    target = memory_file_path(workspace, vpath)
    stamp = timestamp_of(now)
    entry = entry_text(text, stamp)
    with writer_lock(lock_path):
        target.parent.mkdir(parents=True, exist_ok=True)
        memory_file_path(workspace, vpath)  # again: a directory may have been swapped
        raw = _read_current(target, vpath)
        old = _decode(raw, vpath)
        lines = old.splitlines(keepends=True)
        end = None if section is None else _section_end(lines, section)
        if section is not None and end is not None and end < len(lines):
            # Inside the file: after the section's last non-blank line.
            at = end
            while at > 0 and not lines[at - 1].strip():
                at -= 1
            before = "".join(lines[:at])
            if before and not before.endswith("\n"):
                before += "\n"
            new = before + entry + "\n" + "".join(lines[end:]).lstrip("\n")
            start = _line_count(before) + 1
            mode = "replace"
        else:
            prefix = "" if not old or old.endswith("\n") else "\n"
            if section is not None and end is None:
                if old.strip():
                    prefix += "\n"
                prefix += f"## {section.strip()}\n\n"
            new = old + prefix + entry
            start = _line_count(old + prefix) + 1
            mode = "append"
        data = new.encode("utf-8")
        if len(data) > max_file_bytes:
            raise MemoryWriteError(
                f"{vpath} would grow to {len(data)} bytes, over max_file_bytes "
                f"({max_file_bytes}); write to another file (--file) or raise max_file_bytes"
            )
        if mode == "append":
            _append_file(target, data[len(raw) :])
        else:
            _replace_file(target, data)
    end_line = start + entry.count("\n") - 1
    return Written(
        path=vpath,
        start_line=start,
        end_line=end_line,
        revision=hashlib.sha256(data).hexdigest(),
        timestamp=stamp,
    )


def remove_lines(
    workspace: Path,
    vpath: str,
    start: int,
    end: int,
    *,
    revision: str | None,
    dry_run: bool,
    lock_path: Path,
) -> Removed:
    """Take lines ``start``..``end`` (1-based, inclusive) out of memory file ``vpath``.

    ``revision`` (the file's SHA-256, as search hits and added entries carry it) must
    still match when given: lines of a file that changed since may be other lines now.
    """
    target = memory_file_path(workspace, vpath)
    with writer_lock(lock_path):
        if not target.is_file():
            raise SourcePathError(f"{vpath} was not found in the workspace")
        data = _read_current(target, vpath)
        current = hashlib.sha256(data).hexdigest()
        if revision is not None and revision != current:
            raise StaleReferenceError(
                f"{vpath} has changed since this reference was made; search again for a "
                "current reference"
            )
        lines = _decode(data, vpath).splitlines(keepends=True)
        if start < 1 or end < start or end > len(lines):
            raise InvalidSearchError(
                f"{vpath} has {len(lines)} line(s); lines {start}-{end} are not in it"
            )
        removed = "".join(lines[start - 1 : end])
        if not dry_run:
            _replace_file(target, "".join(lines[: start - 1] + lines[end:]).encode("utf-8"))
    return Removed(path=vpath, text=removed, revision=current)


def write_refusal(service: MemoryCoreService, context: MemoryCallerContext) -> str | None:
    """Why ``context`` may not write Memory Core's files (the owner's), or ``None``."""
    refusal = writer_refusal(context)
    if refusal is not None:
        return refusal
    if "memory" not in service.config.settings.sources:
        return "the memory source is disabled (sources), so there is no memory file to write"
    return None


def _require_writer(service: MemoryCoreService, context: MemoryCallerContext) -> None:
    context.assert_current()
    refusal = write_refusal(service, context)
    if refusal is not None:
        raise CapabilityDeniedError(refusal)


async def _resync(service: MemoryCoreService) -> None:
    """Sync the indexes this process has open, so the next search sees the change now.

    An index another process holds (``claw serve``) sees it on its next search: the
    search checks its files first.
    """
    for agent in service.open_agents():
        async with service.use(agent) as index:
            await index.sync()


async def add_memory(
    service: MemoryCoreService, context: MemoryCallerContext, request: MemoryAddRequest
) -> MemoryAddResult:
    """Memory Core's ``add``: append a stamped entry (see the module docstring)."""
    _require_writer(service, context)
    now = time.time() if request.now is None else request.now
    vpath = request.path if request.path is not None else daily_note_path(now)
    written = await service.api.workers.run_sync(
        lambda: append_entry(
            service.workspace_dir,
            vpath,
            request.text,
            section=request.section,
            now=now,
            max_file_bytes=service.config.settings.max_file_bytes,
            lock_path=service.write_lock_path(),
        )
    )
    await _resync(service)
    context.assert_current()
    return MemoryAddResult(
        reference=MemoryReference(
            provider_id=PROVIDER_ID,
            id=written.path,
            revision=written.revision,
            fragment=line_fragment(written.start_line, written.end_line),
        ),
        citation=Citation(
            path=written.path, start_line=written.start_line, end_line=written.end_line
        ),
        timestamp=written.timestamp,
    )


async def forget_reference(
    service: MemoryCoreService,
    agent_id: str,
    context: MemoryCallerContext,
    reference: MemoryReference,
    *,
    dry_run: bool,
) -> MemoryForgetResult:
    """Memory Core's ``forget_reference``.

    A reference with a line fragment (``L3-L4``) names lines of a memory file: they are
    removed from the file. A reference to a whole file or transcript
    (``sessions/<agent>/<session id>``) drops its derived chunks from the index
    (tombstoned; the source is left alone, as ``claw memory forget --path`` does).
    """
    _require_writer(service, context)
    path = reference.id
    if path.startswith("sessions/"):
        parts = path.split("/")
        if len(parts) != 3 or reference.fragment is not None:
            raise InvalidSearchError(
                f"{path!r}: a transcript is forgotten whole (sessions/<agent>/<session id>)"
            )
        if parts[1] != agent_id:
            raise CapabilityDeniedError(f"{path!r} is a transcript of another agent")
        async with service.use(agent_id) as index:
            context.assert_current()
            result = await index.forget(session_id=parts[2], agent_id=agent_id, dry_run=dry_run)
        return MemoryForgetResult(
            reference=reference, dry_run=dry_run, paths=result.paths, chunks=len(result.chunk_ids)
        )
    if reference.fragment is None:
        memory_file_path(service.workspace_dir, path)
        async with service.use(agent_id) as index:
            context.assert_current()
            result = await index.forget(path=path, dry_run=dry_run)
        return MemoryForgetResult(
            reference=reference, dry_run=dry_run, paths=result.paths, chunks=len(result.chunk_ids)
        )
    try:
        start, end = parse_line_fragment(reference.fragment)
    except ClawError as exc:
        raise InvalidSearchError(str(exc)) from None
    removed = await service.api.workers.run_sync(
        lambda: remove_lines(
            service.workspace_dir,
            path,
            start,
            end,
            revision=reference.revision,
            dry_run=dry_run,
            lock_path=service.write_lock_path(),
        )
    )
    if not dry_run:
        await _resync(service)
    context.assert_current()
    return MemoryForgetResult(
        reference=reference, dry_run=dry_run, paths=(path,), removed_text=removed.text
    )
