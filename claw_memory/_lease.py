"""The writer lease of an index directory: an OS lock one process holds while it writes.

Any number of processes open an index; the one that syncs or forgets takes the lease
(``flock`` on ``<index_dir>/LOCK``) for the duration of that write and releases it
when the write is published. The kernel drops a ``flock`` when its holder exits, even
by ``SIGKILL``, so a writer that dies mid-publication never keeps the others out: the
next process to write takes the lease over and completes what was left (see
:mod:`claw_memory._published`). Holding the lease only while writing means nobody has
to ask a long-lived writer to sync: a process that notices changed sources takes the
lease itself, or, when another process holds it, that process is syncing right now.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import attrs
import trio

from ._errors import IndexBusyError

LEASE_FILE = "LOCK"
# How long a waiting writer sleeps between attempts (it doubles up to the cap): the
# lease is held for one sync, so a short poll costs little and stays cancellable,
# which a blocking flock in a thread would not be.
_FIRST_WAIT = 0.005
_MAX_WAIT = 0.1
#: How long (seconds of real time) a writer waits for another process's write before it
#: gives up with :class:`~claw_memory.IndexBusyError`. A write holds the lease for one
#: sync, so only a hung process (or a very large first index) keeps it this long; a
#: request must fail then, retryably, rather than wait without bound. Real time, not
#: Trio's clock: the other side is another process, which a test's MockClock does not
#: move.
LEASE_WAIT_LIMIT = 60.0


@attrs.define(eq=False)
class WriterLease:
    """The lease file of one index directory; :meth:`try_acquire` / :meth:`release`.

    Not reentrant: the index serialises its own writers behind one ``trio.Lock`` and
    takes the lease inside it.
    """

    path: Path
    _fd: int | None = attrs.field(default=None, init=False)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lease if no process holds it; ``False`` (at once) if one does."""
        if self._fd is not None:
            raise RuntimeError(f"the writer lease {self.path} is already held by this index")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        # Who holds it, for a person looking at the directory (never read by claw).
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return True

    async def acquire(self) -> None:
        """Wait (cancellably, up to :data:`LEASE_WAIT_LIMIT`) until this process holds the lease.

        Raises :class:`~claw_memory.IndexBusyError` when another process holds it longer.
        """
        wait = _FIRST_WAIT
        limit = LEASE_WAIT_LIMIT
        deadline = time.monotonic() + limit
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                raise IndexBusyError(
                    f"another process has held the writer lease of {self.path.parent} for "
                    f"more than {limit:g} s; retry when its write has finished"
                )
            await trio.sleep(wait)
            wait = min(wait * 2, _MAX_WAIT)

    def release(self) -> None:
        """Give the lease up (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
