"""The durable session store: operations, validation, listeners, schema versions."""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import trio

from claw import ClawError, HostClosedError, InlineWorkerPool, ThreadWorkerPool
from claw.sessions import (
    SCHEMA_VERSION,
    InvalidSessionError,
    NoAudience,
    SessionExistsError,
    SessionNotFoundError,
    SessionRow,
    SessionSchemaError,
    SessionStorageError,
    SessionStore,
    explain_audience,
    open_session_store,
    resolve_audience,
)

T = TypeVar("T")
UUID_TEXT = re.compile(r"^[a-f0-9-]{36}$")
SID = "0b5e2f7c-1111-4a2b-9c3d-00000000abcd"


def ticking_clock() -> Callable[[], float]:
    it: Iterator[int] = iter(range(1000, 10**6))
    return lambda: float(next(it))


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[SessionStore]:
    """The store contract, run against both backends (PostgreSQL: the real test server)."""
    if request.param == "postgresql":
        from claw.state.postgres._stores import open_state

        dsn = request.getfixturevalue("postgres_dsn")
        async with open_state(dsn, workers=InlineWorkerPool(), clock=ticking_clock()) as state:
            yield state.sessions
        return
    async with open_session_store(
        ":memory:", workers=InlineWorkerPool(), clock=ticking_clock()
    ) as s:
        yield s


# ---- operations ---------------------------------------------------------------------------


async def test_create_stores_a_root_row_with_a_uuid_session_id(store: SessionStore) -> None:
    row = await store.create("dm:alice", agent_id="main", chat_type="direct")
    assert UUID_TEXT.fullmatch(row.session_id)
    assert (row.agent_id, row.session_key, row.chat_type) == ("main", "dm:alice", "direct")
    assert row.peer_is_owner is False
    assert row.is_root and row.parent_key is None and row.parent_revision is None
    assert row.created_at == row.updated_at == 1000.0
    assert await store.get("dm:alice") == row == store.get_nowait("dm:alice")


async def test_create_accepts_a_given_session_id_and_owner_flag(store: SessionStore) -> None:
    row = await store.create(
        "dm:alice", agent_id="main", chat_type="direct", session_id=SID, peer_is_owner=True
    )
    assert (row.session_id, row.peer_is_owner) == (SID, True)


async def test_create_twice_is_refused(store: SessionStore) -> None:
    await store.create("grp:1", agent_id="main", chat_type="group")
    with pytest.raises(SessionExistsError, match="grp:1"):
        await store.create("grp:1", agent_id="main", chat_type="group")


async def test_get_of_a_missing_key_is_none(store: SessionStore) -> None:
    assert await store.get("nope") is None
    assert store.get_nowait("nope") is None


async def test_reset_keeping_the_id_bumps_only_the_revision(store: SessionStore) -> None:
    row = await store.create("dm:alice", agent_id="main", chat_type="direct")
    after = await store.reset("dm:alice")
    assert after.session_id == row.session_id
    assert after.lifecycle_revision == row.lifecycle_revision + 1
    assert after.incarnation != row.incarnation
    assert after.incarnation.supersedes(row.incarnation)
    assert after.created_at == row.created_at < after.updated_at


async def test_reset_with_a_new_id_changes_both(store: SessionStore) -> None:
    row = await store.create("dm:alice", agent_id="main", chat_type="direct")
    after = await store.reset("dm:alice", keep_session_id=False)
    assert after.session_id != row.session_id
    assert UUID_TEXT.fullmatch(after.session_id)
    assert after.lifecycle_revision == row.lifecycle_revision + 1
    assert after.created_at > row.created_at


async def test_reassign_changes_fields_and_revision(store: SessionStore) -> None:
    row = await store.create("dm:alice", agent_id="main", chat_type="direct")
    after = await store.reassign("dm:alice", agent_id="other", peer_is_owner=True)
    assert (after.agent_id, after.peer_is_owner, after.chat_type) == ("other", True, "direct")
    assert after.session_id == row.session_id
    assert after.lifecycle_revision == row.lifecycle_revision + 1
    again = await store.reassign("dm:alice", chat_type="thread")
    assert (again.chat_type, again.lifecycle_revision) == ("thread", after.lifecycle_revision + 1)


async def test_reassign_with_nothing_to_change_is_refused(store: SessionStore) -> None:
    await store.create("dm:alice", agent_id="main", chat_type="direct")
    with pytest.raises(InvalidSessionError, match="at least one"):
        await store.reassign("dm:alice")


async def test_spawn_child_records_the_parent_incarnation(store: SessionStore) -> None:
    parent = await store.create("dm:alice", agent_id="main", chat_type="direct", peer_is_owner=True)
    parent = await store.reset("dm:alice")
    kid = await store.spawn_child("dm:alice", "dm:alice/task-1", sender_is_owner=True)
    assert (kid.parent_key, kid.parent_session_id, kid.parent_revision) == (
        "dm:alice",
        parent.session_id,
        parent.lifecycle_revision,
    )
    assert (kid.agent_id, kid.chat_type, kid.peer_is_owner) == ("main", "direct", True)
    assert kid.session_id != parent.session_id
    assert not kid.is_root


async def test_spawn_child_can_override_chat_type_and_session_id(store: SessionStore) -> None:
    await store.create("grp:1", agent_id="main", chat_type="group")
    kid = await store.spawn_child(
        "grp:1", "grp:1/t", chat_type="thread", session_id=SID, sender_is_owner=True
    )
    assert (kid.chat_type, kid.session_id) == ("thread", SID)


async def test_spawn_child_needs_a_parent_and_a_free_child_key(store: SessionStore) -> None:
    with pytest.raises(SessionNotFoundError, match="'nope'"):
        await store.spawn_child("nope", "nope/t", sender_is_owner=True)
    await store.create("grp:1", agent_id="main", chat_type="group")
    await store.create("grp:2", agent_id="main", chat_type="group")
    with pytest.raises(SessionExistsError, match="grp:2"):
        await store.spawn_child("grp:1", "grp:2", sender_is_owner=True)
    with pytest.raises(InvalidSessionError, match="own parent"):
        await store.spawn_child("grp:1", "grp:1", sender_is_owner=True)


async def test_delete_removes_the_row_and_orphans_children(store: SessionStore) -> None:
    await store.create("grp:1", agent_id="main", chat_type="group")
    await store.spawn_child("grp:1", "grp:1/t", sender_is_owner=True)
    await store.delete("grp:1")
    assert await store.get("grp:1") is None
    assert resolve_audience(store, "grp:1/t", sender_is_owner=False) is None
    with pytest.raises(SessionNotFoundError):
        await store.delete("grp:1")


async def test_recreated_key_continues_its_revision_sequence(store: SessionStore) -> None:
    """An old incarnation never comes back, even with the same session id."""
    first = await store.create("dm:alice", agent_id="main", chat_type="direct", session_id=SID)
    await store.reset("dm:alice")
    await store.delete("dm:alice")
    assert store.last_revision_nowait("dm:alice") == first.lifecycle_revision + 1
    again = await store.create("dm:alice", agent_id="main", chat_type="direct", session_id=SID)
    assert again.lifecycle_revision == first.lifecycle_revision + 2
    assert again.incarnation.supersedes(first.incarnation)


async def test_missing_keys_raise_not_found_as_a_key_error(store: SessionStore) -> None:
    for call in (store.reset("x"), store.reassign("x", agent_id="a"), store.delete("x")):
        with pytest.raises(KeyError) as info:
            await call
        assert isinstance(info.value, SessionNotFoundError)
        assert isinstance(info.value, ClawError)
        assert str(info.value) == "no session with key 'x'"


async def test_list_orders_by_key_and_filters_by_agent(store: SessionStore) -> None:
    await store.create("b", agent_id="main", chat_type="group")
    await store.create("a", agent_id="other", chat_type="group")
    await store.create("c", agent_id="main", chat_type="direct")
    assert [r.session_key for r in await store.list()] == ["a", "b", "c"]
    assert [r.session_key for r in await store.list("main")] == ["b", "c"]
    assert await store.list("nobody") == []


async def test_snapshot_is_a_frozen_copy(store: SessionStore) -> None:
    await store.create("a", agent_id="main", chat_type="group")
    snap = store.snapshot()
    await store.reset("a")
    snapped = snap.get_nowait("a")
    current = store.get_nowait("a")
    assert snapped is not None and current is not None
    assert snapped.lifecycle_revision + 1 == current.lifecycle_revision


# ---- validation on write ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field", "value"),
    [
        ({"key": ""}, "session_key", "''"),
        ({"key": "   "}, "session_key", "'   '"),
        ({"key": "a\x00b"}, "session_key", "'a\\x00b'"),
        ({"agent_id": ""}, "agent_id", "''"),
        ({"agent_id": 7}, "agent_id", "7"),
        ({"chat_type": "dm"}, "chat_type", "'dm'"),
        ({"chat_type": None}, "chat_type", "None"),
        ({"session_id": "not-a-uuid"}, "session_id", "'not-a-uuid'"),
        ({"session_id": SID.upper()}, "session_id", repr(SID.upper())),
        ({"session_id": "-" * 36}, "session_id", repr("-" * 36)),
        ({"peer_is_owner": 1}, "peer_is_owner", "1"),
    ],
)
async def test_create_rejects_malformed_fields_naming_field_and_value(
    store: SessionStore, kwargs: dict[str, object], field: str, value: str
) -> None:
    args: dict[str, object] = {"key": "k", "agent_id": "main", "chat_type": "group", **kwargs}
    key = args.pop("key")
    with pytest.raises(InvalidSessionError) as info:
        await store.create(key, **args)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    assert info.value.field == field
    assert f"session {field}:" in str(info.value)
    assert value in str(info.value)
    assert await store.list() == []


async def test_other_writes_reject_malformed_fields(store: SessionStore) -> None:
    await store.create("g", agent_id="main", chat_type="group")
    with pytest.raises(InvalidSessionError, match="chat_type.*'dm'"):
        await store.spawn_child("g", "g/t", chat_type="dm", sender_is_owner=True)  # type: ignore[arg-type]
    with pytest.raises(InvalidSessionError, match="session_id.*'x'"):
        await store.spawn_child("g", "g/t", session_id="x", sender_is_owner=True)
    with pytest.raises(InvalidSessionError, match="session_key.*''"):
        await store.spawn_child("g", "", sender_is_owner=True)
    with pytest.raises(InvalidSessionError, match="agent_id.*''"):
        await store.reassign("g", agent_id="")
    with pytest.raises(InvalidSessionError, match="chat_type.*'x'"):
        await store.reassign("g", chat_type="x")  # type: ignore[arg-type]
    with pytest.raises(InvalidSessionError, match="keep_session_id.*0"):
        await store.reset("g", keep_session_id=0)  # type: ignore[arg-type]
    row = store.get_nowait("g")
    assert row is not None and row.lifecycle_revision == 1


# ---- listeners ----------------------------------------------------------------------------


async def test_listeners_hear_every_committed_change_after_the_mirror_updates(
    store: SessionStore,
) -> None:
    heard: list[tuple[str, int | None]] = []

    def listener(key: str) -> None:
        row = store.get_nowait(key)
        heard.append((key, None if row is None else row.lifecycle_revision))

    store.add_listener(listener)
    await store.create("p", agent_id="main", chat_type="group")
    await store.spawn_child("p", "p/c", sender_is_owner=True)
    await store.reset("p")
    await store.reassign("p/c", chat_type="thread")
    await store.delete("p/c")
    assert heard == [("p", 1), ("p/c", 1), ("p", 2), ("p/c", 2), ("p/c", None)]
    with pytest.raises(SessionExistsError):
        await store.create("p", agent_id="main", chat_type="group")
    assert len(heard) == 5  # a refused change is not heard
    store.remove_listener(listener)
    await store.reset("p")
    assert len(heard) == 5


async def test_listeners_run_on_the_event_loop_thread_with_a_thread_pool() -> None:
    loop_thread = threading.get_ident()
    threads: list[int] = []
    async with open_session_store(":memory:", workers=ThreadWorkerPool()) as store:
        store.add_listener(lambda key: threads.append(threading.get_ident()))
        await store.create("a", agent_id="main", chat_type="group")
        await store.reset("a")
        assert (await store.get("a")) == store.get_nowait("a")
    assert threads == [loop_thread, loop_thread]


async def test_a_failing_listener_does_not_stop_the_others_or_undo_the_change(
    store: SessionStore,
) -> None:
    heard: list[str] = []

    def broken(key: str) -> None:
        raise RuntimeError(f"listener broke on {key}")

    store.add_listener(broken)
    store.add_listener(heard.append)
    with pytest.raises(RuntimeError, match="broke on a"):
        await store.create("a", agent_id="main", chat_type="group")
    assert heard == ["a"]
    assert await store.get("a") is not None


async def test_a_change_cancelled_before_it_starts_is_not_made(store: SessionStore) -> None:
    await store.create("a", agent_id="main", chat_type="group")
    with trio.CancelScope() as scope:
        scope.cancel()
        await store.reset("a")
    assert scope.cancelled_caught
    row = await store.get("a")
    assert row is not None and row.lifecycle_revision == 1 == store.last_revision_nowait("a")


async def test_concurrent_changes_are_serialized() -> None:
    async with open_session_store(":memory:", workers=ThreadWorkerPool(4)) as store:
        await store.create("a", agent_id="main", chat_type="group")
        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(store.reset, "a")
        row = await store.get("a")
        assert row is not None and row.lifecycle_revision == 21
        assert store.get_nowait("a") == row


async def test_a_closed_store_refuses_calls(store: SessionStore) -> None:
    await store.aclose()
    await store.aclose()  # idempotent
    with pytest.raises(HostClosedError, match="closed"):
        await store.get("a")
    with pytest.raises(HostClosedError, match="closed"):
        await store.create("a", agent_id="main", chat_type="group")


# ---- files, WAL and schema versions -------------------------------------------------------


async def test_file_store_persists_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "sessions.sqlite"
    async with open_session_store(path, workers=InlineWorkerPool()) as store:
        row = await store.create("dm:alice", agent_id="main", chat_type="direct")
        row = await store.reset("dm:alice")
    async with open_session_store(path, workers=InlineWorkerPool()) as store:
        assert await store.get("dm:alice") == row == store.get_nowait("dm:alice")
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


async def test_deleted_key_watermark_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "sessions.sqlite"
    async with open_session_store(path, workers=InlineWorkerPool()) as store:
        await store.create("a", agent_id="main", chat_type="group")
        await store.reset("a")
        await store.delete("a")
    async with open_session_store(path, workers=InlineWorkerPool()) as store:
        assert store.last_revision_nowait("a") == 2
        again = await store.create("a", agent_id="main", chat_type="group")
        assert again.lifecycle_revision == 3


V1_SHAPE = """
CREATE TABLE sessions (
    session_key TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    lifecycle_revision INTEGER NOT NULL DEFAULT 0,
    chat_type TEXT,
    parent_key TEXT,
    parent_session_id TEXT,
    parent_revision INTEGER,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
PRAGMA user_version = 1;
"""

ROOT_SID = "aaaaaaaa-0000-4000-8000-000000000001"
CHILD_SID = "aaaaaaaa-0000-4000-8000-000000000002"
LEGACY_SID = "aaaaaaaa-0000-4000-8000-000000000003"


def write_v1(path: Path, extra_rows: tuple[tuple[object, ...], ...] = ()) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.executescript(V1_SHAPE)
        conn.executemany(
            "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                ("dm:alice", "main", ROOT_SID, 0, "direct", None, None, None, 10.0, 11.0),
                ("dm:alice/t", "main", CHILD_SID, 0, "direct", "dm:alice", ROOT_SID, 0, 12, 12),
                ("legacy", "main", LEGACY_SID, 4, None, None, None, None, 1.0, 2.0),
                *extra_rows,
            ],
        )
        conn.commit()
    finally:
        conn.close()


async def test_v1_store_is_migrated_keeping_incarnations(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite"
    write_v1(path)
    async with open_session_store(path, workers=InlineWorkerPool()) as store:
        dm = await store.get("dm:alice")
        assert dm == SessionRow("main", "dm:alice", ROOT_SID, 0, "direct", False,
                                created_at=10.0, updated_at=11.0)  # fmt: skip
        # The child's recorded parent incarnation is carried over exactly, but it was
        # spawned before receipts existed: no audience until it is respawned.
        kid = await store.get("dm:alice/t")
        assert kid is not None and kid.parent_session_id == ROOT_SID
        assert kid.spawned_by_owner is None
        assert resolve_audience(store, "dm:alice/t", sender_is_owner=True) is None
        found = explain_audience(store, "dm:alice/t", sender_is_owner=True)
        assert isinstance(found, NoAudience)
        assert "respawn it from its parent session" in found.reason
        audience = resolve_audience(store, "dm:alice", sender_is_owner=True)
        assert audience is not None and audience.kind == "owner-private"
        # A legacy row without a chat type is kept, and gets no audience.
        legacy = await store.get("legacy")
        assert legacy is not None and legacy.chat_type is None
        assert resolve_audience(store, "legacy", sender_is_owner=False) is None
        # The migrated store takes v2 writes.
        await store.reassign("legacy", chat_type="group", peer_is_owner=True)
        assert resolve_audience(store, "legacy", sender_is_owner=False) is not None
        await store.delete("dm:alice/t")
        assert store.last_revision_nowait("dm:alice/t") == 0
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


async def test_v1_row_that_cannot_be_carried_over_refuses_by_name(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite"
    write_v1(
        path, (("bad", "main", LEGACY_SID.replace("a", "A"), 0, "dm", None, None, None, 1, 1),)
    )
    with pytest.raises(SessionSchemaError, match=r"schema version 1.*row 'bad'.*session_id"):
        await SessionStore.open(path, workers=InlineWorkerPool())
    # The refusal changed nothing: the file is still a readable v1 store.
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (4,)


async def test_v1_row_with_unknown_chat_type_refuses_by_name(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite"
    write_v1(path, (("odd", "main", LEGACY_SID[:-1] + "9", 0, "dm", None, None, None, 1, 1),))
    with pytest.raises(SessionSchemaError, match=r"row 'odd'.*chat_type.*'dm'"):
        await SessionStore.open(path, workers=InlineWorkerPool())


async def test_newer_schema_version_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite"
    async with open_session_store(path, workers=InlineWorkerPool()) as store:
        await store.create("a", agent_id="main", chat_type="group")
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    with pytest.raises(SessionSchemaError) as info:
        await SessionStore.open(path, workers=InlineWorkerPool())
    assert f"schema version {SCHEMA_VERSION + 5}" in str(info.value)
    assert str(path) in str(info.value)
    assert isinstance(info.value, RuntimeError)


async def test_foreign_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    with pytest.raises(SessionSchemaError, match=r"not a claw session store.*'notes'"):
        await SessionStore.open(path, workers=InlineWorkerPool())


async def test_a_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "garbage.sqlite"
    path.write_bytes(b"definitely not a database" * 100)
    with pytest.raises(SessionSchemaError, match="garbage.sqlite"):
        await SessionStore.open(path, workers=InlineWorkerPool())


async def test_a_path_that_cannot_be_opened_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(SessionStorageError, match="no-such-dir") as info:
        await SessionStore.open(tmp_path / "no-such-dir" / "s.sqlite", workers=InlineWorkerPool())
    assert isinstance(info.value, OSError)


async def test_current_schema_missing_a_table_is_refused_as_damaged(tmp_path: Path) -> None:
    path = tmp_path / "damaged.sqlite"
    async with open_session_store(path, workers=InlineWorkerPool()):
        pass
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE session_key_watermarks")
    with pytest.raises(SessionSchemaError, match="damaged"):
        await SessionStore.open(path, workers=InlineWorkerPool())


async def test_the_database_refuses_rows_that_bypass_validation(tmp_path: Path) -> None:
    """The v2 table's CHECK constraints back up write validation."""
    path = tmp_path / "s.sqlite"
    async with open_session_store(path, workers=InlineWorkerPool()):
        pass
    with sqlite3.connect(path) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO sessions VALUES "
            "('k', 'main', ?, 1, 'dm', 0, NULL, NULL, NULL, 0, 0, NULL)",
            (ROOT_SID,),
        )
    with sqlite3.connect(path) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute(  # a root with a spawn receipt
            "INSERT INTO sessions VALUES "
            "('k', 'main', ?, 1, 'group', 0, NULL, NULL, NULL, 0, 0, 1)",
            (ROOT_SID,),
        )


async def test_v2_store_is_migrated_with_children_lacking_spawn_receipts(tmp_path: Path) -> None:
    from claw.state.sqlite._session_schema import _sessions_ddl

    path = tmp_path / "v2.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute(_sessions_ddl("sessions", receipts=False))
        conn.execute(
            "CREATE TABLE session_key_watermarks (session_key TEXT PRIMARY KEY NOT NULL, "
            "last_revision INTEGER NOT NULL) STRICT"
        )
        conn.executemany(
            "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, 1.0, 1.0)",
            [
                ("dm:alice", "main", ROOT_SID, 1, "direct", None, None, None),
                ("dm:alice/t", "main", CHILD_SID, 1, "direct", "dm:alice", ROOT_SID, 1),
            ],
        )
        conn.execute("PRAGMA user_version = 2")
    conn.close()
    async with open_session_store(path, workers=InlineWorkerPool()) as store:
        kid = await store.get("dm:alice/t")
        assert kid is not None and kid.spawned_by_owner is None
        found = explain_audience(store, "dm:alice/t", sender_is_owner=True)
        assert isinstance(found, NoAudience) and "predates spawn receipts" in found.reason
        respawned = await store.spawn_child("dm:alice", "dm:alice/t2", sender_is_owner=True)
        assert respawned.spawned_by_owner is True
        audience = resolve_audience(store, "dm:alice/t2", sender_is_owner=False)
        assert audience is not None and audience.kind == "owner-private"
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (3,)
    conn.close()
