"""The writer lease: taken at once when free, waited for within a bound when held."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

import claw_memory._lease
from claw_memory import IndexBusyError
from claw_memory._lease import WriterLease


async def test_a_lease_held_elsewhere_past_the_wait_limit_raises_busy_naming_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hung holder must not hang every writer behind it: the wait is bounded."""
    monkeypatch.setattr(claw_memory._lease, "LEASE_WAIT_LIMIT", 0.05)
    fd = os.open(tmp_path / "LOCK", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        lease = WriterLease(tmp_path / "LOCK")
        with pytest.raises(IndexBusyError, match=str(tmp_path)):
            await lease.acquire()
        assert not lease.held
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    lease = WriterLease(tmp_path / "LOCK")
    await lease.acquire()
    assert lease.held
    lease.release()
