"""The on-disk schema of the session store, its version, and migrations to it.

The version lives in ``PRAGMA user_version``. Opening a store runs, inside one
``BEGIN IMMEDIATE`` transaction, exactly one of: create the current schema
(empty database), migrate an older one, accept the current one, or refuse
(a newer version, or a database that is not a session store). A migration
that would have to guess (a legacy row with an unknown chat type or a
non-UUID session id) refuses by name instead, so nothing is ever read as
garbage.

Schema history:

* **v1**: ``sessions`` without ``peer_is_owner``; ``chat_type`` nullable and
  unchecked (rows from before chat types were recorded); no constraints; no
  memory of deleted keys.
* **v2**: a ``STRICT`` table with ``CHECK`` constraints mirroring
  write validation, ``peer_is_owner``, an index by agent, and
  ``session_key_watermarks``, which keeps the last lifecycle revision of each
  deleted key so that a re-created key continues its revision sequence and an
  old incarnation can never come back.
* **v3** (current): ``spawned_by_owner``, a child's spawn receipt (whether the
  spawning turn's sender was the owner; ``NULL`` for roots). Migrated children
  keep ``NULL``: their receipt was never recorded, so they resolve to no
  audience (reason: respawn them from their parent session) rather than
  guessing one.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from ...sessions._errors import InvalidSessionError, SessionSchemaError
from ...sessions._rows import SessionRow, validate_row
from .._sessions_sql import COLUMNS, SessionSql, row_values

SCHEMA_VERSION: Final[int] = 3

#: The v1 table, kept here as the documented shape the v1 -> v2 migration reads.
V1_DDL: Final[str] = """
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
)
"""

_SESSIONS_V2_DDL: Final[str] = """
CREATE TABLE {name} (
    session_key TEXT PRIMARY KEY NOT NULL CHECK (length(session_key) > 0),
    agent_id TEXT NOT NULL CHECK (length(agent_id) > 0),
    session_id TEXT NOT NULL CHECK (length(session_id) = 36),
    lifecycle_revision INTEGER NOT NULL CHECK (lifecycle_revision >= 0),
    chat_type TEXT CHECK (chat_type IN ('direct', 'group', 'channel', 'thread')),
    peer_is_owner INTEGER NOT NULL DEFAULT 0 CHECK (peer_is_owner IN (0, 1)),
    parent_key TEXT,
    parent_session_id TEXT,
    parent_revision INTEGER,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    {receipt}
    CHECK ((parent_key IS NULL) = (parent_session_id IS NULL)),
    CHECK ((parent_key IS NULL) = (parent_revision IS NULL)),
    CHECK (parent_key IS NULL OR parent_key <> session_key){receipt_check}
) STRICT
"""

_RECEIPT_COLUMN: Final[str] = (
    "spawned_by_owner INTEGER CHECK (spawned_by_owner IS NULL OR spawned_by_owner IN (0, 1)),"
)
_RECEIPT_CHECK: Final[str] = ",\n    CHECK (parent_key IS NOT NULL OR spawned_by_owner IS NULL)"


def _sessions_ddl(name: str, *, receipts: bool = True) -> str:
    return _SESSIONS_V2_DDL.format(
        name=name,
        receipt=_RECEIPT_COLUMN if receipts else "",
        receipt_check=_RECEIPT_CHECK if receipts else "",
    )


_WATERMARKS_DDL: Final[str] = """
CREATE TABLE session_key_watermarks (
    session_key TEXT PRIMARY KEY NOT NULL,
    last_revision INTEGER NOT NULL CHECK (last_revision >= 0)
) STRICT
"""

_INDEX_DDL: Final[str] = "CREATE INDEX sessions_by_agent ON sessions (agent_id, session_key)"

SQLITE: Final = SessionSql(
    sessions="sessions", watermarks="session_key_watermarks", placeholder="?", greatest="max"
)
"""The SQLite spelling of the session tables (no row locks: ``BEGIN IMMEDIATE`` holds
the database's write lock for the whole change)."""

#: The columns of schema version 2 (version 3 added ``spawned_by_owner``).
_V2_COLUMNS: Final[str] = COLUMNS.removesuffix(", spawned_by_owner")


def _tables(conn: sqlite3.Connection) -> set[str]:
    cursor = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    return {str(name) for (name,) in cursor.fetchall()}


def _create_current(conn: sqlite3.Connection) -> None:
    conn.execute(_sessions_ddl("sessions"))
    conn.execute(_INDEX_DDL)
    conn.execute(_WATERMARKS_DDL)


def _migrate_v1_to_v2(conn: sqlite3.Connection, where: str) -> None:
    """Rebuild a v1 store as v2, validating every legacy row on the way."""
    cursor = conn.execute(
        "SELECT agent_id, session_key, session_id, lifecycle_revision, chat_type, 0, "
        "parent_key, parent_session_id, parent_revision, created_at, updated_at "
        "FROM sessions ORDER BY session_key"
    )
    legacy = cursor.fetchall()
    rows: list[SessionRow] = []
    for values in legacy:
        (agent_id, key, sid, rev, chat, _peer, pkey, psid, prev, cat, uat) = values
        row = SessionRow(
            agent_id=agent_id,
            session_key=key,
            session_id=sid,
            lifecycle_revision=rev,
            chat_type=chat,
            peer_is_owner=False,
            parent_key=pkey,
            parent_session_id=psid,
            parent_revision=prev,
            created_at=cat,
            updated_at=uat,
        )
        try:
            # A missing chat type is carried over as missing (it resolves to no
            # audience); anything else that is wrong cannot be carried faithfully.
            validate_row(row, allow_missing_chat_type=True)
        except InvalidSessionError as exc:
            raise SessionSchemaError(
                f"cannot migrate the session store at {where} from schema version 1: "
                f"row {key!r} is invalid ({exc}); fix or delete that row and reopen"
            ) from exc
        rows.append(row)
    conn.execute(_sessions_ddl("sessions_v2", receipts=False))
    conn.executemany(
        f"INSERT INTO sessions_v2 ({_V2_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [row_values(r)[:-1] for r in rows],
    )
    conn.execute("DROP TABLE sessions")
    conn.execute("ALTER TABLE sessions_v2 RENAME TO sessions")
    conn.execute(_INDEX_DDL)
    conn.execute(_WATERMARKS_DDL)


def _migrate_v2_to_v3(conn: sqlite3.Connection) -> None:
    """Add spawn receipts; every existing child keeps ``NULL`` (never recorded)."""
    conn.execute(_sessions_ddl("sessions_v3"))
    conn.execute(
        f"INSERT INTO sessions_v3 ({_V2_COLUMNS}, spawned_by_owner) "
        f"SELECT {_V2_COLUMNS}, NULL FROM sessions"
    )
    conn.execute("DROP TABLE sessions")
    conn.execute("ALTER TABLE sessions_v3 RENAME TO sessions")
    conn.execute(_INDEX_DDL)


def ensure_schema(conn: sqlite3.Connection, where: str) -> int:
    """Bring the database to :data:`SCHEMA_VERSION` or refuse; returns the version found.

    Must be called inside a write transaction (``BEGIN IMMEDIATE``) so that a
    crash or a refusal leaves the database exactly as it was.
    """
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    tables = _tables(conn)
    if version == 0:
        if tables:
            raise SessionSchemaError(
                f"the database at {where} is not a claw session store (schema version 0 "
                f"with tables {sorted(tables)!r}); point the store at its own file"
            )
        _create_current(conn)
    elif version == 1:
        if "sessions" not in tables:
            raise SessionSchemaError(
                f"the session store at {where} claims schema version 1 but has no sessions "
                "table; it is damaged"
            )
        _migrate_v1_to_v2(conn, where)
        _migrate_v2_to_v3(conn)
    elif version == 2:
        missing = {"sessions", "session_key_watermarks"} - tables
        if missing:
            raise SessionSchemaError(
                f"the session store at {where} (schema version 2) lacks tables "
                f"{sorted(missing)!r}; it is damaged"
            )
        _migrate_v2_to_v3(conn)
    elif version == SCHEMA_VERSION:
        missing = {"sessions", "session_key_watermarks"} - tables
        if missing:
            raise SessionSchemaError(
                f"the session store at {where} (schema version {version}) lacks tables "
                f"{sorted(missing)!r}; it is damaged"
            )
        return int(version)
    else:
        raise SessionSchemaError(
            f"the session store at {where} has schema version {version}, but this claw reads "
            f"versions up to {SCHEMA_VERSION}; open it with the newer claw that wrote it"
        )
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return int(version)
