"""Following the published pointer: how a reader sees what the writer published.

Every process, the writer included, searches the *published* generations
(:mod:`claw_memory._published`). :class:`Follower` keeps this process on the latest
one: before a search it looks whether the pointer moved (with inotify on the index
directory, one non-blocking ``read`` when nothing did) and, when it did, opens what the
new pointer names on a worker and replaces the view's pointer, generation, lexical
reader, sources and tombstones in one step. It never takes the writer lease: a process
holding it is the one publishing, and follows itself.
"""

from __future__ import annotations

import attrs
import trio

from claw.plugin_sdk import LexicalIndexError, WorkerPool

from ._changes import DirectoryWatch, open_directory_watch
from ._errors import IndexLockedError
from ._generation import Generation
from ._lease import WriterLease
from ._lexical import LexicalIndex
from ._published import Pointer, follow_generation, load_generation, read_pointer
from ._store import SourceState, Store
from ._view import IndexView

Followed = tuple[
    Pointer,
    LexicalIndex,
    Generation,
    dict[str, SourceState],
    tuple[int, int, int],
    frozenset[str],
]
"""What a pointer publishes: itself, the lexical reader, the generation, sources, tombstones."""


@attrs.define(eq=False)
class Follower:
    """Keeps :attr:`view` on the generation the index directory's pointer names."""

    view: IndexView
    store: Store
    workers: WorkerPool
    lease: WriterLease
    #: The key of the settings this process indexes with; a pointer with another is
    #: an index rebuilt under different settings.
    identity_key: str
    #: Held while the view's published fields are replaced (the writer holds it for
    #: the whole of a write, so a follow never interleaves with a publication).
    lock: trio.Lock = attrs.field(factory=trio.Lock)
    # inotify on the index directory: no event since the last look means the pointer
    # was not replaced (None: read the pointer before every search).
    _watch: DirectoryWatch | None = attrs.field(default=None, init=False)
    _due: bool = attrs.field(default=True, init=False)

    async def attach(self) -> bool:
        """Watch the index directory and follow the published generation; ``False`` when
        there is none this index can read (first open, changed settings, a writer that
        died between committing a change and publishing it, or a lexical directory that
        cannot be opened): the writer must publish one."""
        run = self.workers.run_sync
        self._watch = await run(open_directory_watch, [str(self.view.index_dir)])
        pointer = await run(read_pointer, self.view.index_dir)
        if (
            pointer is not None
            and pointer.identity == self.identity_key
            and pointer.store_version == await run(self.store.version)
        ):
            try:
                async with self.lock:
                    await self.follow_locked()
            except LexicalIndexError:
                pass  # a lexical directory that cannot be opened: the writer rebuilds it
            else:
                return True
        return False

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()

    async def follow(self) -> None:
        """Follow the pointer if another process published since the last look.

        With inotify, a search where no event arrived in the index directory costs one
        non-blocking ``read``; otherwise (or after an event) the small pointer file is
        read and compared, on the loop. Only a moved pointer costs a worker call. A
        process holding the lease is the one publishing: it follows itself.
        """
        if self.lease.held:
            return
        watch = self._watch
        if watch is not None and watch.changed():
            self._due = True
        if not self._due and watch is not None:
            return
        if read_pointer(self.view.index_dir) == self.view.pointer:
            self._due = False
            return
        async with self.lock:
            if not self.lease.held:
                await self.follow_locked()

    async def follow_locked(self) -> None:
        """Bring the view to what the pointer publishes now (hold :attr:`lock`)."""
        followed = await self.workers.run_sync(self._read_published)
        self._due = False
        if followed is None:
            return
        view = self.view
        pointer, lexical, gen, sources, mark, tombstones = followed
        view.pointer, view.lexical = pointer, lexical
        view.generation = gen
        view.index_generation = pointer.index_generation
        view.sources, view.sources_mark = sources, mark
        view.tombstones = tombstones
        view.sources_changed()

    def _read_published(self) -> Followed | None:
        """What the pointer publishes now (blocking; on a worker)."""
        view = self.view
        index_dir = view.index_dir
        for attempt in range(3):
            pointer = read_pointer(index_dir)
            if pointer is None:
                return None
            if pointer.identity != self.identity_key:
                raise IndexLockedError(
                    f"index {index_dir} was rebuilt by another process with different"
                    " settings (embedder, chunking or sources); reopen it with the same"
                    " settings, or give this one its own index directory"
                )
            old = view.pointer
            # (Read before the sources: a write after it moves the mark past this one.)
            mark = self.store.sources_mark()
            if pointer == old:
                # Nothing published since: the sources are read again only if the store's
                # changed since they were (a writer taking the lease for every synced
                # turn read every source state of every session each time).
                sources = view.sources if mark == view.sources_mark else self.store.load_sources()
                return pointer, view.lexical, view.generation, sources, mark, view.tombstones
            try:
                if old is not None and old.index_generation == pointer.index_generation:
                    lexical = view.lexical
                else:
                    lexical = LexicalIndex.open_reader(
                        index_dir / "lexical" / f"g{pointer.index_generation}"
                    )
                searcher = lexical.searcher()
                if old is None:
                    gen = load_generation(index_dir, pointer, searcher)
                else:
                    gen = follow_generation(view.generation, index_dir, old, pointer, searcher)
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
                self.store.load_sources(),
                mark,
                frozenset(self.store.tombstones()),
            )
        return None
