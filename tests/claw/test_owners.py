"""Owners of a state directory: liveness by a lock the kernel drops when a process dies."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from claw.state.sqlite._owners import OWNERS_DIR, OwnerLease, owner_alive

from .._processes import reap


def test_an_owner_is_alive_while_its_process_holds_the_lease_and_dead_once_killed(
    tmp_path: Path,
) -> None:
    code = textwrap.dedent(
        f"""
        import os, sys, time
        from pathlib import Path
        from claw.state.sqlite._owners import OwnerLease
        lease = OwnerLease.acquire(Path({str(tmp_path)!r}))
        os.write(1, (lease.owner_id + "\\n").encode())
        time.sleep(600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        owner_id = proc.stdout.readline().strip()
        assert owner_alive(tmp_path, owner_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not owner_alive(tmp_path, owner_id)
        assert not (tmp_path / OWNERS_DIR / f"{owner_id}.lock").exists(), "the file is removed"
    finally:
        reap(proc)


def test_ids_that_are_not_owner_ids_have_no_live_owner(tmp_path: Path) -> None:
    lease = OwnerLease.acquire(tmp_path)
    try:
        for bogus in (None, "", "../../etc/passwd", lease.owner_id.upper()):
            assert not owner_alive(tmp_path, bogus)
        assert lease.is_alive(lease.owner_id)
        assert owner_alive(tmp_path, lease.owner_id)  # another open file: the lock is held
    finally:
        lease.release()
    assert not owner_alive(tmp_path, lease.owner_id)
    assert not lease.is_alive(lease.owner_id)


def test_taking_a_lease_sweeps_the_files_dead_owners_left(tmp_path: Path) -> None:
    owners = tmp_path / OWNERS_DIR
    owners.mkdir()
    dead = owners / f"{'a' * 32}.lock"
    dead.write_text("12345\n")  # what a killed process leaves: a file nobody locks
    live = OwnerLease.acquire(tmp_path)
    try:
        assert not dead.exists()
        other = OwnerLease.acquire(tmp_path)
        try:
            assert sorted(p.name for p in owners.iterdir()) == sorted(
                [f"{live.owner_id}.lock", f"{other.owner_id}.lock"]
            )
        finally:
            other.release()
    finally:
        live.release()
    assert list(owners.iterdir()) == []
