"""memory.get decides that a path is a source before it reads, and reads a stream.

A get for a large file that is not a source must cost nothing; a get for a line range
of a source keeps only that range; and the streamed lines are exactly the lines that
chunking counts (``str.splitlines``), whatever the block boundaries.
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import claw
import claw_memory
from claw.gateway import Gateway, open_in_memory_gateway_client
from claw.plugin_sdk import InlineWorkerPool
from claw_memory import _read
from claw_memory._errors import IndexClosedError, SourcePathError
from claw_memory._generation import Generation
from claw_memory._listing import SourceListing
from claw_memory._read import SourceReader, read_line_range
from claw_memory._settings import MemoryCoreSettings
from claw_memory._sources import FileEntry
from claw_memory._transcripts import InMemoryTranscriptSource, TranscriptTurn
from claw_memory._view import IndexView

TOKEN = "read-range-token-1"


def _host_config(tmp_path: Path) -> claw.HostConfig:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "MEMORY.md").write_text("first\nsecond\nthird\n", encoding="utf-8")
    return claw.HostConfig(
        workspace_dir=ws,
        state_dir=tmp_path / "state",
        plugins=claw.PluginsConfig(discover=False, slots=claw.SlotsConfig(memory="memory-core")),
        workers=claw.WorkersConfig(inline=True),
        gateway=claw.GatewayConfig(tokens={TOKEN: ("operator.read",)}),
    )


@pytest.fixture
async def core_host(tmp_path: Path) -> AsyncIterator[claw.Host]:
    async with claw.open_host(_host_config(tmp_path), plugins=[claw_memory.plugin]) as h:
        yield h


def _sparse(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(size)


async def _peak_during_gets(host: claw.Host, ids: list[str]) -> tuple[list[str], int]:
    statuses = []
    async with open_in_memory_gateway_client(Gateway(host), TOKEN) as client:
        await client.request("memory.status", {})  # the index is open before measuring
        tracemalloc.start()
        try:
            for ref_id in ids:
                got = await client.request(
                    "memory.get",
                    {"reference": {"providerId": "memory-core", "id": ref_id}, "lines": 1},
                )
                statuses.append(got["status"])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    return statuses, peak


async def test_a_get_for_a_large_file_that_is_not_a_source_reads_nothing(
    core_host: claw.Host,
) -> None:
    ws = core_host.config.workspace_dir
    _sparse(ws / "huge.txt", 300 * 1024 * 1024)  # not a memory source
    _sparse(ws / "memory" / "huge.md", 300 * 1024 * 1024)  # a source, but over max_file_bytes
    statuses, peak = await _peak_during_gets(
        core_host, ["huge.txt", "memory/huge.md", "huge.txt"]
    )
    assert statuses == ["not_found", "not_found", "not_found"]
    print(f"peak traced allocation over 3 gets of 300 MB files: {peak / 1e6:.2f} MB")
    assert peak < 20 * 1024 * 1024


async def test_a_get_of_a_line_range_keeps_only_that_range(core_host: claw.Host) -> None:
    ws = core_host.config.workspace_dir
    line = "a memory line of some length, repeated to fill the file\n"
    (ws / "memory").mkdir()
    (ws / "memory" / "long.md").write_text(line * 30_000, encoding="utf-8")  # ~1.7 MB
    assert (ws / "memory" / "long.md").stat().st_size < 2 * 1024 * 1024
    statuses, peak = await _peak_during_gets(core_host, ["memory/long.md"])
    assert statuses == ["ok"]
    print(f"peak traced allocation reading 1 line of a 1.7 MB file: {peak / 1e6:.2f} MB")
    assert peak < 1024 * 1024


async def test_a_get_returns_the_revision_a_hit_carries(core_host: claw.Host) -> None:
    async with open_in_memory_gateway_client(Gateway(core_host), TOKEN) as client:
        found = await client.request(
            "memory.search", {"version": 2, "query": "second", "minScore": 0}
        )
        ref = found["hits"][0]["reference"]
        got = await client.request("memory.get", {"reference": ref, "from": 2, "lines": 1})
        assert (got["status"], got["text"], got["reference"]["revision"]) == (
            "ok",
            "second",
            ref["revision"],
        )
        stale = dict(ref, revision="0" * 64)
        gone = await client.request("memory.get", {"reference": stale})
        assert gone["status"] == "not_found"


line_ends = st.sampled_from(["\n", "\r\n", "\r", "\v", "\f", "\x1c", "\x85", "\u2028", ""])
texts = st.lists(
    st.tuples(st.text(alphabet="ab é€漢", max_size=6), line_ends), max_size=12
).map(lambda parts: "".join(a + b for a, b in parts))


@settings(max_examples=150, deadline=None)
@given(
    text=texts,
    block=st.integers(min_value=1, max_value=9),
    from_line=st.integers(min_value=1, max_value=8),
    lines=st.none() | st.integers(min_value=1, max_value=8),
)
def test_streamed_lines_are_exactly_splitlines_whatever_the_blocks(
    tmp_path_factory: pytest.TempPathFactory,
    text: str,
    block: int,
    from_line: int,
    lines: int | None,
) -> None:
    path = tmp_path_factory.mktemp("r") / "f.md"
    data = text.encode("utf-8")
    path.write_bytes(data)
    entry = FileEntry(vpath="f.md", real=os.fspath(path), size=len(data), mtime_ns=0)
    saved = _read._READ_BLOCK
    _read._READ_BLOCK = block
    try:
        span = read_line_range(entry, 1 << 20, from_line, lines, 1 << 20)
    finally:
        _read._READ_BLOCK = saved
    expected = text.splitlines()
    end = len(expected) if lines is None else from_line - 1 + lines
    assert span.reason is None
    assert span.lines == expected[from_line - 1 : end]
    assert span.total == len(expected)


async def test_a_source_reader_on_its_own_reads_sources_and_refuses_the_rest(
    tmp_path: Path,
) -> None:
    """A reader needs the listing, the settings and a view: no store, lexical index or
    lease (a transcript it has not listed yet is listed on first read)."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("one\ntwo\nthree\n", encoding="utf-8")
    (ws / "notes.txt").write_text("not a source\n", encoding="utf-8")
    transcripts = InMemoryTranscriptSource()
    transcripts.put("main", "main:s1", "s1", [TranscriptTurn("e1", "user", "ann", "hello")])
    settings = MemoryCoreSettings(sources=("memory", "sessions"))
    workers = InlineWorkerPool()
    view = IndexView(tmp_path / "idx", Generation.empty(0, 0, None))
    reader = SourceReader(
        view, settings, workers, SourceListing(ws, settings, workers, transcripts)
    )

    got = await reader.read("memory/a.md", from_line=2, lines=1)
    assert (got.text, got.to_line, got.total_lines, got.truncated) == ("two", 2, 3, False)
    with pytest.raises(SourcePathError, match="not a memory source"):
        await reader.read("notes.txt")
    session = await reader.read("sessions/main/s1")
    assert session.source == "sessions" and "hello" in session.text
    view.closed = True
    with pytest.raises(IndexClosedError):
        await reader.read("memory/a.md")
