"""The memory-file writer: every change to a workspace memory file, under one discipline.

**Exclusion belongs to the workspace.** Every change takes an exclusive ``flock`` on
``<workspace>/.claw/memory-writes/LOCK``. The lock file lives with the workspace, not
with a state directory, because the files it protects are the workspace's: two
processes, or two hosts configured with different state directories, that write one
workspace take the same lock (an ``flock`` is on the file's inode, so any path that
reaches the workspace, a symlink or a bind mount included, reaches the same lock). The
kernel drops it however its holder ends, so a killed writer never blocks the next.

**An append** (a new entry at the end) is one ``O_APPEND`` write of the whole entry,
then ``fsync``: a concurrent appender outside claw (``echo >> file``) is never
overwritten and never interleaves inside the entry.

**A rewrite** (an entry inserted inside the file, lines removed, lines restored) reads
the file under the lock, writes the new content to a temporary file beside it, fsyncs
it, re-checks the file (inode, size, ``mtime_ns`` and content hash) just before the
rename, renames, and fsyncs the directory. A file an editor changed since the read is
never overwritten: the rewrite starts again from the new content (up to
``attempts`` times), then refuses with :class:`MemoryFileChangedError`. On Linux the
rename is ``renameat2(RENAME_EXCHANGE)``, which hands back the file it displaced, so the
check also covers the moment of the rename itself: lines appended to the old file in
that moment are carried over to the new one, and a file replaced in that moment is put
back and the rewrite starts again.

**A writer killed anywhere** leaves nothing torn. Before its effect each change writes
``pending.json`` beside the lock (the append's bytes and offset; the rewrite's
temporary file, the hashes before and after, and the inode it read); the next writer to
take the lock settles it first: a torn append is cut back to where it began (it was
never acknowledged), a complete one gets its journal record (a displaced file's late
bytes carried over are recorded the same way, so a carry is never made twice), a stray
temporary file is removed, and a forget whose rename never happened is marked void in
the journal (told by inodes, since lines appended meanwhile change the content either
way).

Everything here blocks: the host runs it on its worker pool (:mod:`._service`).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import attrs

from .._errors import ClawError
from ..memory._types import MemoryProvenance, MemoryRemoval, RemovalStatus
from ._entries import check_revision, entries_within, entry_spans, lines_revision
from ._errors import (
    ForgetScopeError,
    MemoryFileBusyError,
    MemoryFileChangedError,
    MemoryFileError,
    MemoryFileTooLargeError,
    MemoryPathError,
    NothingToRestoreError,
    RemovalNotFoundError,
    StaleReferenceError,
)
from ._journal import Journal, fsync_dir, write_all

logger = logging.getLogger("claw.memory_files")

HOME = PurePosixPath(".claw/memory-writes")
LOCK_NAME = "LOCK"
PENDING_NAME = "pending.json"
PURGES_NAME = "purges"
DISPLACED_DIR = "displaced"
_APPEND_ROUNDS = 20
#: How long a file a rename displaced is watched for late appends (seconds): longer than
#: any outside writer keeps a file open between its open and its write.
DISPLACED_GRACE = 5.0
CONTEXT_LINES = 3
RESTORED_HEADING = "## Restored by claw"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_HEADING_LINE = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def new_id() -> str:
    """A fresh record id: 12 hex digits (what ``claw memory restore`` takes)."""
    return uuid.uuid4().hex[:12]


def check_path(vpath: object) -> PurePosixPath:
    """``vpath`` as a clean relative POSIX path, or :class:`MemoryPathError`."""
    if not isinstance(vpath, str) or not vpath or "\\" in vpath or "\x00" in vpath:
        raise MemoryPathError(f"{str(vpath)[:200]!r} is not a workspace file path")
    pure = PurePosixPath(vpath)
    if pure.is_absolute() or any(p in ("", ".", "..") for p in vpath.split("/")):
        raise MemoryPathError(f"{vpath[:200]!r} is not a path inside the workspace")
    if pure.parts[0] == ".claw":
        raise MemoryPathError(f"{vpath[:200]!r} is claw's own directory, not a memory file")
    return pure


def _decode(data: bytes, vpath: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise MemoryFileError(f"{vpath} is not UTF-8 text; it cannot be edited") from None


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _place_record(record: dict[str, Any], start: int, written: str) -> None:
    """Record where an append's entry landed: ``written`` is the whole append (a section
    heading may come first), the entry is its last ``record["lines"]`` lines."""
    total = written.count("\n")
    lines = int(record.get("lines", total))
    record["start"] = start + total - lines
    record["end"] = start + total - 1


def _entry_hashes(text: str) -> list[str]:
    lines = text.splitlines()
    return [lines_revision(lines[a - 1 : b]) for a, b in entry_spans(lines)]


# -- renameat2(RENAME_EXCHANGE) ---------------------------------------------------------

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
try:
    _renameat2: Any = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
except OSError:  # pragma: no cover - no C library to load
    _renameat2 = None


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap ``a`` and ``b`` (both exist); ``False`` where unsupported."""
    if _renameat2 is None:
        return False
    result = _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


# -- values -------------------------------------------------------------------------


@attrs.frozen
class Placement:
    """Where a new entry goes, decided by the caller from the file's current text.

    ``before=None`` appends ``prefix + text`` at the end of the file (a newline first
    when the file does not end with one); otherwise ``prefix + text + suffix`` is
    inserted before 0-based line ``before``. ``text`` is the entry itself (the lines a
    citation of it names); ``prefix`` (a new section's heading, a blank line) and
    ``suffix`` (a blank line before the next heading) frame it.
    """

    text: str
    before: int | None = None
    prefix: str = ""
    suffix: str = ""


@attrs.frozen
class Written:
    """Where an entry landed: its lines (1-based, inclusive), their revision, its record."""

    path: str
    start_line: int
    end_line: int
    revision: str
    record_id: str


@attrs.frozen
class Removal:
    """What a forget removed (or, with ``dry_run``, would remove)."""

    path: str
    start_line: int
    end_line: int
    text: str
    entries: int
    removal_id: str | None
    dry_run: bool
    moved_from: tuple[int, int] | None = None


@attrs.frozen
class Restoration:
    """What a restore put back, where, and how (see :class:`claw.memory.MemoryRestoreResult`)."""

    removal_id: str
    path: str
    start_line: int
    end_line: int
    mode: Literal["in-place", "appended", "present"]
    already: bool = False
    dry_run: bool = False


@attrs.frozen
class Cited:
    """Lines cited for a forget or purge: where, and how they must still read.

    ``revision`` and ``also_matches`` are :meth:`MemoryFileWriter.remove`'s revision rule;
    ``whole_range`` its matched-entry rule.
    """

    path: str
    start: int
    end: int
    revision: str | None = None
    also_matches: Callable[[Sequence[str]], bool] | None = None
    whole_range: bool = False


@attrs.frozen
class _Plan:
    start: int
    end: int
    entries: int
    moved_from: tuple[int, int] | None


@attrs.frozen
class Purged:
    """What a purge deleted (or, with ``dry_run``, would delete) from files and journal:
    the files it changed, how many entries it took out of them, and the forgets whose
    kept text it erased."""

    paths: tuple[str, ...]
    entries: int
    removals: tuple[str, ...]
    dry_run: bool


@attrs.frozen
class _Pattern:
    """What a purge looks for: a piece of ``text`` anywhere in a line, or an exact entry
    (``block``, its lines)."""

    text: str | None = None
    block: tuple[str, ...] = ()

    def matches(self, lines: Sequence[str]) -> bool:
        """Whether the entry of ``lines`` is one to purge."""
        if self.text is not None:
            return any(self.text in line for line in lines)
        return tuple(lines) == self.block

    def found_in(self, text: str) -> bool:
        """Whether ``text`` (a forget's kept copy) holds what is purged."""
        if self.text is not None:
            return self.text in text
        return "\n".join(self.block) in text

    def touches(self, line: str) -> bool:
        """Whether a context line kept beside a forget holds what is purged."""
        if self.text is not None:
            return self.text in line
        return bool(line.strip()) and line in self.block


def _patterns(blocks: Sequence[Sequence[str]]) -> list[_Pattern]:
    """The entries of ``blocks`` to purge every copy of (headings alone are no copy: many
    files share ``## Decisions``)."""
    found: list[_Pattern] = []
    for block in blocks:
        spans = entry_spans(block)
        entries = [
            tuple(block[a - 1 : b]) for a, b in spans if not _HEADING_LINE.match(block[a - 1])
        ]
        found.extend(_Pattern(block=e) for e in (entries or [tuple(block)]))
    return found


@attrs.frozen
class _Seen:
    """A file as a rewrite read it: bytes and the identity the re-check compares."""

    data: bytes
    exists: bool
    ino: int = 0
    dev: int = 0
    size: int = 0
    mtime_ns: int = 0
    mode: int = 0o644

    @property
    def sha(self) -> str:
        return _sha(self.data)


class _Changed(Exception):
    """The file changed from outside between the read and the rename."""


Matcher = Callable[[Sequence[str]], bool]


@attrs.define(eq=False)
class MemoryFileWriter:
    """The blocking writer of one workspace's memory files (see the module docstring).

    ``now`` stamps journal records (wall-clock seconds). ``lock_timeout`` bounds the wait
    for another writer; ``attempts`` bounds the retries of a rewrite an editor races.
    """

    workspace: Path
    now: Callable[[], float] = time.time
    lock_timeout: float = 30.0
    attempts: int = 5

    # The purge mark's file, made once: it is stat'ed on every use of an index.
    _purges_path: Path = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._purges_path = self.home / PURGES_NAME

    @property
    def home(self) -> Path:
        """``<workspace>/.claw/memory-writes``: the lock, the pending op and the journal."""
        return self.workspace.joinpath(*HOME.parts)

    @property
    def journal(self) -> Journal:
        return Journal(self.home)

    # -- paths and the lock -----------------------------------------------------------

    def resolve(self, vpath: str) -> Path:
        """The real path of workspace file ``vpath``; never through a symlink."""
        pure = check_path(vpath)
        probe = self.workspace
        for part in pure.parts:
            probe = probe / part
            if probe.is_symlink():
                raise MemoryPathError(f"{vpath!r} goes through a symlink, which is never followed")
        return probe

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the workspace's writer lock, after settling what a dead writer left."""
        if not self.workspace.is_dir():
            raise MemoryFileError(f"the workspace {self.workspace} is not a directory")
        home = self.home
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(home / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            deadline = time.monotonic() + self.lock_timeout
            delay = 0.0005
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise MemoryFileBusyError(
                            f"another writer held {home / LOCK_NAME} for over "
                            f"{self.lock_timeout:g} s; try again"
                        ) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.01)
            self._recover()
            self._settle_stragglers()
            yield
        finally:
            os.close(fd)

    # -- the pending op ---------------------------------------------------------------

    def _set_pending(self, op: dict[str, Any]) -> None:
        """Record the op in flight, replacing the record whole.

        Written beside and renamed over, never truncated in place: a rewrite updates
        its record after it has journalled (what the re-check carried, a tail carried
        over, an undo), and a kill between a truncation and the write's end left a torn
        record, which recovery takes for an op that never began; the journal then kept
        a forget whose rename never happened, and its lines stayed in the file.
        """
        path = self.home / PENDING_NAME
        staged = path.with_name(PENDING_NAME + ".next")
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            write_all(fd, json.dumps(op, separators=(",", ":")).encode())
        finally:
            os.close(fd)
        staged.replace(path)

    def _clear_pending(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.home / PENDING_NAME).unlink()

    def recover(self) -> None:
        """Settle what a killed writer left (the next writer does this anyway)."""
        with self.exclusive():
            pass

    def _recover(self) -> None:
        journal = self.journal
        journal.repair()
        path = self.home / PENDING_NAME
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return
        try:
            op = json.loads(raw)
            vpath = str(op["path"])
            target = self.workspace.joinpath(*check_path(vpath).parts)
            if op["op"] == "append":
                landed = self._recover_append(target, op, journal)
                settled = op.get("settled")  # a displaced file's late bytes carried over
                if landed and isinstance(settled, list) and len(settled) == 2:
                    home = self.home / DISPLACED_DIR
                    with contextlib.suppress(OSError):
                        (home / str(settled[0])).rename(home / str(settled[1]))
            elif op["op"] == "rewrite":
                self._recover_rewrite(target, op, journal)
        except (ValueError, KeyError, TypeError, MemoryPathError):
            pass  # torn before the op began: it never happened
        self._clear_pending()

    def _recover_append(self, target: Path, op: dict[str, Any], journal: Journal) -> bool:
        """Settle a killed append; whether its bytes landed whole (journalled if it
        carried a record; a torn one is cut back and counts as never written)."""
        offset = int(op["offset"])
        data = base64.b64decode(op["data"])
        try:
            current = target.read_bytes()
        except FileNotFoundError:
            return False
        landed = current[offset : offset + len(data)]
        record = op.get("record")
        if landed != data and len(current) >= offset + len(data):
            # An outside append (``echo >>``) got in between the size read and the write:
            # ours landed after it, as the writer itself would have found before it
            # journalled (see _commit_append). Journal it where it is.
            at = current.find(data, offset)
            if at >= 0:
                landed = data
                if isinstance(record, dict):
                    separator = data.startswith(b"\n")
                    start = current[:at].count(b"\n") + 1 + separator
                    written = data[separator:].decode("utf-8", "surrogatepass")
                    _place_record(record, start, written)
        if landed == data:
            if isinstance(record, dict) and journal.last_id() != record.get("id"):
                journal.append(record, sync=True)
            return True
        if len(current) > offset and data.startswith(current[offset:]):
            # Torn by the kill and never acknowledged: cut back to where it began.
            fd = os.open(target, os.O_RDWR | _NOFOLLOW | os.O_CLOEXEC)
            try:
                os.ftruncate(fd, offset)
                os.fsync(fd)
            finally:
                os.close(fd)
            logger.warning(
                "%s: removed %d bytes of a write that was killed before it finished",
                op["path"],
                len(current) - offset,
            )
        return False

    def _recover_rewrite(self, target: Path, op: dict[str, Any], journal: Journal) -> None:
        tmp = target.parent / str(op["tmp"])
        ours = tmp.name.startswith(".") and tmp.name.endswith(".claw-tmp")
        read = op.get("read")  # [inode, device, size] of the file the rewrite read
        if ours and isinstance(read, list) and len(read) == 3:
            carry = op.get("carry")
            undo = op.get("undo")
            renamed = self._recover_by_identity(
                target,
                tmp,
                str(op["path"]),
                read,
                carry=carry if isinstance(carry, list) else None,
                undo=undo if isinstance(undo, list) and len(undo) == 3 else None,
            )
        else:  # the file did not exist, or a pending op from before identities were kept
            try:
                renamed = _sha(target.read_bytes()) != op["old"]
            except FileNotFoundError:
                renamed = _sha(b"") != op["old"]
        if ours:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        record_id = op.get("record")
        if renamed or not isinstance(record_id, str) or journal.last_id() != record_id:
            return
        # The journal has the record but the rename never happened.
        journal.append(
            {"id": new_id(), "op": "void", "of": record_id, "at": self.now(), "path": op["path"]},
            sync=True,
        )

    def _recover_by_identity(
        self,
        target: Path,
        tmp: Path,
        vpath: str,
        read: list[Any],
        *,
        carry: list[Any] | None,
        undo: list[Any] | None,
    ) -> bool:
        """Whether a killed rewrite's rename happened, told by inodes rather than content.

        Content cannot tell: lines an editor appended after the read (carried into the
        temporary file by the re-check) change the hash of the file the rename never
        replaced, and a forget journalled then would stand in the journal while its
        lines stayed in the file. The temporary file still holding another inode than
        the one read means the rename never happened, or happened and was being undone
        because the file was replaced at that moment (``undo`` in ``pending.json``: the
        new file's length and inode): the undo is finished if the kill came before it,
        and bytes an editor wrote to the new file while it was in place go to the file
        put back unless the writer had carried them already; else the rename happened
        exactly when ``target`` is no longer the inode read. After an exchange the
        temporary name holds the file displaced: it is kept as any displaced file is,
        settled up to what the new file holds (the size the re-check last saw, which
        ``pending.json`` records), so bytes written to it past that (an ``echo >>`` at
        the moment of the rename, or later) are carried over by the next writer. Unless
        the writer got further before the kill: a tail it carried over (``carry`` in
        ``pending.json``, found in the new file past where that ended) counts as
        settled, and a displaced file it already kept (its inode linked in
        ``displaced/``) is not kept twice; either would carry the same lines again.
        """
        ino, dev, size = int(read[0]), int(read[1]), int(read[2])
        try:
            st_tmp: os.stat_result | None = os.lstat(tmp)
        except FileNotFoundError:
            st_tmp = None
        if st_tmp is not None and (st_tmp.st_ino, st_tmp.st_dev) != (ino, dev):
            if undo is not None:
                self._finish_undo(target, tmp, vpath, undo, carry=carry)
            return False
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            return False
        renamed = (st.st_ino, st.st_dev) != (ino, dev)
        if renamed and st_tmp is not None and not self._already_kept(st_tmp):
            # Kept like any displaced file: bytes past what the new file holds (written
            # at the moment of the rename, or later through a descriptor opened before
            # it) are carried over by the next writer.
            self._keep_displaced(tmp, vpath, size + self._carried(target, tmp, size, carry))
        return renamed

    def _finish_undo(
        self, target: Path, tmp: Path, vpath: str, undo: list[Any], *, carry: list[Any] | None
    ) -> None:
        """Finish undoing a rename killed on its way back (see :meth:`_settle_displaced`).

        ``undo`` is our new file's length and identity (inode, device), recorded before
        the undo: by inode, not content (a forget of a file's last lines makes the new
        file a prefix of the old one). If our file is still at ``target`` (the kill
        came before the undo), it is swapped back with the file that replaced it; then
        bytes past ``length`` in it (written while it was in place) are given to the
        file put back, unless the writer had already.
        """
        length, ours_id = int(undo[0]), (int(undo[1]), int(undo[2]))
        try:
            st = os.lstat(target)
            if (st.st_ino, st.st_dev) == ours_id and not _exchange(tmp, target):
                return
            st_tmp = os.lstat(tmp)
        except FileNotFoundError:
            return
        if (
            (st_tmp.st_ino, st_tmp.st_dev) != ours_id
            or st_tmp.st_size <= length
            or self._already_kept(st_tmp)
            or self._carried(target, tmp, length, carry)
        ):
            return
        with tmp.open("rb") as f:
            f.seek(length)
            late = f.read()
        with contextlib.suppress(FileNotFoundError):
            self._append_bytes(target, late)
            logger.info("%s: carried over %d bytes written during a rewrite", vpath, len(late))

    def _already_kept(self, st: os.stat_result) -> bool:
        """Whether ``displaced/`` already holds the file ``st`` describes (by inode)."""
        try:
            kept = list((self.home / DISPLACED_DIR).iterdir())
        except FileNotFoundError:
            return False
        for entry in kept:
            with contextlib.suppress(OSError):
                other = entry.lstat()
                if (other.st_ino, other.st_dev) == (st.st_ino, st.st_dev):
                    return True
        return False

    def _carried(self, target: Path, tmp: Path, size: int, carry: list[Any] | None) -> int:
        """How many bytes of the displaced file ``tmp`` past ``size`` a killed rewrite
        had already carried over to ``target`` (0, or the whole tail it recorded)."""
        if carry is None or len(carry) != 2:
            return 0
        at, length = int(carry[0]), int(carry[1])
        with tmp.open("rb") as f:
            f.seek(size)
            tail = f.read(length)
        if len(tail) != length or not tail:
            return 0
        with target.open("rb") as f:
            f.seek(at)
            after = f.read()
        # Found where the new file ended, or later (an editor's append landing first).
        return length if after.find(tail) >= 0 else 0

    # -- reading and committing -------------------------------------------------------

    def _read(self, target: Path, vpath: str) -> _Seen:
        try:
            fd = os.open(target, os.O_RDONLY | _NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return _Seen(data=b"", exists=False)
        except OSError as exc:
            raise MemoryFileError(f"{vpath}: cannot read ({exc.strerror or exc})") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read()
        return _Seen(
            data=data,
            exists=True,
            ino=st.st_ino,
            dev=st.st_dev,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            mode=st.st_mode & 0o777,
        )

    def _unchanged(self, target: Path, seen: _Seen) -> bool:
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            return not seen.exists
        if not seen.exists or (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns) != (
            seen.ino,
            seen.dev,
            seen.size,
            seen.mtime_ns,
        ):
            return False
        try:
            return _sha(target.read_bytes()) == seen.sha
        except OSError:
            return False

    def _recheck(self, target: Path, tmp: Path, seen: _Seen) -> _Seen:
        """Make sure ``target`` is still the file ``seen`` read, right before the rename.

        Lines only appended to it meanwhile (``echo >>``: same inode, the old bytes
        untouched) are appended to ``tmp`` too, and the check runs again; any other
        change raises :class:`_Changed`. Returns what the rename will displace.
        """
        for _ in range(_APPEND_ROUNDS):
            if self._unchanged(target, seen):
                return seen
            try:
                st = os.lstat(target)
                if not seen.exists or (st.st_ino, st.st_dev) != (seen.ino, seen.dev):
                    raise _Changed
                now = target.read_bytes()
            except OSError:
                raise _Changed from None
            if len(now) <= len(seen.data) or not now.startswith(seen.data):
                raise _Changed
            self._append_bytes(tmp, now[len(seen.data) :])
            seen = attrs.evolve(seen, data=now, size=len(now), mtime_ns=st.st_mtime_ns)
        raise _Changed

    def _append_bytes(self, target: Path, data: bytes) -> None:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | _NOFOLLOW | os.O_CLOEXEC)
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _commit_append(
        self, target: Path, vpath: str, text: str, record: dict[str, Any], max_bytes: int | None
    ) -> tuple[int, int]:
        """Append ``text`` as one write; the entry's first line and the file's new size."""
        target.parent.mkdir(parents=True, exist_ok=True)
        self.resolve(vpath)  # again: a directory may have been swapped for a symlink
        created = not target.exists()
        fd = os.open(target, os.O_RDWR | os.O_APPEND | os.O_CREAT | _NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            size = os.fstat(fd).st_size
            old = os.pread(fd, size, 0) if size else b""
            payload = text.encode("utf-8", "surrogatepass")
            separator = bool(old) and not old.endswith(b"\n")
            if separator:
                payload = b"\n" + payload
            if max_bytes is not None and size + len(payload) > max_bytes:
                raise MemoryFileTooLargeError(
                    f"{vpath} would grow to {size + len(payload)} bytes, over its limit "
                    f"({max_bytes})",
                    size=size + len(payload),
                    limit=max_bytes,
                )
            start = old.count(b"\n") + 1 + separator
            _place_record(record, start, text)
            self._set_pending(
                {
                    "op": "append",
                    "path": vpath,
                    "offset": size,
                    "data": base64.b64encode(payload).decode(),
                    "record": record,
                }
            )
            write_all(fd, payload)
            os.fsync(fd)
            end_size = os.fstat(fd).st_size
            if end_size != size + len(payload):
                # Someone outside claw appended at the same moment: find where ours landed.
                whole = os.pread(fd, end_size, 0)
                at = whole.find(payload, size)
                if at >= 0:
                    start = whole[:at].count(b"\n") + 1 + separator
                    _place_record(record, start, text)
        finally:
            os.close(fd)
        if created:
            fsync_dir(target.parent)
        self.journal.append(record, sync=False)
        self._clear_pending()
        return start, size + len(payload)

    def _commit_rewrite(
        self, target: Path, vpath: str, seen: _Seen, new: bytes, record: dict[str, Any] | None
    ) -> None:
        """Replace ``target`` with ``new`` unless it changed since ``seen`` (:class:`_Changed`)."""
        tmp = target.parent / f".{target.name}.{uuid.uuid4().hex[:12]}.claw-tmp"
        pending: dict[str, Any] = {
            "op": "rewrite",
            "path": vpath,
            "tmp": tmp.name,
            "old": seen.sha,
            "new": _sha(new),
            "read": [seen.ino, seen.dev, seen.size] if seen.exists else None,
            "record": None if record is None else record["id"],
        }
        self._set_pending(pending)
        journaled = False
        try:
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | os.O_CLOEXEC, 0o600
            )
            with os.fdopen(fd, "wb") as f:
                f.write(new)
                f.flush()
                os.fsync(f.fileno())
            tmp.chmod(seen.mode if seen.exists else 0o644)
            if record is not None:
                self.journal.append(record, sync=True)
                journaled = True
            read = len(seen.data)
            seen = self._recheck(target, tmp, seen)
            new += seen.data[read:]  # what was appended meanwhile is in tmp too
            if seen.exists and len(seen.data) > read:
                # The new file holds the old one up to here: a kill after the rename
                # leaves only what lies beyond it to carry over (never these lines twice).
                pending["read"] = [seen.ino, seen.dev, seen.size]
                self._set_pending(pending)
            if not seen.exists:
                try:
                    os.link(tmp, target)  # never over a file that appeared meanwhile
                except FileExistsError:
                    raise _Changed from None
            elif _exchange(tmp, target):
                kept = self._settle_displaced(target, tmp, seen, new, pending)
                self._keep_displaced(tmp, vpath, kept)
            else:
                tmp.replace(target)
            fsync_dir(target.parent)
        except _Changed:
            if journaled:
                assert record is not None
                self.journal.append(
                    {
                        "id": new_id(),
                        "op": "void",
                        "of": record["id"],
                        "at": self.now(),
                        "path": vpath,
                    },
                    sync=True,
                )
            raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            self._clear_pending()

    def _settle_displaced(
        self, target: Path, tmp: Path, seen: _Seen, new: bytes, pending: dict[str, Any]
    ) -> int:
        """After the exchange, ``tmp`` holds the file we displaced: make sure it was ours.

        Returns how many of its bytes are accounted for (carried over or ours). A tail
        to carry over is recorded in ``pending`` first (where the new file ended and how
        long the tail is), so that recovery after a kill tells whether it landed.
        """
        st = os.lstat(tmp)
        if (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns) == (
            seen.ino,
            seen.dev,
            seen.size,
            seen.mtime_ns,
        ):
            return seen.size
        displaced = tmp.read_bytes()
        if (st.st_ino, st.st_dev) == (seen.ino, seen.dev) and displaced.startswith(seen.data):
            tail = displaced[len(seen.data) :]
            if tail:
                # Appended to the old file at the moment of the rename: carry it over.
                pending["carry"] = [os.lstat(target).st_size, len(tail)]
                self._set_pending(pending)
                self._append_bytes(target, tail)
                logger.info(
                    "%s: carried over %d bytes appended during a rewrite", target, len(tail)
                )
            return len(displaced)
        # Replaced or edited at the moment of the rename: put it back, start again
        # (recorded first: a kill from here on is finished by recovery, _finish_undo).
        mine = os.lstat(target)  # our file, until the undo
        pending["undo"] = [len(new), mine.st_ino, mine.st_dev]
        self._set_pending(pending)
        if not _exchange(tmp, target):  # pragma: no cover - it just worked
            raise MemoryFileError(f"{target}: could not undo a rename")
        ours = tmp.read_bytes()
        if len(ours) > len(new) and ours.startswith(new):
            # Written to our file in the moment it was in place: give it to the file
            # put back (recorded first, as a carried tail is).
            pending["carry"] = [os.lstat(target).st_size, len(ours) - len(new)]
            self._set_pending(pending)
            self._append_bytes(target, ours[len(new) :])
        self._keep_displaced(tmp, str(target.relative_to(self.workspace).as_posix()), len(ours))
        raise _Changed

    # -- stragglers: appends through a file descriptor opened before the rename -----------

    def _keep_displaced(self, tmp: Path, vpath: str, settled: int) -> None:
        """Keep the file a rename displaced for :data:`DISPLACED_GRACE` seconds.

        A writer outside claw that opened the old file before the rename (``echo >>``)
        may still write to it after: the next writer to take the lock carries such late
        bytes over to the file (:meth:`_settle_stragglers`). The name records what is
        accounted for: ``<id>.<settled bytes>.<when, ns>.<path, base64>``.
        """
        home = self.home / DISPLACED_DIR
        name = ".".join(
            (
                new_id(),
                str(settled),
                str(time.time_ns()),
                base64.urlsafe_b64encode(vpath.encode("utf-8", "surrogatepass")).decode(),
            )
        )
        try:
            home.mkdir(exist_ok=True)
            os.link(tmp, home / name)
        except OSError:
            pass  # another file system: no grace, as with a plain rename

    def _settle_stragglers(self, *, drop_all: bool = False) -> None:
        """Carry late bytes of displaced files over, and drop those past their grace."""
        home = self.home / DISPLACED_DIR
        try:
            entries = list(home.iterdir())
        except FileNotFoundError:
            return
        now = time.time_ns()
        for found in entries:
            entry = found
            try:
                rid, settled, at, encoded = entry.name.split(".", 3)
                vpath = base64.urlsafe_b64decode(encoded).decode("utf-8", "surrogatepass")
                size = entry.stat().st_size
                if size > int(settled):
                    with entry.open("rb") as f:
                        f.seek(int(settled))
                        tail = f.read()
                    target = self.resolve(vpath)
                    carried = str(int(settled) + len(tail))
                    marked = entry.with_name(".".join((rid, carried, at, encoded)))
                    if target.exists():
                        # Recorded first, as an append is: a kill between the carry and
                        # the new name is settled by recovery (the carry landed: the
                        # name moves on; torn: cut back, carried again), never twice.
                        self._set_pending(
                            {
                                "op": "append",
                                "path": vpath,
                                "offset": os.lstat(target).st_size,
                                "data": base64.b64encode(tail).decode(),
                                "record": None,
                                "settled": [entry.name, marked.name],
                            }
                        )
                        self._append_bytes(target, tail)
                        logger.info("%s: carried over %d late bytes", vpath, len(tail))
                    entry = entry.rename(marked)
                    self._clear_pending()
                if drop_all or now - int(at) > DISPLACED_GRACE * 1e9:
                    entry.unlink()
            except (ValueError, OSError, MemoryPathError):
                with contextlib.suppress(OSError):
                    entry.unlink()  # not ours, or unreadable: it holds nothing to keep

    def _retrying(self, vpath: str, attempt: Callable[[], Any]) -> Any:
        for _ in range(self.attempts):
            try:
                return attempt()
            except _Changed:
                continue
        raise MemoryFileChangedError(
            f"{vpath} kept changing while claw tried to rewrite it ({self.attempts} attempts); "
            "nothing was written, and the outside change was kept; try again"
        )

    # -- the operations ---------------------------------------------------------------

    def ensure(self, vpath: str) -> None:
        """Create ``vpath`` (and its directories) empty if it is missing; never truncate."""
        target = self.resolve(vpath)
        with self.exclusive():
            target.parent.mkdir(parents=True, exist_ok=True)
            self.resolve(vpath)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND | _NOFOLLOW, 0o644)
            os.close(fd)

    def append(
        self,
        vpath: str,
        text: str,
        *,
        by: Mapping[str, Any],
        max_bytes: int | None = None,
    ) -> Written:
        """Append ``text`` (a newline added when missing) as one whole write.

        The file is not read as text first, so any file can be appended to.
        """
        return self._add(vpath, None, Placement(text=text), by=by, max_bytes=max_bytes)

    def place(
        self,
        vpath: str,
        compose: Callable[[str], Placement],
        *,
        by: Mapping[str, Any],
        max_bytes: int | None = None,
    ) -> Written:
        """Add the entry ``compose`` places, given the file's current text (under the lock)."""
        return self._add(vpath, compose, None, by=by, max_bytes=max_bytes)

    def _add(
        self,
        vpath: str,
        compose: Callable[[str], Placement] | None,
        fixed: Placement | None,
        *,
        by: Mapping[str, Any],
        max_bytes: int | None,
    ) -> Written:
        target = self.resolve(vpath)

        def attempt() -> Written:
            seen = _Seen(b"", False)
            if compose is not None:
                seen = self._read(target, vpath)
                placement = compose(_decode(seen.data, vpath))
            else:
                assert fixed is not None
                placement = fixed
            text = placement.text if placement.text.endswith("\n") else placement.text + "\n"
            record: dict[str, Any] = {
                "id": new_id(),
                "op": "add",
                "at": self.now(),
                "path": vpath,
                "entries": _entry_hashes(text),
                "lines": text.count("\n"),
                "by": dict(by),
            }
            if placement.before is None:
                start, _ = self._commit_append(
                    target, vpath, placement.prefix + text, record, max_bytes
                )
                start += placement.prefix.count("\n")
            else:
                kept = _decode(seen.data, vpath).splitlines(keepends=True)
                before = max(0, min(placement.before, len(kept)))
                head = "".join(kept[:before])
                if head and not head.endswith("\n"):
                    head += "\n"
                new = head + placement.prefix + text + placement.suffix + "".join(kept[before:])
                data = new.encode("utf-8", "surrogatepass")
                if max_bytes is not None and len(data) > max_bytes:
                    raise MemoryFileTooLargeError(
                        f"{vpath} would grow to {len(data)} bytes, over its limit ({max_bytes})",
                        size=len(data),
                        limit=max_bytes,
                    )
                start = _line_count((head + placement.prefix).encode()) + 1
                record["start"] = start
                record["end"] = start + text.count("\n") - 1
                self._commit_rewrite(target, vpath, seen, data, record)
            return Written(
                path=vpath,
                start_line=start,
                end_line=start + text.count("\n") - 1,
                revision=lines_revision(text.splitlines()),
                record_id=record["id"],
            )

        with self.exclusive():
            result: Written = self._retrying(vpath, attempt)
            return result

    def remove(
        self,
        vpath: str,
        start: int,
        end: int,
        *,
        by: Mapping[str, Any],
        revision: str | None = None,
        also_matches: Matcher | None = None,
        whole_range: bool = False,
        dry_run: bool = False,
    ) -> Removal:
        """Take lines ``start..end`` (1-based, inclusive) out of ``vpath``, keeping an undo.

        ``revision`` (see :mod:`._entries`) must still match the cited lines, or the whole
        file's hash; cited lines that only moved are found where they are now (when that
        is unambiguous), anything else is refused as stale naming what changed.
        ``also_matches`` lets a provider accept its own revisions of the lines.

        Without ``whole_range`` a forget removes exactly one entry: the cited lines must
        lie within one entry, and that whole entry goes; a citation of several entries
        is refused naming them. ``whole_range`` removes exactly the cited lines.
        """
        cited = Cited(vpath, start, end, revision, also_matches, whole_range)
        target = self.resolve(vpath)

        def attempt() -> Removal:
            seen, plan = self._plan(cited)
            a, b = plan.start, plan.end
            text = _decode(seen.data, vpath)
            kept = text.splitlines(keepends=True)
            lines = text.splitlines()
            removed = "".join(kept[a - 1 : b])
            if dry_run:
                return Removal(vpath, a, b, removed, plan.entries, None, True, plan.moved_from)
            new = "".join(kept[: a - 1] + kept[b:]).encode("utf-8", "surrogatepass")
            gone = lines[a - 1 : b]
            hashes = [lines_revision(gone[x - 1 : y]) for x, y in entry_spans(gone)]
            writers = self._writers_of(hashes)
            rid = new_id()
            record: dict[str, Any] = {
                "id": rid,
                "op": "forget",
                "at": self.now(),
                "path": vpath,
                "start": a,
                "end": b,
                "text": removed,
                "before": lines[max(0, a - 1 - CONTEXT_LINES) : a - 1],
                "after": lines[b : b + CONTEXT_LINES],
                "fileAfter": _sha(new),
                "entries": hashes,
                "provenance": [writers.get(h) for h in hashes],
                "by": dict(by),
            }
            self._commit_rewrite(target, vpath, seen, new, record)
            return Removal(vpath, a, b, removed, plan.entries, rid, False, plan.moved_from)

        with self.exclusive():
            result: Removal = self._retrying(vpath, attempt)
            return result

    def _plan(self, cited: Cited) -> tuple[_Seen, _Plan]:
        """Read the cited file and decide which lines a forget (or purge) of ``cited``
        takes: the revision rule and the matched-entry rule of :meth:`remove`."""
        vpath, start, end = cited.path, cited.start, cited.end
        if start < 1 or end < start:
            raise StaleReferenceError(f"lines {start}-{end} are not a line range")
        wanted = None if cited.revision is None else check_revision(cited.revision)
        target = self.resolve(vpath)
        if not target.is_file():
            raise StaleReferenceError(f"{vpath} was not found in the workspace")
        seen = self._read(target, vpath)
        lines = _decode(seen.data, vpath).splitlines()

        def matches(cut: Sequence[str]) -> bool:
            if wanted is None:
                return True
            if seen.sha.startswith(wanted) or lines_revision(cut).startswith(wanted):
                return True
            return cited.also_matches is not None and cited.also_matches(cut)

        a, b = start, end
        moved: tuple[int, int] | None = None
        if b > len(lines) or not matches(lines[a - 1 : b]):
            n = b - a + 1
            found = (
                [i + 1 for i in range(0, len(lines) - n + 1) if matches(lines[i : i + n])]
                if wanted is not None
                else []
            )
            if len(found) != 1:
                raise StaleReferenceError(_stale_message(vpath, lines, a, b, len(found)))
            moved = (a, b)
            a, b = found[0], found[0] + n - 1
        spans = entries_within(lines, a, b)
        if not cited.whole_range:
            if not spans:
                raise ForgetScopeError(f"{vpath}#L{a}-L{b} holds only blank lines")
            if len(spans) > 1:
                raise ForgetScopeError(_scope_message(vpath, lines, a, b, spans))
            a, b = spans[0]
        return seen, _Plan(a, b, len(spans), moved)

    def _writers_of(self, hashes: Sequence[str]) -> dict[str, Any]:
        wanted = set(hashes)
        writers = provenance_map(live(self.journal.records()))
        return {h: p for h, p in writers.items() if h in wanted}

    def restore(
        self, removal_id: str, *, by: Mapping[str, Any], dry_run: bool = False
    ) -> Restoration:
        """Put a forget's lines back (see :class:`claw.memory.MemoryRestoreResult`)."""
        with self.exclusive():
            records = live(self.journal.records())
            forget = _find_removal(records, removal_id)
            rid = forget["id"]
            for r in records:
                if r.get("op") == "restore" and r.get("of") == rid:
                    return Restoration(
                        rid, str(r["path"]), int(r["start"]), int(r["end"]), r["mode"], already=True
                    )
            if _purged(records, rid):
                raise NothingToRestoreError(f"removal {rid} was purged: its text is gone for good")
            vpath = str(forget["path"])
            target = self.resolve(vpath)

            def attempt() -> Restoration:
                return self._restore_once(target, vpath, forget, by=by, dry_run=dry_run)

            result: Restoration = self._retrying(vpath, attempt)
            return result

    def _restore_once(
        self,
        target: Path,
        vpath: str,
        forget: dict[str, Any],
        *,
        by: Mapping[str, Any],
        dry_run: bool,
    ) -> Restoration:
        rid = str(forget["id"])
        text = str(forget["text"])
        seen = self._read(target, vpath)
        current = _decode(seen.data, vpath)
        kept = current.splitlines(keepends=True)
        lines = current.splitlines()
        gone = text.splitlines()
        present = _present(lines, forget, gone)
        at = present if present is not None else _gap(lines, forget, seen.sha)
        record: dict[str, Any] = {
            "id": new_id(),
            "op": "restore",
            "of": rid,
            "at": self.now(),
            "path": vpath,
            "entries": forget.get("entries", []),
            "provenance": forget.get("provenance", []),
            "by": dict(by),
        }
        if present is not None:
            record.update(mode="present", start=present + 1, end=present + len(gone))
            if not dry_run:
                self.journal.append(record, sync=True)
            return Restoration(
                rid, vpath, present + 1, present + len(gone), "present", dry_run=dry_run
            )
        if at is not None:
            body = text if text.endswith("\n") else text + "\n"
            head = "".join(kept[:at])
            if head and not head.endswith("\n"):
                head += "\n"
            new = (head + body + "".join(kept[at:])).encode("utf-8", "surrogatepass")
            record.update(mode="in-place", start=at + 1, end=at + len(gone))
            if not dry_run:
                self._commit_rewrite(target, vpath, seen, new, record)
            return Restoration(rid, vpath, at + 1, at + len(gone), "in-place", dry_run=dry_run)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(forget["at"])))
        heading = (
            f"{RESTORED_HEADING} (forgotten {stamp} from lines {forget['start']}-{forget['end']})"
        )
        lead = (
            ""
            if not current or current.endswith("\n\n")
            else ("\n" if current.endswith("\n") else "\n\n")
        )
        prefix = f"{lead}{heading}\n\n"
        body = text if text.endswith("\n") else text + "\n"
        start = _line_count((current + prefix).encode()) + 1
        record.update(mode="appended", start=start, end=start + len(gone) - 1)
        if not dry_run:
            self._commit_rewrite(target, vpath, seen, seen.data + (prefix + body).encode(), record)
        return Restoration(rid, vpath, start, start + len(gone) - 1, "appended", dry_run=dry_run)

    def purge(
        self,
        vpaths: Sequence[str],
        *,
        by: Mapping[str, Any],
        text: str | None = None,
        cited: Cited | None = None,
        removal_id: str | None = None,
        dry_run: bool = False,
    ) -> Purged:
        """Delete for good, with no undo, one of:

        * ``text``: every entry of ``vpaths`` with a line containing it, and every
          forget in the journal whose text contains it;
        * ``cited``: the cited entry (the revision and matched-entry rules of
          :meth:`remove`), every exact copy of it in ``vpaths``, and every forget that
          kept a copy of it;
        * ``removal_id``: what that forget kept (and every other forget that kept it).

        The journal is rewritten without the text (its only rewrite); forget records
        that lose their text are listed as ``purged``; a ``purge`` record says who
        purged how much, never what. Files a rename displaced are dropped (after their
        late bytes are carried over). Derived copies (an index) are the caller's.
        """
        if sum(x is not None for x in (text, cited, removal_id)) != 1:
            raise ValueError("purge needs exactly one of text, cited or removal_id")
        if text is not None and not text.strip():
            raise StaleReferenceError("the text to purge must not be blank")
        with self.exclusive():
            self._settle_stragglers(drop_all=not dry_run)
            records = live(self.journal.records())
            blocks: list[list[str]] = []
            removed: dict[str, list[tuple[int, int]]] = {}
            if cited is not None:
                one = self._cited_block(cited)
                removed[cited.path] = [one]
                lines = _decode(self._read(self.resolve(cited.path), cited.path).data, cited.path)
                blocks.append(lines.splitlines()[one[0] - 1 : one[1]])
            elif removal_id is not None:
                forget = _find_removal(records, removal_id)
                if _purged(records, forget["id"]) or forget.get("text") is None:
                    raise NothingToRestoreError(f"removal {forget['id']} was purged already")
                blocks.append(str(forget["text"]).splitlines())
            patterns = [_Pattern(text=text)] if text is not None else _patterns(blocks)
            for vpath in vpaths:
                target = self.resolve(vpath)
                if not target.is_file():
                    continue
                spans = self._matching_entries(target, vpath, patterns)
                if spans:
                    removed.setdefault(vpath, [])
                    removed[vpath] = sorted(set(removed[vpath]) | set(spans))
            named = None if removal_id is None else _find_removal(records, removal_id)["id"]
            scrubbed = [
                r["id"]
                for r in records
                if r.get("op") == "forget"
                and r.get("text") is not None
                and (r["id"] == named or any(p.found_in(str(r["text"])) for p in patterns))
            ]
            entries = sum(len(v) for v in removed.values())
            if dry_run:
                return Purged(tuple(sorted(removed)), entries, tuple(scrubbed), True)
            for vpath, spans in removed.items():
                self._drop_lines(vpath, spans)
            # The rewrites just displaced the files that held the text: keep no copy.
            self._settle_stragglers(drop_all=True)
            self._scrub_journal(set(scrubbed), patterns, by, tuple(sorted(removed)), entries)
            # Tell every index of the workspace, whatever its state directory, that a
            # purge happened (see purge_mark): one line, no text.
            fd = os.open(
                self.home / PURGES_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            )
            try:
                write_all(fd, f"{new_id()} {self.now():.3f}\n".encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            return Purged(tuple(sorted(removed)), entries, tuple(scrubbed), False)

    def purge_mark(self) -> int:
        """A number that grows with every purge of this workspace (0 before the first:
        the size of its ``purges`` file): an index that last scrubbed at a lower mark
        may hold bytes of a purge made through another state directory, and scrubs
        itself."""
        try:
            return self._purges_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _cited_block(self, cited: Cited) -> tuple[int, int]:
        """The lines a cited purge removes (what :meth:`remove` would, with its rules)."""
        _, plan = self._plan(cited)
        return plan.start, plan.end

    def _matching_entries(
        self, target: Path, vpath: str, patterns: Sequence[_Pattern]
    ) -> list[tuple[int, int]]:
        try:
            lines = _decode(self._read(target, vpath).data, vpath).splitlines()
        except MemoryFileError:
            return []  # not text: nothing claw wrote, nothing a search could return
        return [
            (a, b)
            for a, b in entry_spans(lines)
            if any(p.matches(lines[a - 1 : b]) for p in patterns)
        ]

    def _drop_lines(self, vpath: str, spans: Sequence[tuple[int, int]]) -> None:
        """Remove ``spans`` from ``vpath`` (a checked rewrite; an outside change since
        the spans were found makes the purge start over on the new text)."""
        target = self.resolve(vpath)

        def attempt() -> None:
            seen = self._read(target, vpath)
            kept = _decode(seen.data, vpath).splitlines(keepends=True)
            drop = {i for a, b in spans for i in range(a - 1, b)}
            new = "".join(line for i, line in enumerate(kept) if i not in drop)
            self._commit_rewrite(target, vpath, seen, new.encode("utf-8", "surrogatepass"), None)

        self._retrying(vpath, attempt)

    def _scrub_journal(
        self,
        scrubbed: set[str],
        patterns: Sequence[_Pattern],
        by: Mapping[str, Any],
        paths: tuple[str, ...],
        entries: int,
    ) -> None:
        """Rewrite the journal without the purged text, then record the purge."""
        out = []
        for original in self.journal.records():
            record = dict(original)
            if record.get("op") == "forget":
                if record.get("id") in scrubbed:
                    record.update(text=None, before=[], after=[])
                for side in ("before", "after"):
                    context = record.get(side) or []
                    record[side] = [
                        "" if any(p.touches(line) for p in patterns) else line for line in context
                    ]
            out.append(record)
        out.append(
            {
                "id": new_id(),
                "op": "purge",
                "at": self.now(),
                "paths": list(paths),
                "entries": entries,
                "removals": sorted(scrubbed),
                "by": dict(by),
            }
        )
        self.journal.rewrite(out)

    def removals(self, *, limit: int = 50) -> list[MemoryRemoval]:
        """The most recent forgets (newest first) and what became of each."""
        records = live(self.journal.records())
        restored = {r.get("of") for r in records if r.get("op") == "restore"}
        purged = {rid for r in records if r.get("op") == "purge" for rid in r.get("removals", [])}
        out: list[MemoryRemoval] = []
        for r in reversed(records):
            if r.get("op") != "forget":
                continue
            status: RemovalStatus = "forgotten"
            if r["id"] in purged:
                status = "purged"
            elif r["id"] in restored:
                status = "restored"
            out.append(
                MemoryRemoval(
                    id=r["id"],
                    path=str(r.get("path")),
                    start_line=int(r.get("start", 0)),
                    end_line=int(r.get("end", 0)),
                    text=None if status == "purged" else r.get("text"),
                    at=float(r.get("at", 0.0)),
                    status=status,
                    by=_provenance(r.get("by")),
                    provenance=tuple(
                        p for p in map(_provenance, r.get("provenance") or []) if p is not None
                    ),
                )
            )
            if len(out) >= limit:
                break
        return out


def _provenance(wire: object) -> MemoryProvenance | None:
    """A journal record's provenance, or ``None`` (none recorded, or edited by hand)."""
    if not isinstance(wire, dict):
        return None
    try:
        return MemoryProvenance.from_wire(wire)
    except ClawError:
        return None


def provenance_map(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Entry hash -> who wrote it, from the journal's ``add`` and ``restore`` records."""
    writers: dict[str, Any] = {}
    for r in records:
        op = r.get("op")
        if op not in ("add", "restore"):
            continue
        hashes = r.get("entries") or []
        original = r.get("provenance") or []
        for i, h in enumerate(hashes):
            who = (
                original[i]
                if op == "restore" and i < len(original) and original[i]
                else r.get("by")
            )
            if isinstance(h, str) and isinstance(who, dict):
                writers[h] = who
    return writers


def _find_removal(records: Sequence[dict[str, Any]], removal_id: str) -> dict[str, Any]:
    if not isinstance(removal_id, str) or len(removal_id.strip()) < 6:
        raise RemovalNotFoundError(
            f"{str(removal_id)[:40]!r} is not a removal id (at least 6 of its hex digits)"
        )
    wanted = removal_id.strip().lower()
    found = [
        r for r in records if r.get("op") == "forget" and str(r.get("id", "")).startswith(wanted)
    ]
    if len({r["id"] for r in found}) > 1:
        raise RemovalNotFoundError(f"{wanted!r} names several removals; give more of its digits")
    if not found:
        raise RemovalNotFoundError(
            f"no removal {wanted!r} in this workspace's memory journal (claw memory forgotten "
            "lists them)"
        )
    return found[0]


def _purged(records: Sequence[dict[str, Any]], rid: str) -> bool:
    return any(r.get("op") == "purge" and rid in (r.get("removals") or []) for r in records)


def _context_at(lines: list[str], p: int, forget: dict[str, Any], width: int) -> bool:
    """Whether ``lines`` has the forget's context around a block of ``width`` lines at ``p``.

    The lines before the gap and the lines after it must both still be there. A side
    with no lines (the removal opened or closed the file) constrains nothing, since
    lines are often added at the end (or top) of a file since; a removal of the whole
    file goes back only into an empty one.
    """
    before = list(forget.get("before") or [])
    after = list(forget.get("after") or [])
    q = p + width
    if not before and not after:
        return len(lines) == width and p == 0
    if before and (p < len(before) or lines[p - len(before) : p] != before):
        return False
    return not after or lines[q : q + len(after)] == after


def _gap(lines: list[str], forget: dict[str, Any], file_sha: str) -> int | None:
    """Where (0-based line index) a forget's lines go back, or ``None`` when ambiguous."""
    start = int(forget["start"])
    if file_sha == forget.get("fileAfter") and start - 1 <= len(lines):
        return start - 1
    found = [p for p in range(len(lines) + 1) if _context_at(lines, p, forget, 0)]
    return found[0] if len(found) == 1 else None


def _present(lines: list[str], forget: dict[str, Any], gone: list[str]) -> int | None:
    """Where the forget's lines already stand back in place (restored by hand), if they do."""
    n = len(gone)
    for p in range(len(lines) - n + 1):
        if lines[p : p + n] == gone and _context_at(lines, p, forget, n):
            return p
    return None


def live(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records whose change happened (those a ``void`` names are left out)."""
    void = {r.get("of") for r in records if r.get("op") == "void"}
    return [r for r in records if r.get("op") != "void" and r.get("id") not in void]


def _excerpt(lines: Sequence[str]) -> str:
    shown = " / ".join(line.strip() for line in lines if line.strip())
    return repr(shown[:160] + ("..." if len(shown) > 160 else ""))


def _stale_message(vpath: str, lines: list[str], a: int, b: int, found: int) -> str:
    if b > len(lines):
        now = f"the file has {len(lines)} line(s) now"
    else:
        now = f"they now read {_excerpt(lines[a - 1 : b])}"
    where = "" if found == 0 else f" (the cited lines appear {found} times now)"
    return (
        f"{vpath} lines {a}-{b} changed since they were cited: {now}{where}; nothing was "
        "removed. Search again for a current reference"
    )


def _scope_message(
    vpath: str, lines: list[str], a: int, b: int, spans: Sequence[tuple[int, int]]
) -> str:
    shown = "; ".join(f"L{x}-L{y} {_excerpt(lines[x - 1 : y])}" for x, y in spans[:6])
    more = f"; and {len(spans) - 6} more" if len(spans) > 6 else ""
    return (
        f"{vpath}#L{a}-L{b} covers {len(spans)} entries ({shown}{more}); nothing was removed. "
        "Cite the one entry to forget (its own lines), or ask for the whole range to be "
        f"removed (all {b - a + 1} lines)"
    )
