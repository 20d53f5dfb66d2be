"""One writer, many readers: real processes sharing one index directory."""

from __future__ import annotations

import mmap
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from claw.plugin_sdk import InlineWorkerPool
from claw.plugin_sdk.search import HashEmbedder
from claw_memory._errors import IndexLockedError
from claw_memory._index import open_memory_index
from claw_memory._lease import LEASE_FILE, WriterLease
from claw_memory._settings import MemoryCoreSettings

CHILD = Path(__file__).with_name("_child.py")
READER = MemoryCoreSettings(min_score=0.0, sync_on_open=False, sync_on_search=False)


def _open(ws: Path, idx: Path, settings: MemoryCoreSettings = READER) -> Any:
    return open_memory_index(
        workspace_dir=ws,
        index_dir=idx,
        workers=InlineWorkerPool(),
        settings=settings,
        embedder=HashEmbedder(),
    )


async def _start(ws: Path, idx: Path, *args: str) -> trio.Process:
    return await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), str(ws), str(idx), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


async def _expect_line(proc: trio.Process, expected: bytes) -> None:
    assert proc.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        chunk = await proc.stdout.receive_some(1)
        assert chunk, f"child exited before printing {expected!r}"
        line += chunk
    assert line == expected + b"\n"


async def _stop(proc: trio.Process) -> None:
    if proc.returncode is None:
        proc.kill()
    await proc.wait()


async def _stderr(proc: trio.Process) -> str:
    assert proc.stderr is not None
    data = b""
    while chunk := await proc.stderr.receive_some(65536):
        data += chunk
    return data.decode()


async def test_the_writer_lease_is_taken_over_when_its_holder_is_killed(
    workspace: Path, index_dir: Path
) -> None:
    holder = await _start(workspace, index_dir, "lease")
    try:
        await _expect_line(holder, b"HELD")
        lease = WriterLease(index_dir / LEASE_FILE)
        assert not lease.try_acquire()
        holder.send_signal(signal.SIGKILL)
        assert await holder.wait() == -signal.SIGKILL
        assert lease.try_acquire()
        lease.release()
    finally:
        await _stop(holder)


async def test_two_processes_racing_for_the_lease_both_sync_and_index_each_note_once(
    workspace: Path, index_dir: Path
) -> None:
    (workspace / "MEMORY.md").write_text("shared root memo")
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)):
        pass  # a first publication, so that both children open as readers
    racers = [await _start(workspace, index_dir, "race", name) for name in ("left", "right")]
    try:
        for proc in racers:
            await _expect_line(proc, b"READY")
        for proc in racers:  # both go at once: one syncs, the other waits for the lease
            assert proc.stdin is not None
            await proc.stdin.send_all(b"go\n")
        for proc in racers:
            errors = await _stderr(proc)
            assert await proc.wait() == 0, errors
    finally:
        for proc in racers:
            await _stop(proc)
    async with _open(workspace, index_dir) as index:
        hits = (await index.search("raced note", mode="lexical", max_results=10)).hits
        assert sorted(h.path for h in hits) == ["memory/left.md", "memory/right.md"]
        assert index.status().chunks == 3


async def test_a_reader_searching_while_another_process_publishes_sees_whole_generations(
    workspace: Path, index_dir: Path
) -> None:
    (workspace / "MEMORY.md").write_text("unrelated root memo")
    rounds = 12
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)):
        pass
    async with _open(workspace, index_dir) as reader:
        writer = await _start(workspace, index_dir, "publish", str(rounds))
        seen: list[int] = []
        try:
            while True:
                exited = writer.poll() is not None
                for mode in ("lexical", "vector", "hybrid"):
                    result = await reader.search("plover round", mode=mode, max_results=10)
                    notes = [h.excerpt for h in result.hits if h.path == "memory/note.md"]
                    # Every generation has exactly one version of the note (or none yet),
                    # and the lexical and vector halves of a search agree on it.
                    assert len(notes) <= 1, notes
                    if notes:
                        seen.append(int(notes[0].rsplit(" ", 1)[1]))
                if exited:
                    break
                await trio.sleep(0.002)
            errors = await _stderr(writer)
            assert await writer.wait() == 0, errors
        finally:
            await _stop(writer)
        assert seen == sorted(seen), "a reader went back to an older generation"
        # The first search after the writer's last publication sees it.
        assert seen[-1] == rounds - 1
        assert reader.status().generation > 1


async def test_a_writer_killed_mid_publication_never_shows_readers_half_and_the_lease_recovers(
    workspace: Path, index_dir: Path
) -> None:
    (workspace / "memory").mkdir()
    (workspace / "memory" / "a.md").write_text("kestrel original")
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)):
        pass
    (workspace / "memory" / "a.md").write_text("kestrel changed, and longer")
    (workspace / "memory" / "b.md").write_text("kestrel fresh")
    before = {"kestrel original"}
    after = {"kestrel changed, and longer", "kestrel fresh"}
    async with _open(workspace, index_dir) as reader:
        # The writer dies with its publication written but the pointer not flipped.
        writer = await _start(workspace, index_dir, "kill", "flip_pointer")
        try:
            searches = 0
            while True:
                exited = writer.poll() is not None
                for mode in ("lexical", "vector", "hybrid"):
                    result = await reader.search("kestrel", mode=mode, max_results=10)
                    assert {h.excerpt for h in result.hits} == before
                    searches += 1
                if exited:
                    break
                await trio.sleep(0.002)
            assert await writer.wait() == -signal.SIGKILL, await _stderr(writer)
        finally:
            await _stop(writer)
        assert searches >= 3
        # The reader takes the lease over and publishes what the dead writer committed.
        await reader.sync()
        for mode in ("lexical", "vector", "hybrid"):
            result = await reader.search("kestrel", mode=mode, max_results=10)
            assert {h.excerpt for h in result.hits} == after
        assert reader.status().chunks == 2


async def test_a_follower_of_an_index_rebuilt_with_other_settings_gets_a_clear_error(
    workspace: Path, index_dir: Path
) -> None:
    (workspace / "MEMORY.md").write_text("merlin sighting")
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)) as first:
        assert [h.excerpt for h in (await first.search("merlin")).hits] == ["merlin sighting"]
        other = MemoryCoreSettings(min_score=0.0, chunk_tokens=200)
        async with _open(workspace, index_dir, other) as second:
            assert [h.excerpt for h in (await second.search("merlin")).hits] == [
                "merlin sighting"
            ]
        with pytest.raises(IndexLockedError, match="different settings"):
            await first.search("merlin")


def _is_mapped(array: object) -> bool:
    while array is not None:
        if isinstance(array, mmap.mmap):
            return True
        array = getattr(array, "base", None)
    return False


async def test_every_open_index_maps_the_published_matrix_instead_of_copying_it(
    workspace: Path, index_dir: Path
) -> None:
    (workspace / "MEMORY.md").write_text("heron\nplover")
    async with _open(workspace, index_dir, MemoryCoreSettings(min_score=0.0)) as writer:
        async with _open(workspace, index_dir) as reader:
            for index in (writer, reader):
                matrix = index._view.generation.matrix
                assert matrix is not None and matrix.shape[0] == 1
                assert _is_mapped(matrix)
                assert not matrix.flags.writeable
            (workspace / "memory").mkdir()
            (workspace / "memory" / "b.md").write_text("bittern")
            await writer.sync()
            hits = (await reader.search("bittern", mode="vector", max_results=1)).hits
            assert [h.path for h in hits] == ["memory/b.md"]
            assert _is_mapped(reader._view.generation.matrix)
