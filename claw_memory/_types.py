"""Values Memory Core hands out: search hits and results, reads, forgets, status."""

from __future__ import annotations

import time
from typing import Any

import attrs

from claw.plugin_sdk import Table, html_record

from ._settings import SearchMode, SourceKind


@attrs.frozen
class SearchHit:
    """One retrieved chunk.

    ``score`` is the final ranking score (after weighting, decay and MMR ordering);
    ``text_score`` and ``vector_score`` are its lexical (BM25 relative to the best
    lexical candidate, 0..1) and cosine components, ``None`` when that retriever did not
    run. ``content_hash`` is the chunk's SHA-256 and ``revision`` the hash of the
    source (file bytes or transcript change token) it was cut from. Transcript hits
    carry their session identity and the ordered entry ids of the turns they span;
    ``start_line``/``end_line`` of a transcript hit are turn numbers (1-based), which
    is also how :meth:`MemoryIndex.read` addresses transcripts.
    """

    chunk_id: str
    path: str
    source: SourceKind
    start_line: int
    end_line: int
    excerpt: str
    score: float
    text_score: float | None
    vector_score: float | None
    content_hash: str
    revision: str
    agent_id: str | None = None
    session_key: str | None = None
    session_id: str | None = None
    entry_ids: tuple[str, ...] = ()
    timestamp: float | None = None

    def row(self) -> dict[str, Any]:
        """The hit as one flat row: its scores, where it is, its excerpt."""
        return {
            "score": self.score,
            "text": self.text_score,
            "vector": self.vector_score,
            "source": self.source,
            "where": f"{self.path}#L{self.start_line}-L{self.end_line}",
            "excerpt": self.excerpt,
        }

    def _repr_html_(self) -> str:
        return html_record("search hit", self.row())


@attrs.frozen
class SearchResult:
    """A page of hits; ``next_offset`` is set when more ranked hits follow.

    ``warning`` is set when the answer is behind the sources: a change was noticed and
    is being synced in the background (``generation`` is the one searched).
    """

    query: str
    mode: SearchMode
    hits: tuple[SearchHit, ...]
    offset: int
    next_offset: int | None
    generation: int
    warning: str | None = None

    def table(self) -> Table:
        """The hits as rows, ranked from the page's offset; ``pandas.DataFrame`` takes it."""
        return Table.of(
            ({"rank": rank, **hit.row()} for rank, hit in enumerate(self.hits, self.offset + 1)),
            caption=f"{self.mode} search {self.query!r}: {len(self.hits)} hit(s), "
            f"generation {self.generation}",
            notes=[
                self.warning or "",
                "" if self.next_offset is None else f"more from offset {self.next_offset}",
            ],
        )

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()


@attrs.frozen
class SearchFilter:
    """Restricts a search before ranking (so filtered-out chunks never crowd out others).

    ``None`` means no restriction on that attribute. Agent and session filters apply
    to transcript chunks only; memory-file chunks pass them unless ``sources`` excludes
    ``"memory"``.
    """

    sources: frozenset[SourceKind] | None = None
    agent_ids: frozenset[str] | None = None
    session_keys: frozenset[str] | None = None


@attrs.frozen
class ReadResult:
    """Lines ``from_line..to_line`` of a source (turns, for a transcript)."""

    path: str
    source: SourceKind
    from_line: int
    to_line: int
    total_lines: int
    text: str
    truncated: bool
    revision: str | None = None
    """For a memory file: the SHA-256 of the bytes read (the revision hits carry)."""
    labels: tuple[str, ...] = ()
    """For a transcript: the speaker label each turn read starts with (``"user: "``;
    ``""`` for a turn without a speaker), which every piece of a long turn repeats."""


@attrs.frozen
class ForgetResult:
    """What a forget removed (or, with ``dry_run``, would remove)."""

    dry_run: bool
    chunk_ids: tuple[str, ...]
    paths: tuple[str, ...]
    forget_id: str | None = None
    """The forget's id (``claw memory unforget`` takes it); ``None`` for a dry run."""


@attrs.frozen
class SkippedSource:
    """A source that was not indexed, and why (``binary``, ``too large``, ``unreadable``...)."""

    path: str
    source: SourceKind
    reason: str


@attrs.frozen
class SyncReport:
    """What one sync changed; ``skipped`` lists every source skipped now, changed or not."""

    indexed: tuple[str, ...]
    removed: tuple[str, ...]
    skipped: tuple[SkippedSource, ...]
    chunks_added: int
    chunks_removed: int
    embedded: int
    generation: int


@attrs.frozen
class IndexStatus:
    """A snapshot of the index, for ``memory.status`` and diagnostics."""

    workspace_dir: str
    index_dir: str
    generation: int
    index_generation: int
    chunks: int
    memory_chunks: int
    session_chunks: int
    sources: int
    skipped: tuple[SkippedSource, ...]
    embedder_id: str | None
    embedder_model: str | None
    dims: int | None
    default_mode: SearchMode
    tombstones: int
    embedding_cache_entries: int
    last_sync_at: float | None
    active_searches: int

    def row(self) -> dict[str, Any]:
        """The status as one flat row (skipped sources with their reasons)."""
        row = attrs.asdict(self, recurse=False)
        row["skipped"] = [f"{s.path} ({s.reason})" for s in self.skipped]
        if self.last_sync_at is not None:
            row["last_sync_at"] = time.strftime(
                "%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.last_sync_at)
            )
        return row

    def _repr_html_(self) -> str:
        return html_record("Memory Core index", self.row())
