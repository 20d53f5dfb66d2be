"""A reference context engine that implements the full durable admitted-turn contract.

:class:`ReferenceContextEngine` keeps its own SQLite store of committed turns, keyed by
``advancement_key``: ``commit_turn`` inserts the turn and its messages in one
transaction, and a retry with the same key returns ``"duplicate"`` without writing.
It does not own compaction (it delegates to the runtime), bootstraps from the host's
transcript through the messages ``assemble`` receives, and returns a thread-bootstrap
projection whose epoch changes when a compaction happened. It exists so that tests
(ours and users') have a real engine to exercise the host against.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from claw.context import (
    CURRENT_TURN_FENCE,
    TURN_ADVANCEMENT_IDEMPOTENCY,
    AfterTurnParams,
    AssembleParams,
    AssembleResult,
    BootstrapParams,
    CommitTurnParams,
    CommitTurnResult,
    CompactParams,
    CompactResult,
    ContextEngineInfo,
    ContextProjection,
    IngestParams,
    IngestResult,
    MaintainParams,
    TranscriptSemantics,
    build_memory_system_prompt_addition,
    delegate_compaction_to_runtime,
    estimate_tokens,
)
from claw.models import CompactionSummary, message_to_dict
from claw.plugin_sdk import enter_wal

_SCHEMA = """
CREATE TABLE IF NOT EXISTS advancements (
    advancement_key TEXT PRIMARY KEY,
    session_key TEXT NOT NULL,
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    entry_ids TEXT NOT NULL,
    committed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    advancement_key TEXT NOT NULL REFERENCES advancements(advancement_key),
    position INTEGER NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (advancement_key, position)
);
"""


@attrs.define(eq=False)
class ReferenceContextEngine:
    """See the module docstring. ``path`` is the engine's own SQLite file."""

    path: Path | str
    engine_id: str = "reference"
    durable: bool = True
    before_commit: Callable[[CommitTurnParams], None] | None = None
    _conn: sqlite3.Connection = attrs.field(init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    calls: list[str] = attrs.field(factory=list, init=False)
    assembled: list[AssembleParams] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        self._conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        # Two processes of one test may open the same new file at once (see enter_wal).
        self._conn.execute("PRAGMA busy_timeout = 5000")
        enter_wal(self._conn)
        self._conn.execute("PRAGMA synchronous = FULL")
        self._conn.executescript(_SCHEMA)

    @property
    def info(self) -> ContextEngineInfo:
        semantics = (
            TranscriptSemantics(
                current_turn_fence=CURRENT_TURN_FENCE,
                turn_advancement_idempotency=TURN_ADVANCEMENT_IDEMPOTENCY,
            )
            if self.durable
            else None
        )
        return ContextEngineInfo(
            id=self.engine_id,
            name="Reference durable engine",
            owns_compaction=False,
            transcript_semantics=semantics,
        )

    async def ingest(self, params: IngestParams) -> IngestResult:
        self.calls.append("ingest")
        await trio.lowlevel.checkpoint()
        return IngestResult(ingested=False)

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        self.calls.append("assemble")
        self.assembled.append(params)
        await trio.lowlevel.checkpoint()
        addition = build_memory_system_prompt_addition(
            available_tools=params.available_tools or frozenset(),
            citations_mode=params.citations_mode,
            agent_session_key=params.session_key,
        )
        summaries = sum(isinstance(m, CompactionSummary) for m in params.messages)
        return AssembleResult(
            messages=params.messages,
            estimated_tokens=estimate_tokens(params.messages),
            system_prompt_addition=addition or None,
            context_projection=ContextProjection(
                mode="thread_bootstrap", epoch=f"{params.session_id}:{summaries}"
            ),
        )

    async def compact(self, params: CompactParams) -> CompactResult:
        self.calls.append("compact")
        return await delegate_compaction_to_runtime(params)

    async def after_turn(self, params: AfterTurnParams) -> None:
        self.calls.append("after_turn")
        await trio.lowlevel.checkpoint()

    async def bootstrap(self, params: BootstrapParams) -> None:
        """Record how much earlier history the host handed over."""
        self.calls.append(f"bootstrap:{len(params.messages)}")
        await trio.lowlevel.checkpoint()

    async def maintain(self, params: MaintainParams) -> None:
        """Nothing to tidy in this store; honours cancellation through its checkpoint."""
        self.calls.append("maintain")
        await trio.lowlevel.checkpoint()

    async def dispose(self) -> None:
        self.calls.append("dispose")
        await trio.lowlevel.checkpoint()

    def _commit_sync(self, params: CommitTurnParams, now: float) -> CommitTurnResult:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                exists = self._conn.execute(
                    "SELECT 1 FROM advancements WHERE advancement_key = ?",
                    (params.advancement_key,),
                ).fetchone()
                if exists:
                    self._conn.execute("ROLLBACK")
                    return CommitTurnResult(status="duplicate")
                self._conn.execute(
                    "INSERT INTO advancements VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        params.advancement_key,
                        params.session_key or "",
                        params.session_id or "",
                        params.turn_id,
                        json.dumps(list(params.entry_ids)),
                        now,
                    ),
                )
                self._conn.executemany(
                    "INSERT INTO messages VALUES (?, ?, ?)",
                    [
                        (params.advancement_key, i, json.dumps(message_to_dict(m)))
                        for i, m in enumerate(params.messages)
                    ],
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return CommitTurnResult(status="committed")

    async def commit_turn(self, params: CommitTurnParams) -> CommitTurnResult:
        self.calls.append("commit_turn")
        if self.before_commit is not None:
            self.before_commit(params)
        await trio.lowlevel.checkpoint()
        # A small local write: done inline so deterministic (MockClock) tests stay so.
        return self._commit_sync(params, trio.current_time())

    def advancements(self) -> list[tuple[str, str, int]]:
        """``(advancement_key, turn_id, message count)`` of every committed turn, in order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT a.advancement_key, a.turn_id, COUNT(m.position) FROM advancements a "
                "LEFT JOIN messages m USING (advancement_key) GROUP BY a.advancement_key "
                "ORDER BY a.rowid"
            ).fetchall()
        return [(str(k), str(t), int(n)) for k, t, n in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
