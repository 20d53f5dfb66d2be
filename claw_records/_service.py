"""The records service: the database pool, the per-agent local indexes, the change feed.

One service per host (registered with ``api.register_service``). While the host runs it
holds a connection pool to PostgreSQL (through :mod:`claw.plugin_sdk.postgres`), keeps a
:class:`~claw_records._index.RecordIndex` per agent it has served, and keeps them
current three ways:

* after this host's own write, at once (a search right after an add sees it);
* on ``NOTIFY claw_memory_records`` from any host's write (a LISTEN thread), the
  notified agent's index catches up from its cursor;
* every ``catch_up_interval`` seconds, and whenever the LISTEN connection (re)connects,
  every open index catches up: a notification lost while the listener was away is
  repaired then, without any rule depending on notification delivery.

Catching up is "apply every change with a sequence above the cursor": a host that
starts (or first serves an agent) builds its index that way from sequence 0, reading
stored vectors, never computing them again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np
import numpy.typing as npt
import trio

from claw.plugin_sdk import ConfigError, EmbeddingProvider, PluginApi, check_json
from claw.plugin_sdk.search import HashEmbedder, embed_texts, normalise_rows

from . import _store
from ._errors import InvalidRecordError, RecordsUnavailableError
from ._index import RecordIndex

if TYPE_CHECKING:
    from claw.plugin_sdk.postgres import Database, ListenEvent

    from ._plugin import RecordsConfig

logger = logging.getLogger("claw_records")

PLUGIN_ID = "memory-records"
CATCH_UP_BATCH = 2000


@attrs.define(eq=False)
class _AgentIndex:
    index: RecordIndex
    lock: trio.Lock = attrs.field(factory=trio.Lock)


@attrs.frozen
class CatchUpStatistics:
    """How one service has kept its indexes current (a snapshot, for tests and health)."""

    catch_ups: int
    changes_applied: int
    notifications: int
    reconnects: int


@attrs.define(eq=False)
class RecordsService:
    """Owns the pool, the local indexes and the change feed for the life of the host."""

    api: PluginApi
    config: RecordsConfig
    clock: Callable[[], float] = time.time
    _db: Database | None = attrs.field(default=None, init=False)
    _indexes: dict[str, _AgentIndex] = attrs.field(factory=dict, init=False)
    _open_lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _closed: bool = attrs.field(default=False, init=False)
    _stats: dict[str, int] = attrs.field(
        factory=lambda: dict.fromkeys(
            ("catch_ups", "changes_applied", "notifications", "reconnects"), 0
        ),
        init=False,
    )
    _embedder: EmbeddingProvider | bool | None = attrs.field(default=False, init=False)

    # -- lifetime -----------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the pool, check the schema, listen; run until the host closes."""
        # Imported here: psycopg is an optional extra, and an installed but unconfigured
        # Memory Records must not need it.
        from claw.plugin_sdk.postgres import open_database  # noqa: PLC0415

        try:
            async with open_database(
                self.config.dsn,
                workers=self.api.workers,
                min_size=self.config.pool_min,
                max_size=self.config.pool_max,
                acquire_timeout=self.config.pool_timeout,
                dsn_key=self.config.dsn_key,
                name=PLUGIN_ID,
            ) as db:
                await db.transaction(_store.ensure_schema, db.name)
                self._db = db
                async with db.listen(_store.CHANNEL) as events, trio.open_nursery() as nursery:
                    nursery.start_soon(self._follow, events)
                    nursery.start_soon(self._periodic_catch_up)
                    task_status.started()
                    await trio.sleep_forever()
        finally:
            self._closed = True
            self._db = None
            entries = list(self._indexes.values())
            self._indexes.clear()
            for entry in entries:
                entry.index.close()

    def database(self) -> Database:
        if self._db is None or self._closed:
            raise RecordsUnavailableError(
                f'memory provider "{PLUGIN_ID}" is not running (its database is not open)'
            )
        return self._db

    def statistics(self) -> CatchUpStatistics:
        return CatchUpStatistics(**self._stats)

    # -- embeddings ---------------------------------------------------------------

    def embedder(self) -> EmbeddingProvider | None:
        """The configured embedding provider (the host's registry first).

        ``claw-hash`` falls back to the SDK's hash embedder when no plugin registered it
        (Memory Core, which does, may be disabled); ``none`` means lexical search only.
        """
        if self._embedder is not False:
            return self._embedder  # type: ignore[return-value]
        name = self.config.embedder
        provider: EmbeddingProvider | None
        if name == "none":
            provider = None
        else:
            provider = self.api.get_embedding_provider(name)
            if provider is None and name == "claw-hash":
                provider = HashEmbedder(workers=self.api.workers)
            if provider is None:
                raise ConfigError(
                    f"plugins.entries.{PLUGIN_ID}.config.embedder",
                    f"embedding provider {name!r} is not registered",
                    value=name,
                )
        self._embedder = provider
        return provider

    def embedder_identity(self) -> str | None:
        """What a stored vector must have been made by to be used here (id/model/dims)."""
        e = self.embedder()
        return None if e is None else f"{e.id}/{e.model}/{e.dims}"

    async def embed(self, text: str) -> _store.Vector | None:
        """The record's vector, computed once by the writer and stored with it."""
        e = self.embedder()
        if e is None:
            return None
        vec = await embed_texts(e, [text], 1)
        identity = self.embedder_identity()
        assert identity is not None
        return _store.Vector(embedder=identity, data=np.ascontiguousarray(vec[0]).tobytes())

    async def query_vector(self, query: str) -> npt.NDArray[np.float32] | None:
        e = self.embedder()
        if e is None:
            return None
        result: npt.NDArray[np.float32] = normalise_rows(await embed_texts(e, [query], 1))[0]
        return result

    def fusion_weights(self) -> tuple[float, float]:
        """``(vector, text)`` weights: the configured ones, else the embedder's hint."""
        if self.config.vector_weight is not None:
            return self.config.vector_weight, 1.0 - self.config.vector_weight
        hint = getattr(self.embedder(), "fusion_vector_weight", None)
        v = float(hint) if isinstance(hint, int | float) and 0.0 < hint <= 1.0 else 0.5
        return v, 1.0 - v

    # -- indexes ------------------------------------------------------------------

    async def index_for(self, agent_id: str) -> RecordIndex:
        """The agent's local index, built by catching up from sequence 0 on first use."""
        entry = self._indexes.get(agent_id)
        if entry is None:
            async with self._open_lock:
                entry = self._indexes.get(agent_id)
                if entry is None:
                    self.database()
                    e = self.embedder()
                    entry = _AgentIndex(
                        RecordIndex(
                            dims=None if e is None else e.dims, embedder=self.embedder_identity()
                        )
                    )
                    await self._catch_up_entry(agent_id, entry)
                    self._indexes[agent_id] = entry
        return entry.index

    def open_agents(self) -> tuple[str, ...]:
        return tuple(self._indexes)

    async def catch_up(self, agent_id: str) -> int:
        """Apply the agent's changes after its index's cursor (if this host has one open)."""
        entry = self._indexes.get(agent_id)
        return 0 if entry is None else await self._catch_up_entry(agent_id, entry)

    async def catch_up_all(self) -> int:
        applied = 0
        for agent_id in list(self._indexes):
            applied += await self.catch_up(agent_id)
        return applied

    async def rebuild(self, agent_id: str) -> int:
        """Drop the agent's local index and build it again from sequence 0."""
        async with self._open_lock:
            old = self._indexes.pop(agent_id, None)
            if old is not None:
                async with old.lock:
                    old.index.close()
        index = await self.index_for(agent_id)
        return index.live_count

    async def _catch_up_entry(self, agent_id: str, entry: _AgentIndex) -> int:
        db = self.database()
        applied = 0
        async with entry.lock:
            self._stats["catch_ups"] += 1
            while True:
                changes: Sequence[_store.Change] = await db.run(
                    _store.changes_after, agent_id, entry.index.cursor, CATCH_UP_BATCH
                )
                if not changes:
                    break
                applied += await self.api.workers.run_sync(entry.index.apply, changes)
                if len(changes) < CATCH_UP_BATCH:
                    break
        self._stats["changes_applied"] += applied
        return applied

    async def _follow(self, events: trio.MemoryReceiveChannel[ListenEvent]) -> None:
        """Catch up on every notification; everything on every (re)connection."""
        async for event in events:
            payload = getattr(event, "payload", None)
            try:
                if payload is None:
                    if getattr(event, "reconnects", 0):
                        self._stats["reconnects"] += 1
                    await self.catch_up_all()
                elif payload:
                    self._stats["notifications"] += 1
                    await self.catch_up(payload)
                else:
                    self._stats["notifications"] += 1
                    await self.catch_up_all()
            except RecordsUnavailableError:
                return
            except Exception:
                # The periodic catch-up repairs whatever this one missed.
                logger.exception("memory records: catching up after a notification failed")

    async def _periodic_catch_up(self) -> None:
        while True:
            await trio.sleep(self.config.catch_up_interval)
            try:
                await self.catch_up_all()
            except Exception:
                logger.exception("memory records: the periodic catch-up failed")


def flush_key(flush_id: str, partition: str, text: str) -> str:
    """The identity of one flush's write: its flush id, where it writes, and what."""
    data = "\x1f".join((flush_id, partition, text.strip())).encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


def json_metadata(value: Any, *, what: str, max_bytes: int) -> Mapping[str, Any]:
    """``value`` checked as a JSON object of at most ``max_bytes`` (for record metadata)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidRecordError(f"{what} must be a JSON object with string keys")
    # claw's input rules (an InvalidInputError naming the field): PostgreSQL's jsonb
    # holds no NUL or lone surrogate, and a deep value would fail json.dumps below.
    check_json(value, what)
    try:
        encoded = json.dumps(dict(value), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidRecordError(f"{what} must be JSON: {exc}") from None
    if len(encoded.encode("utf-8")) > max_bytes:
        raise InvalidRecordError(f"{what} is larger than {max_bytes} bytes of JSON")
    loaded: Mapping[str, Any] = json.loads(encoded)
    return loaded
