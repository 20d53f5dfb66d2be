"""The Memory Core index engine: sync, search, read, forget, status, watch.

:func:`open_memory_index` opens (or creates) an index directory for a workspace and
yields a :class:`MemoryIndex`. Any number of processes may open the same directory:
one writer at a time, any number of readers. It holds the SQLite store (the durable
owner, WAL), one tantivy directory per index generation (``lexical/g<N>``; a new one
is built when the index identity changes), the published generations
(:mod:`claw_memory._published`: a pointer file, a mapped vector matrix and a record
log) and, while it writes, the writer lease (:mod:`claw_memory._lease`).

:class:`MemoryIndex` is the face of parts that each do one thing, built once here
(:class:`_Parts`) and handed the narrow collaborators they use:

- the reader's half: :mod:`._follow` follows the published pointer, :mod:`._search`
  answers a search, :mod:`._schedule` decides where and with whom it is ranked;
- the writer's half: :mod:`._writer` (the lease, take-over and repair, the lexical
  writer, forget), :mod:`._sync` with :mod:`._embedding` (a sync's batches) and
  :mod:`._publication` (blocks past the published prefix, the pointer flip);
- :mod:`._freshness` notices changed sources and starts syncs, :mod:`._read` reads a
  source, :mod:`._listing` lists them, and :mod:`._view` is what this process sees of
  the index, shared by all.

Write path (sync, forget) runs under one lock in the process and under the writer
lease across processes, so that there is one tantivy writer and one SQLite writer:
prepare chunks on workers, embed (through the cache), commit to SQLite with a
lexical journal entry per touched source, apply the same change to tantivy and
commit it, clear the journal, append the change to the published files and flip the
pointer. A crash anywhere leaves SQLite consistent and the pointer on the last
complete publication; the next process to take the lease replays the journal into
tantivy and republishes what was committed but not published. Every process
(writers included) searches the published generations: a search follows the
pointer when it moved (one ``stat`` when it did not), reads whichever generation
was current when it started, and never takes a lock.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final, NoReturn, final

import attrs
import trio

from claw.plugin_sdk import EmbeddingProvider, WorkerPool, storage_problem
from claw.plugin_sdk.search import sha256_hex

from ._embedding import ChunkEmbedder
from ._errors import IndexCorruptError, IndexStoreError
from ._follow import Follower
from ._freshness import Freshness
from ._generation import Generation
from ._lease import LEASE_FILE, WriterLease
from ._lexical import DOCUMENT_VERSION
from ._listing import SourceListing
from ._publication import Publisher
from ._read import SourceReader
from ._records import RECORD_FORMAT
from ._repair import set_aside_corrupt_database
from ._schedule import RankScheduler
from ._search import Searcher, SearchPage, search_hit
from ._settings import MemoryCoreSettings, SearchMode, SourceKind
from ._sources import MEMORY_CHUNKING
from ._store import SCHEMA_VERSION, IndexForget, Store
from ._sync import Syncer, SyncProgress
from ._transcripts import TURN_PIECES, TURN_VECTORS, TranscriptSource
from ._types import ForgetResult, IndexStatus, ReadResult, SearchFilter, SearchResult, SyncReport
from ._view import IndexView
from ._writer import IndexWriter

_PRIVATE: Final = object()


def _resolve_dirs(workspace: Path, index_dir: Path) -> tuple[Path, Path]:
    index_dir = index_dir.resolve()
    try:
        index_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        problem = storage_problem(index_dir, exc) or exc.strerror or str(exc)
        raise IndexStoreError(f"Memory Core index directory {index_dir}: {problem}") from exc
    return workspace.resolve(), index_dir


def _identity(settings: MemoryCoreSettings, embedder: EmbeddingProvider | None) -> str:
    """What the derived index depends on; any change rebuilds into a new generation."""
    return json.dumps(
        {
            "schema": SCHEMA_VERSION,
            "lexical_document": DOCUMENT_VERSION,
            "memory_chunks": MEMORY_CHUNKING,
            "turn_vectors": TURN_VECTORS,
            "turn_pieces": TURN_PIECES,
            "records": RECORD_FORMAT,
            "provider": None if embedder is None else embedder.id,
            "model": None if embedder is None else embedder.model,
            "dims": None if embedder is None else embedder.dims,
            "chunk_tokens": settings.chunk_tokens,
            "chunk_overlap": settings.chunk_overlap,
            "chars_per_token": settings.chars_per_token,
            "sources": sorted(settings.sources),
            "extra_paths": list(settings.extra_paths),
            "max_file_bytes": settings.max_file_bytes,
            "turns_per_chunk": settings.transcript_turns_per_chunk,
            "context_turns": settings.transcript_context_turns,
        },
        sort_keys=True,
    )


@attrs.frozen(eq=False)
class _Parts:
    """The parts of one open index, each built once with the collaborators it uses."""

    workspace: Path
    settings: MemoryCoreSettings
    embedder: EmbeddingProvider | None
    workers: WorkerPool
    store: Store
    view: IndexView
    follower: Follower
    writer: IndexWriter
    embedding: ChunkEmbedder
    syncer: Syncer
    freshness: Freshness
    searcher: Searcher
    reader: SourceReader

    @classmethod
    def build(
        cls,
        *,
        workspace: Path,
        index_dir: Path,
        settings: MemoryCoreSettings,
        embedder: EmbeddingProvider | None,
        workers: WorkerPool,
        transcripts: TranscriptSource | None,
        store: Store,
        background: trio.Nursery | None,
    ) -> _Parts:
        dims = None if embedder is None else embedder.dims
        identity = _identity(settings, embedder)
        identity_key = sha256_hex(identity)
        view = IndexView(index_dir, Generation.empty(0, 0, dims))
        lease = WriterLease(index_dir / LEASE_FILE)
        follower = Follower(view, store, workers, lease, identity_key)
        publisher = Publisher(view, store, workers, lease)
        writer = IndexWriter(
            view,
            store,
            workers,
            lease,
            follower,
            publisher,
            identity=identity,
            identity_key=identity_key,
            dims=dims,
        )
        listing = SourceListing(workspace, settings, workers, transcripts)
        embedding = ChunkEmbedder(
            embedder,
            store,
            workers,
            batch_size=settings.embed_batch_size,
            cache_limit=settings.embedding_cache_max_entries,
        )
        syncer = Syncer(view, store, workers, settings, listing, embedding, writer, publisher)
        freshness = Freshness(view, settings, workers, listing, writer, syncer, background)
        scheduler = RankScheduler(workers, lambda: view.lexical)
        return cls(
            workspace=workspace,
            settings=settings,
            embedder=embedder,
            workers=workers,
            store=store,
            view=view,
            follower=follower,
            writer=writer,
            embedding=embedding,
            syncer=syncer,
            freshness=freshness,
            searcher=Searcher(view, settings, embedder, workers, follower, freshness, scheduler),
            reader=SourceReader(view, settings, workers, listing),
        )


@final
class MemoryIndex:
    """An open Memory Core index (create it with :func:`open_memory_index`)."""

    def __init__(self, token: object, parts: _Parts | None = None) -> None:
        if token is not _PRIVATE or parts is None:
            raise TypeError("MemoryIndex has no public constructor; use open_memory_index(...)")
        self._workspace = parts.workspace
        self._settings = parts.settings
        self._embedder = parts.embedder
        self._workers = parts.workers
        self._store = parts.store
        self._view = parts.view
        self._follower = parts.follower
        self._writer = parts.writer
        self._embedding = parts.embedding
        self._syncer = parts.syncer
        self._freshness = parts.freshness
        self._searcher = parts.searcher
        self._reader = parts.reader

    # -- lifecycle ----------------------------------------------------------------
    @classmethod
    async def _open(
        cls,
        *,
        workspace_dir: str | os.PathLike[str],
        index_dir: str | os.PathLike[str],
        settings: MemoryCoreSettings,
        embedder: EmbeddingProvider | None,
        workers: WorkerPool,
        transcripts: TranscriptSource | None,
        background: trio.Nursery | None = None,
    ) -> MemoryIndex:
        workspace, idx_dir = await workers.run_sync(
            _resolve_dirs, Path(workspace_dir), Path(index_dir)
        )
        store = await workers.run_sync(Store, idx_dir / "index.sqlite3")
        parts = _Parts.build(
            workspace=workspace,
            index_dir=idx_dir,
            settings=settings,
            embedder=embedder,
            workers=workers,
            transcripts=transcripts,
            store=store,
            background=background,
        )
        index = cls(_PRIVATE, parts)
        try:
            # Follow the published generation, or take the lease and publish one when
            # there is none this index can read.
            if not await index._follower.attach():
                async with index._writer.write(repair=True):
                    pass
            await index._embedding.count_cache()
            await index._freshness.start()
            if settings.sync_on_open:
                await index.sync()
        except BaseException:
            with trio.CancelScope(shield=True):
                await index.aclose()
            raise
        return index

    async def aclose(self) -> None:
        """Close the database and the watches, and let the lease go (idempotent)."""
        if self._view.closed:
            return
        self._view.closed = True
        self._freshness.stop()
        async with self._writer.lock:
            try:
                await self._workers.run_sync(self._store.close)
            finally:
                self._freshness.close()
                self._follower.close()
                self._writer.lease.release()

    @property
    def embedder(self) -> EmbeddingProvider | None:
        """The embedding provider, or ``None`` in lexical-only mode."""
        return self._embedder

    @property
    def settings(self) -> MemoryCoreSettings:
        return self._settings

    @property
    def default_mode(self) -> SearchMode:
        """``hybrid`` with an embedder, ``lexical`` without one."""
        return self._searcher.default_mode

    # -- sync ---------------------------------------------------------------------
    async def sync(
        self, *, force: bool = False, progress: SyncProgress | None = None
    ) -> SyncReport:
        """Bring the index up to date with its sources; ``force`` re-reads and re-chunks all.

        Only sources whose stat (files) or change token (sessions) moved are read;
        a file whose bytes hash the same only has its stat refreshed. ``progress``, when
        given, is called on the event loop as ``progress(stage, done, total)`` through
        the stages of a sync that changes something: ``"scan"`` (sources found),
        ``"chunk"`` (changed sources read and chunked), ``"embed"`` (new chunks
        embedded) and ``"publish"`` (database, lexical index, generation), so a CLI can
        show where a long first index is.
        """
        return await self._freshness.sync(force=force, progress=progress)

    def syncing(self) -> bool:
        """Whether a sync a search started is pending or running in the background."""
        return self._freshness.syncing()

    async def watch(
        self,
        *,
        interval: float = 2.0,
        debounce: float = 0.5,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        """Poll the sources every ``interval`` seconds and sync once they settle.

        Start it with ``await nursery.start(index.watch)``. A change is synced only
        after two polls ``debounce`` seconds apart see the same state, so a burst of
        writes is indexed once. Sync errors propagate (and end the watcher).
        """
        await self._freshness.watch(interval=interval, debounce=debounce, task_status=task_status)

    # -- search -------------------------------------------------------------------
    async def search(
        self,
        query: str,
        *,
        mode: SearchMode | None = None,
        max_results: int | None = None,
        offset: int = 0,
        min_score: float | None = None,
        filter: SearchFilter | None = None,
        now: float | None = None,
    ) -> SearchResult:
        """Rank chunks for ``query``; see :class:`MemoryCoreSettings` for the defaults.

        ``mode`` is ``hybrid`` (default with an embedder), ``lexical`` or ``vector``;
        hybrid without an embedder runs lexical. ``offset`` and ``max_results`` page
        through the ranked hits (``next_offset`` says where the next page starts).
        ``now`` (epoch seconds) is the reference time of temporal decay.
        """
        page = await self.search_page(
            query,
            mode=mode,
            max_results=max_results,
            offset=offset,
            min_score=min_score,
            filter=filter,
            now=now,
        )
        return SearchResult(
            query=query,
            mode=page.mode,
            hits=tuple(search_hit(rec, r) for rec, r in page.hits),
            offset=offset,
            next_offset=page.next_offset,
            generation=page.generation,
            warning=page.warning,
        )

    async def search_page(
        self,
        query: str,
        *,
        mode: SearchMode | None = None,
        max_results: int | None = None,
        offset: int = 0,
        min_score: float | None = None,
        filter: SearchFilter | None = None,
        now: float | None = None,
    ) -> SearchPage:
        """:meth:`search`, its hits as the records and ranked rows they are made of
        (what a provider converts to its own hits, without a :class:`SearchHit` each)."""
        return await self._searcher.search_page(
            query,
            mode=mode,
            max_results=max_results,
            offset=offset,
            min_score=min_score,
            filter=filter,
            now=now,
        )

    async def rank_page(
        self,
        query: str,
        *,
        mode: SearchMode | None,
        limit: int,
        offset: int,
        min_score: float | None,
        filter: SearchFilter | None = None,
        now: float | None = None,
    ) -> SearchPage:
        """:meth:`search_page` for arguments already checked where the request entered
        (Memory Core's provider handle: the host's boundary validated the request), so
        they are not checked again. ``mode`` ``None`` is the default mode, ``min_score``
        ``None`` the settings'."""
        return await self._searcher.rank_page(
            query,
            mode=mode,
            limit=limit,
            offset=offset,
            min_score=min_score,
            filter=filter,
            now=now,
        )

    # -- read ---------------------------------------------------------------------
    async def read(self, path: str, *, from_line: int = 1, lines: int | None = None) -> ReadResult:
        """Lines ``from_line..from_line+lines-1`` of a source (turns, for a transcript).

        ``path`` is a virtual path as search hits and status report it. Anything
        that is not a current source of this index is refused with
        :class:`SourcePathError`; the read is bounded by ``read_max_chars``.
        """
        return await self._reader.read(path, from_line=from_line, lines=lines)

    # -- forget -------------------------------------------------------------------
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
        """Remove the chunks derived from a path, a session or a whole source.

        Criteria combine with AND; at least one is required. Forgotten chunks are
        tombstoned: they are filtered out of every generation (including ones
        searches already hold), and a later sync (a forced one too) does not index the
        same chunk again. Source files and transcripts are left untouched. The forget is
        recorded (``by``: who made it): :meth:`forgotten` lists it and :meth:`unforget`
        takes it back.
        """
        return await self._writer.forget(
            path=path,
            session_id=session_id,
            agent_id=agent_id,
            source=source,
            dry_run=dry_run,
            by=by,
        )

    async def forgotten(self) -> list[IndexForget]:
        """The forgets in effect (what they hid, when, by whom), newest first."""
        self._view.check_open()
        return await self._workers.run_sync(self._store.forgets)

    async def unforget(self, forget_id: str) -> IndexForget | None:
        """Take forget ``forget_id`` back and sync, so that what it hid is indexed again
        (as its sources stand now); ``None`` when there is no such forget."""
        found = await self._writer.unforget(forget_id)
        if found is not None:
            await self.sync()
        return found

    # -- purge --------------------------------------------------------------------
    async def memory_hashes(self, paths: tuple[str, ...]) -> frozenset[str]:
        """The content hashes of the chunks of memory files ``paths`` (see :meth:`purged`)."""
        self._view.check_open()
        return frozenset(await self._workers.run_sync(self._store.memory_hashes, paths))

    async def purged(self, paths: tuple[str, ...], before: frozenset[str]) -> None:
        """Bring the index up to a purge of ``paths`` and leave no byte of what went.

        ``before`` is :meth:`memory_hashes` of ``paths`` taken before the purge changed
        them: the sync drops the chunks that went, and the vectors cached for them go
        too; then the database, the tantivy directory and the published files are
        rewritten without any deleted chunk (:meth:`IndexWriter.scrub`).
        """
        await self.sync()
        after = await self.memory_hashes(paths)
        await self._writer.scrub(before - after)

    async def purge_mark(self, current: int) -> int:
        """The workspace purge mark this index last scrubbed at. An index that never
        recorded one cannot hold a purged byte (it is new, or older than purges): it
        takes ``current``, the workspace's mark now."""
        self._view.check_open()
        mark = await self._workers.run_sync(self._store.purge_mark)
        if mark is None:
            await self._workers.run_sync(self._store.set_purge_mark, current)
            return current
        return mark

    async def caught_up_with_purge(
        self, mark: int, paths: tuple[str, ...] | None = None, before: frozenset[str] | None = None
    ) -> None:
        """Leave no byte of a purge in this index, and remember ``mark``.

        With ``paths`` and ``before`` (this process made the purge) only the vectors of
        the chunks that went are dropped; otherwise (a purge made through another state
        directory) every cached vector no chunk has.
        """
        if paths is not None and before is not None:
            await self.purged(paths, before)
        else:
            await self.sync()
            dropped = await self._workers.run_sync(self._store.unreferenced_cache)
            await self._writer.scrub(frozenset(dropped))
        await self._workers.run_sync(self._store.set_purge_mark, mark)

    async def count_containing(self, text: str) -> int:
        """How many chunks still hold ``text`` (see :mod:`claw_memory._purge`)."""
        self._view.check_open()
        return await self._workers.run_sync(self._store.count_containing, text)

    def source_paths(self, source: SourceKind = "memory") -> tuple[str, ...]:
        """The virtual paths of the indexed (not skipped) sources of one kind, sorted."""
        return self._view.source_paths(source)

    # -- status -------------------------------------------------------------------
    def status(self) -> IndexStatus:
        """A snapshot of the index (no I/O)."""
        view = self._view
        gen = view.generation
        live_sessions = gen.is_session if gen.alive is None else gen.is_session & gen.alive
        sessions = int(live_sessions.sum())
        e = self._embedder
        return IndexStatus(
            workspace_dir=str(self._workspace),
            index_dir=str(view.index_dir),
            generation=gen.number,
            index_generation=view.index_generation,
            chunks=gen.live_count,
            memory_chunks=gen.live_count - sessions,
            session_chunks=sessions,
            sources=sum(1 for s in view.sources.values() if s.skip_reason is None),
            skipped=view.skipped(),
            embedder_id=None if e is None else e.id,
            embedder_model=None if e is None else e.model,
            dims=None if e is None else e.dims,
            default_mode=self.default_mode,
            tombstones=len(view.tombstones),
            embedding_cache_entries=self._embedding.cache_entries,
            last_sync_at=self._syncer.last_sync_at,
            active_searches=self._searcher.active,
        )


@contextlib.asynccontextmanager
async def open_memory_index(
    *,
    workspace_dir: str | os.PathLike[str],
    index_dir: str | os.PathLike[str],
    workers: WorkerPool,
    settings: MemoryCoreSettings | None = None,
    embedder: EmbeddingProvider | None = None,
    transcripts: TranscriptSource | None = None,
    background: trio.Nursery | None = None,
) -> AsyncIterator[MemoryIndex]:
    """Open the index of ``workspace_dir`` stored in ``index_dir`` and close it on exit.

    Any number of processes may have the directory open: the one that syncs or
    forgets holds the writer lease meanwhile (another process's write is waited for),
    and every process searches the published generations. A corrupt database is set
    aside and rebuilt from the sources, with a warning. With
    ``settings.sync_on_open`` (the default) the index is synced before it is yielded.
    ``embedder=None`` means lexical-only retrieval. With ``background`` (a nursery that
    outlives the index), a search that notices changed sources syncs them there and
    answers at once from the current generation, with a warning; without it the
    search syncs inline before it ranks.
    """

    async def opened() -> MemoryIndex:
        return await MemoryIndex._open(
            background=background,
            workspace_dir=workspace_dir,
            index_dir=index_dir,
            settings=settings or MemoryCoreSettings(),
            embedder=embedder,
            workers=workers,
            transcripts=transcripts,
        )

    try:
        index = await opened()
    except IndexCorruptError as exc:
        # The database is derived data: set it aside and rebuild from the sources.
        await workers.run_sync(set_aside_corrupt_database, Path(index_dir), exc)
        index = await opened()
    try:
        yield index
    finally:
        with trio.CancelScope(shield=True):
            await index.aclose()
