"""The inotify fast path of the freshness check, and its fallback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from claw.plugin_sdk import InlineWorkerPool
from claw_memory import _follow, _freshness
from claw_memory._changes import open_directory_watch, source_directories
from claw_memory._index import open_memory_index
from claw_memory._settings import MemoryCoreSettings

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")
SETTINGS = MemoryCoreSettings(min_score=0.0)


def _write(ws: Path, rel: str, text: str) -> None:
    path = ws / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@linux_only
def test_watch_reports_writes_creations_and_deletions(tmp_path: Path) -> None:
    _write(tmp_path, "memory/a.md", "one")
    watch = open_directory_watch(source_directories(str(tmp_path), []))
    assert watch is not None
    try:
        assert watch.changed() is False
        with (tmp_path / "memory" / "a.md").open("a", encoding="utf-8") as f:
            f.write(" more")
        assert watch.changed() is True
        assert watch.changed() is False  # drained
        _write(tmp_path, "memory/b.md", "two")
        assert watch.changed() is True
        (tmp_path / "memory" / "b.md").unlink()
        assert watch.changed() is True
        _write(tmp_path, "MEMORY.md", "root file")
        assert watch.changed() is True
    finally:
        watch.close()


def test_source_directories_do_not_follow_directory_symlinks(tmp_path: Path) -> None:
    (tmp_path / "memory" / "sub").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "memory" / "link").symlink_to(tmp_path / "elsewhere")
    dirs = source_directories(str(tmp_path), [])
    assert str(tmp_path / "memory" / "sub") in dirs
    assert not any(d.endswith("link") for d in dirs)


@linux_only
async def test_a_file_in_a_new_subdirectory_is_found_by_the_next_search(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws, "MEMORY.md", "root")
    async with open_memory_index(
        workspace_dir=ws, index_dir=tmp_path / "idx", workers=InlineWorkerPool(), settings=SETTINGS
    ) as index:
        assert index._freshness.source_watch is not None
        await index.search("root")
        _write(ws, "memory/deep/new/notes.md", "the aardvark migration")
        first = await index.search("aardvark migration")
        assert [h.path for h in first.hits][:1] == ["memory/deep/new/notes.md"]
        # A file written into the just-created directory right after: a new watch was
        # added, so the next search stats everything instead of trusting the queue.
        _write(ws, "memory/deep/new/more.md", "the okapi census")
        second = await index.search("okapi census")
        assert [h.path for h in second.hits][:1] == ["memory/deep/new/more.md"]


async def test_without_inotify_searches_still_see_every_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_follow, "open_directory_watch", lambda dirs: None)
    monkeypatch.setattr(_freshness, "open_directory_watch", lambda dirs: None)
    ws = tmp_path / "ws"
    _write(ws, "MEMORY.md", "root")
    async with open_memory_index(
        workspace_dir=ws, index_dir=tmp_path / "idx", workers=InlineWorkerPool(), settings=SETTINGS
    ) as index:
        assert index._freshness.source_watch is None
        await index.search("root")
        _write(ws, "memory/x.md", "the narwhal tusk")
        result = await index.search("narwhal tusk")
        assert [h.path for h in result.hits][:1] == ["memory/x.md"]


@linux_only
async def test_an_unchanged_workspace_skips_the_stat_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    _write(ws, "MEMORY.md", "the quokka smile")
    calls: list[int] = []
    original = _freshness.files_changed

    def counting(*args: object) -> bool:
        calls.append(1)
        return original(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_freshness, "files_changed", counting)
    async with open_memory_index(
        workspace_dir=ws, index_dir=tmp_path / "idx", workers=InlineWorkerPool(), settings=SETTINGS
    ) as index:
        for _ in range(5):
            await index.search("quokka")
        assert calls == []  # the sync at open primed the watch: nothing moved since
        _write(ws, "MEMORY.md", "the quokka frown")
        result = await index.search("quokka frown")
        # The kernel reported the write: the search synced at once (the sync's scan is
        # the check), without a separate stat check first.
        assert calls == []
        assert "frown" in result.hits[0].excerpt
