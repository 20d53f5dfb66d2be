"""What one process sees of an open index: the published state it follows and its sources.

Every part of an open :class:`~claw_memory.MemoryIndex` shares one :class:`IndexView`.
The follower (:mod:`._follow`) replaces the published fields when another process
publishes, the writer (:mod:`._writer`, :mod:`._publication`) when this one does, and
the sync (:mod:`._sync`) records the sources it rewrites; searches and status read it.
The generation, the lexical reader and the tombstones are replaced, never changed in
place, so a search that took one keeps reading the same one until it ends.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from ._errors import IndexClosedError
from ._generation import Generation
from ._lexical import LexicalIndex
from ._published import Pointer
from ._settings import SourceKind
from ._store import SourceState
from ._transcripts import TranscriptSession
from ._types import SkippedSource

KnownFiles = dict[str, tuple[int | None, int | None]]
"""``{virtual path: (size, mtime_ns)}`` of the memory files as last synced."""


@attrs.define(eq=False)
class IndexView:
    """The state of one open index in this process (see the module docstring)."""

    index_dir: Path
    #: The generation this process searches (the one the pointer names once followed).
    generation: Generation
    #: The pointer followed last (None until the first follow).
    pointer: Pointer | None = None
    #: The tantivy generation (``lexical/g<N>``) the pointer names.
    index_generation: int = 0
    #: Every source as last synced or followed, by provenance.
    sources: dict[str, SourceState] = attrs.field(factory=dict)
    #: The store's :meth:`~._store.Store.sources_mark` that :attr:`sources` reflects
    #: (None: unknown, read them again).
    sources_mark: tuple[int, int, int] | None = None
    #: Chunk ids forgotten: filtered out of every generation, including held ones.
    tombstones: frozenset[str] = frozenset()
    #: The transcript sessions the latest sync listed, by virtual path (what a read of
    #: a ``sessions/...`` path resolves against).
    sessions: dict[str, TranscriptSession] = attrs.field(factory=dict)
    closed: bool = False
    #: Counts :meth:`sources_changed` calls: a check made against :attr:`sources` holds
    #: while it is unchanged.
    sources_epoch: int = 0
    #: The read-only view of the lexical index; set with the first follow, before the
    #: index is handed out.
    lexical: LexicalIndex = attrs.field(init=False)
    _known: KnownFiles | None = attrs.field(default=None, init=False)

    def check_open(self) -> None:
        if self.closed:
            raise IndexClosedError(f"memory index {self.index_dir} is closed")

    def known_files(self) -> KnownFiles:
        """The memory files' ``(size, mtime_ns)`` as last synced, by virtual path.

        Rebuilt after each sync and never mutated afterwards, so a worker thread can
        compare against it while the event loop goes on.
        """
        if self._known is None:
            self._known = {
                st.path: (st.size, st.mtime_ns)
                for st in self.sources.values()
                if st.source == "memory"
            }
        return self._known

    def sources_changed(self) -> None:
        """The sources were synced or followed: :meth:`known_files` is built again."""
        self._known = None
        self.sources_epoch += 1

    def skipped(self) -> tuple[SkippedSource, ...]:
        """Every source skipped as of the last sync, by path."""
        return tuple(
            SkippedSource(path=s.path, source=s.source, reason=s.skip_reason)
            for s in sorted(self.sources.values(), key=lambda s: s.path)
            if s.skip_reason is not None
        )

    def source_paths(self, source: SourceKind = "memory") -> tuple[str, ...]:
        """The virtual paths of the indexed (not skipped) sources of one kind, sorted."""
        return tuple(
            sorted(
                s.path
                for s in self.sources.values()
                if s.source == source and s.skip_reason is None
            )
        )
