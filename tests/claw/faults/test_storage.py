"""Storage failures with real mechanisms: read-only directories and full disks.

A directory is made read-only by a read-only bind mount (as root; ``chmod`` otherwise),
and a disk is full because a small ``tmpfs`` is (``tests/_storage.py``, root only), or,
for any user, because SQLite itself refuses to grow the database (``PRAGMA
max_page_count``: SQLite's own ``SQLITE_FULL``, the error a full disk gives it). Each
failure must be a claw error that says what is wrong and where, and nothing acknowledged
before it may be lost.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import attrs
import pytest

import claw
import claw_memory
from claw.memory import MemorySearchRequest
from claw.models import AssistantMessage, UserMessage
from claw.turns import TurnStatus
from claw_testing import ScriptedModel

from ..._storage import grow, read_only, small_disk


def _config(tmp_path: Path) -> claw.HostConfig:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "MEMORY.md").write_text("- The deploy window is Friday.\n", encoding="utf-8")
    return claw.HostConfig(
        workspace_dir=workspace,
        state_dir=tmp_path / "state",
        plugins=claw.PluginsConfig(discover=False, slots=claw.SlotsConfig(memory="memory-core")),
        workers=claw.WorkersConfig(inline=True),
    )


async def _search(config: claw.HostConfig) -> int:
    async with claw.open_host(config, plugins=[claw_memory.plugin]) as host:
        async with host.open_scope("test") as scope:
            caller = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
            async with host.memory.open(caller) as handle:
                result = await handle.search(MemorySearchRequest(query="deploy window"))
    return len(result.hits)


@pytest.mark.parametrize("when", ["before the first index", "after an index exists"])
async def test_a_read_only_index_directory_is_named_as_read_only(tmp_path: Path, when: str) -> None:
    config = _config(tmp_path)
    memory_dir = tmp_path / "state" / "memory"
    if when == "after an index exists":
        assert await _search(config) == 1
        # A change, so that the next search must write.
        (config.workspace_dir / "MEMORY.md").write_text("- The deploy is Monday.\n", "utf-8")
        blocked = memory_dir / "main"
    else:
        blocked = memory_dir
    with read_only(blocked), pytest.raises(claw.ProviderError) as info:
        await _search(config)
    message = str(info.value)
    assert str(blocked) in message
    assert "read-only file system" in message or "not writable" in message
    assert "unable to open database file" not in message.split("(SQLite:", maxsplit=1)[0]
    # Writable again, it recovers.
    assert await _search(config) >= 1


TURN_TEXT = "x" * 3000


async def _turns_until_full(host: claw.Host, acknowledged: list[str], most: int) -> str:
    """Run turns on ``dm:alice`` until one fails with StorageFullError (its message);
    the text of each turn that returned is appended to ``acknowledged``."""
    with pytest.raises(claw.StorageFullError) as info:
        for i in range(most):
            text = f"turn {i} {TURN_TEXT}"
            await host.run_turn("dm:alice", UserMessage(text, sender="alice"), sender_is_owner=True)
            acknowledged.append(text)
    return str(info.value)


@pytest.mark.slow
async def test_a_full_state_directory_is_named_and_loses_no_acknowledged_turn(
    tmp_path: Path,
) -> None:
    """Turns until the state directory's disk (a 1 MiB tmpfs) is full: the failing turn is a
    StorageFullError naming the database and the directory; every turn acknowledged before
    it is there, once, after the disk has room again, and the session goes on."""
    with small_disk(tmp_path / "state", "1m") as state:
        config = attrs.evolve(
            _config(tmp_path),
            state_dir=state,
            agents=claw.AgentsConfig(defaults=claw.AgentDefaultsConfig(model="scripted/main")),
            plugins=claw.PluginsConfig(discover=False),
        )
        model = ScriptedModel(["noted"] * 2000)
        acknowledged: list[str] = []
        async with claw.open_host(config) as host:
            host.models.register_provider("scripted", lambda name: model)
            await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
            message = await _turns_until_full(host, acknowledged, 2000)
        assert str(state) in message and "is full" in message
        assert "database" in message and not message.startswith("database or disk is full")
        assert len(acknowledged) > 5
        grow(state, "16m")
        async with claw.open_host(config) as host:
            host.models.register_provider("scripted", lambda name: model)
            row = host.sessions.get_nowait("dm:alice")
            assert row is not None
            messages = await host.transcripts.visible_messages(row.session_id)
            said = [m.text for m in messages if isinstance(m, UserMessage)]
            for text in acknowledged:
                assert said.count(text) == 1, text[:12]
            turns = await host.transcripts.turns(row.session_id)
            finished = [t for t in turns if t.status in (TurnStatus.TERMINAL, TurnStatus.COMMITTED)]
            assert len(finished) == len(acknowledged)
            replies = [m for m in messages if isinstance(m, AssistantMessage)]
            assert len(replies) >= len(acknowledged)
            await host.run_turn(
                "dm:alice", UserMessage("after", sender="alice"), sender_is_owner=True
            )
        print(
            f"\nfull disk: {len(acknowledged)} turns acknowledged before the disk filled, "
            f"all {len(acknowledged)} there after it had room; failure: {message[:120]}"
        )


def _stop_growing(conn: sqlite3.Connection, room: int) -> int:
    """Let the database ``conn`` holds grow by ``room`` pages and no more: a write that
    needs another fails inside SQLite with ``SQLITE_FULL`` ("database or disk is full")."""
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0]) + room
    assert int(conn.execute(f"PRAGMA max_page_count = {pages}").fetchone()[0]) == pages
    return pages


def _grow_again(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA max_page_count = 4294967294")


def _turns_config(tmp_path: Path) -> claw.HostConfig:
    return attrs.evolve(
        _config(tmp_path),
        agents=claw.AgentsConfig(defaults=claw.AgentDefaultsConfig(model="scripted/main")),
        plugins=claw.PluginsConfig(discover=False),
    )


async def _said(host: claw.Host, key: str) -> list[str]:
    row = host.sessions.get_nowait(key)
    assert row is not None
    messages = await host.transcripts.visible_messages(row.session_id)
    return [m.text for m in messages if isinstance(m, UserMessage)]


async def test_a_full_transcript_database_loses_no_acknowledged_turn(tmp_path: Path) -> None:
    """Any user, no mount: the transcript database may not grow (SQLite answers
    ``SQLITE_FULL`` as it does on a full disk). Turns run until one fails: it is a
    StorageFullError naming the database, every turn acknowledged before it is there
    once (before and after the host reopens), and the session goes on once there is
    room again."""
    config = _turns_config(tmp_path)
    model = ScriptedModel(["noted"] * 500)
    acknowledged: list[str] = []
    async with claw.open_host(config) as host:
        host.models.register_provider("scripted", lambda name: model)
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        for i in range(3):
            text = f"before {i} {TURN_TEXT}"
            await host.run_turn("dm:alice", UserMessage(text, sender="alice"), sender_is_owner=True)
            acknowledged.append(text)
        conn = host.transcripts._conn  # type: ignore[attr-defined]
        pages = _stop_growing(conn, room=12)
        message = await _turns_until_full(host, acknowledged, 200)
        assert "transcripts.sqlite3" in message and "is full" in message, message
        assert len(acknowledged) > 4  # some turns fitted in the room left
        said = await _said(host, "dm:alice")
        assert [said.count(text) for text in acknowledged] == [1] * len(acknowledged)
        _grow_again(conn)
        await host.run_turn(
            "dm:alice", UserMessage("room again", sender="alice"), sender_is_owner=True
        )
    async with claw.open_host(config) as host:
        said = await _said(host, "dm:alice")
        assert [said.count(text) for text in acknowledged] == [1] * len(acknowledged)
        assert said.count("room again") == 1
    print(
        f"\nfull transcript database (SQLite's limit at {pages} pages): "
        f"{len(acknowledged)} turns acknowledged, all there after reopening; "
        f"failure: {message[:100]}"
    )


async def test_a_full_session_database_loses_no_acknowledged_session(tmp_path: Path) -> None:
    """The same for the session database: sessions are created until one cannot be; it
    is a StorageFullError naming the database, and every session created before it is
    there after the host reopens."""
    config = _turns_config(tmp_path)
    created: list[str] = []
    async with claw.open_host(config) as host:
        conn = host.sessions._conn  # type: ignore[attr-defined]
        _stop_growing(conn, room=4)
        with pytest.raises(claw.StorageFullError) as info:
            for i in range(5000):
                key = f"dm:user-{i}-{'x' * 200}"
                await host.sessions.create(key, agent_id="main", chat_type="direct")
                created.append(key)
        message = str(info.value)
        assert "sessions.sqlite3" in message and "is full" in message, message
        _grow_again(conn)
    async with claw.open_host(config) as host:
        keys = {row.session_key for row in await host.sessions.list()}
        assert created and [key for key in created if key not in keys] == []
