"""Many processes, one state directory: real processes, not threads pretending."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

import claw
from claw._demo import copy_sample_workspace
from claw.context import CommitTurnParams
from claw.turns import TurnStatus
from claw_testing import ReferenceContextEngine, ScriptedModel, harness_config

from ..._processes import reap

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[3]
CHILD = "tests.claw.multiprocess._child"


@contextmanager
def child(*args: str | Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", CHILD, *map(str, args)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        reap(proc)


def expect(proc: subprocess.Popen[str], prefix: str) -> str:
    """The child's next line, which must start with ``prefix`` (``CHANGED`` reports of
    the holder's mirror are skipped unless they are what is expected)."""
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            assert proc.stderr is not None
            raise AssertionError(f"child exited before {prefix!r}: {proc.stderr.read()[-3000:]}")
        if line.startswith("CHANGED ") and prefix != "CHANGED":
            continue
        assert line.startswith(prefix), f"expected {prefix!r}, the child said {line!r}"
        return line.rstrip("\n")


def send(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def _config(state: Path, **kw: object) -> claw.HostConfig:
    return harness_config(state.parent, state, **kw)  # type: ignore[arg-type]


async def _create(state: Path, key: str = "dm:alice") -> None:
    async with claw.open_host(_config(state)) as host:
        await host.sessions.create(key, agent_id="main", chat_type="direct")


async def _reset(state: Path, key: str = "dm:alice") -> None:
    async with claw.open_host(_config(state)) as host:
        await host.sessions.reset(key)


def test_processes_opening_a_fresh_state_dir_at_once_all_succeed(tmp_path: Path) -> None:
    """Schema creation is raced by four processes; each opens, writes, and all see it."""
    state, go = tmp_path / "state", tmp_path / "go"
    with (
        child("open-race", state, "1", go) as a,
        child("open-race", state, "2", go) as b,
        child("open-race", state, "3", go) as c,
        child("open-race", state, "4", go) as d,
    ):
        go.touch()
        for proc in (a, b, c, d):
            expect(proc, "OK")
            assert proc.wait() == 0

    async def check() -> None:
        async with claw.open_host(_config(state)) as host:
            keys = [row.session_key for row in await host.sessions.list()]
            assert keys == ["dm:1", "dm:2", "dm:3", "dm:4"]

    trio.run(check)


def test_a_reset_elsewhere_is_refused_at_release_even_when_the_watcher_is_off(
    tmp_path: Path,
) -> None:
    """Process B's mirror never hears of A's reset; its next search still fails closed."""
    state = tmp_path / "state"
    trio.run(_create, state)
    with child("holder", state, "deaf") as b:
        expect(b, "RUN")
        send(b, "search")
        assert expect(b, "HITS") == "HITS 1"
        trio.run(_reset, state)  # process A: this test process
        send(b, "search")
        line = expect(b, "STALE")
        assert "memory audience is no longer current" in line
        send(b, "search")  # and it stays revoked
        expect(b, "STALE")


def test_a_reset_elsewhere_stops_an_agent_tools_search_at_release(tmp_path: Path) -> None:
    """The tool path gets the guard's release check too: B's turn is in its model call
    when A resets the session; the memory_search tool B then runs releases nothing,
    although B's mirror (watcher off) still shows the old incarnation."""
    state = tmp_path / "state"
    trio.run(_create, state)
    with child("tool-turn", state, "deaf") as b:
        expect(b, "READY")
        send(b, "turn")
        expect(b, "IN_MODEL")
        send(b, "go")
        found = json.loads(expect(b, "TOOL").removeprefix("TOOL "))
        assert "alice likes tea" in found
        send(b, "turn")
        expect(b, "IN_MODEL")
        trio.run(_reset, state)  # process A: this test process
        send(b, "go")
        refused = json.loads(expect(b, "TOOL").removeprefix("TOOL "))
        assert "tea" not in refused
        assert "memory audience is no longer current" in refused


def test_a_reset_elsewhere_of_a_recalled_conversation_is_refused_at_release(
    tmp_path: Path,
) -> None:
    """B's run holds a recall pass naming grp:1; A resets grp:1. B's audience (dm:alice)
    is unchanged and its mirror never hears of the reset: the release check still
    reads the pass's conversations and fails closed."""
    state = tmp_path / "state"
    trio.run(_create, state)

    async def create_group() -> None:
        async with claw.open_host(_config(state)) as host:
            await host.sessions.create("grp:1", agent_id="main", chat_type="group")

    trio.run(create_group)
    with child("holder", state, "deaf", "recall") as b:
        expect(b, "RUN")
        send(b, "search")
        assert expect(b, "HITS") == "HITS 1"
        trio.run(_reset, state, "grp:1")
        send(b, "search")
        line = expect(b, "STALE")
        assert "conversation recall pass is no longer current" in line
        send(b, "search")
        expect(b, "STALE")


def test_a_reset_elsewhere_revokes_the_audience_through_the_watcher(tmp_path: Path) -> None:
    state = tmp_path / "state"
    trio.run(_create, state)
    with child("holder", state) as b:
        expect(b, "RUN")
        trio.run(_reset, state)
        # Without any call from B, its watcher brings the reset into the mirror.
        assert expect(b, "CHANGED") == "CHANGED dm:alice"
        send(b, "search")
        expect(b, "STALE")


def test_a_killed_processs_turn_is_closed_by_another_and_the_session_goes_on(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    trio.run(_create, state)

    async def while_alive_then_after(hanging: subprocess.Popen[str]) -> None:
        async with claw.open_host(_config(state)) as host:
            (turn,) = await host.transcripts.turns()
            # Opening beside a live process leaves its turn in flight alone.
            assert turn.open
            assert await host.turns.close_orphaned_turns() == 0
            hanging.send_signal(signal.SIGKILL)
            assert await trio.to_thread.run_sync(hanging.wait) == -signal.SIGKILL
            host.models.register_provider("scripted", lambda name: ScriptedModel(["fine"]))
            # The next turn of the session closes the dead process's turn, then runs.
            result = await host.run_turn(
                "dm:alice", claw.UserMessage("still there?"), sender_is_owner=True
            )
            assert result.reply.text == "fine"
            dead, done = await host.transcripts.turns()
            assert dead.turn_id == turn.turn_id
            assert dead.status is TurnStatus.ABORTED
            assert done.status is not TurnStatus.ABORTED and not done.open

    with child("hang-turn", state) as hanging:
        expect(hanging, "IN_MODEL")
        trio.run(while_alive_then_after, hanging)


def test_a_turn_admitted_by_two_processes_at_once_is_recorded_once(tmp_path: Path) -> None:
    state, go = tmp_path / "state", tmp_path / "go"
    trio.run(_create, state)
    with (
        child("admit", state, go, "turn-1", "adv-1") as a,
        child("admit", state, go, "turn-1", "adv-1") as b,
    ):
        go.touch()
        assert expect(a, "OK") == expect(b, "OK") == "OK turn-1"
        assert a.wait() == 0 and b.wait() == 0

    async def check() -> None:
        async with claw.open_host(_config(state)) as host:
            (turn,) = await host.transcripts.turns()
            assert turn.advancement_key == "adv-1"
            assert len(await host.transcripts.read_entries(turn.session_id)) == 1

    trio.run(check)


def test_two_processes_retrying_one_pending_commit_advance_the_engine_once(
    tmp_path: Path,
) -> None:
    state, go, engine_db = tmp_path / "state", tmp_path / "go", tmp_path / "engine.sqlite3"
    trio.run(_pending_commit, state, engine_db)
    with child("commit", state, go, engine_db) as a, child("commit", state, go, engine_db) as b:
        go.touch()
        expect(a, "OK")
        expect(b, "OK")
        assert a.wait() == 0 and b.wait() == 0
    engine = ReferenceContextEngine(engine_db)
    try:
        assert len(engine.advancements()) == 1
    finally:
        engine.close()

    async def check() -> None:
        async with claw.open_host(_config(state)) as host:
            (turn,) = await host.transcripts.turns()
            assert turn.status is TurnStatus.COMMITTED

    trio.run(check)


async def _pending_commit(state: Path, engine_db: Path) -> None:
    """A turn that reached its terminal entry, whose commit failed: queued for retry."""
    def refuse(params: CommitTurnParams) -> None:
        raise RuntimeError("the engine is down")

    engine = ReferenceContextEngine(engine_db, before_commit=refuse)
    plugin = claw.Plugin(
        id="reference-plugin",
        register=lambda api: api.register_context_engine("reference", lambda ctx: engine),
    )
    config = _config(state, context_engine="reference")
    async with claw.open_host(config, plugins=[plugin]) as host:
        host.models.register_provider("scripted", lambda name: ScriptedModel(["answer"]))
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        await host.run_turn("dm:alice", claw.UserMessage("q"), sender_is_owner=True)
        (turn,) = await host.transcripts.pending_commits()
        assert turn.needs_commit
    engine.close()


# -- the command line beside a running server ---------------------------------------


def _claw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "claw", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_searches_run_beside_claw_serve_on_one_workspace(tmp_path: Path) -> None:
    """Was: "state directory ... is locked by another claw host"; three at once, too."""
    workspace = copy_sample_workspace(tmp_path / "ws")
    serve = subprocess.Popen(
        [sys.executable, "-m", "claw", "serve", "--workspace", str(workspace), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CLAW_GATEWAY_TOKEN": "serve-token-1234"},
    )
    try:
        assert serve.stdout is not None
        first = serve.stdout.readline().rstrip("\n")
        assert re.fullmatch(r"claw gateway listening on ws://127\.0\.0\.1:\d+", first), first
        search = [
            sys.executable, "-m", "claw", "memory", "search", "green tea", "--json",
            "--workspace", str(workspace),
        ]  # fmt: skip
        searches = [
            subprocess.Popen(search, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(3)
        ]
        try:
            for proc in searches:
                out, err = proc.communicate(timeout=120)
                assert proc.returncode == 0, err
                assert json.loads(out)["providerId"] == "memory-core"
        finally:
            for proc in searches:
                reap(proc)
        assert serve.poll() is None, "the server keeps serving"
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=30) == 0
    finally:
        reap(serve)
