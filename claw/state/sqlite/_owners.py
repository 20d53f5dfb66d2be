"""Process owners of a state directory: an id per open host, and a liveness test others can make.

Any number of processes open one state directory. Each open host is an *owner*: it
takes a fresh id and holds an exclusive ``flock`` on ``<state_dir>/owners/<id>.lock``
for as long as it is open. The kernel drops the lock when the process exits, however
it exits (``SIGKILL`` included), so another process tells a live owner from a dead
one by trying the lock: it cannot take a live owner's, and it can take a dead one's.
No pid is ever read or guessed (pids are reused).

The ledger records the owner of every turn it admits; a turn in flight is closed by
another process only once :func:`owner_alive` says its owner is dead.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import uuid
from pathlib import Path
from typing import Final

import attrs

OWNERS_DIR: Final[str] = "owners"
_OWNER_ID: Final[re.Pattern[str]] = re.compile(r"^[0-9a-f]{32}$")


def _lock_path(state_dir: Path, owner_id: str) -> Path:
    return state_dir / OWNERS_DIR / f"{owner_id}.lock"


@attrs.define(eq=False)
class OwnerLease:
    """This process's owner id and the lock that proves it is alive; see the module docstring."""

    owner_id: str
    _state_dir: Path
    _fd: int | None

    @classmethod
    def acquire(cls, state_dir: Path) -> OwnerLease:
        """Take a fresh owner id and hold its liveness lock (never waits: the file is new)."""
        owner_id = uuid.uuid4().hex
        path = _lock_path(state_dir, owner_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Lock under a name nobody tests, then rename: a file with an owner's name is
        # never seen unlocked while its owner lives (a sweep could take it otherwise).
        staging = path.with_name(f".{owner_id}.new")
        fd = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # For a human looking at the directory; nothing reads it back.
            os.write(fd, f"{os.getpid()}\n".encode())
            staging.rename(path)
        except BaseException:
            os.close(fd)
            staging.unlink(missing_ok=True)
            raise
        _sweep(path.parent, owner_id)
        return cls(owner_id, state_dir, fd)

    def is_alive(self, owner_id: str | None) -> bool:
        """Whether the owner ``owner_id`` of this state directory is alive (this one is)."""
        if owner_id == self.owner_id:
            return self._fd is not None
        return owner_alive(self._state_dir, owner_id)

    def release(self) -> None:
        """Give up the id: remove the lock file (still holding it), then drop the lock."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            _lock_path(self._state_dir, self.owner_id).unlink()
        os.close(fd)


def _sweep(owners: Path, keep: str) -> None:
    """Remove the lock files of dead owners (a killed process cannot remove its own)."""
    with contextlib.suppress(OSError):
        for entry in owners.iterdir():
            # Only named lock files: a ``.new`` one may be an owner between its create
            # and its lock (one left by a kill in that instant stays; it is harmless).
            if entry.suffix == ".lock" and entry.stem != keep:
                _held(entry)


def owner_alive(state_dir: Path, owner_id: str | None) -> bool:
    """Whether the process that owns ``owner_id`` still holds its liveness lock.

    An id that is not an owner id (``None`` for a turn recorded before owners existed,
    or anything malformed) has no live owner. A dead owner's lock file is removed.
    """
    if owner_id is None or not _OWNER_ID.fullmatch(owner_id):
        return False
    return _held(_lock_path(state_dir, owner_id))


def _held(path: Path) -> bool:
    """Whether a live process holds the lock on ``path``; removes the file if none does."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        # We hold a dead owner's lock: nobody else can be using the file; remove it.
        with contextlib.suppress(OSError):
            path.unlink()
        return False
    finally:
        os.close(fd)
