"""Publishing a generation: blocks past the published prefix, then one pointer flip.

Only the process holding the writer lease publishes. A change (a sync's batches, a
forget) is written as blocks after the published rows and records, invisible until
:meth:`Publisher.finish` flips the pointer (write, ``fsync``, ``rename``); the
process then follows its own publication. Rows that go are marked dead and new ones
appended (the cost of the change, not of the index); once dead rows pass an eighth of
a generation, its live rows are written as a new, compact epoch instead. A crash
before the flip leaves every reader on the last complete publication, and the next
writer republishes what the store committed (:func:`publish_from_store`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs
import numpy as np
import numpy.typing as npt

from claw.plugin_sdk import WorkerPool
from claw.plugin_sdk.search import normalise_rows

from ._generation import Generation, RowColumns
from ._lease import WriterLease
from ._published import (
    Pointer,
    RowRecords,
    Written,
    flip_pointer,
    generation_after,
    live_row_batches,
    pending_generation,
    write_epoch,
    write_publication,
)
from ._records import ChunkRecord
from ._store import Store
from ._view import IndexView


@attrs.define(eq=False)
class Publication:
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


@attrs.define(eq=False)
class Publisher:
    """Writes this process's changes as the next published generation (holding the
    writer lease) and moves :attr:`view` onto it."""

    view: IndexView
    store: Store
    workers: WorkerPool
    lease: WriterLease

    def begin(self) -> Publication:
        """A publication following the generation the view holds (needs the lease)."""
        pointer = self.view.pointer
        if pointer is None or not self.lease.held:
            raise RuntimeError("publishing needs the writer lease and a published pointer")
        return Publication(old=self.view.generation, pointer=pointer, number=pointer.number + 1)

    async def write_block(
        self,
        pub: Publication,
        *,
        dead: Sequence[int],
        added: Sequence[ChunkRecord],
        vectors: npt.NDArray[np.float32] | None,
    ) -> None:
        """Write one block of ``pub`` past the published prefix (invisible until the
        pointer flips): ``dead`` rows of the generation it follows, ``added`` records."""
        rows = pub.old.added_rows(vectors, len(added))
        written = await self.workers.run_sync(
            functools.partial(
                write_publication,
                self.view.index_dir,
                pub.pointer,
                number=pub.number,
                dead=dead,
                added=added,
                vectors=rows,
                store_version=pub.pointer.store_version,
            )
        )
        pub.add(written, dead, added)

    async def publish(
        self,
        *,
        replaced: frozenset[str] = frozenset(),
        removed_ids: frozenset[str] = frozenset(),
        within: Iterable[str] | None = None,
        added: Sequence[ChunkRecord] = (),
        added_vectors: npt.NDArray[np.float32] | None = None,
    ) -> None:
        """Publish the next generation in one block (see :meth:`finish`)."""
        pub = self.begin()
        dead = pub.old.dead_rows(replaced, removed_ids, within)
        await self.write_block(pub, dead=dead, added=added, vectors=added_vectors)
        await self.finish(pub)

    async def finish(self, pub: Publication) -> None:
        """Publish what ``pub``'s blocks wrote: flip the pointer, and follow it (the
        pointer and generation change in one step, so a cancellation leaves this
        process on the old pair and it follows later).

        Rows that go are marked dead and new ones appended after the published rows
        (the cost of the change, not of the index); once dead rows pass an eighth,
        the live rows are written as a new, compact epoch instead.
        """
        run = self.workers.run_sync
        index_dir = self.view.index_dir
        old = pub.old
        version = await run(self.store.version)
        searcher = await run(self.view.lexical.searcher)
        written = pub.written(version)
        epoch = False
        columns: RowColumns | None = pub.columns
        if old.needs_compaction(pub.dead, pub.added):
            appended = await run(
                functools.partial(
                    pending_generation,
                    old,
                    index_dir,
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
                    index_dir,
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
        await run(flip_pointer, index_dir, written.pointer)
        new = await run(
            functools.partial(
                generation_after,
                old,
                index_dir,
                written,
                searcher,
                dead=pub.dead,
                columns=columns,
                epoch=epoch,
            )
        )
        # The pointer's number survives restarts: every process reports the same one.
        self.view.pointer, self.view.generation = written.pointer, new


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
