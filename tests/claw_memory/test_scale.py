"""What keeps a large index bounded: a sync in batches, rows read from the publication log
instead of held as objects, key lookups over sorted arrays."""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from claw.plugin_sdk import InlineWorkerPool
from claw.plugin_sdk.search import HashEmbedder
from claw_memory import _sync
from claw_memory._generation import KeyIndex
from claw_memory._index import open_memory_index
from claw_memory._published import RowRecords
from claw_memory._settings import MemoryCoreSettings
from claw_memory._store import Store

from .test_index import GatedPool

NO_CUT = MemoryCoreSettings(min_score=0.0, sync_on_open=False, sync_on_search=False)


def _files(workspace: Path, count: int, tag: str = "note") -> None:
    (workspace / "memory").mkdir(exist_ok=True)
    for i in range(count):
        (workspace / "memory" / f"f{i:03d}.md").write_text(f"{tag} number{i} word{i % 7}")


def _open(workspace: Path, index_dir: Path) -> object:
    return open_memory_index(
        workspace_dir=workspace,
        index_dir=index_dir,
        workers=InlineWorkerPool(),
        settings=NO_CUT,
        embedder=HashEmbedder(),
    )


async def test_a_large_sync_is_stored_embedded_and_written_in_bounded_batches(
    workspace: Path, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sync, "_SYNC_BATCH_CHUNKS", 5)
    monkeypatch.setattr(_sync, "_CHUNK_BATCH_FILES", 2)
    applied: list[int] = []
    apply_changes = Store.apply_changes

    def counting(self: Store, changes: object) -> None:
        applied.append(sum(len(c.chunks) for c in changes))  # type: ignore[attr-defined]
        apply_changes(self, changes)  # type: ignore[arg-type]

    monkeypatch.setattr(Store, "apply_changes", counting)
    _files(workspace, 23)
    async with _open(workspace, index_dir) as index:  # type: ignore[attr-defined]
        before = index.status().generation
        report = await index.sync()
        assert report.chunks_added == 23
        # Never more than a batch (plus the last files read) held at once.
        assert len(applied) >= 4 and max(applied) <= 6 and sum(applied) == 23
        # One publication for the whole sync.
        assert index.status().generation == before + 1
        hits = (await index.search("number17", mode="lexical")).hits
        assert [h.excerpt for h in hits] == ["note number17 word3"]
        vector = (await index.search("note number17 word3", mode="vector")).hits
        assert vector[0].excerpt == "note number17 word3"
    # A fresh process reads the same rows back from the published log.
    async with _open(workspace, index_dir) as index:  # type: ignore[attr-defined]
        assert index.status().chunks == 23
        hits = (await index.search("number17", mode="lexical")).hits
        assert [h.excerpt for h in hits] == ["note number17 word3"]


async def test_a_reader_follows_a_publication_written_in_many_blocks(
    workspace: Path, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sync, "_SYNC_BATCH_CHUNKS", 3)
    monkeypatch.setattr(_sync, "_CHUNK_BATCH_FILES", 1)
    _files(workspace, 4, tag="first")
    async with _open(workspace, index_dir) as writer:  # type: ignore[attr-defined]
        await writer.sync()
        async with _open(workspace, index_dir) as reader:  # type: ignore[attr-defined]
            assert reader.status().chunks == 4
            # Replace two files, drop one, add twelve: dead rows and added rows in
            # several blocks of one publication.
            (workspace / "memory" / "f000.md").write_text("second zero")
            (workspace / "memory" / "f001.md").write_text("second one")
            (workspace / "memory" / "f003.md").unlink()
            for i in range(10, 22):
                (workspace / "memory" / f"f{i:03d}.md").write_text(f"second number{i}")
            await writer.sync()
            result = await reader.search("second", mode="lexical", max_results=50)
            assert len(result.hits) == 14
            assert result.generation == writer.status().generation
            assert reader.status().chunks == writer.status().chunks == 15
            first = await reader.search("first", mode="lexical", max_results=50)
            assert [h.excerpt for h in first.hits] == ["first number2 word2"]


async def test_published_rows_are_read_from_the_log_on_demand(
    workspace: Path, index_dir: Path
) -> None:
    """A generation holds where each row's record lies, not the records: none is
    decoded until a search reads it, and then only the rows it reads."""
    _files(workspace, 40)
    async with _open(workspace, index_dir) as index:  # type: ignore[attr-defined]
        await index.sync()
    async with _open(workspace, index_dir) as index:  # type: ignore[attr-defined]
        gen = index._view.generation
        assert isinstance(gen.records, RowRecords)
        assert len(gen.records) == 40 and not gen.records._decoded
        hits = (await index.search("number33", mode="lexical", max_results=1)).hits
        assert [h.excerpt for h in hits] == ["note number33 word5"]
        assert 0 < len(gen.records._decoded) < 40
        row = gen.row_of_key[gen.records[7].key]
        assert gen.records[row].text == gen.records[7].text


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "kill", "rebuild"]), st.integers(0, 30)),
        max_size=60,
    )
)
def test_key_index_answers_as_a_dict_filled_in_row_order(steps: list[tuple[str, int]]) -> None:
    """Keys added and killed through the overlay, and rebuilt from the live rows, map
    each key to the same row as a dict kept up to date would."""
    rng = random.Random(len(steps))
    keys: list[int] = [rng.randrange(20) for _ in range(10)]
    alive = [True] * len(keys)
    expected: dict[int, int] = {}
    for row, key in enumerate(keys):
        expected[key] = row
    index = KeyIndex.build(np.array(keys, dtype=np.int64), None)
    for op, value in steps:
        if op == "add":
            key = value % 25
            keys.append(key)
            alive.append(True)
            expected[key] = len(keys) - 1
            index = index.changed({key: len(keys) - 1})
        elif op == "kill":
            live = [r for r, a in enumerate(alive) if a]
            if not live:
                continue
            row = live[value % len(live)]
            alive[row] = False
            if expected.get(keys[row]) == row:
                del expected[keys[row]]
            if index.get(keys[row]) == row:
                index = index.changed({keys[row]: -1})
        else:
            index = KeyIndex.build(np.array(keys, dtype=np.int64), np.array(alive, dtype=bool))
            # A rebuild keeps the last live row of a key; the dict keeps the last
            # assignment, which may have been killed since: follow the rebuild there.
            expected = {}
            for row, key in enumerate(keys):
                if alive[row]:
                    expected[key] = row
        assert dict(index.items()) == expected
        assert len(index) == len(expected)
        probe = list(itertools.chain(range(26), [10**12]))
        assert index.lookup(probe) == [expected.get(k, -1) for k in probe]


def _open_with(
    workspace: Path, index_dir: Path, embedder: object, workers: Any = None, **settings: Any
) -> object:
    return open_memory_index(
        workspace_dir=workspace,
        index_dir=index_dir,
        workers=workers or InlineWorkerPool(),
        settings=attrs.evolve(NO_CUT, **settings),
        embedder=embedder,  # type: ignore[arg-type]
    )


async def test_a_large_sync_writes_only_the_cache_entries_that_survive_pruning(
    workspace: Path, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache keeps its latest entries: a sync of more chunks than that writes those
    once at its end, not every vector batch by batch to delete most of them again."""
    monkeypatch.setattr(_sync, "_SYNC_BATCH_CHUNKS", 5)
    monkeypatch.setattr(_sync, "_CHUNK_BATCH_FILES", 2)
    written: list[int] = []
    cache_vectors = Store.cache_vectors

    def counting(self: Store, provider: str, model: str, entries: Any, limit: int) -> None:
        written.append(len(entries))
        cache_vectors(self, provider, model, entries, limit)

    monkeypatch.setattr(Store, "cache_vectors", counting)
    _files(workspace, 23)
    async with _open_with(  # type: ignore[attr-defined]
        workspace, index_dir, HashEmbedder(), embedding_cache_max_entries=4
    ) as index:
        report = await index.sync()
        assert report.embedded == 23
        assert sum(written) == 4
        assert index.status().embedding_cache_entries == 4
        # The four kept are the latest: a forced re-sync embeds every other chunk.
        again = await index.sync(force=True)
        assert again.embedded == 19


class _FailingOn:
    """A hash embedder that fails while ``word`` is in a text it is asked to embed."""

    def __init__(self, word: str) -> None:
        self.inner = HashEmbedder()
        self.id, self.model, self.dims = self.inner.id, self.inner.model, self.inner.dims
        self.max_input_bytes = self.inner.max_input_bytes
        self.word: str | None = word

    async def embed(self, texts: Sequence[str]) -> Any:
        if self.word is not None and any(self.word in t for t in texts):
            raise RuntimeError("embedder down")
        return await self.inner.embed(texts)


async def test_a_failed_sync_keeps_the_vectors_it_embedded_in_the_cache(
    workspace: Path, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sync, "_SYNC_BATCH_CHUNKS", 5)
    monkeypatch.setattr(_sync, "_CHUNK_BATCH_FILES", 2)
    _files(workspace, 23)
    embedder = _FailingOn("number15")
    async with _open_with(workspace, index_dir, embedder) as index:  # type: ignore[attr-defined]
        with pytest.raises(Exception, match="embedder down"):
            await index.sync()
        stored = index.status().embedding_cache_entries
        assert 0 < stored < 23
        embedder.word = None
        report = await index.sync(force=True)
        assert report.embedded == 23 - stored
        assert index.status().embedding_cache_entries == 23


async def test_a_publication_of_many_blocks_waits_for_the_disk_once_before_its_flip(
    workspace: Path, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each epoch file is made durable once per publication, and before the pointer
    that publishes it is renamed into place (a block is not synced on its own)."""
    monkeypatch.setattr(_sync, "_SYNC_BATCH_CHUNKS", 5)
    monkeypatch.setattr(_sync, "_CHUNK_BATCH_FILES", 2)
    events: list[str] = []
    fdatasync, replace = os.fdatasync, os.replace

    # Only this index's files: other tests' leftover threads may sync or rename too.
    def syncing(fd: int) -> None:
        path = Path(f"/proc/self/fd/{fd}").readlink()
        if path.is_relative_to(index_dir):
            events.append("sync " + path.name)
        fdatasync(fd)

    def renaming(src: Any, dst: Any) -> None:
        if Path(dst).is_relative_to(index_dir):
            events.append("rename " + Path(dst).name)
        replace(src, dst)

    _files(workspace, 23)
    async with _open(workspace, index_dir) as index:  # type: ignore[attr-defined]
        monkeypatch.setattr(os, "fdatasync", syncing)
        monkeypatch.setattr(os, "replace", renaming)
        await index.sync()
        monkeypatch.undo()
        assert index.status().chunks == 23
    published = [e for e in events if e.startswith("sync e") or e == "rename CURRENT"]
    assert sorted(published[:2]) == ["sync e1.f32", "sync e1.log"]
    assert published[2:] == ["rename CURRENT"]


async def test_a_sync_reads_and_embeds_the_next_batch_while_it_stores_one(
    workspace: Path, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stages of consecutive batches overlap: while batch 1 is committed to SQLite,
    batch 2 is read, chunked and looked up in the embedding cache."""
    monkeypatch.setattr(_sync, "_SYNC_BATCH_CHUNKS", 5)
    monkeypatch.setattr(_sync, "_CHUNK_BATCH_FILES", 5)
    _files(workspace, 15)
    pool = GatedPool()
    async with _open_with(workspace, index_dir, HashEmbedder(), pool) as index:  # type: ignore[attr-defined]
        parked, release = pool.gate("apply_changes")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(index.sync)
            await parked.wait()
            await trio.testing.wait_all_tasks_blocked()
            # Parked in batch 1's commit, the sync has read and looked up batch 2 too
            # (in whichever order the two tasks were scheduled).
            assert pool.calls.count("apply_changes") == 1
            assert pool.calls.count("_prepare_files") == 2
            assert pool.calls.count("cached_vectors") == 2
            release.set()
        assert index.status().chunks == 15
        hits = (await index.search("number12", mode="lexical")).hits
        assert [h.excerpt for h in hits] == ["note number12 word5"]
