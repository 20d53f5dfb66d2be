"""Process-level faults: a sync killed at each step, and a second process using the index."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import trio

from claw.plugin_sdk import InlineWorkerPool
from claw.plugin_sdk.search import HashEmbedder
from claw_memory._index import open_memory_index
from claw_memory._settings import MemoryCoreSettings

CHILD = Path(__file__).with_name("_child.py")
NO_SYNC = MemoryCoreSettings(min_score=0.0, sync_on_open=False, sync_on_search=False)


def _open(ws: Path, idx: Path, settings: MemoryCoreSettings) -> object:
    return open_memory_index(
        workspace_dir=ws,
        index_dir=idx,
        workers=InlineWorkerPool(),
        settings=settings,
        embedder=HashEmbedder(),
    )


async def _excerpts(index: object, query: str, mode: str) -> set[str]:
    result = await index.search(query, mode=mode, max_results=10)  # type: ignore[attr-defined]
    return {h.excerpt for h in result.hits}


@pytest.mark.parametrize(
    ("victim", "committed"),
    [
        ("apply_changes", False),  # before the SQLite commit
        ("replace", True),  # SQLite committed, tantivy not yet
        ("clear_pending", True),  # tantivy committed, journal not cleared
        ("write_epoch", True),  # everything durable, nothing published (a compaction)
        ("flip_pointer", True),  # the publication written, the pointer not flipped
        ("generation_after", True),  # published, the writer not yet following it
    ],
)
async def test_a_sync_killed_midway_leaves_a_consistent_index_that_the_next_open_completes(
    workspace: Path, index_dir: Path, victim: str, committed: bool
) -> None:
    (workspace / "memory").mkdir()
    (workspace / "memory" / "a.md").write_text("alpha original")
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)):
        pass
    (workspace / "memory" / "a.md").write_text("alpha changed, longer")
    (workspace / "memory" / "b.md").write_text("bravo fresh")

    done = await trio.run_process(
        [sys.executable, str(CHILD), str(workspace), str(index_dir), "kill", victim],
        check=False,
        capture_stderr=True,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()

    # Without syncing, what the crashed process left is searchable and consistent:
    # lexical and vector retrieval agree on one state, old or new, never a mix.
    async with _open(workspace, index_dir, NO_SYNC) as index:
        expected = {"alpha changed, longer", "bravo fresh"} if committed else {"alpha original"}
        assert await _excerpts(index, "alpha bravo", "lexical") == expected
        assert await _excerpts(index, "alpha bravo", "vector") == expected
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)) as index:
        assert await _excerpts(index, "alpha bravo", "hybrid") == {
            "alpha changed, longer",
            "bravo fresh",
        }
        assert index.status().chunks == 2


@pytest.mark.parametrize(
    "victim",
    ["apply_changes", "replace", "clear_pending", "flip_pointer", "generation_after"],
)
async def test_a_grown_session_synced_by_a_killed_process_ends_as_a_fresh_index_holds_it(
    workspace: Path, index_dir: Path, victim: str
) -> None:
    """The sync that keeps a grown session's earlier chunks (removing only the rows the
    new turns replace) killed at each step: the next open completes it, and the rows
    are what a fresh index of the session holds."""
    from claw_memory._index import MemoryIndex

    from ._child import GROWN, grown_source

    sessions = attrs.evolve(NO_SYNC, sources=("sessions",))

    def opened(root: Path, turns: int, settings: MemoryCoreSettings) -> object:
        return open_memory_index(
            workspace_dir=workspace,
            index_dir=root,
            workers=InlineWorkerPool(),
            settings=settings,
            embedder=HashEmbedder(),
            transcripts=grown_source(turns),
        )

    def rows(index: MemoryIndex) -> set[tuple[object, ...]]:
        return {
            (r.chunk_id, r.text, context, r.start_line, r.entry_ids)
            for r, context in index._store.chunks_for(None)
        }

    async with opened(index_dir, GROWN - 3, attrs.evolve(sessions, sync_on_open=True)):
        pass
    done = await trio.run_process(
        [sys.executable, str(CHILD), str(workspace), str(index_dir), "grow", victim],
        check=False,
        capture_stderr=True,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    fresh_states = []
    for turns in (GROWN - 3, GROWN):
        root = index_dir.parent / f"fresh{turns}"
        async with opened(root, turns, attrs.evolve(sessions, sync_on_open=True)) as fresh:
            fresh_states.append(rows(fresh))  # type: ignore[arg-type]

    async def published(index: MemoryIndex) -> tuple[set[object], set[object]]:
        gen = index._view.generation
        live = {gen.records[r].chunk_id for rs in gen.rows_of_provenance.values() for r in rs}
        found = await index.search("heron walrus", mode="lexical", max_results=100)
        return live, {h.chunk_id for h in found.hits}

    async with opened(index_dir, GROWN, sessions) as index:
        # What the killed process left is one state, old or new, never a mix: the
        # published rows, what tantivy finds and the SQLite rows all agree.
        live, lexical = await published(index)  # type: ignore[arg-type]
        assert live == lexical
        assert rows(index) in fresh_states  # type: ignore[arg-type]
        assert live == {row[0] for row in rows(index)}  # type: ignore[arg-type]
    async with opened(index_dir, GROWN, attrs.evolve(sessions, sync_on_open=True)) as index:
        assert rows(index) == fresh_states[1]  # type: ignore[arg-type]
        live, lexical = await published(index)  # type: ignore[arg-type]
        assert live == lexical == {row[0] for row in fresh_states[1]}


async def test_a_second_process_opens_searches_and_syncs_while_the_first_holds_the_index(
    workspace: Path, index_dir: Path
) -> None:
    (workspace / "MEMORY.md").write_text("held")
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), str(workspace), str(index_dir), "hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = b""
        while not line.endswith(b"\n"):
            chunk = await proc.stdout.receive_some(64)
            assert chunk, "child exited before opening the index"
            line += chunk
        assert line == b"OPEN\n"
        (workspace / "memory").mkdir()
        (workspace / "memory" / "b.md").write_text("second process note")
        async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)) as index:
            assert await _excerpts(index, "held", "lexical") == {"held"}
            assert await _excerpts(index, "second process", "lexical") == {"second process note"}
        await proc.stdin.aclose()
        assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def _segment_ids(index_dir: Path) -> list[str]:
    return sorted(p.stem for p in index_dir.glob("lexical/g*/*.idx"))


def _plant_stray_deletes(index_dir: Path) -> None:
    """What a kill inside a tantivy commit leaves: ``<segment>.<opstamp>.del`` files
    that ``meta.json`` does not reference (one per opstamp a replay could reach)."""
    for segment in _segment_ids(index_dir):
        for opstamp in range(128):
            (next(index_dir.glob("lexical/g*")) / f"{segment}.{opstamp}.del").touch()


async def test_a_killed_index_whose_journal_replay_fails_is_rebuilt_from_sqlite(
    workspace: Path, index_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (workspace / "MEMORY.md").write_text("alpha original")
    (workspace / "memory").mkdir()
    (workspace / "memory" / "b.md").write_text("bravo kept")
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)):
        pass
    (workspace / "MEMORY.md").write_text("alpha changed, longer")
    # A real kill: SQLite committed the change and its journal entry, tantivy did not.
    done = await trio.run_process(
        [sys.executable, str(CHILD), str(workspace), str(index_dir), "kill", "replace"],
        check=False,
        capture_stderr=True,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    _plant_stray_deletes(index_dir)
    for _ in range(2):  # the first open repairs; the second finds nothing to repair
        async with _open(workspace, index_dir, NO_SYNC) as index:
            expected = {"alpha changed, longer", "bravo kept"}
            assert await _excerpts(index, "alpha bravo", "lexical") == expected
            assert await _excerpts(index, "alpha bravo", "vector") == expected
            assert index.status().chunks == 2
    rebuilt = [r for r in caplog.records if "rebuilding it from" in r.getMessage()]
    assert len(rebuilt) == 1
    assert "index.sqlite3" in rebuilt[0].getMessage()
    assert str(index_dir) in rebuilt[0].getMessage()


async def test_a_stray_tantivy_file_met_by_a_running_sync_is_repaired_in_place(
    workspace: Path, index_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (workspace / "MEMORY.md").write_text("alpha original")
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)) as index:
        _plant_stray_deletes(index_dir)
        (workspace / "MEMORY.md").write_text("alpha changed, longer")
        await index.sync()
        assert await _excerpts(index, "alpha", "lexical") == {"alpha changed, longer"}
        (workspace / "MEMORY.md").write_text("alpha changed again")
        await index.sync()
        assert await _excerpts(index, "alpha", "lexical") == {"alpha changed again"}
    async with _open(workspace, index_dir, NO_SYNC) as index:
        assert await _excerpts(index, "alpha", "lexical") == {"alpha changed again"}
    assert any("rebuilding it from" in r.getMessage() for r in caplog.records)


def _corrupt_meta(index_dir: Path) -> None:
    for meta in index_dir.glob("lexical/g*/meta.json"):
        meta.write_text("{ not json")


async def test_an_unopenable_lexical_directory_is_rebuilt_from_sqlite(
    workspace: Path, index_dir: Path
) -> None:
    (workspace / "MEMORY.md").write_text("alpha original")
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)):
        pass
    _corrupt_meta(index_dir)
    async with _open(workspace, index_dir, NO_SYNC) as index:
        assert await _excerpts(index, "alpha", "lexical") == {"alpha original"}


def _set_aside(index_dir: Path) -> list[Path]:
    return list(index_dir.glob("index.sqlite3.corrupt-*"))


async def test_a_corrupt_index_database_is_set_aside_and_rebuilt_from_the_sources(
    workspace: Path, index_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (workspace / "MEMORY.md").write_text("alpha original")
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)):
        pass
    db = index_dir / "index.sqlite3"
    db.write_bytes(b"this is not a database, it was overwritten" * 100)
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)) as index:
        assert await _excerpts(index, "alpha", "lexical") == {"alpha original"}
        assert index.status().chunks == 1
    (warning,) = [r for r in caplog.records if "rebuilding it" in r.getMessage()]
    assert warning.levelname == "WARNING"
    assert str(db) in warning.getMessage()
    assert len(_set_aside(index_dir)) == 1


def _fill_limit(index: object) -> None:
    db = index._store._db  # type: ignore[attr-defined]
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages + 2}")


async def test_a_full_disk_during_a_sync_is_reported_as_such_naming_the_file(
    workspace: Path, index_dir: Path
) -> None:
    from claw_memory._errors import IndexStoreError

    (workspace / "MEMORY.md").write_text("alpha original")
    (workspace / "memory").mkdir()
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)) as index:
        _fill_limit(index)
        for i in range(40):
            words = " ".join(f"w{i}x{j}" for j in range(400))
            (workspace / "memory" / f"f{i}.md").write_text(words)
        with pytest.raises(IndexStoreError) as failed:
            await index.sync()
        assert "database or disk is full" in str(failed.value)
        assert str(index_dir / "index.sqlite3") in str(failed.value)
        # Once there is room again, the next sync completes the change.
        index._store._db.execute("PRAGMA max_page_count = 1073741823")  # type: ignore[attr-defined]
        assert any("w7x3 " in e for e in await _excerpts(index, "w7x3", "lexical"))
        assert index.status().chunks > 40


# Worker functions of the publication path, in the order a sync calls them.
PUBLICATION_STEPS = ["apply_changes", "replace", "clear_pending", "write_epoch", "flip_pointer"]


async def _assert_index_agrees_with_the_files(workspace: Path, index_dir: Path) -> None:
    # Without syncing: whatever the killed process left opens, and both retrievers
    # see one state.
    async with _open(workspace, index_dir, NO_SYNC) as index:
        lexical = await _excerpts(index, "churn round note", "lexical")
        assert lexical == await _excerpts(index, "churn round note", "vector")
    # Synced: exactly the files' current content.
    files = _memory_file_texts(workspace)
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)) as index:
        assert await _excerpts(index, "churn round note", "lexical") == files - {""}
        assert index.status().chunks == len(files - {""})
    assert not _set_aside(index_dir)


def _memory_file_texts(workspace: Path) -> set[str]:
    return {p.read_text(encoding="utf-8") for p in (workspace / "memory").glob("*.md")}


@pytest.mark.slow
async def test_kill_9_loop_during_index_publication_always_reopens_in_agreement_with_the_files(
    workspace: Path, index_dir: Path
) -> None:
    """20 SIGKILLs of a process that keeps rewriting memory files and publishing:
    half at a chosen call of a publication step (seeded), half at an arbitrary moment
    (inside tantivy's commit, too). After each, the index opens and agrees."""
    rng = random.Random(1414)
    (workspace / "memory").mkdir()
    (workspace / "MEMORY.md").write_text("")
    kills = 0
    for round_ in range(20):
        if round_ % 2 == 0:
            step = PUBLICATION_STEPS[(round_ // 2) % len(PUBLICATION_STEPS)]
            args = ["kill", step, str(rng.randint(1, 6))]
        else:
            args = ["churn"]
        proc = await trio.lowlevel.open_process(
            [sys.executable, str(CHILD), str(workspace), str(index_dir), *args],
            stdout=subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            if args[0] == "churn":
                # Let it publish at least once, then kill it wherever it is.
                seen = b""
                while b"SYNCED" not in seen:
                    chunk = await proc.stdout.receive_some(256)
                    assert chunk, "the churn child died before publishing"
                    seen += chunk
                await trio.sleep(rng.uniform(0.0, 0.15))
                proc.kill()
            async with proc.stdout:
                while await proc.stdout.receive_some(4096):
                    pass
            code = await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert code == -signal.SIGKILL, (args, code)
        kills += 1
        await _assert_index_agrees_with_the_files(workspace, index_dir)
    print(f"index publication kill loop: {kills} kills, every reopen consistent")
    assert kills == 20
