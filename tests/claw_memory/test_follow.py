"""The reader's half on its own: a Follower, given only a view, the store and the lease,
keeps to what the writer publishes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from claw.plugin_sdk import InlineWorkerPool
from claw.plugin_sdk.search import HashEmbedder, sha256_hex
from claw_memory._errors import IndexLockedError
from claw_memory._follow import Follower
from claw_memory._generation import Generation
from claw_memory._index import _identity, open_memory_index
from claw_memory._lease import LEASE_FILE, WriterLease
from claw_memory._settings import MemoryCoreSettings
from claw_memory._store import Store
from claw_memory._view import IndexView

SETTINGS = MemoryCoreSettings(min_score=0.0, sync_on_search=False)


def _write(ws: Path, rel: str, text: str) -> None:
    path = ws / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _follower(index_dir: Path, identity_key: str) -> tuple[Follower, IndexView, Store]:
    store = Store(index_dir / "index.sqlite3")
    view = IndexView(index_dir.resolve(), Generation.empty(0, 0, HashEmbedder().dims))
    lease = WriterLease(index_dir / LEASE_FILE)
    return Follower(view, store, InlineWorkerPool(), lease, identity_key), view, store


async def test_a_follower_on_its_own_follows_each_publication(
    workspace: Path, index_dir: Path
) -> None:
    _write(workspace, "memory/a.md", "the gannet colony")
    key = sha256_hex(_identity(SETTINGS, HashEmbedder()))
    async with open_memory_index(
        workspace_dir=workspace,
        index_dir=index_dir,
        workers=InlineWorkerPool(),
        settings=SETTINGS,
        embedder=HashEmbedder(),
    ) as writer:
        follower, view, store = _follower(index_dir, key)
        try:
            assert await follower.attach()
            first = writer.status().generation
            assert view.generation.number == first
            assert [r.text for r in view.generation.records] == ["the gannet colony"]
            assert set(view.sources) == {"memory:memory/a.md"}

            _write(workspace, "memory/b.md", "the puffin burrow")
            await writer.sync()
            await follower.follow()
            assert view.generation.number == first + 1
            assert sorted(r.text for r in view.generation.records) == [
                "the gannet colony",
                "the puffin burrow",
            ]
            assert view.known_files().keys() == {"memory/a.md", "memory/b.md"}

            await writer.forget(path="memory/a.md")
            await follower.follow()
            assert view.tombstones == writer._view.tombstones != frozenset()
        finally:
            follower.close()
            store.close()


async def test_a_follower_refuses_an_index_published_with_other_settings(
    workspace: Path, index_dir: Path
) -> None:
    _write(workspace, "MEMORY.md", "the skua")
    async with open_memory_index(
        workspace_dir=workspace,
        index_dir=index_dir,
        workers=InlineWorkerPool(),
        settings=SETTINGS,
        embedder=HashEmbedder(),
    ):
        follower, view, store = _follower(index_dir, sha256_hex("other settings"))
        try:
            # attach() reads the pointer, sees another identity and leaves the view alone.
            assert not await follower.attach()
            assert view.pointer is None
            with pytest.raises(IndexLockedError, match="different settings"):
                await follower.follow()
        finally:
            follower.close()
            store.close()


async def test_a_writer_reads_every_source_again_only_after_another_writer_changed_one(
    workspace: Path, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each sync takes the writer lease over. A writer whose own syncs kept its copy of
    the sources in step does not read them all again (a live host paid that for every
    appended turn); after another writer changed one without publishing (a stat-only
    sync), it does, and so does not read that file again itself."""
    from claw_memory import _sync

    loads: list[int] = []
    read: list[str] = []
    load_sources, prepare = Store.load_sources, _sync._prepare_files

    def counted(self: Store) -> object:
        loads.append(1)
        return load_sources(self)

    def reading(files: list, *args: object) -> object:  # type: ignore[type-arg]
        read.extend(f.vpath for f in files)
        return prepare(files, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Store, "load_sources", counted)
    monkeypatch.setattr(_sync, "_prepare_files", reading)
    _write(workspace, "memory/a.md", "the gannet colony")

    def opened() -> object:
        return open_memory_index(
            workspace_dir=workspace,
            index_dir=index_dir,
            workers=InlineWorkerPool(),
            settings=SETTINGS,
            embedder=HashEmbedder(),
        )

    async with opened() as a, opened() as b:  # type: ignore[attr-defined]
        await a.sync()
        _write(workspace, "memory/b.md", "the puffin burrow")
        loads.clear()
        assert (await a.sync()).indexed == ("memory/b.md",)
        _write(workspace, "memory/c.md", "the skua")
        assert (await a.sync()).indexed == ("memory/c.md",)
        assert loads == []
        # The other writer finds a.md touched (same bytes): it records the new stat.
        stat = (workspace / "memory/a.md").stat()
        os.utime(workspace / "memory/a.md", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        read.clear()
        await b.sync()
        assert read == ["memory/a.md"]
        loads.clear()
        read.clear()
        assert (await a.sync()).indexed == ()
        assert loads == [1] and read == []
