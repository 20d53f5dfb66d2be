"""A corrupt system-of-record database fails at open, naming the file, and is kept (§1)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import claw
from claw import InlineWorkerPool
from claw.models import AssistantMessage, UserMessage
from claw.sessions import SessionSchemaError, SessionStorageError
from claw.turns import TranscriptStorageError, open_transcript_store


async def _seed(config: claw.HostConfig) -> None:
    async with claw.open_host(config) as host:
        for i in range(60):
            row = await host.sessions.create(f"dm:{i}", agent_id="main", chat_type="direct")
            await host.transcripts.append(
                row.session_key, row.session_id, [UserMessage("q" * 400), AssistantMessage("a")]
            )


def _corrupt(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    if how == "header":
        data[:16] = b"not a database!!"
    elif how == "torn page":  # a page in the middle overwritten, as by a torn write
        start = page * (len(data) // page // 2)
        data[start : start + page] = b"\xff" * page
    else:  # truncated
        del data[len(data) // 2 :]
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name", ["transcripts.sqlite3", "sessions.sqlite3"])
@pytest.mark.parametrize("how", ["header", "torn page", "truncated"])
async def test_a_corrupt_state_database_fails_at_open_naming_the_file_and_is_kept(
    host_config: claw.HostConfig, name: str, how: str
) -> None:
    await _seed(host_config)
    path = host_config.resolved_state_dir / name
    for leftover in (Path(f"{path}-wal"), Path(f"{path}-shm")):
        assert not leftover.exists()  # checkpointed at close: the main file is the database
    _corrupt(path, how)
    before = path.read_bytes()
    errors = (TranscriptStorageError, SessionStorageError, SessionSchemaError)
    with pytest.raises(errors) as info:
        async with claw.open_host(host_config):
            pass  # pragma: no cover - the open fails
    assert str(path) in str(info.value)
    assert path.read_bytes() == before  # the system of record is never deleted or rewritten


async def test_a_torn_transcript_page_is_refused_at_open_not_at_the_first_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "transcripts.sqlite3"
    async with open_transcript_store(path, workers=InlineWorkerPool()) as store:
        for _ in range(100):
            await store.append("k", "s", [UserMessage("q" * 400), AssistantMessage("a")])
    _corrupt(path, "torn page")
    with pytest.raises(TranscriptStorageError, match="is corrupt") as info:
        async with open_transcript_store(path, workers=InlineWorkerPool()):
            pass  # pragma: no cover - the open fails
    assert str(path) in str(info.value)
    assert isinstance(info.value, OSError)


async def test_a_healthy_database_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "transcripts.sqlite3"
    async with open_transcript_store(path, workers=InlineWorkerPool()) as store:
        await store.append("k", "s", [UserMessage("q")])
    async with open_transcript_store(path, workers=InlineWorkerPool()) as store:
        assert len(await store.read_entries("s")) == 1
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA quick_check").fetchone() == ("ok",)
