"""Why a local write failed, in words: a read-only directory, a full disk, a missing folder.

SQLite reports a read-only index directory as "unable to open database file" and a full
disk as "database or disk is full" (or, at a commit, a bare ``sqlite3.OperationalError``);
tantivy and plain file writes report an ``OSError`` whose errno says it. Neither names
the directory, nor says what to do. :func:`storage_problem` looks at the error and, when
the error alone does not say (SQLite's ``CANTOPEN`` and ``IOERR``), at the directory
itself (``statvfs``: a read-only mount, no free blocks; ``access``: no write permission),
and returns one phrase naming what is wrong and where. :func:`storage_error` turns that
into a :class:`~claw.StorageReadOnlyError` or :class:`~claw.StorageFullError`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from ._errors import ClawError, StorageError, StorageFullError, StorageReadOnlyError

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_READ_ONLY_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def _existing_directory(path: Path) -> Path:
    """``path`` if it is a directory, else its nearest existing parent."""
    current = path
    while not current.is_dir() and current != current.parent:
        current = current.parent
    return current


def _probe(directory: Path) -> type[StorageError] | None:
    """What the directory itself says: a read-only mount, no space, no write permission."""
    try:
        stats = os.statvfs(directory)
    except OSError:
        return None
    if stats.f_flag & os.ST_RDONLY:
        return StorageReadOnlyError
    if stats.f_bavail == 0 or (stats.f_favail == 0 and stats.f_files > 0):
        return StorageFullError
    if not os.access(directory, os.W_OK):
        return StorageReadOnlyError
    return None


def _kind(exc: BaseException, directory: Path) -> type[StorageError] | None:
    if isinstance(exc, StorageError):
        return type(exc)
    if isinstance(exc, sqlite3.Error):
        name = getattr(exc, "sqlite_errorname", "") or ""
        if name == "SQLITE_FULL" or "disk is full" in str(exc):
            return StorageFullError
        if name.startswith("SQLITE_READONLY") or "readonly database" in str(exc):
            return StorageReadOnlyError
        if name.startswith(("SQLITE_CANTOPEN", "SQLITE_IOERR")) or any(
            words in str(exc) for words in ("unable to open", "I/O error")
        ):
            return _probe(directory)
        return None
    if isinstance(exc, OSError):
        if exc.errno in _FULL_ERRNOS:
            return StorageFullError
        if exc.errno in _READ_ONLY_ERRNOS:
            return _probe(directory) or StorageReadOnlyError
        if exc.errno in (errno.EIO, None):
            return _probe(directory)
    return None


def _phrase(kind: type[StorageError], directory: Path) -> str:
    if kind is StorageFullError:
        return f"the disk holding {directory} is full (no space left); free space there"
    try:
        read_only_mount = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        read_only_mount = False
    if read_only_mount:
        return f"{directory} is on a read-only file system; it must be writable"
    return f"{directory} is not writable (permission denied); it must be writable by this user"


def storage_problem(path: str | os.PathLike[str], exc: BaseException) -> str | None:
    """What ``exc`` (raised writing or opening ``path``) means, naming the directory:
    ``"/srv/claw/.claw is on a read-only file system; it must be writable"``, or ``None``
    when it is not a read-only or full-disk failure."""
    directory = _existing_directory(Path(path))
    kind = _kind(exc, directory)
    return None if kind is None else _phrase(kind, directory)


def storage_error(
    path: str | os.PathLike[str], exc: BaseException, *, what: str
) -> StorageError | None:
    """``exc`` as a :class:`~claw.StorageReadOnlyError` or :class:`~claw.StorageFullError`
    (``what`` names the store: ``"the session database"``), or ``None``."""
    directory = _existing_directory(Path(path))
    kind = _kind(exc, directory)
    if kind is None:
        return None
    return kind(f"{what} {path}: {_phrase(kind, directory)} ({exc})", path=str(path))


@contextlib.contextmanager
def naming_storage_failures(path: str | os.PathLike[str], *, what: str) -> Iterator[None]:
    """Raise a read-only or full-disk failure inside the block (a ``sqlite3`` error or an
    ``OSError``, raw or as the cause of a claw error) as :func:`storage_error`'s
    :class:`~claw.StorageError` naming ``what`` at ``path``; other errors pass unchanged."""
    try:
        yield
    except StorageError:
        raise
    except (sqlite3.Error, OSError) as exc:
        cause: BaseException = exc
        if isinstance(exc, ClawError) and isinstance(exc.__cause__, sqlite3.Error | OSError):
            cause = exc.__cause__
        error = storage_error(path, cause, what=what)
        if error is None:
            raise
        raise error from cause


def enter_wal(conn: sqlite3.Connection) -> str:
    """Switch ``conn``'s database to WAL and return the journal mode SQLite reports.

    Two processes opening one new database at once both ask for WAL; each holds a
    shared lock and wants the exclusive one, and SQLite answers one of them
    ``SQLITE_BUSY`` at once, without calling the busy handler (waiting could deadlock),
    so ``busy_timeout`` does not cover it. That is not a failure of the store: the
    other process is switching the same file. Ask again, with a short growing pause,
    until the switch is seen or the connection's own ``busy_timeout`` has passed (then
    the error is raised as SQLite gave it), so a store states its patience once. Runs
    in a worker thread, so the pause is a plain sleep.
    """
    (busy_ms,) = conn.execute("PRAGMA busy_timeout").fetchone()
    deadline = time.monotonic() + busy_ms / 1000
    pause = 0.001
    while True:
        try:
            row = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as exc:
            code = getattr(exc, "sqlite_errorcode", None)
            busy = code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
            if not busy or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
            continue
        return str(row[0]).lower()
