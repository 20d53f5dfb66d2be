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

from claw.state.postgres._session_locks import session_locks_application_name
from claw.state.postgres._stores import owner_application_name
from tests._processes import reap
from tests._session_turns import check_once_per_cycle, check_serial

ROOT = Path(__file__).parent.parent.parent
SID = "0b5e2f7c-1111-4a2b-9c3d-00000000abcd"


class Host:
    """One child host; :meth:`ask` sends a command and returns its one-line answer."""

    def __init__(self, dsn: str, base: Path, name: str, log: Path | None = None) -> None:
        workspace = base / name / "ws"
        workspace.mkdir(parents=True)
        extra = [] if log is None else [str(log)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.postgres.host_child", dsn, str(workspace),
             str(base / name / "state"), *extra],
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

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()

    def ask(self, **cmd: Any) -> Any:
        self.send(**cmd)
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


def test_a_reset_on_a_of_a_conversation_a_recall_pass_on_b_names_is_refused_at_release(
    hosts: tuple[Host, Host],
) -> None:
    """B's audience (dm:alice) is unchanged; the pass's conversation is read at release."""
    a, b = hosts
    a.ask(op="create", key="dm:alice")
    a.ask(op="create", key="grp:1")
    b.ask(op="wait_known", key="grp:1")
    assert b.ask(op="hold", key="dm:alice", recall=["grp:1"]) == {"held": True}
    assert b.ask(op="search") == {"hits": ["o"]}
    a.ask(op="reset", key="grp:1")
    answer = b.ask(op="search")
    assert answer.get("error") == "StaleCapabilityError", answer
    assert "conversation recall pass" in answer["message"]


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


# -- one turn of a session at a time, across hosts ---------------------------------


@pytest.fixture
def turn_hosts(postgres_dsn: str, tmp_path: Path) -> Iterator[tuple[Host, Host, Path]]:
    """Two hosts whose model logs its calls to one file and whose sessions flush."""
    log = tmp_path / "model.log"
    started: list[Host] = []
    try:
        started.append(Host(postgres_dsn, tmp_path, "a", log))
        started.append(Host(postgres_dsn, tmp_path, "b", log))
        yield started[0], started[1], log
    finally:
        for host in started:
            host.close()


def _rows(dsn: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, args).fetchall()


def test_two_hosts_running_turns_of_one_session_take_turns_and_flush_each_cycle_once(
    turn_hosts: tuple[Host, Host, Path], postgres_dsn: str
) -> None:
    a, b, log = turn_hosts
    created = a.ask(op="create", key="dm:alice")
    b.ask(op="wait_known", key="dm:alice")
    a.send(op="turns", key="dm:alice", count=5)
    b.send(op="turns", key="dm:alice", count=5)
    reports = [a._read(), b._read()]
    # The model ran turns, flushes and summaries, never two at once ...
    assert check_serial(log) >= 10
    sid = created["session_id"]
    # ... every turn's entries are one unbroken run of the transcript ...
    turns = _rows(
        postgres_dsn,
        "SELECT turn_id, first_seq, terminal_seq FROM claw_turn_ledger WHERE session_id = %s",
        sid,
    )
    assert len(turns) == 10
    owner = dict(
        _rows(
            postgres_dsn,
            "SELECT seq, turn_id FROM claw_transcript_entries WHERE session_id = %s",
            sid,
        )
    )
    for turn_id, first, terminal in turns:
        assert {owner[seq] for seq in range(first, terminal + 1)} == {turn_id}
    # ... and each compaction cycle flushed exactly once, on one host or the other.
    ((compactions,),) = _rows(
        postgres_dsn,
        "SELECT count(*) FROM claw_transcript_entries WHERE session_id = %s "
        "AND kind = 'compaction'",
        sid,
    )
    assert compactions >= 2
    check_once_per_cycle(
        reports, session_id=sid, revision=created["revision"], compactions=compactions
    )


def test_a_cycle_flushed_on_one_host_is_not_flushed_again_on_another(
    turn_hosts: tuple[Host, Host, Path],
) -> None:
    a, b, _ = turn_hosts
    created = a.ask(op="create", key="dm:alice")
    b.ask(op="wait_known", key="dm:alice")
    assert b.ask(op="turns", key="dm:alice", count=1) == {"flushed": [], "compactions": 0}
    first = a.ask(op="turns", key="dm:alice", count=1)  # cycle 0 flushes
    assert len(first["flushed"]) == 1 and first["compactions"] == 0
    second = b.ask(op="turns", key="dm:alice", count=1)  # and compacts, without a flush
    assert second == {"flushed": [], "compactions": 1}
    check_once_per_cycle(
        [first, second],
        session_id=created["session_id"],
        revision=created["revision"],
        compactions=1,
    )


def test_a_host_killed_holding_a_session_does_not_block_its_next_turn_on_another(
    turn_hosts: tuple[Host, Host, Path], postgres_dsn: str
) -> None:
    a, b, _ = turn_hosts
    a.ask(op="create", key="dm:alice")
    b.ask(op="wait_known", key="dm:alice")
    assert a.ask(op="hang_turn", key="dm:alice") == {"in_model": True}
    # While A lives, it holds the session: B's turn waits, admitting nothing, until the
    # test gives up on it (the wait is cancelled and leaves nothing held).
    assert b.ask(op="turn_within", key="dm:alice", seconds=1.0) == {"cancelled": True, "turns": 1}
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    # A is dead to the other hosts once the server has ended its backends.
    _wait_until_gone(postgres_dsn, session_locks_application_name(a.owner_id))
    _wait_until_gone(postgres_dsn, owner_application_name(a.owner_id))
    assert b.ask(op="turns", key="dm:alice", count=1) == {"flushed": [], "compactions": 0}
    statuses = _rows(postgres_dsn, "SELECT close_status FROM claw_turn_ledger ORDER BY position")
    assert statuses == [("aborted",), (None,)]
