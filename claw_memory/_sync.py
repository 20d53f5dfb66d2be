"""A sync: bring the index up to date with its sources, under the writer lease.

Only sources whose stat (files) or change token (sessions) moved are read; a file whose
bytes hash the same only has its stat refreshed. Changed sources are read, chunked and
embedded a bounded batch at a time (:data:`_SYNC_BATCH_CHUNKS`), and each batch is
committed to SQLite with a lexical journal entry per source, staged in the lexical
writer and written past the published prefix as a block of the coming publication.
Two batches are in flight: the next is read, chunked and embedded (a producer task)
while the current one is stored, so the stages use both cores. At the end the lexical
writer commits once and the publication flips the pointer once.

A transcript only grows, so a session that did (its turns as last synced are still its
first turns, by a digest of them kept in its source state) keeps the chunks of those
earlier turns: only the chunks of its new turns and of the last turns whose context
window the new ones entered are written, and those they replace removed
(:func:`_session_change`). The earlier turns are only named (their chunk ids, which
count identical pieces from the session's start), not cut into records, contexts and
analysis again. The syncer keeps each session's groups as its last cut named them
(:class:`~._transcripts.SessionNames`: each group's entry ids, a hash of its turns and
its pieces' hashes), so a settled group whose turns are unchanged is named without
rendering, cutting or hashing its text again (while no chunk is forgotten). A one-turn
sync then costs what changed, and a pass over the session's kept names (at 5,000 turns,
a third of them 2,400-character replies, a one-turn sync's CPU fell from 175-229 ms to
86-87 ms).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import time
from collections.abc import AsyncGenerator, Callable, Sequence

import attrs
import numpy as np
import numpy.typing as npt
import trio

from claw.plugin_sdk import WorkerPool, collapse_single_exception_group

from ._embedding import ChunkEmbedder
from ._generation import Generation
from ._listing import SourceListing
from ._publication import Publication, Publisher
from ._records import PreparedChunk
from ._settings import MemoryCoreSettings
from ._sources import FileEntry, prepare_file_chunks, read_source
from ._store import SourceChange, SourceState, Store
from ._transcripts import (
    SessionNames,
    TranscriptSession,
    TranscriptTurn,
    cut_session,
    session_path,
    session_provenance,
)
from ._types import SyncReport
from ._view import IndexView
from ._writer import IndexWriter

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


def _path_of_prov(prov: str) -> str:
    return prov.split(":", 1)[1] if prov.startswith("memory:") else prov


@attrs.define(eq=False)
class Syncer:
    """Runs a sync while the caller holds the writer lease (see the module docstring)."""

    view: IndexView
    store: Store
    workers: WorkerPool
    settings: MemoryCoreSettings
    listing: SourceListing
    embedding: ChunkEmbedder
    writer: IndexWriter
    publisher: Publisher
    #: When the last sync ended (epoch seconds), for status.
    last_sync_at: float | None = None
    #: Each session's groups as its last cut named them (a grown session's settled
    #: turns are named from them: :class:`~._transcripts.SessionNames`).
    names: SessionNames = attrs.field(factory=SessionNames, init=False)
    #: The transcript sessions the last run left the index holding, with the source's
    #: listing version read before it (see :meth:`take_listing`).
    _listed: tuple[object | None, dict[str, str]] | None = attrs.field(default=None, init=False)

    def take_listing(self) -> tuple[object | None, dict[str, str]] | None:
        """Once, after a run that finished: the listing version read before it listed,
        and the sessions the index now holds, exactly, by provenance key with their
        change tokens. ``None`` after that, when the run did not finish, or when the
        listing named a session twice. What lets the next search know the index is
        current without listing again."""
        listed, self._listed = self._listed, None
        return listed

    async def run(self, force: bool, progress: SyncProgress | None = None) -> SyncReport:
        """Sync (``force``: re-read and re-chunk every source); hold the writer lease."""
        view = self.view
        settings = self.settings
        report = progress or _no_progress
        self._listed = None
        # Whether the view's sources are the store's as this run starts (the take-over
        # just read or kept them): this run keeps them in step with what it writes, so
        # at its end they are the store's again, at the store's new mark.
        in_step = view.sources_mark == await self.workers.run_sync(self.store.sources_mark)
        entries = await self.listing.scan_memory()
        # Read before listing: a change after this read moves the version past it.
        version = self.listing.sessions_version()
        sessions = await self.listing.list_sessions()
        report("scan", len(entries) + len(sessions), len(entries) + len(sessions))
        present: set[str] = set()

        to_read: list[FileEntry] = []
        for e in entries.values():
            present.add(e.provenance)
            prev = view.sources.get(e.provenance)
            if force or prev is None or (prev.size, prev.mtime_ns) != (e.size, e.mtime_ns):
                to_read.append(e)
        session_map: dict[str, TranscriptSession] = {}
        to_chunk: list[TranscriptSession] = []
        # What the index holds once this run has finished: every listed session at
        # its token (unchanged ones already were; the rest it re-chunks).
        holds: dict[str, str] = {}
        files = len(present)
        for s in sessions:
            prov = session_provenance(s)
            present.add(prov)
            session_map[session_path(s)] = s
            holds[prov] = s.change_token
            prev = view.sources.get(prov)
            if force or prev is None or prev.token != s.change_token:
                to_chunk.append(s)
        # A session listed twice (a source's mistake), or two whose provenance keys
        # coincide, leave no exact listing to keep.
        distinct = len(present) - files == len(sessions)
        listed = (version, holds) if distinct else None
        view.sessions = session_map
        # The generation this run's publication derives from (nothing else publishes
        # while the lease is held): the rows a grown transcript keeps are its rows.
        generation = view.generation
        removed = [prov for prov in view.sources if prov not in present]
        chunk_total = len(to_read) + len(to_chunk)
        old_sources = dict(view.sources)

        async def changed_batches() -> AsyncGenerator[
            list[tuple[SourceState, list[PreparedChunk], _Kept | None]]
        ]:
            # Changed sources, read and chunked a bounded batch at a time: a first index
            # of a million chunks holds one batch of chunks and vectors, not all of them.
            batch: list[tuple[SourceState, list[PreparedChunk], _Kept | None]] = []
            held = 0
            for start in range(0, len(to_read), _CHUNK_BATCH_FILES):
                files = to_read[start : start + _CHUNK_BATCH_FILES]
                file_changes, batch_stats = await self.workers.run_sync(
                    _prepare_files, files, old_sources, settings, view.tombstones, force
                )
                stat_only.extend(batch_stats)
                report("chunk", start + len(files), chunk_total)
                batch.extend((st, c, None) for st, c in file_changes)
                held += sum(len(c) for _, c in file_changes)
                if held >= _SYNC_BATCH_CHUNKS:
                    yield batch
                    batch, held = [], 0
            chunked = len(to_read)
            for s in to_chunk:
                chunked += 1
                report("chunk", chunked, chunk_total)
                turns = await self.listing.read_turns(s)
                state, chunks, kept = await self.workers.run_sync(
                    functools.partial(
                        _session_change,
                        s,
                        turns,
                        prev=None if force else old_sources.get(session_provenance(s)),
                        generation=generation,
                        settings=settings,
                        tombstones=view.tombstones,
                        names=self.names,
                    )
                )
                batch.append((state, chunks, kept))
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
        pub: Publication | None = None
        rows_of = view.generation.rows_of_provenance
        # The embedding-cache entries this sync makes, written once at its end.
        cache = self.embedding.writes()
        ready_send, ready = trio.open_memory_channel[_Embedded](0)

        async def embed_batches() -> None:
            # Batch N+1 is read, chunked and embedded while batch N is stored, staged
            # and written (their C parts run without the GIL: two cores, not one); at
            # most one embedded batch waits.
            done = 0
            async with ready_send, contextlib.aclosing(changed_batches()) as batches:
                async for batch in batches:
                    chunks_in = [c for _, chunks, _ in batch for c in chunks]
                    vectors, fresh = await self.embedding.embed(
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
                                pub = self.publisher.begin()
                            changes = item.source_changes()
                            indexed.extend(
                                st.path for st, _, _ in item.batch if st.skip_reason is None
                            )
                            kept_dead = [
                                r for _, _, k in item.batch if k is not None for r in k.dead_rows
                            ]
                            added_count += await self._apply_batch(
                                pub, changes, item.chunks, item.vectors, kept_dead
                            )
                            old_count += len(kept_dead) + sum(
                                len(rows_of.get(c.provenance, ()))
                                for c in changes
                                if c.removed is None
                            )
                            replaced_all.update(c.provenance for c in changes)
        except Exception:
            # What the cache would have held had the sync written it batch by batch;
            # the failure that matters is the one raised.
            with contextlib.suppress(Exception):
                await self.embedding.write_cache(cache)
            raise
        await self.embedding.write_cache(cache)
        if removed:
            if pub is None:
                pub = self.publisher.begin()
            gone = [SourceChange(prov, None, (), None) for prov in removed]
            await self._apply_batch(pub, gone, [], None)
            old_count += sum(len(rows_of.get(prov, ())) for prov in removed)
            replaced_all.update(removed)

        if stat_only:
            await self.workers.run_sync(self.store.update_stats, stat_only)
            for st in stat_only:
                view.sources[st.provenance] = st
        if pub is None:
            self.last_sync_at = time.time()
            self._listed = listed
            await self._mark_in_step(in_step)
            return SyncReport(
                indexed=(),
                removed=(),
                skipped=view.skipped(),
                chunks_added=0,
                chunks_removed=0,
                embedded=0,
                generation=view.generation.number,
            )
        report("publish", 0, 3)
        report("publish", 1, 3)
        await self.writer.commit_lexical(sorted(replaced_all))
        report("publish", 2, 3)
        await self.publisher.finish(pub)
        report("publish", 3, 3)
        self.last_sync_at = time.time()
        self._listed = listed
        await self._mark_in_step(in_step)
        return SyncReport(
            indexed=tuple(sorted(indexed)),
            removed=tuple(sorted(_path_of_prov(p) for p in removed)),
            skipped=view.skipped(),
            chunks_added=added_count,
            chunks_removed=old_count,
            embedded=embedded,
            generation=view.generation.number,
        )

    async def _mark_in_step(self, in_step: bool) -> None:
        """At the end of a run that finished: the view's sources are the store's (they
        were at its start, and every source it wrote it also set in the view), so the
        next take-over of the lease need not read them all again."""
        self.view.sources_mark = (
            await self.workers.run_sync(self.store.sources_mark) if in_step else None
        )

    async def _apply_batch(
        self,
        pub: Publication,
        changes: Sequence[SourceChange],
        chunks: Sequence[PreparedChunk],
        vectors: npt.NDArray[np.float32] | None,
        kept_dead: Sequence[int] = (),
    ) -> int:
        """One bounded batch of a sync: committed to SQLite, staged in the lexical
        writer (committed once, at the end) and written past the published prefix as a
        block of the coming publication. ``kept_dead``: the rows that changes naming
        what they remove (``SourceChange.removed``) replace. Returns the rows it added."""
        await self.workers.run_sync(self.store.apply_changes, changes)
        sources = self.view.sources
        for ch in changes:
            if ch.state is None:
                sources.pop(ch.provenance, None)
            else:
                sources[ch.provenance] = ch.state
        provenances = sorted(c.provenance for c in changes)
        pub.provenances.update(provenances)
        replaced = sorted(c.provenance for c in changes if c.removed is None)
        removed_ids = frozenset(cid for c in changes if c.removed is not None for cid in c.removed)
        await self.writer.stage_lexical(
            replaced, [(c.record, c.context) for c in chunks], removed_ids
        )
        dead = pub.old.dead_rows(frozenset(replaced))
        if kept_dead:
            dead = sorted({*dead, *kept_dead})
        await self.publisher.write_block(
            pub, dead=dead, added=[c.record for c in chunks], vectors=vectors
        )
        return len(chunks)


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


@attrs.frozen(eq=False)
class _Embedded:
    """One batch of a sync, read, chunked and embedded: ready to store and index."""

    batch: list[tuple[SourceState, list[PreparedChunk], _Kept | None]]
    chunks: list[PreparedChunk]
    vectors: npt.NDArray[np.float32] | None
    fresh: int

    def source_changes(self) -> list[SourceChange]:
        """The batch as one change per source, each with its rows of vectors."""
        changes: list[SourceChange] = []
        offset = 0
        for state, chunks, kept in self.batch:
            vecs = None if self.vectors is None else self.vectors[offset : offset + len(chunks)]
            offset += len(chunks)
            removed = None if kept is None else kept.removed_ids
            changes.append(SourceChange(state.provenance, state, chunks, vecs, removed))
        return changes


@attrs.frozen(eq=False)
class _Kept:
    """A grown transcript's change: the rows of the chunks it replaces (``dead_rows``,
    in the run's starting generation) and their ids; its other rows stay."""

    dead_rows: tuple[int, ...]
    removed_ids: frozenset[str]


def turns_digest(turns: Sequence[TranscriptTurn], at: int) -> tuple[str | None, str]:
    """The digest of ``turns[:at]`` (None when ``at`` is past the end) and of all of them:
    what tells that the turns a session had at its last sync are still its first ones."""
    h = hashlib.sha256()
    prefix = None
    for i, t in enumerate(turns):
        if i == at:
            prefix = h.hexdigest()
        h.update(
            f"{t.entry_id}\x1f{t.role}\x1f{t.speaker}\x1f{t.text}\x1f{t.timestamp!r}\x1e".encode(
                "utf-8", "surrogatepass"
            )
        )
    whole = h.hexdigest()
    return (whole if at == len(turns) else prefix), whole


def _session_change(
    session: TranscriptSession,
    turns: Sequence[TranscriptTurn],
    *,
    prev: SourceState | None,
    generation: Generation,
    settings: MemoryCoreSettings,
    tombstones: frozenset[str],
    names: SessionNames | None = None,
) -> tuple[SourceState, list[PreparedChunk], _Kept | None]:
    """A changed session's new state and the chunks to write (blocking).

    When the session grew (``prev``, its state at the last sync, counted ``prev.size``
    turns whose digest is still that of its first turns), the chunks whose turns and
    context window lie within those earlier turns are unchanged: their rows stay, and
    only the rest are written (:class:`_Kept` names the rows they replace). Otherwise
    every chunk is written and the session's rows replaced (``None``).
    """
    prov = session_provenance(session)
    old_size = (
        prev.size
        if prev is not None and prev.source == "sessions" and prev.skip_reason is None
        else None
    )
    grew = old_size is not None and 0 < old_size <= len(turns)
    prefix, digest = turns_digest(turns, old_size if old_size is not None and grew else -1)
    state = SourceState(
        provenance=prov,
        source="sessions",
        path=session_path(session),
        size=len(turns),
        mtime_ns=None,
        token=session.change_token,
        hash=digest,
        skip_reason=None,
    )
    cut = functools.partial(
        cut_session,
        session,
        turns,
        turns_per_chunk=settings.transcript_turns_per_chunk,
        context_turns=settings.transcript_context_turns,
        max_tokens=settings.chunk_tokens,
        chars_per_token=settings.chars_per_token,
        tombstones=tombstones,
        names=names,
    )
    if not grew or old_size is None or prev is None or prefix != prev.hash:
        return state, cut().chunks, None
    # A chunk's context reaches transcript_context_turns turns past its own: those
    # ending that far before the old end saw only turns that are still the same. They
    # are cut by id only: the index has their rows (else, rarely, all are cut in full
    # and the ones it has are left out).
    limit = old_size - settings.transcript_context_turns
    grown = cut(settled_through=limit)
    rows = generation.row_of_key.lookup(grown.settled_keys)
    if min(rows, default=0) >= 0:
        kept_rows = set(rows)
        chunks = grown.chunks
    else:
        whole = cut()
        by_id = dict(zip(grown.settled_ids, rows, strict=True))
        kept_rows = {row for row in rows if row >= 0}
        chunks = [c for c in whole.chunks if by_id.get(c.record.chunk_id, -1) < 0]
    dead = tuple(r for r in generation.rows_of_provenance.get(prov, ()) if r not in kept_rows)
    removed = frozenset(generation.records[r].chunk_id for r in dead)
    return state, chunks, _Kept(dead, removed)
