"""Two host processes sharing one PostgreSQL: revocation, one turn per key, a dead host.

Each host is a real process (``tests/postgres/host_child.py``) with its own workspace,
state directory, pool, mirror and LISTEN thread; only the database is shared.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from claw.postgres._stores import owner_application_name
from tests._processes import reap

ROOT = Path(__file__).parent.parent.parent
SID = "0b5e2f7c-1111-4a2b-9c3d-00000000abcd"


class Host:
    """One child host; :meth:`ask` sends a command and returns its one-line answer."""

    def __init__(self, dsn: str, base: Path, name: str) -> None:
        workspace = base / name / "ws"
        workspace.mkdir(parents=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.postgres.host_child", dsn, str(workspace),
             str(base / name / "state")],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self._buffer = b""
        self.owner_id = self._read()["ready"]

    def _read(self, guard: float = 120.0) -> Any:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], guard)
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""  # type: ignore[union-attr]
                raise AssertionError(f"host exited or hung (rc={self.proc.poll()}): {err[-3000:]}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def ask(self, **cmd: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(b'{"op": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                pass
        reap(self.proc)


@pytest.fixture
def hosts(postgres_dsn: str, tmp_path: Path) -> Iterator[tuple[Host, Host]]:
    started: list[Host] = []
    try:
        started.append(Host(postgres_dsn, tmp_path, "a"))
        started.append(Host(postgres_dsn, tmp_path, "b"))
        yield started[0], started[1]
    finally:
        for host in started:
            host.close()


def test_a_reset_on_a_revokes_an_audience_held_by_a_run_on_b_before_its_next_search(
    hosts: tuple[Host, Host],
) -> None:
    a, b = hosts
    a.ask(op="create", key="dm:alice")
    b.ask(op="wait_known", key="dm:alice")
    assert b.ask(op="hold", key="dm:alice") == {"held": True}
    assert b.ask(op="search") == {"hits": ["o"]}
    a.ask(op="reset", key="dm:alice")
    # No waiting for B to hear of it: B's very next provider call releases nothing.
    answer = b.ask(op="search")
    assert answer.get("error") == "StaleCapabilityError", answer


def test_a_reset_on_a_during_a_search_on_b_keeps_that_searchs_data(
    hosts: tuple[Host, Host],
) -> None:
    """The provider already has the request when the reset commits: its answer is withheld."""
    a, b = hosts
    a.ask(op="create", key="dm:alice")
    b.ask(op="wait_known", key="dm:alice")
    b.ask(op="hold", key="dm:alice")
    assert b.ask(op="search_gated") == {"entered": True}
    a.ask(op="reset", key="dm:alice")
    answer = b.ask(op="open_gate")
    assert answer.get("error") == "StaleCapabilityError", answer


def test_two_hosts_admitting_the_same_advancement_key_record_one_turn(
    hosts: tuple[Host, Host],
) -> None:
    a, b = hosts
    a.ask(op="create", key="dm:bob")
    first = a.ask(op="admit", key="dm:bob", session_id=SID, turn_id="t-1", advancement_key="k")
    again = b.ask(op="admit", key="dm:bob", session_id=SID, turn_id="t-1", advancement_key="k")
    assert first == again == {"turn_id": "t-1", "seq": 1, "status": "admitted"}


def _wait_until_gone(dsn: str, application_name: str) -> None:
    """Poll the server until no backend has ``application_name`` (a hang fails the guard)."""
    deadline = time.monotonic() + 60
    with psycopg.connect(dsn, autocommit=True) as conn:
        while conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchone() != (0,):
            assert time.monotonic() < deadline, f"{application_name!r} never went away"
            time.sleep(0.01)


def test_a_killed_mid_turn_b_closes_the_turn_and_the_session_goes_on(
    hosts: tuple[Host, Host], postgres_dsn: str
) -> None:
    dsn = postgres_dsn
    a, b = hosts
    a.ask(op="create", key="dm:carol")
    a.ask(op="admit", key="dm:carol", session_id=SID, turn_id="t-a", advancement_key="ka")
    # While A lives, its turn is in flight: B must not close it.
    assert b.ask(op="close_orphans") == {"closed": []}
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    # The server ends a dead client's backends (dropping its locks) a moment after the
    # process is gone; that moment, not the kill, is when A is dead to every host.
    _wait_until_gone(dsn, owner_application_name(a.owner_id))
    assert b.ask(op="close_orphans") == {"closed": ["t-a"]}
    assert b.ask(op="close_orphans") == {"closed": []}
    nxt = b.ask(op="admit", key="dm:carol", session_id=SID, turn_id="t-b", advancement_key="kb")
    assert nxt == {"turn_id": "t-b", "seq": 2, "status": "admitted"}
    assert b.ask(op="append_terminal", key="dm:carol", session_id=SID, turn_id="t-b") == {
        "seq": 3
    }
