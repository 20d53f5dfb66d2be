"""The writer of an index: the lease, the lexical writer, forget.

Writes (a sync, a forget) run one at a time in the process (:attr:`IndexWriter.lock`)
and under the writer lease across processes (:mod:`claw_memory._lease`), so there is
one tantivy writer and one SQLite writer. Taking the lease brings this process to the
published state and repairs what a writer that died left behind: it replays the
lexical journal into tantivy and republishes what the store committed but never
published (the pointer records the store's change version). The lexical writer is
open only while the lease is held; the sync (:mod:`._sync`) and :meth:`forget` stage
and commit through it, then publish (:mod:`._publication`).
"""

from __future__ import annotations

import contextlib
import functools
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import attrs
import trio

from claw.plugin_sdk import LexicalIndexError, WorkerPool

from ._errors import InvalidSearchError
from ._follow import Follower
from ._lease import WriterLease
from ._lexical import LexicalIndex
from ._publication import Publisher, publish_from_store
from ._published import read_pointer
from ._records import ChunkRecord
from ._repair import open_lexical, prepare_lexical_dir, rebuild_lexical
from ._store import IndexForget, Store
from ._types import ForgetResult
from ._view import IndexView


@attrs.define(eq=False)
class IndexWriter:
    """Holds the writer lease for one write at a time, and writes (see module docstring)."""

    view: IndexView
    store: Store
    workers: WorkerPool
    lease: WriterLease
    follower: Follower
    publisher: Publisher
    #: What the derived index depends on (settings, embedder): the store rebuilds into
    #: a new generation when it changes; ``identity_key`` is its digest in pointers.
    identity: str
    identity_key: str
    dims: int | None
    #: Serialises this process's writers (the lease is not reentrant).
    lock: trio.Lock = attrs.field(factory=trio.Lock)
    # The lexical writer, open only while this process holds the writer lease.
    _lexical: LexicalIndex | None = attrs.field(default=None, init=False)

    @contextlib.asynccontextmanager
    async def write(self, *, wait: bool = True, repair: bool = False) -> AsyncIterator[bool]:
        """Hold :attr:`lock` and the writer lease for one write.

        Takes the lease (waiting for another process's write to end, or, with
        ``wait=False``, yielding ``False`` at once if one is writing), brings this
        process to the published state, repairs what a writer that died left behind
        and opens the lexical writer (``repair``: check and republish everything, as
        after a writer that did not finish); on exit closes it and gives the lease up.
        """
        async with self.lock, self._holding(wait, repair) as held:
            yield held

    @contextlib.asynccontextmanager
    async def _holding(self, wait: bool, repair: bool) -> AsyncIterator[bool]:
        if wait:
            await self.lease.acquire()
        elif not self.lease.try_acquire():
            yield False
            return
        try:
            async with self.follower.lock:
                await self._take_over(repair)
                yield True
        finally:
            with trio.CancelScope(shield=True):
                writer, self._lexical = self._lexical, None
                try:
                    if writer is not None:
                        await self.workers.run_sync(writer.close)
                finally:
                    self.lease.release()

    async def _take_over(self, repair: bool) -> None:
        run = self.workers.run_sync
        store = self.store
        index_dir = self.view.index_dir
        generation, rebuilt = await run(store.ensure_identity, self.identity)
        lex_dir = await run(prepare_lexical_dir, index_dir / "lexical", generation, rebuilt)
        pending = await run(store.pending_lexical)
        pointer = await run(read_pointer, index_dir)
        repair = (
            repair
            or rebuilt
            or bool(pending)
            or pointer is None
            or pointer.identity != self.identity_key
            or pointer.index_generation != generation
            or pointer.store_version != await run(store.version)
        )
        # Replaying the journal (and checking tantivy against SQLite) is needed only
        # after a writer that did not finish; a directory that cannot be opened or
        # replayed is rebuilt from SQLite either way.
        self._lexical = await run(open_lexical, store, lex_dir, repair)
        if repair:
            await run(
                functools.partial(
                    publish_from_store,
                    store,
                    index_dir,
                    pointer,
                    index_generation=generation,
                    identity=self.identity_key,
                    dims=self.dims,
                )
            )
        await self.follower.follow_locked()

    # -- the lexical writer ----------------------------------------------------------
    def _open_writer(self) -> LexicalIndex:
        writer = self._lexical
        if writer is None:
            raise RuntimeError("the lexical writer is open only while holding the writer lease")
        return writer

    async def replace_lexical(
        self, provenances: Sequence[str], documents: Sequence[tuple[ChunkRecord, str]]
    ) -> None:
        """Replace the documents of ``provenances`` and commit, then clear their journal."""
        writer = self._open_writer()
        try:
            await self.workers.run_sync(writer.replace, provenances, documents)
        except LexicalIndexError as exc:
            await self._rebuild_lexical(writer, exc)
            return
        await self.workers.run_sync(self.store.clear_pending, provenances)

    async def stage_lexical(
        self,
        provenances: Sequence[str],
        documents: Sequence[tuple[ChunkRecord, str]],
        removed_ids: frozenset[str] = frozenset(),
    ) -> None:
        """Stage one batch's documents in the lexical writer, uncommitted: every
        document of ``provenances`` and those of ``removed_ids`` replaced by
        ``documents``."""
        writer = self._open_writer()
        try:
            await self.workers.run_sync(
                functools.partial(
                    writer.replace, provenances, documents, removed_ids=removed_ids, commit=False
                )
            )
        except LexicalIndexError as exc:
            # Rebuilt from SQLite, which holds every batch applied so far.
            await self._rebuild_lexical(writer, exc)

    async def commit_lexical(self, provenances: Sequence[str]) -> None:
        """Commit the staged batches, then clear their journal entries."""
        writer = self._open_writer()
        try:
            await self.workers.run_sync(writer.commit)
        except LexicalIndexError as exc:
            await self._rebuild_lexical(writer, exc)
            return
        await self.workers.run_sync(self.store.clear_pending, provenances)

    async def _rebuild_lexical(self, writer: LexicalIndex, exc: LexicalIndexError) -> None:
        # SQLite holds the change and its journal entry: rebuild rather than fail
        # every later sync on the same broken directory.
        self._lexical = await self.workers.run_sync(
            rebuild_lexical, self.store, writer, writer.path, exc
        )
        # The directory was replaced: search it through a fresh reader.
        self.view.lexical = await self.workers.run_sync(LexicalIndex.open_reader, writer.path)

    # -- purge -------------------------------------------------------------------------
    async def scrub(self, dropped_hashes: frozenset[str]) -> None:
        """After a purge's sync: leave no byte of a deleted chunk in this index.

        The sync already removed the chunks; their bytes may live on in SQLite's free
        pages and WAL, in tantivy segments (a deleted document stays until a merge), in
        the published record log (append-only until a compaction) and as cached
        vectors. So: drop those vectors and rebuild the database file
        (:meth:`Store.scrub`), rebuild the tantivy directory from SQLite, and publish a
        new epoch from SQLite (the flip unlinks the older epochs' files; a process that
        still maps them keeps only pages no path reaches).
        """
        async with self.write():
            run = self.workers.run_sync
            view = self.view
            view.check_open()
            await run(self.store.scrub, dropped_hashes)
            old = self._open_writer()
            self._lexical = await run(
                rebuild_lexical, self.store, old, old.path, "a purge (no deleted byte may stay)"
            )
            view.lexical = await run(LexicalIndex.open_reader, old.path)
            pointer = await run(read_pointer, view.index_dir)
            assert pointer is not None  # the take-over published one
            await run(
                functools.partial(
                    publish_from_store,
                    self.store,
                    view.index_dir,
                    pointer,
                    index_generation=pointer.index_generation,
                    identity=self.identity_key,
                    dims=self.dims,
                )
            )
            await self.follower.follow_locked()

    # -- forget ------------------------------------------------------------------------
    async def forget(
        self,
        *,
        path: str | None = None,
        session_id: str | None = None,
        agent_id: str | None = None,
        source: str | None = None,
        dry_run: bool = False,
        by: Mapping[str, Any] | None = None,
    ) -> ForgetResult:
        """Remove the chunks derived from a path, a session or a whole source (see
        :meth:`claw_memory.MemoryIndex.forget`)."""
        view = self.view
        view.check_open()
        if path is None and session_id is None and agent_id is None and source is None:
            raise InvalidSearchError("forget needs a path, session_id, agent_id or source")
        if source is not None and source not in ("memory", "sessions"):
            raise InvalidSearchError(f"unknown source {source!r}; use memory or sessions")
        async with self.write():
            view.check_open()
            matches = await self.workers.run_sync(
                lambda: self.store.select_chunks(
                    path=path, session_id=session_id, agent_id=agent_id, source=source
                )
            )
            ids = tuple(m[0] for m in matches)
            paths = tuple(dict.fromkeys(m[2] for m in matches))
            if dry_run or not matches:
                return ForgetResult(dry_run=dry_run, chunk_ids=ids, paths=paths)
            # Visible to every search from now on, before anything is deleted.
            view.tombstones = view.tombstones | frozenset(ids)
            criteria = {
                k: v
                for k, v in (
                    ("path", path),
                    ("session_id", session_id),
                    ("agent_id", agent_id),
                    ("source", source),
                )
                if v is not None
            }
            record = IndexForget(
                id=uuid.uuid4().hex[:12],
                criteria=criteria,
                paths=paths,
                chunks=len(ids),
                at=time.time(),
                by=by,
            )
            await self.workers.run_sync(self.store.forget, matches, record)
            provs = sorted({m[1] for m in matches})
            remaining = await self.workers.run_sync(self.store.chunks_for, provs)
            await self.replace_lexical(provs, remaining)
            await self.publisher.publish(removed_ids=frozenset(ids), within=provs)
            return ForgetResult(dry_run=False, chunk_ids=ids, paths=paths, forget_id=record.id)

    async def unforget(self, forget_id: str) -> IndexForget | None:
        """Take an index forget back (see :meth:`Store.unforget`); the caller then syncs,
        which indexes the sources again as they are now."""
        async with self.write():
            self.view.check_open()
            found = await self.workers.run_sync(self.store.unforget, forget_id)
            if found is not None:
                self.view.tombstones = frozenset(await self.workers.run_sync(self.store.tombstones))
            return found
