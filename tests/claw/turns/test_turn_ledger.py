import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from claw import InlineWorkerPool
from claw.models import AssistantMessage, ToolCall, ToolResult, UserMessage
from claw.state.sqlite._transcripts import SCHEMA_VERSION
from claw.turns import (
    TranscriptError,
    TranscriptStore,
    TurnLedgerError,
    TurnStatus,
    UnknownTurnError,
    open_transcript_store,
)

KEY, SID = "agent:main:chat", "sess-1"


@pytest.fixture
def store(ledger_store: TranscriptStore) -> TranscriptStore:
    """The ledger contract, run against both backends (see ``ledger_store``)."""
    return ledger_store


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[TranscriptStore]:
    async with open_transcript_store(tmp_path / "t.db", workers=InlineWorkerPool()) as opened:
        yield opened


async def run_turn(
    store: TranscriptStore, turn_id: str, *, engine_id: str | None = "lossless"
) -> None:
    await store.record_admitted(
        KEY,
        SID,
        UserMessage(f"q {turn_id}"),
        turn_id=turn_id,
        advancement_key=f"adv-{turn_id}",
        engine_id=engine_id,
    )
    await store.append(KEY, SID, [AssistantMessage(f"a {turn_id}")], turn_id=turn_id, terminal=True)


async def test_admission_writes_the_user_entry_and_the_ledger_row_together(
    store: TranscriptStore,
) -> None:
    await store.append(KEY, SID, [UserMessage("earlier"), AssistantMessage("reply")])
    entry, turn = await store.record_admitted(
        KEY, SID, UserMessage("hello"), turn_id="t1", advancement_key="adv-1", engine_id="lossless"
    )
    assert (entry.entry_id, entry.turn_id, entry.advancement_key) == (f"{SID}:3", "t1", "adv-1")
    assert (turn.turn_id, turn.session_key, turn.session_id) == ("t1", KEY, SID)
    assert (turn.first_seq, turn.first_entry_id, turn.terminal_seq) == (3, f"{SID}:3", None)
    assert turn.status is TurnStatus.ADMITTED and not turn.needs_commit
    assert await store.get_turn("t1") == turn
    assert await store.pending_commits() == ()


async def test_turn_entries_inherit_the_advancement_key_and_terminal_is_recorded_atomically(
    store: TranscriptStore,
) -> None:
    await store.record_admitted(
        KEY, SID, UserMessage("q"), turn_id="t1", advancement_key="adv-1", engine_id="lossless"
    )
    call = ToolCall("c1", "search", {})
    middle = await store.append(
        KEY,
        SID,
        [AssistantMessage("", tool_calls=[call]), ToolResult("c1", "search", "r")],
        turn_id="t1",
    )
    assert {e.advancement_key for e in middle} == {"adv-1"}
    (last,) = await store.append(KEY, SID, [AssistantMessage("done")], turn_id="t1", terminal=True)
    turn = await store.get_turn("t1")
    assert (turn.first_seq, turn.terminal_seq, turn.terminal_entry_id) == (1, 4, last.entry_id)
    assert turn.status is TurnStatus.TERMINAL and turn.needs_commit
    assert await store.pending_commits() == (turn,)
    assert await store.pending_commits(SID) == (turn,)
    assert await store.pending_commits("other-session") == ()


async def test_mark_committed_clears_the_pending_commit_and_is_idempotent(
    store: TranscriptStore,
) -> None:
    await run_turn(store, "t1")
    first = await store.mark_committed("t1")
    assert first.status is TurnStatus.COMMITTED
    assert (first.commit_outcome, first.committed_at is not None) == ("committed", True)
    again = await store.mark_committed("t1", outcome="duplicate")
    assert again == first, "the first record stands"
    assert await store.pending_commits() == ()


async def test_a_legacy_path_turn_never_waits_for_a_commit(store: TranscriptStore) -> None:
    await run_turn(store, "t1", engine_id=None)
    turn = await store.get_turn("t1")
    assert turn.status is TurnStatus.TERMINAL and not turn.needs_commit
    assert await store.pending_commits() == ()


async def test_pending_commits_survive_a_crash_between_terminal_entry_and_commit(
    tmp_path: Path,
) -> None:
    """A child process ends a turn and dies before committing; a restart sees it pending."""
    path = tmp_path / "t.db"
    child = f"""
import os, trio
from claw import InlineWorkerPool
from claw.models import AssistantMessage, UserMessage
from claw.turns import open_transcript_store
async def main():
    async with open_transcript_store({str(path)!r}, workers=InlineWorkerPool()) as store:
        await store.record_admitted("k", "s", UserMessage("q"), turn_id="t1",
                                    advancement_key="adv-1", engine_id="lossless")
        await store.append("k", "s", [AssistantMessage("a")], turn_id="t1", terminal=True)
        os._exit(0)
trio.run(main)
"""
    await trio.run_process([sys.executable, "-c", child])
    async with open_transcript_store(path, workers=InlineWorkerPool()) as store:
        (pending,) = await store.pending_commits()
        assert (pending.turn_id, pending.advancement_key, pending.engine_id) == (
            "t1",
            "adv-1",
            "lossless",
        )
        assert (pending.first_seq, pending.terminal_seq) == (1, 2)
        await store.mark_committed("t1")
    async with open_transcript_store(path, workers=InlineWorkerPool()) as store:
        assert await store.pending_commits() == ()
        assert (await store.get_turn("t1")).status is TurnStatus.COMMITTED


async def test_a_turn_id_or_advancement_key_is_admitted_once(store: TranscriptStore) -> None:
    await run_turn(store, "t1")
    with pytest.raises(TurnLedgerError, match="turn id already recorded"):
        await store.record_admitted(
            KEY, SID, UserMessage("again"), turn_id="t1", advancement_key="adv-x"
        )
    with pytest.raises(TurnLedgerError, match="advancement key already recorded for turn 't1'"):
        await store.record_admitted(
            KEY, SID, UserMessage("again"), turn_id="t2", advancement_key="adv-t1"
        )
    assert len(await store.read_entries(SID)) == 2, "a refused admission leaves no user entry"


async def test_ledger_refuses_out_of_order_and_foreign_updates(store: TranscriptStore) -> None:
    await store.record_admitted(KEY, SID, UserMessage("q"), turn_id="t1", advancement_key="adv-1")
    with pytest.raises(TurnLedgerError, match="no terminal entry yet"):
        await store.mark_committed("t1")
    with pytest.raises(TranscriptError, match="does not exist"):
        await store.mark_terminal("t1", 5)
    with pytest.raises(UnknownTurnError, match="'ghost'"):
        await store.mark_committed("ghost")
    with pytest.raises(TranscriptError, match="belongs to session id 'sess-1'"):
        await store.append(KEY, "sess-2", [AssistantMessage("x")], turn_id="t1")
    with pytest.raises(TranscriptError, match="advancement key 'adv-1', not 'adv-2'"):
        await store.append(KEY, SID, [AssistantMessage("x")], turn_id="t1", advancement_key="adv-2")
    with pytest.raises(TranscriptError, match="admitted by a UserMessage"):
        await store.record_admitted(
            KEY, SID, AssistantMessage("x"), turn_id="t9", advancement_key="a9"
        )  # type: ignore[arg-type]


async def test_mark_terminal_records_an_already_appended_entry_once(store: TranscriptStore) -> None:
    await store.record_admitted(KEY, SID, UserMessage("q"), turn_id="t1", advancement_key="adv-1")
    await store.append(KEY, SID, [AssistantMessage("a"), AssistantMessage("b")], turn_id="t1")
    turn = await store.mark_terminal("t1", 3)
    assert turn.terminal_seq == 3
    assert await store.mark_terminal("t1", 3) == turn
    with pytest.raises(TurnLedgerError, match="already ended"):
        await store.mark_terminal("t1", 2)
    with pytest.raises(TurnLedgerError, match="already ended"):
        await store.append(KEY, SID, [AssistantMessage("c")], turn_id="t1", terminal=True)
    assert len(await store.read_entries(SID)) == 3, "the refused terminal append rolled back"


async def test_turns_lists_the_ledger_in_admission_order(store: TranscriptStore) -> None:
    for turn_id in ("t1", "t2", "t3"):
        await run_turn(store, turn_id)
    await store.mark_committed("t2")
    assert [t.turn_id for t in await store.turns(SID)] == ["t1", "t2", "t3"]
    assert [t.turn_id for t in await store.pending_commits()] == ["t1", "t3"]


async def test_a_closed_turn_is_finished_never_committed_and_reopened_only_if_latest(
    store: TranscriptStore,
) -> None:
    await store.record_admitted(KEY, SID, UserMessage("q"), turn_id="t1", advancement_key="a1")
    closed = await store.close_turn("t1", TurnStatus.FAILED, "ModelError: down")
    assert (closed.status, closed.close_reason, closed.open) == (
        TurnStatus.FAILED,
        "ModelError: down",
        False,
    )
    assert await store.close_turn("t1", TurnStatus.ABORTED, "again") == closed  # first wins
    with pytest.raises(TurnLedgerError, match="closed as failed"):
        await store.append(KEY, SID, [AssistantMessage("late")], turn_id="t1", terminal=True)
    reopened = await store.reopen_turn("t1")
    assert reopened.open and reopened.close_status is None
    await store.close_turn("t1", TurnStatus.ABORTED, "cancelled")
    await run_turn(store, "t2")
    with pytest.raises(TurnLedgerError, match="'t2' was admitted after it"):
        await store.reopen_turn("t1")
    with pytest.raises(TurnLedgerError, match="reached its terminal entry"):
        await store.close_turn("t2", TurnStatus.FAILED, "too late")
    stale = await store.close_turn("t2", TurnStatus.STALE, "session reset since")
    assert stale.status is TurnStatus.STALE and not stale.needs_commit
    with pytest.raises(TurnLedgerError, match="never committed"):
        await store.mark_committed("t2")
    assert await store.pending_commits() == ()


async def test_a_dead_owners_open_turns_are_aborted_in_one_pass_and_counted_in_stats(
    sqlite_store: TranscriptStore, tmp_path: Path
) -> None:
    store = sqlite_store  # SQLite's own files and plans; tests/postgres covers PostgreSQL
    await run_turn(store, "t1")
    await store.record_admitted(KEY, SID, UserMessage("q"), turn_id="t2", advancement_key="a2")
    assert (await store.stats(SID)).open_turn_seqs == (3,)
    assert (await store.get_turn("t2")).owner_id == store.owner_id
    # Its own turn in flight is alive to the store that admitted it.
    assert await store.close_orphaned_turns("process died") == ()
    # A second store on the file is another owner, to which this one is dead.
    async with open_transcript_store(tmp_path / "t.db", workers=InlineWorkerPool()) as next_one:
        (aborted,) = await next_one.close_orphaned_turns("process died")
        assert (aborted.turn_id, aborted.status) == ("t2", TurnStatus.ABORTED)
        assert (await next_one.stats(SID)).open_turn_seqs == ()
        assert await next_one.close_orphaned_turns("process died") == ()


async def test_a_live_owners_open_turn_is_not_closed_by_another_store(
    sqlite_store: TranscriptStore, tmp_path: Path
) -> None:
    store = sqlite_store  # SQLite's own files and plans; tests/postgres covers PostgreSQL
    await store.record_admitted(KEY, SID, UserMessage("q"), turn_id="t1", advancement_key="a1")
    async with open_transcript_store(
        tmp_path / "t.db", workers=InlineWorkerPool(), is_alive=lambda o: o == store.owner_id
    ) as other:
        assert await other.close_orphaned_turns("process died") == ()
    assert (await store.get_turn("t1")).open


async def test_repeating_an_admission_exactly_records_one_turn(store: TranscriptStore) -> None:
    first = await store.record_admitted(
        KEY, SID, UserMessage("q"), turn_id="t1", advancement_key="a1"
    )
    again = await store.record_admitted(
        KEY, SID, UserMessage("q"), turn_id="t1", advancement_key="a1"
    )
    assert again == first
    assert len(await store.turns()) == 1
    assert len(await store.read_entries(SID)) == 1


def as_version_3(conn: sqlite3.Connection) -> None:
    """Turn a transcript database back into what version 3 wrote: no per-session
    summary of the entries, no index of the turns in flight."""
    conn.execute("DROP TRIGGER transcript_entries_summary")
    conn.execute("DROP INDEX turn_ledger_open")
    for column in (
        "entry_count",
        "byte_size",
        "last_seq",
        "compaction_count",
        "last_compaction_seq",
    ):
        conn.execute(f"ALTER TABLE transcript_sessions DROP COLUMN {column}")
    conn.execute("PRAGMA user_version = 3")


async def test_a_version_3_database_gains_summaries_counted_from_its_entries(
    tmp_path: Path,
) -> None:
    from claw.turns import _transcript_core as core

    path = tmp_path / "t.db"
    async with open_transcript_store(path, workers=InlineWorkerPool()) as store:
        await run_turn(store, "t1")
        await store.append_compaction(KEY, SID, "summary")
        await store.append("other", "sess-2", [UserMessage("héllo"), AssistantMessage("ok")])
        await store.record_admitted(
            "other", "sess-2", UserMessage("q"), turn_id="t2", advancement_key="a2"
        )
        before = [await store.stats(SID), await store.stats("sess-2")]
    with sqlite3.connect(path) as conn:
        as_version_3(conn)
    async with open_transcript_store(path, workers=InlineWorkerPool()) as store:
        assert [await store.stats(SID), await store.stats("sess-2")] == before
        await store.append(KEY, SID, [UserMessage("after the migration")])
        for session_id in (SID, "sess-2"):
            counted = await store._read(core.counted_stats, sql=store._sql, session_id=session_id)
            assert await store.stats(session_id) == counted
        assert (await store.stats(SID)).entry_count == before[0].entry_count + 1
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


async def test_a_version_1_ledger_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with open_transcript_store(path, workers=InlineWorkerPool()) as store:
        await run_turn(store, "t1")
    with sqlite3.connect(path) as conn:  # turn it back into what version 1 wrote
        as_version_3(conn)
        conn.execute("DROP INDEX turn_ledger_pending")
        for column in (
            "owner_id",
            "lifecycle_revision",
            "close_reason",
            "close_status",
            "closed_at",
        ):
            conn.execute(f"ALTER TABLE turn_ledger DROP COLUMN {column}")
        conn.execute("PRAGMA user_version = 1")
    async with open_transcript_store(path, workers=InlineWorkerPool()) as store:
        (turn,) = await store.turns()
        assert turn.status is TurnStatus.TERMINAL and turn.close_status is None
        await store.record_admitted(KEY, SID, UserMessage("q"), turn_id="t2", advancement_key="a2")
        await store.close_turn("t2", TurnStatus.FAILED, "boom")
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


async def test_a_version_2_ledger_gains_turn_owners(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with open_transcript_store(path, workers=InlineWorkerPool()) as store:
        await store.record_admitted(KEY, SID, UserMessage("q"), turn_id="t1", advancement_key="a1")
    with sqlite3.connect(path) as conn:  # what version 2 wrote: no owners
        as_version_3(conn)
        conn.execute("ALTER TABLE turn_ledger DROP COLUMN owner_id")
        conn.execute("PRAGMA user_version = 2")
    async with open_transcript_store(path, workers=InlineWorkerPool()) as store:
        (turn,) = await store.turns()
        assert turn.open and turn.owner_id is None
        # A turn with no recorded owner was left by a process of an older claw: dead.
        (aborted,) = await store.close_orphaned_turns("process died")
        assert aborted.status is TurnStatus.ABORTED
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


async def test_the_commit_queue_of_a_session_key_is_an_index_search(
    sqlite_store: TranscriptStore,
) -> None:
    store = sqlite_store  # SQLite's own files and plans; tests/postgres covers PostgreSQL
    await run_turn(store, "t1")
    await store.record_admitted(
        KEY, "sess-2", UserMessage("q"), turn_id="t2", advancement_key="a2", engine_id="e"
    )
    await store.append(KEY, "sess-2", [AssistantMessage("a")], turn_id="t2", terminal=True)
    await store.record_admitted(
        "other", "sess-3", UserMessage("q"), turn_id="t3", advancement_key="a3", engine_id="e"
    )
    await store.append("other", "sess-3", [AssistantMessage("a")], turn_id="t3", terminal=True)
    queued = await store.pending_commits(session_key=KEY)
    assert [t.turn_id for t in queued] == ["t1", "t2"]  # every incarnation of the key
    conn = store._conn
    assert conn is not None
    (plan,) = conn.execute(
        "EXPLAIN QUERY PLAN SELECT turn_id FROM turn_ledger WHERE session_key = ? AND "
        "engine_id IS NOT NULL AND terminal_seq IS NOT NULL AND committed_at IS NULL "
        "AND close_status IS NULL",
        (KEY,),
    ).fetchall()
    assert "USING INDEX turn_ledger_pending" in plan[3]  # not a scan of the whole ledger


async def test_the_turns_in_flight_are_read_alone_on_request(store: TranscriptStore) -> None:
    await run_turn(store, "t1")  # ended
    await store.record_admitted(KEY, SID, UserMessage("q"), turn_id="t2", advancement_key="a2")
    await store.close_turn("t2", TurnStatus.FAILED, "ModelError: down")
    await store.record_admitted(KEY, "sess-2", UserMessage("q"), turn_id="t3", advancement_key="a3")
    await store.record_admitted(KEY, SID, UserMessage("q"), turn_id="t4", advancement_key="a4")
    assert [t.turn_id for t in await store.turns(SID, open_only=True)] == ["t4"]
    assert [t.turn_id for t in await store.turns(open_only=True)] == ["t3", "t4"]
    every = await store.turns(SID)
    assert [t.turn_id for t in every] == ["t1", "t2", "t4"]
    assert await store.turns(SID, open_only=True) == tuple(t for t in every if t.open)
