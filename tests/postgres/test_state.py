"""The PostgreSQL state: schema by named migrations, sessions and the ledger across hosts.

Two ``open_state`` blocks on one database stand for two hosts here (each has its own
pool, mirror, watchers and owner lock); tests/postgres/test_multihost.py runs real
host processes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import psycopg
import pytest
import trio

import claw
from claw._workers import ThreadWorkerPool
from claw.models import AssistantMessage, UserMessage
from claw.sessions import SessionExistsError
from claw.state.postgres._migrations import Migration, applied_migrations, check_current, migrate
from claw.state.postgres._schema import STATE_MIGRATIONS
from claw.state.postgres._stores import PostgresState, open_state
from claw.turns import TurnStatus
from tests.postgres._util import until

SID = "0b5e2f7c-1111-4a2b-9c3d-00000000abcd"


def ticking_clock() -> Callable[[], float]:
    it: Iterator[int] = iter(range(1000, 10**6))
    return lambda: float(next(it))


@pytest.fixture
async def host_a(postgres_dsn: str) -> AsyncIterator[PostgresState]:
    async with open_state(postgres_dsn, workers=ThreadWorkerPool(4), clock=ticking_clock()) as s:
        yield s


@pytest.fixture
async def host_b(postgres_dsn: str, host_a: PostgresState) -> AsyncIterator[PostgresState]:
    async with open_state(postgres_dsn, workers=ThreadWorkerPool(4), clock=ticking_clock()) as s:
        yield s


# ---- schema -------------------------------------------------------------------------------


def test_a_fresh_database_gets_every_state_migration_in_order(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        applied = migrate(conn, "state", STATE_MIGRATIONS, where="test")
        assert applied == tuple(m.name for m in STATE_MIGRATIONS)
        assert applied_migrations(conn, "state") == applied
        # Reopening applies nothing and accepts it.
        assert migrate(conn, "state", STATE_MIGRATIONS, where="test") == ()
        check_current(conn, "state", STATE_MIGRATIONS, where="test")


def test_an_older_schema_is_migrated_forward_by_name(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        migrate(conn, "state", STATE_MIGRATIONS[:1], where="test")
        with pytest.raises(claw.SchemaVersionError, match="'0002_transcripts_and_ledger' is not"):
            check_current(conn, "state", STATE_MIGRATIONS, where="test")
        assert migrate(conn, "state", STATE_MIGRATIONS, where="test") == (
            "0002_transcripts_and_ledger",
            "0003_transcript_summaries",
        )


async def test_transcripts_written_before_summaries_are_counted_by_their_migration(
    postgres_dsn: str,
) -> None:
    from claw.turns import _transcript_core as core

    with psycopg.connect(postgres_dsn) as conn:  # what a build before 0003 wrote
        migrate(conn, "state", STATE_MIGRATIONS[:2], where="test")
        conn.execute(
            "INSERT INTO claw_transcript_sessions (session_id, session_key, created_at) "
            "VALUES (%s, 'dm:old', 1), ('sess-empty', 'dm:empty', 2)",
            (SID,),
        )
        for seq, kind, payload in (
            (1, "user", '{"text":"héllo"}'),
            (2, "compaction", '{"summary":"s"}'),
            (3, "assistant", '{"text":"ok"}'),
        ):
            conn.execute(
                "INSERT INTO claw_transcript_entries (session_id, seq, kind, created_at, "
                "payload, first_kept_seq) VALUES (%s, %s, %s, 1, %s, %s)",
                (SID, seq, kind, payload, 2 if kind == "compaction" else None),
            )
    async with open_state(postgres_dsn, workers=ThreadWorkerPool(2)) as state:
        t = state.transcripts
        stats = await t.stats(SID)
        assert (stats.entry_count, stats.last_seq, stats.compaction_count) == (3, 3, 1)
        assert stats.last_compaction_seq == 2
        assert stats == await t._read(core.counted_stats, sql=t._sql, session_id=SID)
        await t.append("dm:old", SID, [UserMessage("after")])
        assert await t.stats(SID) == await t._read(core.counted_stats, sql=t._sql, session_id=SID)
        assert (await t.stats("sess-empty")).entry_count == 0
        listed = await t.session_listing(["dm:old", "dm:empty"])
        assert [(key, s.session_id, s.entry_count) for key, s in listed] == [
            ("dm:old", SID, 4),
            ("dm:empty", "sess-empty", 0),
        ]


async def test_a_schema_with_a_migration_this_build_does_not_know_is_refused_by_name(
    postgres_dsn: str,
) -> None:
    newer = (*STATE_MIGRATIONS, Migration("0099_from_the_future", ("SELECT 1",)))
    with psycopg.connect(postgres_dsn) as conn:
        migrate(conn, "state", newer, where="test")
    with pytest.raises(claw.SchemaVersionError, match="'0099_from_the_future'") as info:
        async with open_state(postgres_dsn, workers=ThreadWorkerPool()):
            pass
    assert isinstance(info.value, RuntimeError)
    # Nothing was changed by the refusal.
    with psycopg.connect(postgres_dsn) as conn:
        assert applied_migrations(conn, "state")[-1] == "0099_from_the_future"


def test_migrations_of_two_components_do_not_mix(postgres_dsn: str) -> None:
    other = (Migration("0001_records", ("CREATE TABLE records_t (x int)",)),)
    with psycopg.connect(postgres_dsn) as conn:
        migrate(conn, "state", STATE_MIGRATIONS, where="test")
        assert migrate(conn, "records", other, where="test") == ("0001_records",)
        assert migrate(conn, "state", STATE_MIGRATIONS, where="test") == ()


# ---- sessions across hosts ----------------------------------------------------------------


async def test_a_reset_on_one_host_reaches_the_mirror_and_listeners_of_another(
    host_a: PostgresState, host_b: PostgresState
) -> None:
    row = await host_a.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    await until(lambda: host_b.sessions.get_nowait("dm:alice") == row)
    seen: list[str] = []
    host_b.sessions.add_listener(seen.append)
    reset = await host_a.sessions.reset("dm:alice", keep_session_id=False)
    await until(lambda: seen == ["dm:alice"])
    assert host_b.sessions.get_nowait("dm:alice") == reset
    assert reset.lifecycle_revision == row.lifecycle_revision + 1


async def test_read_committed_sees_another_hosts_commit_before_any_notification(
    host_a: PostgresState, host_b: PostgresState
) -> None:
    row = await host_a.sessions.create("dm:bob", agent_id="main", chat_type="direct")
    # No waiting for the watcher: the release check reads the database itself.
    snap = await host_b.sessions.read_committed(["dm:bob", "dm:nobody"])
    assert snap.rows == {"dm:bob": row}
    await host_a.sessions.delete("dm:bob")
    snap = await host_b.sessions.read_committed(["dm:bob"])
    assert snap.rows == {} and snap.watermarks == {"dm:bob": row.lifecycle_revision}


async def test_two_hosts_creating_one_key_make_one_row(
    host_a: PostgresState, host_b: PostgresState
) -> None:
    outcomes: list[object] = []

    async def create(state: PostgresState) -> None:
        try:
            outcomes.append(
                await state.sessions.create("dm:race", agent_id="main", chat_type="direct")
            )
        except SessionExistsError as exc:
            outcomes.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(create, host_a)
        nursery.start_soon(create, host_b)
    assert sorted(type(o).__name__ for o in outcomes) == ["SessionExistsError", "SessionRow"]


async def test_a_revision_survives_delete_and_recreate_across_hosts(
    host_a: PostgresState, host_b: PostgresState
) -> None:
    first = await host_a.sessions.create("dm:carol", agent_id="main", chat_type="direct")
    await host_b.sessions.delete("dm:carol")
    again = await host_a.sessions.create("dm:carol", agent_id="main", chat_type="direct")
    assert again.lifecycle_revision == first.lifecycle_revision + 1
    await until(lambda: host_b.sessions.get_nowait("dm:carol") == again)


async def test_concurrent_resets_on_two_hosts_both_count(
    host_a: PostgresState, host_b: PostgresState
) -> None:
    row = await host_a.sessions.create("dm:dave", agent_id="main", chat_type="direct")
    async with trio.open_nursery() as nursery:
        for state in (host_a, host_b) * 3:
            nursery.start_soon(state.sessions.reset, "dm:dave")
    final = await host_a.sessions.get("dm:dave")
    assert final is not None and final.lifecycle_revision == row.lifecycle_revision + 6


# ---- transcripts and the ledger across hosts ----------------------------------------------


async def test_two_hosts_admitting_one_advancement_key_record_one_turn(
    host_a: PostgresState, host_b: PostgresState
) -> None:
    results: list[Any] = []

    async def admit(state: PostgresState) -> None:
        results.append(
            await state.transcripts.record_admitted(
                "dm:erin", SID, UserMessage("hi"), turn_id="t-1", advancement_key="adv-1",
                engine_id="e",
            )
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(admit, host_a)
        nursery.start_soon(admit, host_b)
    (entry_a, turn_a), (entry_b, turn_b) = results
    assert turn_a == turn_b and entry_a == entry_b
    assert len(await host_a.transcripts.turns(SID)) == 1
    assert (await host_b.transcripts.stats(SID)).entry_count == 1


async def test_appends_from_two_hosts_interleave_without_clashing(
    host_a: PostgresState, host_b: PostgresState
) -> None:
    async def write(state: PostgresState, who: str) -> None:
        for i in range(5):
            await state.transcripts.append("dm:f", SID, [AssistantMessage(f"{who}{i}")])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write, host_a, "a")
        nursery.start_soon(write, host_b, "b")
    entries = await host_a.transcripts.read_entries(SID)
    assert [e.seq for e in entries] == list(range(1, 11))


async def test_a_dead_hosts_open_turn_is_closed_once_and_a_live_ones_never(
    postgres_dsn: str, host_b: PostgresState
) -> None:
    async with open_state(postgres_dsn, workers=ThreadWorkerPool()) as doomed:
        _, turn = await doomed.transcripts.record_admitted(
            "dm:g", SID, UserMessage("q"), turn_id="t-dead", advancement_key="adv-dead"
        )
        assert turn.owner_id == doomed.transcripts.owner_id
        # While its owner lives, nobody may close it.
        assert await host_b.transcripts.close_orphaned_turns("owner gone") == ()
    # The owner is gone (its connections, and so its lock, with it).
    closed = await host_b.transcripts.close_orphaned_turns("owner gone")
    assert [(t.turn_id, t.status) for t in closed] == [("t-dead", TurnStatus.ABORTED)]
    assert await host_b.transcripts.close_orphaned_turns("owner gone") == ()
    # The session goes on: the next turn is admitted and ends.
    entry, _ = await host_b.transcripts.record_admitted(
        "dm:g", SID, UserMessage("again"), turn_id="t-next", advancement_key="adv-next"
    )
    (end,) = await host_b.transcripts.append(
        "dm:g", SID, [AssistantMessage("ok")], turn_id="t-next", terminal=True
    )
    assert (await host_b.transcripts.get_turn("t-next")).terminal_seq == end.seq
    assert entry.seq == 2


async def test_a_delta_over_postgres_follows_compaction_like_sqlite(
    host_a: PostgresState,
) -> None:
    t = host_a.transcripts
    await t.append("dm:h", SID, [UserMessage("one"), AssistantMessage("two")])
    first = await t.read_session_transcript_visible_message_delta(SID)
    assert first.rebuilt and [m.text for m in first.messages] == ["one", "two"]  # type: ignore[union-attr]
    await t.append("dm:h", SID, [UserMessage("three")])
    more = await t.read_session_transcript_visible_message_delta(SID, first.cursor)
    assert not more.rebuilt and len(more.messages) == 1
    await t.append_compaction("dm:h", SID, "summary", first_kept_seq=3)
    after = await t.read_session_transcript_visible_message_delta(SID, more.cursor)
    assert after.rebuilt and len(after.messages) == 2


async def test_the_version_moves_on_another_hosts_write(
    host_a: PostgresState, host_b: PostgresState
) -> None:
    before = host_b.transcripts.version
    await host_a.transcripts.append("dm:i", SID, [UserMessage("x")])
    await until(lambda: host_b.transcripts.version > before)


