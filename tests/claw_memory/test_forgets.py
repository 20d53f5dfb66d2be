"""Index-level forgets are recorded, listed, kept by a forced sync, and reversible."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from claw.plugin_sdk import InlineWorkerPool
from claw_memory._settings import MemoryCoreSettings
from claw_memory._store import Store
from claw_memory._transcripts import InMemoryTranscriptSource

from .test_index import _open, _session, _write


async def test_a_forgotten_session_is_listed_with_who_forgot_it_and_comes_back(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    src = InMemoryTranscriptSource()
    _session(src, "a1", "s1", ["we talked about sailing"])
    _session(src, "a1", "s2", ["more about sailing"])
    settings = MemoryCoreSettings(min_score=0.0, sources=("memory", "sessions"))
    by = {"kind": "operator", "connectionId": "cli"}
    async with _open(workspace, index_dir, workers, settings=settings, transcripts=src) as index:
        done = await index.forget(session_id="s1", by=by)
        assert done.forget_id is not None
        (listed,) = await index.forgotten()
        assert (listed.id, dict(listed.criteria), listed.chunks, listed.by) == (
            done.forget_id,
            {"session_id": "s1"},
            len(done.chunk_ids),
            by,
        )
        await index.sync(force=True)  # a forced sync keeps what a forget hides
        assert {h.session_id for h in (await index.search("sailing")).hits} == {"s2"}
        assert await index.unforget("0123456789ab") is None
        back = await index.unforget(done.forget_id)
        assert back is not None and back.id == done.forget_id
        assert {h.session_id for h in (await index.search("sailing")).hits} == {"s1", "s2"}
        assert await index.forgotten() == []
        assert index.status().tombstones == 0


async def test_tombstones_from_before_forgets_were_recorded_are_adopted_one_per_path(
    workspace: Path, index_dir: Path, workers: InlineWorkerPool
) -> None:
    _write(workspace, "memory/a.md", "the locker code is 4711")
    _write(workspace, "memory/b.md", "the locker is in the basement")
    async with _open(workspace, index_dir, workers) as index:
        await index.forget(path="memory/a.md")
    with sqlite3.connect(index_dir / "index.sqlite3") as db:  # as an older claw left it
        db.execute("DELETE FROM forget_chunks")
        db.execute("DELETE FROM forgets")
    store = Store(index_dir / "index.sqlite3")
    try:
        (adopted,) = store.forgets()
    finally:
        store.close()
    assert (adopted.paths, dict(adopted.criteria), adopted.by) == (
        ("memory/a.md",),
        {"path": "memory/a.md"},
        None,
    )
    async with _open(workspace, index_dir, workers) as index:
        assert [h.path for h in (await index.search("locker code 4711")).hits] == ["memory/b.md"]
        await index.unforget(adopted.id)
        assert "memory/a.md" in [h.path for h in (await index.search("locker code 4711")).hits]
