"""Two stores on one file, as two processes have: each follows the other's commits."""

from __future__ import annotations

from pathlib import Path

import trio

from claw._workers import InlineWorkerPool
from claw.models import UserMessage
from claw.sessions import open_session_store
from claw.turns import open_transcript_store


async def test_refresh_brings_another_connections_commits_into_the_mirror(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.sqlite3"
    workers = InlineWorkerPool()
    async with (
        open_session_store(path, workers=workers) as mine,
        open_session_store(path, workers=workers) as theirs,
    ):
        seen: list[str] = []
        mine.add_listener(seen.append)
        await mine.create("dm:own", agent_id="main", chat_type="direct")
        assert seen == ["dm:own"]
        assert await mine.refresh() == 0, "its own commit is not news to the store"
        row = await theirs.create("dm:a", agent_id="main", chat_type="direct")
        await theirs.create("dm:b", agent_id="main", chat_type="direct")
        await theirs.delete("dm:b")
        assert mine.get_nowait("dm:a") is None  # not seen yet
        assert await mine.refresh() == 2
        assert seen == ["dm:own", "dm:a", "dm:b"]
        assert mine.get_nowait("dm:a") == row
        assert mine.get_nowait("dm:b") is None
        assert mine.last_revision_nowait("dm:b") == 1
        assert await mine.refresh() == 0


async def test_the_watcher_revokes_on_another_connections_reset_without_a_call(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.sqlite3"
    workers = InlineWorkerPool()
    async with (
        open_session_store(path, workers=workers) as mine,
        open_session_store(path, workers=workers) as theirs,
        trio.open_nursery() as nursery,
    ):
        await mine.create("dm:a", agent_id="main", chat_type="direct")
        changed = trio.Event()
        mine.add_listener(lambda key: changed.set() if key == "dm:a" else None)
        await nursery.start(mine.watch)
        reset = await theirs.reset("dm:a", keep_session_id=False)
        with trio.fail_after(60):  # a hang guard, not a timing assertion
            await changed.wait()
        assert mine.get_nowait("dm:a") == reset
        nursery.cancel_scope.cancel()


async def test_another_connections_transcript_writes_move_the_version_readers_cache_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "transcripts.sqlite3"
    workers = InlineWorkerPool()
    async with (
        open_transcript_store(path, workers=workers) as mine,
        open_transcript_store(path, workers=workers) as theirs,
    ):
        await mine._external_change()  # what the watcher calls: the first look
        before = mine.version
        await mine._external_change()
        assert mine.version == before, "nothing was committed elsewhere"
        await theirs.append("dm:a", "sess-1", [UserMessage("hello")])
        await mine._external_change()
        assert mine.version == before + 1
        await mine.append("dm:a", "sess-1", [UserMessage("again")])
        after_own = mine.version
        await mine._external_change()
        assert mine.version == after_own, "its own write is not news to the store"
