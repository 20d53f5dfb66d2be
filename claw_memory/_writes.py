"""Memory Core's write path: append a memory to a memory file, forget referenced lines.

An added memory is one markdown list item stamped with the UTC time it was written,
``- [2026-12-01 09:30:12 UTC] text`` (continuation lines indented), appended to a
memory file: by default today's ``memory/YYYY-MM-DD.md``, the file the pre-compaction
flush writes. With a ``section`` it goes under that heading (created at the end of the
file when missing).

Every change goes through the host's memory-file writer (``api.memory_files``,
:mod:`claw.memory_files`): the workspace's writer lock (shared by every process and
every state directory on the workspace), one ``O_APPEND`` write for an entry at the end,
a checked rename for one inside the file, and the journal that makes a forget undoable
and records who wrote each entry. Memory Core decides only *what* to write and where.

**References and revisions.** A reference to lines carries the revision of those lines
(their hash, :func:`claw.plugin_sdk.lines_revision`; a search hit's is its chunk's
hash). Forgetting lines whose revision no longer matches is refused as stale, naming
what the lines say now; lines that merely moved (an entry was inserted above) are found
where they are. **The matched entry.** A forget removes exactly one entry (a list item
with what is nested under it, a heading, a paragraph): a reference inside one entry
removes that whole entry; a reference covering several (a search hit's chunk) is
refused, naming them, unless the caller asks for the whole range (``whole_range``).

Only the workspace's own memory files are writable (``MEMORY.md``, ``memory.md``,
``USER.md``, ``DREAMS.md`` and ``memory/**/*.md``), never through a symlink.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from claw.plugin_sdk import (
    CapabilityDeniedError,
    Citation,
    ClawError,
    MemoryAddRequest,
    MemoryAddResult,
    MemoryCallerContext,
    MemoryFileTooLargeError,
    MemoryForgetResult,
    MemoryReference,
    MemoryRemoval,
    MemoryRestoreResult,
    Placement,
    line_fragment,
    lines_revision,
    parse_line_fragment,
    writer_refusal,
)
from claw.plugin_sdk.search import line_windows

from ._errors import InvalidSearchError, MemoryCoreError, SourcePathError
from ._sources import ROOT_FILES

if TYPE_CHECKING:
    from ._plugin import MemoryCoreService
    from ._settings import MemoryCoreSettings

PROVIDER_ID = "memory-core"

MAX_ENTRY_BYTES = 32 * 1024
MAX_SECTION_CHARS = 200
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")


class MemoryWriteError(MemoryCoreError):
    """A memory write could not be made (the message names the file and why)."""


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


def section_placement(entry: str, section: str | None) -> Callable[[str], Placement]:
    """Where an entry goes in a file's current text: under ``section`` when given (after
    its last non-blank line; a new section at the end of the file when it is missing),
    else at the end."""

    def compose(current: str) -> Placement:
        lines = current.splitlines(keepends=True)
        end = None if section is None else _section_end(lines, section)
        if section is not None and end is not None and end < len(lines):
            at = end
            while at > 0 and not lines[at - 1].strip():
                at -= 1
            suffix = "" if lines[at].strip() == "" else "\n"
            return Placement(text=entry, before=at, suffix=suffix)
        prefix = ""
        if section is not None and end is None:
            if current.strip():
                prefix = "\n" if current.endswith("\n") else "\n\n"
            prefix += f"## {section.strip()}\n\n"
        return Placement(text=entry, prefix=prefix)

    return compose


def _by(service: MemoryCoreService, context: MemoryCallerContext) -> dict[str, Any]:
    """Who ``context`` is, as the host records it (for an index forget's record)."""
    return service.api.describe_writer(context).to_wire()


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


def names_a_piece(
    lines: Sequence[str], wanted: str, settings: MemoryCoreSettings, *, overlap_tokens: int
) -> bool:
    """Whether ``wanted`` (a lower-case revision or its prefix) is the hash of one of the
    pieces the index cuts ``lines`` into when they are longer than a chunk: a hit on
    a piece cites all of its lines with the piece's hash."""
    windows = line_windows(
        list(lines),
        max_tokens=settings.chunk_tokens,
        overlap_tokens=overlap_tokens,
        chars_per_token=settings.chars_per_token,
    )
    return len(windows) > 1 and any(lines_revision([w.text]).startswith(wanted) for w in windows)


def piece_matcher(service: MemoryCoreService, revision: str) -> Callable[[Sequence[str]], bool]:
    """Accept ``revision`` when it names a piece of one long line of a memory file: the
    index cuts a line longer than a chunk into pieces, so a hit on one cites the line
    with the piece's hash."""
    settings = service.config.settings
    wanted = revision.strip().lower()

    def matches(lines: Sequence[str]) -> bool:
        return len(lines) == 1 and names_a_piece(
            lines, wanted, settings, overlap_tokens=settings.chunk_overlap
        )

    return matches


async def add_memory(
    service: MemoryCoreService,
    context: MemoryCallerContext,
    request: MemoryAddRequest,
    *,
    tool: str | None = None,
) -> MemoryAddResult:
    """Memory Core's ``add``: append a stamped entry (see the module docstring).

    ``tool`` names Memory Core's own tool when the write comes through one (its
    provenance then says so).
    """
    _require_writer(service, context)
    now = time.time() if request.now is None else request.now
    vpath = request.path if request.path is not None else daily_note_path(now)
    check_entry(request.text, request.section)
    memory_file_path(service.workspace_dir, vpath)
    stamp = timestamp_of(now)
    entry = entry_text(request.text, stamp)
    limit = service.config.settings.max_file_bytes
    try:
        written = await service.api.memory_files.place(
            context,
            vpath,
            section_placement(entry, request.section),
            tool=tool,
            max_bytes=limit,
        )
    except MemoryFileTooLargeError as exc:
        raise MemoryWriteError(
            f"{vpath} would grow to {exc.size} bytes, over max_file_bytes ({limit}); write "
            "to another file (--file) or raise max_file_bytes"
        ) from None
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
        timestamp=stamp,
    )


async def forget_reference(
    service: MemoryCoreService,
    agent_id: str,
    context: MemoryCallerContext,
    reference: MemoryReference,
    *,
    dry_run: bool,
    whole_range: bool = False,
) -> MemoryForgetResult:
    """Memory Core's ``forget_reference``.

    A reference with a line fragment (``L3-L4``) names lines of a memory file: the entry
    they lie in is removed from the file (``whole_range``: exactly those lines), and the
    removal is kept in the workspace's journal for :func:`restore_removal`. A reference
    to a whole file or transcript (``sessions/<agent>/<session id>``) drops its derived
    chunks from the index (tombstoned; the source is left alone, as ``claw memory
    forget --path`` does).
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
            result = await index.forget(
                session_id=parts[2], agent_id=agent_id, dry_run=dry_run, by=_by(service, context)
            )
        return MemoryForgetResult(
            reference=reference,
            dry_run=dry_run,
            paths=result.paths,
            chunks=len(result.chunk_ids),
            forget_id=result.forget_id,
        )
    if reference.fragment is None:
        memory_file_path(service.workspace_dir, path)
        async with service.use(agent_id) as index:
            context.assert_current()
            result = await index.forget(path=path, dry_run=dry_run, by=_by(service, context))
        return MemoryForgetResult(
            reference=reference,
            dry_run=dry_run,
            paths=result.paths,
            chunks=len(result.chunk_ids),
            forget_id=result.forget_id,
        )
    try:
        start, end = parse_line_fragment(reference.fragment)
    except ClawError as exc:
        raise InvalidSearchError(str(exc)) from None
    memory_file_path(service.workspace_dir, path)
    revision = reference.revision
    removed = await service.api.memory_files.remove(
        context,
        path,
        start,
        end,
        revision=revision,
        also_matches=None if revision is None else piece_matcher(service, revision),
        whole_range=whole_range,
        dry_run=dry_run,
    )
    if not dry_run:
        await _resync(service)
    context.assert_current()
    return MemoryForgetResult(
        reference=reference,
        dry_run=dry_run,
        paths=(path,),
        removed_text=removed.text,
        removal_id=removed.removal_id,
        start_line=removed.start_line,
        end_line=removed.end_line,
        entries=removed.entries,
    )


async def restore_removal(
    service: MemoryCoreService, context: MemoryCallerContext, removal_id: str, *, dry_run: bool
) -> MemoryRestoreResult:
    """Put back what a forget removed (see :meth:`claw.memory_files.MemoryFiles.restore`)."""
    _require_writer(service, context)
    restored = await service.api.memory_files.restore(context, removal_id, dry_run=dry_run)
    if not dry_run and not restored.already and restored.mode != "present":
        await _resync(service)
    context.assert_current()
    return MemoryRestoreResult(
        removal_id=restored.removal_id,
        reference=MemoryReference(
            provider_id=PROVIDER_ID,
            id=restored.path,
            fragment=line_fragment(restored.start_line, restored.end_line),
        ),
        mode=restored.mode,
        dry_run=dry_run,
        already=restored.already,
    )


async def list_removals(
    service: MemoryCoreService, context: MemoryCallerContext, *, limit: int
) -> tuple[MemoryRemoval, ...]:
    """The workspace's most recent removals, newest first (a writer only: they hold text)."""
    _require_writer(service, context)
    removals = await service.api.memory_files.removals(context, limit=limit)
    context.assert_current()
    return tuple(removals)
