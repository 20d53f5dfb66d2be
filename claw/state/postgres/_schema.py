"""The state schema in PostgreSQL: sessions, transcripts and the turn ledger.

The tables mirror the SQLite backend's (``claw/state/sqlite/_session_schema.py``,
``claw/state/sqlite/_transcripts.py``, ``claw/turns/_ledger.py``) column for column, with the
same checks, so both backends keep the same contracts; differences are PostgreSQL's
types (``boolean``, ``double precision``) and what several hosts need:

* ``claw_turn_ledger.owner_id`` names the host process that admitted a turn; that
  process holds an advisory lock on it (:data:`OWNER_LOCK_CLASS`) while it lives, so
  another host can tell a dead owner's unfinished turn from a live one's.
* A host running a turn of a session holds a session-level advisory lock on its key
  (:data:`SESSION_LOCK_CLASS`), so turns, flushes and compactions of one session run on
  one host at a time.
* ``claw_turn_ledger.position`` orders turns by admission (SQLite's ``rowid``).
* ``claw_session_changes`` is the NOTIFY channel of committed incarnation changes
  (payload: the session key), sent in the transaction that makes the change.
"""

from __future__ import annotations

from typing import Final

from ._migrations import Migration

COMPONENT: Final[str] = "state"

#: The NOTIFY channel of committed session changes (payload: the session key, or ""
#: for "reload everything" when a key does not fit a notification).
SESSION_CHANNEL: Final[str] = "claw_session_changes"

#: First key of the two-key advisory locks a live host holds on its owner id.
OWNER_LOCK_CLASS: Final[int] = 0x636C6177  # "claw"
#: First key of the session-level locks a host holds on a session key while it runs a
#: turn of that session (see ``_session_locks.py``).
SESSION_LOCK_CLASS: Final[int] = 0x636C7373  # "clss"
#: First key of the transaction-scoped locks serializing appends to one transcript.
TRANSCRIPT_LOCK_CLASS: Final[int] = 0x636C7472  # "cltr"

_SESSIONS: Final[tuple[str, ...]] = (
    """
    CREATE TABLE claw_sessions (
        session_key text PRIMARY KEY CHECK (length(session_key) > 0),
        agent_id text NOT NULL CHECK (length(agent_id) > 0),
        session_id text NOT NULL CHECK (length(session_id) = 36),
        lifecycle_revision bigint NOT NULL CHECK (lifecycle_revision >= 0),
        chat_type text CHECK (chat_type IN ('direct', 'group', 'channel', 'thread')),
        peer_is_owner boolean NOT NULL DEFAULT false,
        parent_key text,
        parent_session_id text,
        parent_revision bigint,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        spawned_by_owner boolean,
        CHECK ((parent_key IS NULL) = (parent_session_id IS NULL)),
        CHECK ((parent_key IS NULL) = (parent_revision IS NULL)),
        CHECK (parent_key IS NULL OR parent_key <> session_key),
        CHECK (parent_key IS NOT NULL OR spawned_by_owner IS NULL)
    )
    """,
    "CREATE INDEX claw_sessions_by_agent ON claw_sessions (agent_id, session_key)",
    """
    CREATE TABLE claw_session_key_watermarks (
        session_key text PRIMARY KEY,
        last_revision bigint NOT NULL CHECK (last_revision >= 0)
    )
    """,
)

_TRANSCRIPTS: Final[tuple[str, ...]] = (
    """
    CREATE TABLE claw_transcript_sessions (
        session_id text PRIMARY KEY,
        session_key text NOT NULL,
        created_at double precision NOT NULL,
        position bigserial NOT NULL
    )
    """,
    """CREATE INDEX claw_transcript_sessions_by_key
        ON claw_transcript_sessions (session_key, created_at, position)""",
    """
    CREATE TABLE claw_transcript_entries (
        session_id text NOT NULL REFERENCES claw_transcript_sessions (session_id),
        seq integer NOT NULL CHECK (seq > 0),
        kind text NOT NULL CHECK (kind IN
            ('user', 'assistant', 'tool_call', 'tool_result', 'compaction', 'system')),
        created_at double precision NOT NULL,
        payload text NOT NULL,
        turn_id text,
        advancement_key text,
        first_kept_seq integer,
        tokens_before integer,
        tokens_after integer,
        PRIMARY KEY (session_id, seq)
    )
    """,
    """CREATE INDEX claw_transcript_compactions
        ON claw_transcript_entries (session_id, seq) WHERE kind = 'compaction'""",
    """
    CREATE TABLE claw_flush_completions (
        flush_id text PRIMARY KEY,
        session_key text NOT NULL,
        completed_at double precision NOT NULL
    )
    """,
    """
    CREATE TABLE claw_turn_ledger (
        turn_id text PRIMARY KEY,
        session_key text NOT NULL,
        session_id text NOT NULL,
        advancement_key text NOT NULL UNIQUE,
        engine_id text,
        first_seq integer NOT NULL,
        terminal_seq integer,
        admitted_at double precision NOT NULL,
        terminal_at double precision,
        committed_at double precision,
        commit_outcome text,
        closed_at double precision,
        close_status text CHECK (close_status IN ('failed', 'aborted', 'stale', 'abandoned')),
        close_reason text,
        lifecycle_revision bigint,
        owner_id text NOT NULL,
        position bigserial NOT NULL,
        FOREIGN KEY (session_id, first_seq)
            REFERENCES claw_transcript_entries (session_id, seq),
        FOREIGN KEY (session_id, terminal_seq)
            REFERENCES claw_transcript_entries (session_id, seq)
    )
    """,
    "CREATE INDEX claw_turn_ledger_by_session ON claw_turn_ledger (session_id, first_seq)",
    """CREATE INDEX claw_turn_ledger_pending ON claw_turn_ledger (session_key)
        WHERE engine_id IS NOT NULL AND terminal_seq IS NOT NULL AND committed_at IS NULL
        AND close_status IS NULL""",
    """CREATE INDEX claw_turn_ledger_open ON claw_turn_ledger (owner_id)
        WHERE terminal_seq IS NULL AND close_status IS NULL""",
)

# Each transcript session's summary of its entries (what ``stats`` and a listing read
# instead of the entries), kept by a trigger in the inserting transaction, whatever
# build of claw the inserting host runs. The trigger comes before the first count: its
# lock on the entries holds other hosts' inserts until this migration commits, so none
# falls between the count and the trigger.
_SUMMARIES: Final[tuple[str, ...]] = (
    """
    ALTER TABLE claw_transcript_sessions
        ADD COLUMN entry_count bigint NOT NULL DEFAULT 0,
        ADD COLUMN byte_size bigint NOT NULL DEFAULT 0,
        ADD COLUMN last_seq integer NOT NULL DEFAULT 0,
        ADD COLUMN compaction_count bigint NOT NULL DEFAULT 0,
        ADD COLUMN last_compaction_seq integer
    """,
    """
    CREATE FUNCTION claw_transcript_summary() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE claw_transcript_sessions SET
            entry_count = entry_count + 1,
            byte_size = byte_size + octet_length(NEW.payload),
            last_seq = greatest(last_seq, NEW.seq),
            compaction_count = compaction_count + (NEW.kind = 'compaction')::int,
            last_compaction_seq = CASE WHEN NEW.kind = 'compaction'
                THEN greatest(coalesce(last_compaction_seq, 0), NEW.seq)
                ELSE last_compaction_seq END
        WHERE session_id = NEW.session_id;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER claw_transcript_entries_summary
        AFTER INSERT ON claw_transcript_entries
        FOR EACH ROW EXECUTE FUNCTION claw_transcript_summary()
    """,
    """
    UPDATE claw_transcript_sessions s SET
        entry_count = c.entry_count, byte_size = c.byte_size, last_seq = c.last_seq,
        compaction_count = c.compaction_count, last_compaction_seq = c.last_compaction_seq
    FROM (
        SELECT session_id, count(*) AS entry_count,
            coalesce(sum(octet_length(payload)), 0) AS byte_size,
            coalesce(max(seq), 0) AS last_seq,
            count(*) FILTER (WHERE kind = 'compaction') AS compaction_count,
            max(seq) FILTER (WHERE kind = 'compaction') AS last_compaction_seq
        FROM claw_transcript_entries GROUP BY session_id
    ) c
    WHERE s.session_id = c.session_id
    """,
)

#: The state component's migrations, in order. Append; never edit a released one.
STATE_MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration("0001_sessions", _SESSIONS),
    Migration("0002_transcripts_and_ledger", _TRANSCRIPTS),
    Migration("0003_transcript_summaries", _SUMMARIES),
)
