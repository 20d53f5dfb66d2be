"""The Memory Core index engine: sync, search, read, forget, status, watch.

:func:`open_memory_index` opens (or creates) an index directory for a workspace and
yields a :class:`MemoryIndex`. Any number of processes may open the same directory.
It holds the SQLite store (the durable owner, WAL), one tantivy directory per index
generation (``lexical/g<N>``; a new one is built when the index identity changes),
the published generations (:mod:`claw_memory._published`: a pointer file, a mapped
vector matrix and a record log) and the writer lease (:mod:`claw_memory._lease`).

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

import codecs
import collections
import contextlib
import functools
import hashlib
import itertools
import json
import logging
import math
import os
import shutil
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NoReturn, final

import attrs
import numpy as np
import numpy.typing as npt
import trio

from claw.plugin_sdk import (
    EmbeddingProvider,
    LexicalIndexError,
    WorkerPool,
    collapse_single_exception_group,
)
from claw.plugin_sdk.search import embed_texts, normalise_rows, sha256_hex
from claw.plugin_sdk.search import product_slice as _product_slice

from ._changes import DirectoryWatch, open_directory_watch, source_directories
from ._errors import (
    IndexClosedError,
    IndexCorruptError,
    IndexLockedError,
    InvalidSearchError,
    SourcePathError,
)
from ._generation import Generation, RowColumns
from ._lease import LEASE_FILE, WriterLease
from ._lexical import DOCUMENT_VERSION, LexicalIndex
from ._published import (
    Pointer,
    RowRecords,
    Written,
    flip_pointer,
    follow_generation,
    generation_after,
    live_row_batches,
    load_generation,
    pending_generation,
    read_pointer,
    write_epoch,
    write_publication,
)
from ._ranking import RankedRow, RankParams, approximate, rank
from ._records import ChunkRecord, PreparedChunk
from ._settings import MemoryCoreSettings, SearchMode, SourceKind
from ._sources import (
    BINARY,
    NOT_UTF8,
    SYMLINK,
    FileEntry,
    discover,
    prepare_file_chunks,
    read_source,
    scan_stats,
    too_large,
    unreadable,
)
from ._store import SCHEMA_VERSION, SourceChange, SourceState, Store
from ._transcripts import (
    TranscriptSession,
    TranscriptSource,
    prepare_session_chunks,
    render_turn,
    session_path,
    session_provenance,
)
from ._types import (
    ForgetResult,
    IndexStatus,
    ReadResult,
    SearchFilter,
    SearchHit,
    SearchResult,
    SkippedSource,
    SyncReport,
)

logger = logging.getLogger("claw_memory")

_PRIVATE: Final = object()
_MAX_PAGE = 1000


def _resolve_dirs(workspace: Path, index_dir: Path) -> tuple[Path, Path]:
    index_dir = index_dir.resolve()
    index_dir.mkdir(parents=True, exist_ok=True)
    return workspace.resolve(), index_dir


def _identity(settings: MemoryCoreSettings, embedder: EmbeddingProvider | None) -> str:
    """What the derived index depends on; any change rebuilds into a new generation."""
    return json.dumps(
        {
            "schema": SCHEMA_VERSION,
            "lexical_document": DOCUMENT_VERSION,
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


def _prepare_lexical_dir(root: Path, generation: int, fresh: bool) -> Path:
    """The tantivy directory of ``generation`` (emptied when ``fresh``); others removed."""
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"g{generation}"
    if fresh and target.exists():
        shutil.rmtree(target)
    for child in root.iterdir():
        if child != target and child.is_dir() and child.name.startswith("g"):
            shutil.rmtree(child, ignore_errors=True)
    return target


def _blob_rows(blobs: Sequence[bytes | None], dims: int) -> npt.NDArray[np.float32]:
    """Stored vectors as normalised matrix rows (a missing or malformed one: zeros)."""
    m = np.zeros((len(blobs), dims), dtype=np.float32)
    for i, blob in enumerate(blobs):
        if blob is not None and len(blob) == 4 * dims:
            m[i] = np.frombuffer(blob, dtype=np.float32)
    return normalise_rows(m)


def publish_from_store(
    store: Store,
    index_dir: Path,
    old: Pointer | None,
    *,
    index_generation: int,
    identity: str,
    dims: int | None,
) -> None:
    """Publish everything the store holds as a new epoch (a first open, changed settings,
    or a writer that died between its commit and its publication), a bounded batch of
    chunks at a time."""
    version = store.version()
    parts = (
        (records, None if dims is None else _blob_rows(blobs, dims))
        for records, blobs in store.iter_chunks()
    )
    written = write_epoch(
        index_dir,
        epoch=1 if old is None else old.epoch + 1,
        number=1 if old is None else old.number + 1,
        index_generation=index_generation,
        identity=identity,
        store_version=version,
        dims=dims,
        parts=parts,
        count=store.chunk_count(),
    )
    flip_pointer(index_dir, written.pointer)


def _prepare_files(
    entries: Sequence[FileEntry],
    old: dict[str, SourceState],
    settings: MemoryCoreSettings,
    tombstones: frozenset[str],
    force: bool,
) -> tuple[list[tuple[SourceState, list[PreparedChunk]]], list[SourceState]]:
    """Read and chunk changed files: ``(replacements, stat-only updates)``."""
    changes: list[tuple[SourceState, list[PreparedChunk]]] = []
    stat_only: list[SourceState] = []
    for e in entries:
        outcome = read_source(e, settings.max_file_bytes)
        prev = old.get(e.provenance)
        state = SourceState(
            provenance=e.provenance,
            source="memory",
            path=e.vpath,
            size=e.size,
            mtime_ns=e.mtime_ns,
            token=None,
            hash=outcome.file_hash,
            skip_reason=outcome.reason,
        )
        if outcome.text is None or outcome.file_hash is None:
            changes.append((state, []))
            continue
        if (
            not force
            and prev is not None
            and prev.skip_reason is None
            and prev.hash == outcome.file_hash
        ):
            stat_only.append(state)
            continue
        chunks = prepare_file_chunks(
            e.vpath,
            outcome.text,
            outcome.file_hash,
            max_tokens=settings.chunk_tokens,
            overlap_tokens=settings.chunk_overlap,
            chars_per_token=settings.chars_per_token,
            tombstones=tombstones,
        )
        changes.append((state, chunks))
    return changes, stat_only


SyncProgress = Callable[[str, int, int], None]
"""``progress(stage, done, total)`` of a sync; see :meth:`MemoryIndex.sync`."""

# Files read and chunked per worker call, so that a long first index reports progress.
_CHUNK_BATCH_FILES = 64
# Chunks a sync embeds, stores and writes per batch: what it holds at once (chunks,
# vectors, lexical documents), whatever the size of the change.
_SYNC_BATCH_CHUNKS = 8192


def _no_progress(stage: str, done: int, total: int) -> None:
    return None


def _embed_progress(report: SyncProgress, before: int, done: int, total: int) -> None:
    """An embed step of one batch, counted with the ``before`` chunks of earlier ones."""
    report("embed", before + done, before + total)


_INLINE_QUERY_CHARS = 2048
# A generation this small (rows times vector dimensions) is ranked on the event loop:
# its matrix product and BM25 search take a fraction of a millisecond, less than
# handing the batch to a thread costs (two wake-ups, and GIL hand-offs during which the
# loop's own system calls stall). Larger ones go to the worker pool.
_INLINE_RANK_WORK = 4_000_000
_INLINE_RANK_ROWS = 20_000
# How many more scheduling rounds an inline batch's leader waits while searches keep
# arriving (measured on claw serve with 32 clients: about 15% more requests per second
# than ranking after one round).
_GATHER_ROUNDS = 4
# How many of the latest queries' vectors an index keeps (a query asked again, a page
# after the first, costs no embedding).
_QUERY_VECTORS = 1024


# Up to this many vector cells, a sparse query vector (at most a quarter of its
# dimensions non-zero) is scored through the generation's transposed matrix, reading
# only its non-zero dimensions' rows.
_SPARSE_PRODUCT_CELLS = 4_000_000
# A generation at least this large (rows times dimensions) has its matrix product split
# into row slices computed by concurrent workers: the product is bound by memory
# bandwidth, which one core does not saturate (two halve the time on two cores).
_PARALLEL_PRODUCT_WORK = 8_000_000


def _rank_inline(gen: Generation) -> bool:
    rows = len(gen.records)
    dims = 0 if gen.matrix is None else gen.matrix.shape[1]
    return rows <= _INLINE_RANK_ROWS and rows * dims <= _INLINE_RANK_WORK


@final
class MemoryIndex:
    """An open Memory Core index (create it with :func:`open_memory_index`)."""

    def __init__(self, token: object, **state: Any) -> None:
        if token is not _PRIVATE:
            raise TypeError("MemoryIndex has no public constructor; use open_memory_index(...)")
        self._workspace: Path = state["workspace"]
        self._index_dir: Path = state["index_dir"]
        self._settings: MemoryCoreSettings = state["settings"]
        self._embedder: EmbeddingProvider | None = state["embedder"]
        self._workers: WorkerPool = state["workers"]
        self._transcripts: TranscriptSource | None = state["transcripts"]
        self._store: Store = state["store"]
        # Where a search that notices changed sources starts their sync, so that it can
        # answer at once from the current generation (None: it syncs inline).
        self._background: trio.Nursery | None = state.get("background")
        # The background sync while one is pending or running, and whether a change
        # was noticed after it scanned (it then runs once more).
        self._background_sync: trio.CancelScope | None = None
        self._resync = False
        self._identity = _identity(self._settings, self._embedder)
        self._identity_key = sha256_hex(self._identity)
        self._lease = WriterLease(self._index_dir / LEASE_FILE)
        # The published state this process follows: the pointer, the generation it
        # names, and a read-only view of the lexical index (set together on the first
        # follow, before the index is handed out).
        self._pointer: Pointer | None = None
        self._lexical: LexicalIndex
        # inotify on the index directory: no event since the last look means the
        # pointer was not replaced (None: read the pointer before every search).
        self._pointer_watch: DirectoryWatch | None = None
        self._follow_due = True
        # The lexical writer, open only while this process holds the writer lease.
        self._writer: LexicalIndex | None = None
        self._index_generation = 0
        self._generation = Generation.empty(
            0, 0, None if self._embedder is None else self._embedder.dims
        )
        self._sources: dict[str, SourceState] = {}
        self._tombstones: frozenset[str] = frozenset()
        self._follow_lock = trio.Lock()
        self._sessions: dict[str, TranscriptSession] = {}
        self._known: dict[str, tuple[int | None, int | None]] | None = None
        self._queue: list[_BatchItem] = []
        self._inline_queue: list[_BatchItem] = []
        self._leaders = 0
        # At least two: a batch parked in a slow worker must not hold every search back.
        self._max_leaders = max(2, self._workers.statistics().total_tokens)
        # inotify on the source directories (Linux); None: stat the files every time.
        self._watch: DirectoryWatch | None = None
        # True once a full check or sync ran after every current watch was in place.
        self._watch_primed = False
        self._write_lock = trio.Lock()
        self._last_sync_at: float | None = None
        self._active_searches = 0
        # The latest queries' vectors, oldest first (see _query_vector).
        self._query_vectors: dict[str, npt.NDArray[np.float32]] = {}
        self._cache_entries = 0
        self._closed = False
        # The ranking parameters that come from the settings and the embedder, both
        # fixed for the index's life: gathered once, not on every search.
        vector_weight, text_weight = self._settings.fusion_weights(self._embedder)
        settings = self._settings
        # (A partial of RankParams, so the type checker sees every field it fills.)
        self._rank_params = functools.partial(
            RankParams,
            vector_weight=vector_weight,
            text_weight=text_weight,
            context_boost=settings.context_boost,
            far_context_boost=settings.far_context_boost,
            speaker_boost=settings.speaker_boost,
            date_boost=settings.date_boost,
            path_boost=settings.path_boost,
            coverage_weight=settings.coverage_weight,
            near_coverage_weight=settings.near_coverage_weight,
            far_coverage_weight=settings.far_coverage_weight,
            candidate_multiplier=settings.candidate_multiplier,
            candidate_growth=settings.candidate_growth,
            when_weight=settings.when_weight,
            approximate_rows=settings.approximate_rows,
            temporal_decay=settings.temporal_decay,
            half_life_days=settings.half_life_days,
            mmr=settings.mmr,
            mmr_lambda=settings.mmr_lambda,
        )

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
        index = cls(
            _PRIVATE,
            workspace=workspace,
            index_dir=idx_dir,
            settings=settings,
            embedder=embedder,
            workers=workers,
            transcripts=transcripts,
            store=store,
            background=background,
        )
        try:
            index._pointer_watch = await workers.run_sync(open_directory_watch, [str(idx_dir)])
            await index._attach()
            index._cache_entries = await workers.run_sync(store.cache_size)
            if "memory" in settings.sources:
                # Watch before the first sync, so no change can fall between the two.
                index._watch = await workers.run_sync(
                    open_directory_watch, index._watch_directories()
                )
        except BaseException:
            with trio.CancelScope(shield=True):
                await index.aclose()
            raise
        try:
            if settings.sync_on_open:
                await index.sync()
        except BaseException:
            with trio.CancelScope(shield=True):
                await index.aclose()
            raise
        return index

    async def aclose(self) -> None:
        """Close the database and the watch, and let the lease go (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._background_sync is not None:
            self._background_sync.cancel()
        async with self._write_lock:
            try:
                await self._workers.run_sync(self._store.close)
            finally:
                for watch in (self._watch, self._pointer_watch):
                    if watch is not None:
                        watch.close()
                self._lease.release()

    # -- processes: the writer lease and the published generations ---------------
    async def _attach(self) -> None:
        """Follow the published generation, or take the lease and publish one when
        there is none this index can read (first open, changed settings, or a writer
        that died between committing a change and publishing it)."""
        run = self._workers.run_sync
        pointer = await run(read_pointer, self._index_dir)
        if (
            pointer is not None
            and pointer.identity == self._identity_key
            and pointer.store_version == await run(self._store.version)
        ):
            try:
                async with self._follow_lock:
                    await self._follow_locked()
            except LexicalIndexError:
                pass  # a lexical directory that cannot be opened: the writer rebuilds it
            else:
                return
        async with self._write_lock, self._writing(repair=True):
            pass

    @contextlib.asynccontextmanager
    async def _writing(self, *, wait: bool = True, repair: bool = False) -> AsyncIterator[bool]:
        """Hold the writer lease for one write (enter under ``_write_lock``).

        Takes the lease (waiting for another process's write to end, or, with
        ``wait=False``, yielding ``False`` at once if one is writing), brings this
        process to the published state, repairs what a writer that died left behind
        and opens the lexical writer (``repair``: check and republish everything, as
        after a writer that did not finish); on exit closes it and gives the lease up.
        """
        if wait:
            await self._lease.acquire()
        elif not self._lease.try_acquire():
            yield False
            return
        try:
            async with self._follow_lock:
                await self._take_over(repair)
                yield True
        finally:
            with trio.CancelScope(shield=True):
                writer, self._writer = self._writer, None
                try:
                    if writer is not None:
                        await self._workers.run_sync(writer.close)
                finally:
                    self._lease.release()

    async def _take_over(self, repair: bool) -> None:
        run = self._workers.run_sync
        store = self._store
        generation, rebuilt = await run(store.ensure_identity, self._identity)
        lex_dir = await run(_prepare_lexical_dir, self._index_dir / "lexical", generation, rebuilt)
        pending = await run(store.pending_lexical)
        pointer = await run(read_pointer, self._index_dir)
        repair = (
            repair
            or rebuilt
            or bool(pending)
            or pointer is None
            or pointer.identity != self._identity_key
            or pointer.index_generation != generation
            or pointer.store_version != await run(store.version)
        )
        # Replaying the journal (and checking tantivy against SQLite) is needed only
        # after a writer that did not finish; a directory that cannot be opened or
        # replayed is rebuilt from SQLite either way.
        self._writer = await run(_open_lexical, store, lex_dir, repair)
        if repair:
            await run(
                functools.partial(
                    publish_from_store,
                    store,
                    self._index_dir,
                    pointer,
                    index_generation=generation,
                    identity=self._identity_key,
                    dims=None if self._embedder is None else self._embedder.dims,
                )
            )
        await self._follow_locked()

    async def _follow(self) -> None:
        """Follow the pointer if another process published since the last look.

        With inotify, a search where no event arrived in the index directory costs one
        non-blocking ``read``; otherwise (or after an event) the small pointer file is
        read and compared, on the loop. Only a moved pointer costs a worker call. A
        process holding the lease is the one publishing: it follows itself.
        """
        if self._lease.held:
            return
        watch = self._pointer_watch
        if watch is not None and watch.changed():
            self._follow_due = True
        if not self._follow_due and watch is not None:
            return
        if read_pointer(self._index_dir) == self._pointer:
            self._follow_due = False
            return
        async with self._follow_lock:
            if not self._lease.held:
                await self._follow_locked()

    async def _follow_locked(self) -> None:
        followed = await self._workers.run_sync(self._read_published)
        self._follow_due = False
        if followed is None:
            return
        pointer, lexical, gen, sources, tombstones = followed
        self._pointer, self._lexical = pointer, lexical
        self._generation = gen
        self._index_generation = pointer.index_generation
        self._sources = sources
        self._tombstones = tombstones
        self._known = None

    def _read_published(
        self,
    ) -> (
        tuple[
            Pointer,
            LexicalIndex,
            Generation,
            dict[str, SourceState],
            frozenset[str],
        ]
        | None
    ):
        """What the pointer publishes now (blocking; on a worker)."""
        for attempt in range(3):
            pointer = read_pointer(self._index_dir)
            if pointer is None:
                return None
            if pointer.identity != self._identity_key:
                raise IndexLockedError(
                    f"index {self._index_dir} was rebuilt by another process with different"
                    " settings (embedder, chunking or sources); reopen it with the same"
                    " settings, or give this one its own index directory"
                )
            old = self._pointer
            if pointer == old:
                sources = self._store.load_sources()
                return pointer, self._lexical, self._generation, sources, self._tombstones
            try:
                if old is not None and old.index_generation == pointer.index_generation:
                    lexical = self._lexical
                else:
                    lexical = LexicalIndex.open_reader(
                        self._index_dir / "lexical" / f"g{pointer.index_generation}"
                    )
                searcher = lexical.searcher()
                if old is None:
                    gen = load_generation(self._index_dir, pointer, searcher)
                else:
                    gen = follow_generation(
                        self._generation, self._index_dir, old, pointer, searcher
                    )
            except (OSError, ValueError, LexicalIndexError):
                # A compaction or rebuild replaced what the pointer we read named
                # before we opened it: read the pointer again.
                if attempt == 2:
                    raise
                continue
            return (
                pointer,
                lexical,
                gen,
                self._store.load_sources(),
                frozenset(self._store.tombstones()),
            )
        return None

    def _watch_directories(self) -> list[str]:
        extra_dirs = []
        for raw in self._settings.extra_paths:
            p = Path(raw).expanduser()
            if not p.is_absolute():
                p = self._workspace / p
            extra_dirs.append(os.fspath(p if p.is_dir() and not p.is_symlink() else p.parent))
        return source_directories(os.fspath(self._workspace), extra_dirs)

    async def _refresh_watch(self) -> None:
        """Watch directories that appeared; a new watch means the next check must stat."""
        watch = self._watch
        if watch is None:
            return
        before = len(watch._watched)
        try:
            await self._workers.run_sync(lambda: watch.watch(self._watch_directories()))
        except OSError:
            watch.close()
            self._watch = None
            return
        self._watch_primed = len(watch._watched) == before

    def _check_open(self) -> None:
        if self._closed:
            raise IndexClosedError(f"memory index {self._index_dir} is closed")

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
        return "lexical" if self._embedder is None else "hybrid"

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
        self._check_open()
        async with self._write_lock, self._writing():
            self._check_open()
            try:
                return await self._sync_locked(force, progress)
            finally:
                self._known = None
                await self._refresh_watch()

    async def _sync_if_free(self) -> bool:
        """Sync unless another process is writing; ``False`` (no sync) if one is.

        The writer publishes soon, and the next search looks at the sources again
        (the watch is unprimed, so its stat check runs), so a change that writer
        missed is still synced; a search never waits for another process's write.
        """
        self._check_open()
        async with self._write_lock, self._writing(wait=False) as held:
            self._check_open()
            if not held:
                self._watch_primed = False
                return False
            try:
                await self._sync_locked(False)
            finally:
                self._known = None
                await self._refresh_watch()
        return True

    async def _changed(self) -> bool:
        """A search noticed changed sources: sync them. Returns whether it answers from
        the current generation while the sync runs in the background.

        With a background nursery the sync starts there and the search does not wait:
        a sync's fixed costs (a tantivy commit with its fsync, the publication) exceed a
        search's at every index size, so waiting even briefly would make the noticing
        search pay most of it. One sync at a time: a change noticed while one runs makes
        it run once more when it ends (its scan may have been earlier).
        """
        if self._background is None:
            await self._sync_if_free()
            return False
        if self._background_sync is not None:
            self._resync = True
            return True
        scope = trio.CancelScope()
        try:
            self._background.start_soon(self._sync_in_background, scope)
        except RuntimeError:  # the nursery is closing: nothing runs in the background now
            await self._sync_if_free()
            return False
        self._background_sync = scope
        return True

    async def _sync_in_background(self, scope: trio.CancelScope) -> None:
        """Sync (again while changes keep being noticed); failures are logged, and the
        next search looks at the sources afresh."""
        try:
            with scope:
                while not self._closed:
                    self._resync = False
                    try:
                        await self._sync_if_free()
                    except Exception:
                        if not self._closed:
                            logger.warning(
                                "background sync of %s failed", self._index_dir, exc_info=True
                            )
                        self._watch_primed = False
                        return
                    if not self._resync:
                        return
        finally:
            self._background_sync = None

    def syncing(self) -> bool:
        """Whether a sync a search started is pending or running in the background."""
        return self._background_sync is not None

    async def _scan_memory(self) -> dict[str, FileEntry]:
        if "memory" not in self._settings.sources:
            return {}
        return await self._workers.run_sync(discover, self._workspace, self._settings.extra_paths)

    async def _list_sessions(self) -> list[TranscriptSession]:
        if "sessions" not in self._settings.sources or self._transcripts is None:
            return []
        return list(await self._transcripts.list_sessions())

    async def _sync_locked(self, force: bool, progress: SyncProgress | None = None) -> SyncReport:
        settings = self._settings
        report = progress or _no_progress
        entries = await self._scan_memory()
        sessions = await self._list_sessions()
        report("scan", len(entries) + len(sessions), len(entries) + len(sessions))
        present: set[str] = set()

        to_read: list[FileEntry] = []
        for e in entries.values():
            present.add(e.provenance)
            prev = self._sources.get(e.provenance)
            if force or prev is None or (prev.size, prev.mtime_ns) != (e.size, e.mtime_ns):
                to_read.append(e)
        session_map: dict[str, TranscriptSession] = {}
        to_chunk: list[TranscriptSession] = []
        for s in sessions:
            present.add(session_provenance(s))
            session_map[session_path(s)] = s
            prev = self._sources.get(session_provenance(s))
            if force or prev is None or prev.token != s.change_token:
                to_chunk.append(s)
        self._sessions = session_map
        removed = [prov for prov in self._sources if prov not in present]
        chunk_total = len(to_read) + len(to_chunk)
        old_sources = dict(self._sources)

        async def changed_batches() -> AsyncGenerator[
            list[tuple[SourceState, list[PreparedChunk]]]
        ]:
            # Changed sources, read and chunked a bounded batch at a time: a first index
            # of a million chunks holds one batch of chunks and vectors, not all of them.
            batch: list[tuple[SourceState, list[PreparedChunk]]] = []
            held = 0
            for start in range(0, len(to_read), _CHUNK_BATCH_FILES):
                files = to_read[start : start + _CHUNK_BATCH_FILES]
                file_changes, batch_stats = await self._workers.run_sync(
                    _prepare_files, files, old_sources, settings, self._tombstones, force
                )
                stat_only.extend(batch_stats)
                report("chunk", start + len(files), chunk_total)
                batch.extend(file_changes)
                held += sum(len(c) for _, c in file_changes)
                if held >= _SYNC_BATCH_CHUNKS:
                    yield batch
                    batch, held = [], 0
            chunked = len(to_read)
            for s in to_chunk:
                chunked += 1
                report("chunk", chunked, chunk_total)
                turns = list(await self._transcripts.read_turns(s)) if self._transcripts else []
                chunks = await self._workers.run_sync(
                    lambda s=s, turns=turns: prepare_session_chunks(
                        s,
                        turns,
                        turns_per_chunk=settings.transcript_turns_per_chunk,
                        context_turns=settings.transcript_context_turns,
                        max_tokens=settings.chunk_tokens,
                        chars_per_token=settings.chars_per_token,
                        tombstones=self._tombstones,
                    )
                )
                state = SourceState(
                    provenance=session_provenance(s),
                    source="sessions",
                    path=session_path(s),
                    size=len(turns),
                    mtime_ns=None,
                    token=s.change_token,
                    hash=sha256_hex(s.change_token),
                    skip_reason=None,
                )
                batch.append((state, chunks))
                held += len(chunks)
                if held >= _SYNC_BATCH_CHUNKS:
                    yield batch
                    batch, held = [], 0
            if batch:
                yield batch

        stat_only: list[SourceState] = []
        indexed: list[str] = []
        replaced_all: set[str] = set()
        old_count = added_count = embedded = 0
        pub: _Publishing | None = None
        rows_of = self._generation.rows_of_provenance
        # The embedding-cache entries this sync makes, written once at its end.
        cache = _CacheWrites.sized(
            settings.embedding_cache_max_entries,
            0 if self._embedder is None else self._embedder.dims,
        )
        ready_send, ready = trio.open_memory_channel[_Embedded](0)

        async def embed_batches() -> None:
            # Batch N+1 is read, chunked and embedded while batch N is stored, staged
            # and written (their C parts run without the GIL: two cores, not one); at
            # most one embedded batch waits.
            done = 0
            async with ready_send, contextlib.aclosing(changed_batches()) as batches:
                async for batch in batches:
                    chunks_in = [c for _, chunks in batch for c in chunks]
                    vectors, fresh = await self._embed_chunks(
                        chunks_in, cache, functools.partial(_embed_progress, report, done)
                    )
                    done += len(chunks_in)
                    await ready_send.send(_Embedded(batch, chunks_in, vectors, fresh))

        try:
            with collapse_single_exception_group():
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(embed_batches)
                    async with ready:
                        async for item in ready:
                            embedded += item.fresh
                            if pub is None:
                                pub = self._begin_publication()
                            changes = item.source_changes()
                            indexed.extend(
                                st.path for st, _ in item.batch if st.skip_reason is None
                            )
                            added_count += await self._apply_batch(
                                pub, changes, item.chunks, item.vectors
                            )
                            old_count += sum(len(rows_of.get(c.provenance, ())) for c in changes)
                            replaced_all.update(c.provenance for c in changes)
        except Exception:
            # What the cache would have held had the sync written it batch by batch;
            # the failure that matters is the one raised.
            with contextlib.suppress(Exception):
                await self._write_cache(cache)
            raise
        await self._write_cache(cache)
        if removed:
            if pub is None:
                pub = self._begin_publication()
            gone = [SourceChange(prov, None, (), None) for prov in removed]
            await self._apply_batch(pub, gone, [], None)
            old_count += sum(len(rows_of.get(prov, ())) for prov in removed)
            replaced_all.update(removed)

        if stat_only:
            await self._workers.run_sync(self._store.update_stats, stat_only)
            for st in stat_only:
                self._sources[st.provenance] = st
        if pub is None:
            self._last_sync_at = time.time()
            return SyncReport(
                indexed=(),
                removed=(),
                skipped=self._skipped(),
                chunks_added=0,
                chunks_removed=0,
                embedded=0,
                generation=self._generation.number,
            )
        report("publish", 0, 3)
        report("publish", 1, 3)
        await self._commit_lexical(pub, sorted(replaced_all))
        report("publish", 2, 3)
        await self._finish_publication(pub)
        report("publish", 3, 3)
        self._last_sync_at = time.time()
        return SyncReport(
            indexed=tuple(sorted(indexed)),
            removed=tuple(sorted(self._path_of_prov(p) for p in removed)),
            skipped=self._skipped(),
            chunks_added=added_count,
            chunks_removed=old_count,
            embedded=embedded,
            generation=self._generation.number,
        )

    async def _apply_batch(
        self,
        pub: _Publishing,
        changes: Sequence[SourceChange],
        chunks: Sequence[PreparedChunk],
        vectors: npt.NDArray[np.float32] | None,
    ) -> int:
        """One bounded batch of a sync: committed to SQLite, staged in the lexical
        writer (committed once, at the end) and written past the published prefix as a
        block of the coming publication. Returns the rows it added."""
        await self._workers.run_sync(self._store.apply_changes, changes)
        for ch in changes:
            if ch.state is None:
                self._sources.pop(ch.provenance, None)
            else:
                self._sources[ch.provenance] = ch.state
        provenances = sorted(c.provenance for c in changes)
        pub.provenances.update(provenances)
        await self._stage_lexical(pub, provenances, [(c.record, c.context) for c in chunks])
        replaced = frozenset(provenances)
        await self._write_block(
            pub,
            dead=pub.old.dead_rows(replaced),
            added=[c.record for c in chunks],
            vectors=vectors,
        )
        return len(chunks)

    @staticmethod
    def _path_of_prov(prov: str) -> str:
        return prov.split(":", 1)[1] if prov.startswith("memory:") else prov

    async def _batched_rank(self, item: _BatchItem) -> tuple[list[RankedRow], bool] | None:
        """Rank ``item``, together with the searches queued while batches were running.

        Concurrent searches share one worker call: a single matrix product serves every
        query vector of a generation (the product is memory-bound, so a batch costs about
        what one query did) and the stat check runs once. Up to ``_max_leaders`` batches
        run at once (one per worker); a search that finds them all busy queues, and the
        next batch to finish hands the lead to the oldest queued search, which takes
        everything queued by then. A leader cancelled before its batch ran gives the
        other items back, so no search is left waiting on work nobody will do.
        """
        self._queue.append(item)
        if self._leaders >= self._max_leaders:
            try:
                await item.done.wait()
            except BaseException:
                if not item.taken:
                    self._queue.remove(item)
                    if item.promoted:
                        # We were handed the lead but will not take it: pass it on.
                        self._hand_over_lead()
                raise
            if not item.promoted:
                return item.outcome()
        else:
            self._leaders += 1
        batch, self._queue = self._queue, []
        for it in batch:
            it.taken = True
        try:
            await self._parallel_products(batch)
            results = await self._workers.run_sync(rank_batch, batch, self._lexical)
        except BaseException as exc:
            others = [it for it in batch if it is not item]
            if isinstance(exc, Exception):
                for it in others:
                    it.error = exc
                    it.done.set()
            else:
                for it in others:
                    it.taken = False
                self._queue[:0] = others
            self._hand_over_lead()
            raise
        for it, result in zip(batch, results, strict=True):
            it.result = result
            if it is not item:
                it.done.set()
        self._hand_over_lead()
        return results[batch.index(item)]

    async def _parallel_products(self, batch: Sequence[_BatchItem]) -> None:
        """Give the items over a large generation their similarities, computed by
        concurrent workers over row slices (one product per generation for the batch)."""
        workers = self._workers.statistics()
        if workers.inline or workers.total_tokens < 2:
            return
        by_gen: dict[int, list[_BatchItem]] = {}
        for it in batch:
            m = it.gen.matrix
            if (
                it.query_vector is not None
                and m is not None
                and m.shape[0] == len(it.gen.records)
                and m.shape[0] * m.shape[1] >= _PARALLEL_PRODUCT_WORK
                and not approximate(it.gen, it.params.approximate_rows)  # it scans a sketch
            ):
                by_gen.setdefault(id(it.gen), []).append(it)
        for items in by_gen.values():
            matrix = items[0].gen.matrix
            assert matrix is not None
            queries = np.stack([it.query_vector for it in items])  # type: ignore[misc]
            out = np.empty((matrix.shape[0], len(items)), dtype=np.float32)
            parts = min(workers.total_tokens, 4)
            bounds = np.linspace(0, matrix.shape[0], parts + 1).astype(int).tolist()
            async with trio.open_nursery() as nursery:
                for start, stop in itertools.pairwise(bounds):
                    nursery.start_soon(
                        self._workers.run_sync, _product_slice, matrix, queries, out, start, stop
                    )
            for column, it in enumerate(items):
                it.sims = np.ascontiguousarray(out[:, column])

    async def _inline_rank(self, item: _BatchItem) -> tuple[list[RankedRow], bool] | None:
        """Rank ``item`` on the event loop, batched with the searches ready to run.

        The first search to arrive leads: it yields (uncancellably, so that the searches
        queued behind it are always served) for one scheduling round, and a few more
        while the queue keeps growing, which lets the tasks that are ready to run queue
        their own searches; then it ranks them all in one call.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._inline_queue.append(item)
        if len(self._inline_queue) > 1:
            try:
                await item.done.wait()
            except BaseException:
                if not item.taken:
                    self._inline_queue.remove(item)
                raise
            return item.outcome()
        await trio.lowlevel.cancel_shielded_checkpoint()
        # Searches still on their way (a few scheduling rounds behind) join too: keep
        # yielding while the queue grows, a bounded number of rounds. (Trio runs a
        # round's tasks in an order of its choosing: the leader may run before the
        # searches it would batch, so one round bringing none does not mean none come.)
        for _ in range(_GATHER_ROUNDS):
            queued = len(self._inline_queue)
            await trio.lowlevel.cancel_shielded_checkpoint()
            if len(self._inline_queue) == queued:
                break
        batch, self._inline_queue = self._inline_queue, []
        for it in batch:
            it.taken = True
        try:
            results = rank_batch(batch, self._lexical)
        except Exception as exc:
            for it in batch[1:]:
                it.error = exc
                it.done.set()
            raise
        for it, result in zip(batch[1:], results[1:], strict=True):
            it.result = result
            it.done.set()
        return results[0]

    def _hand_over_lead(self) -> None:
        self._leaders -= 1
        if self._queue and self._leaders < self._max_leaders:
            nxt = self._queue[0]
            nxt.promoted = True
            self._leaders += 1
            nxt.done.set()

    async def _query_vector(self, query: str) -> npt.NDArray[np.float32]:
        """The query's normalised vector; those of the latest queries are kept (the
        embedder is the index's for its whole life, so a repeated query's vector is
        the same), read-only."""
        memo = self._query_vectors
        found = memo.pop(query, None)
        if found is None:
            found = normalise_rows(await self._embed_query(query))[0]
            found.setflags(write=False)
            if len(memo) >= _QUERY_VECTORS:
                del memo[next(iter(memo))]
        memo[query] = found
        return found

    async def _embed_query(self, query: str) -> npt.NDArray[np.float32]:
        """The query's vector; a local embedder with ``embed_sync`` runs inline for short
        queries, where a thread hand-off would cost more than the hashing itself."""
        embedder = self._embedder
        assert embedder is not None
        embed_sync = getattr(embedder, "embed_sync", None)
        if callable(embed_sync) and len(query) <= _INLINE_QUERY_CHARS:
            vectors = np.asarray(embed_sync([query]), dtype=np.float32)
            if vectors.shape == (1, embedder.dims):
                return vectors
        return await embed_texts(embedder, [query], self._settings.embed_batch_size)

    async def _embed_chunks(
        self,
        chunks: Sequence[PreparedChunk],
        cache: _CacheWrites,
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[npt.NDArray[np.float32] | None, int]:
        """Vectors for ``chunks`` (the sync's own new entries first, then the cache),
        and how many texts were embedded anew; those are added to ``cache``."""
        embedder = self._embedder
        if embedder is None:
            return None, 0
        if not chunks:
            return np.zeros((0, embedder.dims), dtype=np.float32), 0
        hashes = [c.embed_hash or sha256_hex(c.embed_text) for c in chunks]
        known = {h: v for h in dict.fromkeys(hashes) if (v := cache.get(h)) is not None}
        cached = await self._workers.run_sync(
            self._store.cached_vectors,
            embedder.id,
            embedder.model,
            embedder.dims,
            [h for h in hashes if h not in known],
        )
        cached.update(known)
        missing: dict[str, str] = {}
        for h, c in zip(hashes, chunks, strict=True):
            if h not in cached and h not in missing:
                missing[h] = c.embed_text
        if missing:
            texts = list(missing.values())
            step = max(1, self._settings.embed_batch_size) * 4
            parts = []
            for start in range(0, len(texts), step):
                parts.append(
                    await embed_texts(
                        embedder, texts[start : start + step], self._settings.embed_batch_size
                    )
                )
                if progress is not None:
                    progress(min(start + step, len(texts)), len(texts))
            fresh = np.concatenate(parts).astype(np.float32)
            new_entries = list(zip(missing.keys(), fresh, strict=True))
            cached.update(new_entries)
            if cache.add(new_entries):
                await self._write_cache(cache)
        return np.stack([cached[h] for h in hashes]).astype(np.float32), len(missing)

    async def _write_cache(self, cache: _CacheWrites) -> None:
        """Write (and prune past the limit) the embedding-cache entries ``cache`` holds."""
        embedder = self._embedder
        made = cache.made
        entries = cache.take()
        if embedder is None or not made:
            return
        await self._workers.run_sync(
            self._store.cache_vectors,
            embedder.id,
            embedder.model,
            entries,
            self._settings.embedding_cache_max_entries,
        )
        self._cache_entries = await self._workers.run_sync(self._store.cache_size)

    async def _publish_lexical(
        self, provenances: Sequence[str], documents: Sequence[tuple[ChunkRecord, str]]
    ) -> None:
        writer = self._writer
        if writer is None:
            raise RuntimeError("the lexical writer is open only while holding the writer lease")
        try:
            await self._workers.run_sync(writer.replace, provenances, documents)
        except LexicalIndexError as exc:
            await self._rebuild_lexical(writer, exc)
            return
        await self._workers.run_sync(self._store.clear_pending, provenances)

    async def _rebuild_lexical(self, writer: LexicalIndex, exc: LexicalIndexError) -> None:
        # SQLite holds the change and its journal entry: rebuild rather than fail
        # every later sync on the same broken directory.
        self._writer = await self._workers.run_sync(
            rebuild_lexical, self._store, writer, writer.path, exc
        )
        # The directory was replaced: search it through a fresh reader.
        self._lexical = await self._workers.run_sync(LexicalIndex.open_reader, writer.path)

    async def _stage_lexical(
        self,
        pub: _Publishing,
        provenances: Sequence[str],
        documents: Sequence[tuple[ChunkRecord, str]],
    ) -> None:
        """Stage one batch's documents in the lexical writer, uncommitted."""
        writer = self._writer
        if writer is None:
            raise RuntimeError("the lexical writer is open only while holding the writer lease")
        try:
            await self._workers.run_sync(
                functools.partial(writer.replace, provenances, documents, commit=False)
            )
        except LexicalIndexError as exc:
            # Rebuilt from SQLite, which holds every batch applied so far.
            await self._rebuild_lexical(writer, exc)

    async def _commit_lexical(self, pub: _Publishing, provenances: Sequence[str]) -> None:
        """Commit the staged batches, then clear their journal entries."""
        writer = self._writer
        if writer is None:
            raise RuntimeError("the lexical writer is open only while holding the writer lease")
        try:
            await self._workers.run_sync(writer.commit)
        except LexicalIndexError as exc:
            await self._rebuild_lexical(writer, exc)
            return
        await self._workers.run_sync(self._store.clear_pending, provenances)

    def _begin_publication(self) -> _Publishing:
        pointer = self._pointer
        if pointer is None or not self._lease.held:
            raise RuntimeError("publishing needs the writer lease and a published pointer")
        return _Publishing(old=self._generation, pointer=pointer, number=pointer.number + 1)

    async def _write_block(
        self,
        pub: _Publishing,
        *,
        dead: Sequence[int],
        added: Sequence[ChunkRecord],
        vectors: npt.NDArray[np.float32] | None,
    ) -> None:
        """Write one block of ``pub`` past the published prefix (invisible until the
        pointer flips): ``dead`` rows of the generation it follows, ``added`` records."""
        rows = pub.old.added_rows(vectors, len(added))
        written = await self._workers.run_sync(
            functools.partial(
                write_publication,
                self._index_dir,
                pub.pointer,
                number=pub.number,
                dead=dead,
                added=added,
                vectors=rows,
                store_version=pub.pointer.store_version,
            )
        )
        pub.add(written, dead, added)

    async def _publish(
        self,
        *,
        replaced: frozenset[str] = frozenset(),
        removed_ids: frozenset[str] = frozenset(),
        within: Iterable[str] | None = None,
        added: Sequence[ChunkRecord] = (),
        added_vectors: npt.NDArray[np.float32] | None = None,
    ) -> None:
        """Publish the next generation in one block (see :meth:`_finish_publication`)."""
        pub = self._begin_publication()
        dead = pub.old.dead_rows(replaced, removed_ids, within)
        await self._write_block(pub, dead=dead, added=added, vectors=added_vectors)
        await self._finish_publication(pub)

    async def _finish_publication(self, pub: _Publishing) -> None:
        """Publish what ``pub``'s blocks wrote: flip the pointer, and follow it (the
        pointer and generation change in one step, so a cancellation leaves this
        process on the old pair and it follows later).

        Rows that go are marked dead and new ones appended after the published rows
        (the cost of the change, not of the index); once dead rows pass an eighth,
        the live rows are written as a new, compact epoch instead.
        """
        run = self._workers.run_sync
        old = pub.old
        version = await run(self._store.version)
        searcher = await run(self._lexical.searcher)
        written = pub.written(version)
        epoch = False
        columns: RowColumns | None = pub.columns
        if old.needs_compaction(pub.dead, pub.added):
            appended = await run(
                functools.partial(
                    pending_generation,
                    old,
                    self._index_dir,
                    written,
                    searcher,
                    dead=pub.dead,
                    columns=pub.columns,
                )
            )
            keep = np.ones(len(appended.records), dtype=np.bool_)
            if appended.alive is not None:
                keep &= appended.alive
            rows = np.flatnonzero(keep)
            records = appended.records
            kept = (
                records.select(rows)
                if isinstance(records, RowRecords)
                else [records[i] for i in rows.tolist()]
            )
            pointer = written.pointer
            written = await run(
                functools.partial(
                    write_epoch,
                    self._index_dir,
                    epoch=pointer.epoch + 1,
                    number=pointer.number,
                    index_generation=pointer.index_generation,
                    identity=pointer.identity,
                    store_version=version,
                    dims=pointer.dims,
                    records=kept,
                    row_batches=live_row_batches(appended.matrix, rows, None),
                )
            )
            epoch, columns = True, None
        await run(flip_pointer, self._index_dir, written.pointer)
        new = await run(
            functools.partial(
                generation_after,
                old,
                self._index_dir,
                written,
                searcher,
                dead=pub.dead,
                columns=columns,
                epoch=epoch,
            )
        )
        # The pointer's number survives restarts: every process reports the same one.
        self._pointer, self._generation = written.pointer, new

    def _known_files(self) -> dict[str, tuple[int | None, int | None]]:
        """``{virtual path: (size, mtime_ns)}`` of the memory files as last synced.

        Rebuilt after each sync and never mutated afterwards, so a worker thread can
        compare against it while the event loop goes on.
        """
        if self._known is None:
            self._known = {
                st.path: (st.size, st.mtime_ns)
                for st in self._sources.values()
                if st.source == "memory"
            }
        return self._known

    async def _sessions_changed(self) -> bool:
        if "sessions" not in self._settings.sources or self._transcripts is None:
            return False
        sessions = await self._list_sessions()
        known = sum(1 for st in self._sources.values() if st.source == "sessions")
        if len(sessions) != known:
            return True
        for session in sessions:
            prev = self._sources.get(session_provenance(session))
            if prev is None or prev.token != session.change_token:
                return True
        return False

    async def _fingerprint(self) -> tuple[object, ...]:
        entries = await self._scan_memory()
        sessions = await self._list_sessions()
        return (
            tuple(sorted((e.vpath, e.size, e.mtime_ns) for e in entries.values())),
            tuple(sorted((session_provenance(s), s.change_token) for s in sessions)),
        )

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
        self._check_open()
        last = await self._fingerprint()
        task_status.started()
        while True:
            await trio.sleep(interval)
            current = await self._fingerprint()
            if current == last:
                continue
            while True:
                await trio.sleep(debounce)
                settled = await self._fingerprint()
                if settled == current:
                    break
                current = settled
            await self.sync()
            last = current

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
        self._check_open()
        settings = self._settings
        limit = settings.max_results if max_results is None else max_results
        if not 1 <= limit <= _MAX_PAGE:
            raise InvalidSearchError(f"max_results must be between 1 and {_MAX_PAGE}, got {limit}")
        if offset < 0:
            raise InvalidSearchError(f"offset must not be negative, got {offset}")
        chosen: SearchMode = mode or self.default_mode
        if chosen not in ("hybrid", "lexical", "vector"):
            raise InvalidSearchError(
                f"unknown search mode {chosen!r}; use hybrid, lexical or vector"
            )
        if self._embedder is None:
            if chosen == "vector":
                raise InvalidSearchError(
                    "vector search needs an embedding provider; configure one or use lexical"
                )
            chosen = "lexical"
        cut = settings.min_score if min_score is None else min_score
        if not 0.0 <= cut <= 1.0 or math.isnan(cut):
            raise InvalidSearchError(f"min_score must be between 0 and 1, got {cut}")

        await self._follow()
        if settings.sync_on_search and await self._sessions_changed():
            await self._changed()
        if not query.strip():
            return SearchPage(chosen, [], None, self._generation.number, None)
        check_files = settings.sync_on_search and "memory" in settings.sources
        if check_files and self._watch is not None:
            # The kernel says whether anything moved: sync only when it did (its scan is
            # the check; a stat check first would scan the same files twice). Until
            # every current watch has seen a full check, the stat check still runs.
            moved = self._watch.changed()
            if self._watch_primed:
                check_files = False
                if moved:
                    await self._changed()
            else:
                self._watch_primed = True

        self._active_searches += 1
        try:
            qvec: npt.NDArray[np.float32] | None = None
            if chosen != "lexical" and self._embedder is not None:
                qvec = await self._query_vector(query)
            params = self._rank_params(
                mode=chosen,
                offset=offset,
                limit=limit,
                min_score=cut,
                now=time.time() if now is None else now,
                filter=filter or SearchFilter(),
            )
            # A stat check, when one is due, rides the ranking call; only when it finds
            # a file moved does the search sync and rank again.
            gen = self._generation
            # A sync a search started has not published yet: this answer is behind.
            behind = self._background_sync is not None
            item = _BatchItem(
                gen=gen,
                query=query,
                query_vector=qvec,
                params=params,
                tombstones=self._tombstones,
                check=(self._workspace, settings.extra_paths, self._known_files())
                if check_files
                else None,
                rank_stale=self._background is not None,
            )
            if item.check is None and _rank_inline(gen):
                outcome = await self._inline_rank(item)
            elif qvec is not None:
                outcome = await self._batched_rank(item)
            else:
                # Lexical-only searches gain nothing from sharing a matrix product and
                # would only lose the parallelism of separate workers: they go alone.
                outcome = await self._workers.run_sync(_rank_one, item, self._lexical)
            if item.stale:
                behind = await self._changed()
            if outcome is None:
                await self._sync_if_free()
                gen = self._generation
                ranked = await self._workers.run_sync(
                    functools.partial(
                        rank,
                        gen,
                        self._lexical,
                        query=query,
                        query_vector=qvec,
                        params=params,
                        tombstones=self._tombstones,
                    )
                )
            else:
                ranked = outcome
            rows, more = ranked
        finally:
            self._active_searches -= 1
        # Tombstones may have grown while ranking ran: filter again with the latest set.
        tombstones = self._tombstones
        records = gen.records
        hits = []
        for r in rows:
            rec = records[r.row]
            if rec.chunk_id not in tombstones:
                hits.append((rec, r))
        return SearchPage(
            mode=chosen,
            hits=hits,
            next_offset=offset + limit if more else None,
            generation=gen.number,
            warning=None
            if not behind
            else (
                f"the sources changed; this answer is from generation {gen.number} while"
                " the index syncs in the background (a later search sees the change)"
            ),
        )

    # -- read ---------------------------------------------------------------------
    async def read(self, path: str, *, from_line: int = 1, lines: int | None = None) -> ReadResult:
        """Lines ``from_line..from_line+lines-1`` of a source (turns, for a transcript).

        ``path`` is a virtual path as search hits and status report it. Anything
        that is not a current source of this index is refused with
        :class:`SourcePathError`; the read is bounded by ``read_max_chars``.
        """
        self._check_open()
        if from_line < 1:
            raise InvalidSearchError(f"from_line starts at 1, got {from_line}")
        if lines is not None and lines < 1:
            raise InvalidSearchError(f"lines must be at least 1, got {lines}")
        vpath = path.removeprefix("./")
        if vpath.startswith("sessions/") and "sessions" in self._settings.sources:
            if not self._sessions:
                self._sessions = {session_path(s): s for s in await self._list_sessions()}
            session = self._sessions.get(vpath)
            if session is None or self._transcripts is None:
                raise SourcePathError(
                    f"{path!r} is not a session transcript of this index;"
                    " use a path from a search hit"
                )
            turns = await self._transcripts.read_turns(session)
            all_lines = [render_turn(t) for t in turns]
            source: SourceKind = "sessions"
        else:
            if "\x00" in vpath:
                raise InvalidSearchError("a source path must not contain NUL")
            entries = await self._scan_memory()
            entry = entries.get(vpath)
            if entry is None or entry.symlink:
                raise SourcePathError(
                    f"{path!r} is not a memory source of this index; read MEMORY.md,"
                    " memory/*.md or a path returned by search"
                )
            budget = self._settings.read_max_chars
            span = await self._workers.run_sync(
                read_line_range,
                entry,
                self._settings.max_file_bytes,
                from_line,
                lines,
                budget,
            )
            if span.reason is not None:
                raise SourcePathError(f"cannot read {path!r}: {span.reason}")
            return ReadResult(
                path=vpath,
                source="memory",
                from_line=from_line,
                to_line=from_line - 1 + len(span.lines),
                total_lines=span.total,
                text="\n".join(span.lines),
                truncated=span.truncated,
                revision=span.revision,
            )
        total = len(all_lines)
        end = total if lines is None else min(total, from_line - 1 + lines)
        selected = all_lines[from_line - 1 : end]
        text = "\n".join(selected)
        truncated = end < total if lines is None else False
        budget = self._settings.read_max_chars
        if len(text) > budget:
            text = text[:budget]
            kept = text.count("\n") + 1
            end = from_line - 1 + kept
            truncated = True
        return ReadResult(
            path=vpath,
            source=source,
            from_line=from_line,
            to_line=max(from_line - 1, end),
            total_lines=total,
            text=text,
            truncated=truncated,
        )

    # -- forget -------------------------------------------------------------------
    async def forget(
        self,
        *,
        path: str | None = None,
        session_id: str | None = None,
        agent_id: str | None = None,
        source: str | None = None,
        dry_run: bool = False,
    ) -> ForgetResult:
        """Remove the chunks derived from a path, a session or a whole source.

        Criteria combine with AND; at least one is required. Forgotten chunks are
        tombstoned: they are filtered out of every generation (including ones
        searches already hold), and a later sync does not index the same chunk again.
        Source files and transcripts are left untouched.
        """
        self._check_open()
        if path is None and session_id is None and agent_id is None and source is None:
            raise InvalidSearchError("forget needs a path, session_id, agent_id or source")
        if source is not None and source not in ("memory", "sessions"):
            raise InvalidSearchError(f"unknown source {source!r}; use memory or sessions")
        async with self._write_lock, self._writing():
            self._check_open()
            matches = await self._workers.run_sync(
                lambda: self._store.select_chunks(
                    path=path, session_id=session_id, agent_id=agent_id, source=source
                )
            )
            ids = tuple(m[0] for m in matches)
            paths = tuple(dict.fromkeys(m[2] for m in matches))
            if dry_run or not matches:
                return ForgetResult(dry_run=dry_run, chunk_ids=ids, paths=paths)
            # Visible to every search from now on, before anything is deleted.
            self._tombstones = self._tombstones | frozenset(ids)
            await self._workers.run_sync(self._store.forget, matches)
            provs = sorted({m[1] for m in matches})
            remaining = await self._workers.run_sync(self._store.chunks_for, provs)
            await self._publish_lexical(provs, remaining)
            await self._publish(removed_ids=frozenset(ids), within=provs)
            return ForgetResult(dry_run=False, chunk_ids=ids, paths=paths)

    def source_paths(self, source: SourceKind = "memory") -> tuple[str, ...]:
        """The virtual paths of the indexed (not skipped) sources of one kind, sorted."""
        return tuple(
            sorted(
                s.path
                for s in self._sources.values()
                if s.source == source and s.skip_reason is None
            )
        )

    # -- status -------------------------------------------------------------------
    def _skipped(self) -> tuple[SkippedSource, ...]:
        """Every source skipped as of the last sync, by path."""
        return tuple(
            SkippedSource(path=s.path, source=s.source, reason=s.skip_reason)
            for s in sorted(self._sources.values(), key=lambda s: s.path)
            if s.skip_reason is not None
        )

    def status(self) -> IndexStatus:
        """A snapshot of the index (no I/O)."""
        gen = self._generation
        live_sessions = gen.is_session if gen.alive is None else gen.is_session & gen.alive
        sessions = int(live_sessions.sum())
        skipped = self._skipped()
        e = self._embedder
        return IndexStatus(
            workspace_dir=str(self._workspace),
            index_dir=str(self._index_dir),
            generation=gen.number,
            index_generation=self._index_generation,
            chunks=gen.live_count,
            memory_chunks=gen.live_count - sessions,
            session_chunks=sessions,
            sources=sum(1 for s in self._sources.values() if s.skip_reason is None),
            skipped=skipped,
            embedder_id=None if e is None else e.id,
            embedder_model=None if e is None else e.model,
            dims=None if e is None else e.dims,
            default_mode=self.default_mode,
            tombstones=len(self._tombstones),
            embedding_cache_entries=self._cache_entries,
            last_sync_at=self._last_sync_at,
            active_searches=self._active_searches,
        )


def files_changed(
    workspace: Path,
    extra_paths: tuple[str, ...],
    known: Mapping[str, tuple[int | None, int | None]],
) -> bool:
    """Whether any memory file appeared, vanished or changed size or mtime since ``known``."""
    current = scan_stats(workspace, extra_paths)
    if len(current) != len(known):
        return True
    return any(known.get(vpath) != (size, mtime) for vpath, (_, size, mtime, _) in current.items())


@attrs.frozen(eq=False)
class _Embedded:
    """One batch of a sync, read, chunked and embedded: ready to store and index."""

    batch: list[tuple[SourceState, list[PreparedChunk]]]
    chunks: list[PreparedChunk]
    vectors: npt.NDArray[np.float32] | None
    fresh: int

    def source_changes(self) -> list[SourceChange]:
        """The batch as one replacement per source, each with its rows of vectors."""
        changes: list[SourceChange] = []
        offset = 0
        for state, chunks in self.batch:
            vecs = None if self.vectors is None else self.vectors[offset : offset + len(chunks)]
            offset += len(chunks)
            changes.append(SourceChange(state.provenance, state, chunks, vecs))
        return changes


# The most bytes of vectors a sync holds back from the embedding cache (see _CacheWrites).
_CACHE_WRITES_BYTES = 128 * 2**20


@attrs.define(eq=False)
class _CacheWrites:
    """The embedding-cache entries a sync made and has not written yet, oldest first.

    The cache keeps its ``limit`` most recently used entries, so of a first sync of a
    million chunks only the last ``limit`` vectors survive its pruning: written batch by
    batch, the other 950,000 were inserted and deleted again (1.5 GB through SQLite).
    Held back here, only the newest ``limit`` are kept (an older one could not survive)
    and written once at the end of the sync; at most ``bound`` are held (written out
    when the limit is larger), so memory stays bounded whatever the setting. Entries a
    sync made count as used at its end.
    """

    limit: int
    bound: int
    # Whether any entry was added since the last write (a limit of 0 holds none, but
    # the write still prunes the cache to it).
    made: bool = False
    _entries: collections.OrderedDict[str, npt.NDArray[np.float32]] = attrs.field(
        factory=collections.OrderedDict
    )

    @classmethod
    def sized(cls, limit: int, dims: int) -> _CacheWrites:
        """Held back for a cache of ``limit`` entries of ``dims``-dimensional vectors."""
        return cls(limit=max(0, limit), bound=max(1, _CACHE_WRITES_BYTES // max(1, 4 * dims)))

    def get(self, text_hash: str) -> npt.NDArray[np.float32] | None:
        """The held vector of ``text_hash`` (now the most recent), if any."""
        found = self._entries.get(text_hash)
        if found is not None:
            self._entries.move_to_end(text_hash)
        return found

    def add(self, entries: Iterable[tuple[str, npt.NDArray[np.float32]]]) -> bool:
        """Hold ``entries`` as the most recent; whether they are due to be written."""
        held = self._entries
        for text_hash, vector in entries:
            self.made = True
            held[text_hash] = vector
            held.move_to_end(text_hash)
            if len(held) > self.limit:
                held.popitem(last=False)
        return len(held) >= self.bound

    def take(self) -> list[tuple[str, npt.NDArray[np.float32]]]:
        """Every held entry, oldest first, no longer held."""
        out = list(self._entries.items())
        self._entries.clear()
        self.made = False
        return out


@attrs.define(eq=False)
class _Publishing:
    """A publication being written: blocks past the published prefix of ``pointer``,
    one per batch of a sync, each written after the previous one."""

    old: Generation
    pointer: Pointer
    number: int
    dead: list[int] = attrs.field(factory=list)
    added: int = 0
    columns: RowColumns = attrs.field(factory=RowColumns)
    provenances: set[str] = attrs.field(factory=set)
    _starts: list[npt.NDArray[np.int64]] = attrs.field(factory=list)
    _lengths: list[npt.NDArray[np.int32]] = attrs.field(factory=list)

    def add(self, written: Written, dead: Sequence[int], added: Sequence[ChunkRecord]) -> None:
        self.pointer = written.pointer
        self.dead.extend(dead)
        self.added += len(added)
        self.columns.extend(added)
        self._starts.append(written.starts)
        self._lengths.append(written.lengths)

    def written(self, store_version: int) -> Written:
        """Every block as one write, under a pointer recording ``store_version``."""
        return Written(
            pointer=attrs.evolve(self.pointer, store_version=store_version),
            starts=np.concatenate(self._starts) if self._starts else np.zeros(0, np.int64),
            lengths=np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int32),
        )


@attrs.frozen
class SearchPage:
    """A page of :meth:`MemoryIndex.search_page`: each hit's record and ranked row
    (tombstoned chunks already left out), where the next page starts, the generation
    searched and the warning of an answer behind its sources."""

    mode: SearchMode
    hits: list[tuple[ChunkRecord, RankedRow]]
    next_offset: int | None
    generation: int
    warning: str | None


def search_hit(rec: ChunkRecord, r: RankedRow) -> SearchHit:
    """The :class:`SearchHit` of a ranked row and its record."""
    return SearchHit(
        chunk_id=rec.chunk_id,
        path=rec.path,
        source=rec.source,
        start_line=rec.start_line,
        end_line=rec.end_line,
        excerpt=rec.text,
        score=r.score,
        text_score=r.text_score,
        vector_score=r.vector_score,
        content_hash=rec.content_hash,
        revision=rec.revision,
        agent_id=rec.agent_id,
        session_key=rec.session_key,
        session_id=rec.session_id,
        entry_ids=rec.entry_ids,
        timestamp=rec.timestamp,
    )


@attrs.define(eq=False)
class _BatchItem:
    """One search waiting for (or in) a ranking batch."""

    gen: Generation
    query: str
    query_vector: npt.NDArray[np.float32] | None
    params: RankParams
    tombstones: frozenset[str]
    check: tuple[Path, tuple[str, ...], Mapping[str, tuple[int | None, int | None]]] | None
    # Whether a search whose check finds the files moved is still ranked (it then syncs
    # in the background) rather than answered with None (it syncs inline and re-ranks).
    rank_stale: bool = False
    stale: bool = False
    done: trio.Event = attrs.field(factory=trio.Event)
    sims: npt.NDArray[np.float32] | None = None
    taken: bool = False
    promoted: bool = False
    result: tuple[list[RankedRow], bool] | None = None
    error: Exception | None = None

    def outcome(self) -> tuple[list[RankedRow], bool] | None:
        if self.error is not None:
            raise self.error
        return self.result


def _rank_one(item: _BatchItem, lexical: LexicalIndex) -> tuple[list[RankedRow], bool] | None:
    return rank_batch([item], lexical)[0]


def rank_batch(
    items: Sequence[_BatchItem], lexical: LexicalIndex
) -> list[tuple[list[RankedRow], bool] | None]:
    """Rank a batch of searches: one matrix product per generation, one stat check.

    An item that asked for the freshness check gets ``None`` when the memory files moved
    (its search syncs and ranks again), unless it asked to be ranked anyway
    (``rank_stale``: it is marked ``stale``); the others are ranked as usual.
    """
    stale = False
    checks = [it.check for it in items if it.check is not None]
    if checks:
        stale = files_changed(*checks[0])
    by_gen: dict[int, list[int]] = {}
    for i, it in enumerate(items):
        if it.query_vector is not None and it.gen.matrix is not None and it.sims is None:
            by_gen.setdefault(id(it.gen), []).append(i)
    sims: dict[int, npt.NDArray[np.float32]] = {}
    for group in by_gen.values():
        gen = items[group[0]].gen
        assert gen.matrix is not None
        if gen.matrix.shape[0] != len(gen.records) or any(
            approximate(gen, items[i].params.approximate_rows) for i in group
        ):
            continue  # (an approximate vector stage scans the sketch in rank())
        dense = group
        if gen.matrix.size <= _SPARSE_PRODUCT_CELLS:
            cols = gen.columns()
            assert cols is not None
            dense = []
            for i in group:
                q = items[i].query_vector
                assert q is not None
                nz = np.flatnonzero(q)
                if len(nz) * 4 <= q.shape[0]:
                    sims[i] = q[nz] @ cols[nz]
                else:
                    dense.append(i)
        if not dense:
            continue
        queries = np.stack([items[i].query_vector for i in dense])  # type: ignore[misc]
        product = gen.matrix @ queries.T
        for column, i in enumerate(dense):
            sims[i] = np.ascontiguousarray(product[:, column])
    out: list[tuple[list[RankedRow], bool] | None] = []
    for i, it in enumerate(items):
        if stale and it.check is not None:
            if not it.rank_stale:
                out.append(None)
                continue
            it.stale = True
        out.append(
            rank(
                it.gen,
                lexical,
                query=it.query,
                query_vector=it.query_vector,
                params=it.params,
                tombstones=it.tombstones,
                sims=it.sims if it.sims is not None else sims.get(i),
            )
        )
    return out


@attrs.frozen
class _LineSpan:
    """What :func:`read_line_range` kept of one file."""

    lines: list[str]
    total: int
    truncated: bool
    revision: str | None
    reason: str | None


_READ_BLOCK = 64 * 1024
_SNIFF_BYTES = 8192
# Line ends str.splitlines() knows that are one character long; "\r" may be the start
# of "\r\n", so a block ending with it waits for the next one.
_LINE_ENDS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")


def read_line_range(
    entry: FileEntry, max_bytes: int, from_line: int, lines: int | None, max_chars: int
) -> _LineSpan:
    """Lines ``from_line..from_line+lines-1`` of a memory file, read as a stream.

    Only the requested lines are kept (at most ``max_chars`` characters of them); the
    rest is counted and hashed on the way through, so a get costs memory for what it
    returns, not for the file. Lines are those of ``str.splitlines`` (as chunking
    counts them); the same files are refused as by a sync (symlink, larger than
    ``max_bytes``, NUL bytes, not UTF-8), with ``reason`` saying why.
    """

    def refused(reason: str) -> _LineSpan:
        return _LineSpan([], 0, False, None, reason)

    if entry.symlink:
        return refused(SYMLINK)
    if entry.size > max_bytes:
        return refused(too_large(max_bytes, entry.size))
    last = None if lines is None else from_line - 1 + lines
    kept: list[str] = []
    chars = 0
    truncated = False
    total = 0
    size = 0
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")()
    pending = ""

    def take(complete: list[str]) -> None:
        nonlocal total, chars, truncated
        for line in complete:
            total += 1
            if total < from_line or (last is not None and total > last) or truncated:
                continue
            room = max_chars - chars - (1 if kept else 0)
            if len(line) > room:
                if room > 0:
                    kept.append(line[:room])
                truncated = True
                continue
            kept.append(line)
            chars += len(line) + (1 if len(kept) > 1 else 0)

    try:
        fd = os.open(entry.real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            while block := f.read(_READ_BLOCK):
                if size < _SNIFF_BYTES and b"\x00" in block[: _SNIFF_BYTES - size]:
                    return refused(BINARY)
                size += len(block)
                if size > max_bytes:
                    return refused(too_large(max_bytes))
                digest.update(block)
                pending += decoder.decode(block)
                parts = pending.splitlines(keepends=True)
                pending = ""
                if parts and (parts[-1][-1] not in _LINE_ENDS or parts[-1][-1] == "\r"):
                    pending = parts.pop()
                take([p.rstrip("\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029") for p in parts])
            pending += decoder.decode(b"", final=True)
    except OSError as exc:
        return refused(unreadable(exc))
    except UnicodeDecodeError:
        return refused(NOT_UTF8)
    take(pending.splitlines())
    if lines is None and total > from_line - 1 + len(kept):
        truncated = True
    return _LineSpan(kept, total, truncated, digest.hexdigest(), None)


def _set_aside_corrupt_database(index_dir: Path, cause: Exception) -> None:
    """Move a corrupt index database (and its WAL files) aside, so that it is rebuilt."""
    db = index_dir.resolve() / "index.sqlite3"
    aside = db.with_name(f"{db.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
    logger.warning(
        "%s; the index is derived from the memory files and transcripts: moving the "
        "database to %s and rebuilding it (chunks removed with forget must be "
        "forgotten again)",
        cause,
        aside,
    )
    db.rename(aside)
    for suffix in ("-wal", "-shm"):
        extra = db.with_name(db.name + suffix)
        if extra.exists():
            extra.rename(aside.with_name(aside.name + suffix))
    shutil.rmtree(db.parent / "lexical", ignore_errors=True)


def _recover_lexical(store: Store, lexical: LexicalIndex) -> None:
    """Replay the lexical journal; rebuild tantivy from SQLite if the two still disagree."""
    pending = store.pending_lexical()
    if pending:
        lexical.replace(pending, store.chunks_for(pending))
        store.clear_pending(pending)
    if lexical.num_docs() != store.chunk_count():
        lexical.reset(store.chunks_for(None))


def _open_lexical(store: Store, lex_dir: Path, recover: bool = True) -> LexicalIndex:
    """Open the tantivy directory and bring it up to SQLite; rebuild it when that fails.

    A kill inside a tantivy commit can leave files ``meta.json`` does not reference
    (a ``<segment>.<opstamp>.del``): replaying the journal then reaches the same
    opstamp and fails with ``FileAlreadyExists`` on every open. The lexical index is
    derived from SQLite, so a directory that cannot be opened or replayed is rebuilt.
    """
    lexical: LexicalIndex | None = None
    try:
        lexical = LexicalIndex(lex_dir)
        if recover:
            _recover_lexical(store, lexical)
    except LexicalIndexError as exc:
        return rebuild_lexical(store, lexical, lex_dir, exc)
    return lexical


def rebuild_lexical(
    store: Store, lexical: LexicalIndex | None, lex_dir: Path, cause: Exception
) -> LexicalIndex:
    """Replace the tantivy directory with one rebuilt from every chunk in SQLite."""
    logger.warning(
        "lexical index %s cannot be opened or updated (%s); rebuilding it from %s",
        lex_dir,
        cause,
        store.path,
    )
    if lexical is not None:
        with contextlib.suppress(Exception):
            lexical.close()
    shutil.rmtree(lex_dir, ignore_errors=True)
    fresh = LexicalIndex(lex_dir)
    fresh.reset(store.chunks_for(None))
    pending = store.pending_lexical()
    if pending:
        store.clear_pending(pending)
    return fresh


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
    options: dict[str, Any] = {
        "background": background,
        "workspace_dir": workspace_dir,
        "index_dir": index_dir,
        "settings": settings or MemoryCoreSettings(),
        "embedder": embedder,
        "workers": workers,
        "transcripts": transcripts,
    }
    try:
        index = await MemoryIndex._open(**options)
    except IndexCorruptError as exc:
        # The database is derived data: set it aside and rebuild from the sources.
        await workers.run_sync(_set_aside_corrupt_database, Path(index_dir), exc)
        index = await MemoryIndex._open(**options)
    try:
        yield index
    finally:
        with trio.CancelScope(shield=True):
            await index.aclose()
