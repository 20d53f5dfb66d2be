"""The SQLite backend's cross-process session lock: an ``flock`` on one file per session key.

``<state_dir>/session-locks/<digest>.lock``, held exclusively while a turn of that session
runs; the kernel drops it however its holder ends (``SIGKILL`` included). Tried, never
waited on, through :class:`~claw.state._session_locks.PolledSessionLocks`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
from pathlib import Path
from typing import Any, Final

import attrs

from ..._storage import naming_storage_failures
from ..._workers import WorkerPool
from .._session_locks import PolledSessionLocks

SESSION_LOCKS_DIR: Final[str] = "session-locks"


def lock_file(state_dir: Path, session_key: str) -> Path:
    """The lock file of ``session_key`` (named by a digest: keys may hold any character)."""
    digest = hashlib.sha256(f"claw-session-lock-v1\x1f{session_key}".encode()).hexdigest()
    return state_dir / SESSION_LOCKS_DIR / f"{digest[:32]}.lock"


@attrs.frozen
class SessionLockFiles:
    """The SQLite backend's cross-process session lock: ``flock`` on one file per key.

    The files are never removed: removing a lock file while another process has it open
    would let a third lock a new file of the same name beside the held one. One small
    empty file per session key is the cost.
    """

    state_dir: Path

    def try_acquire(self, session_key: str) -> int | None:
        """The locked file's descriptor, or ``None`` when another process holds it."""
        path = lock_file(self.state_dir, session_key)
        with naming_storage_failures(path.parent, what="the session lock directory"):
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except FileNotFoundError:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise
        return fd

    @staticmethod
    def release(fd: int) -> None:
        """Drop the lock (closing the descriptor drops it)."""
        with contextlib.suppress(OSError):
            os.close(fd)

    def locks(self, workers: WorkerPool) -> PolledSessionLocks[Any]:
        """The :class:`~claw.state.SessionLocks` of this state directory."""
        return PolledSessionLocks(workers, self.try_acquire, self.release)
