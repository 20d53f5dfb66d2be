"""The derived local index of one agent's records: tantivy in memory plus a numpy matrix.

Each host keeps one per agent it serves, fed from PostgreSQL by the change sequence
(:mod:`claw_records._store`): :meth:`RecordIndex.apply` takes changes in sequence order
and remembers the last one applied (:attr:`RecordIndex.cursor`), so catching up is
"apply every change after the cursor". Nothing here is authoritative: a lost index is
rebuilt by catching up from sequence 0.

It ranks with the engine Memory Core uses, from :mod:`claw.plugin_sdk.search`: the same
analysers and CJK bigrams (a record and a file chunk of the same text have the same
terms), BM25 through tantivy normalised by the best candidate, an exact cosine over
unit vectors with the same top-k selection, and the same weighted fusion. Vectors are
the writer's, stored in PostgreSQL: a row whose vector came from another embedder than
this host's (or none) ranks by its text alone and is counted in :attr:`foreign_vectors`.

Rows are append-only: a changed record's old row is marked dead and its new state
appended. A search reads an immutable :class:`_Snapshot` (a tantivy searcher, the row
count it saw, a copy of the live mask), so :meth:`apply` may run while searches do;
only one :meth:`apply` runs at a time (the caller serialises them). Once dead rows pass
an eighth of all rows, the next apply rebuilds rows and documents without them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import tantivy

from claw.plugin_sdk import LexicalIndexError
from claw.plugin_sdk.search import (
    ANALYZER,
    any_of,
    cjk_bigrams,
    document_analyzer,
    fallback_query_analyzer,
    has_cjk,
    lexical_search,
    normalise_rows,
    query_analyzer,
    top_k,
)

from ._policy import OWNER
from ._store import Change

_WRITER_HEAP = 15_000_000
_MAX_DEAD_SHARE = 0.125
_MIN_COMPACT_ROWS = 1024
CANDIDATE_MULTIPLIER = 4


@attrs.frozen(slots=True)
class IndexedRecord:
    """A record as a local index holds it (its current state)."""

    ref: str
    partition: str
    text: str
    metadata: Mapping[str, Any]
    revision: int
    created_at: float
    updated_at: float
    seq: int
    provenance: Mapping[str, Any] | None = None


@attrs.frozen
class RankedRecord:
    """A search hit: the record and its scores (``text_score``/``vector_score`` 0..1)."""

    record: IndexedRecord
    score: float
    text_score: float | None
    vector_score: float | None


@attrs.frozen
class PartitionFilter:
    """Which partitions a search covers: all (``partitions=None``) or the named ones,
    narrowed to the owner's (``memory``) and/or the conversations' (``sessions``)."""

    partitions: frozenset[str] | None
    memory: bool = True
    sessions: bool = True

    def resolve(self, known: Mapping[str, int]) -> frozenset[str] | None:
        """The partitions to search among ``known``; ``None`` means every one."""
        if self.partitions is None and self.memory and self.sessions:
            return None
        pool = set(known) if self.partitions is None else set(self.partitions)
        if not self.memory:
            pool.discard(OWNER)
        if not self.sessions:
            pool &= {OWNER}
        return frozenset(pool)


@attrs.frozen
class Snapshot:
    """What one search reads: the rows (``n``) and the tantivy commit they match."""

    n: int
    searcher: tantivy.Searcher | None
    records: list[IndexedRecord]
    alive: npt.NDArray[np.bool_]
    parts: npt.NDArray[np.int32]
    matrix: npt.NDArray[np.float32] | None
    part_codes: Mapping[str, int]


def _schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_unsigned_field("key", stored=False, indexed=False, fast=True)
    sb.add_text_field("ref", tokenizer_name="raw", index_option="basic")
    sb.add_text_field("part", tokenizer_name="raw", index_option="basic")
    sb.add_text_field("text", tokenizer_name=ANALYZER, index_option="freq")
    sb.add_text_field("grams", tokenizer_name="whitespace", index_option="freq")
    return sb.build()


class RecordIndex:
    """One agent's derived index (blocking methods; run them on the worker pool)."""

    def __init__(self, *, dims: int | None, embedder: str | None) -> None:
        self.dims = dims
        self.embedder = embedder
        self.cursor = 0
        self.foreign_vectors = 0
        self._schema = _schema()
        try:
            self._index = tantivy.Index(self._schema)
            self._index.register_tokenizer(ANALYZER, document_analyzer())
            self._index.config_reader(reload_policy="Manual")
            self._writer = self._index.writer(heap_size=_WRITER_HEAP, num_threads=1)
        except ValueError as exc:
            raise LexicalIndexError(f"cannot create a records index: {exc}") from exc
        self._query_analyzer = query_analyzer()
        self._fallback_analyzer = fallback_query_analyzer()
        self._records: list[IndexedRecord] = []
        self._row_of_ref: dict[str, int] = {}
        self._part_codes: dict[str, int] = {}
        self._alive = np.zeros(0, dtype=np.bool_)
        self._parts = np.zeros(0, dtype=np.int32)
        self._matrix = None if dims is None else np.zeros((0, dims), dtype=np.float32)
        self._foreign_rows: set[int] = set()
        self._snap = Snapshot(0, None, [], self._alive, self._parts, self._matrix, {})

    @property
    def live_count(self) -> int:
        return len(self._row_of_ref)

    def snapshot(self) -> Snapshot:
        """The current rows, for a search (and a product computed before it)."""
        return self._snap

    # -- writing ------------------------------------------------------------------

    def _vectors(
        self, changes: Sequence[Change]
    ) -> tuple[npt.NDArray[np.float32] | None, list[bool]]:
        """The changes' unit vectors for this index (normalised in one call), and which
        are foreign (stored by another embedder, or none: a zero row)."""
        foreign = [False] * len(changes)
        if self.dims is None:
            return None, foreign
        out = np.zeros((len(changes), self.dims), dtype=np.float32)
        for i, change in enumerate(changes):
            if (
                change.embedding is None
                or change.embedder != self.embedder
                or len(change.embedding) != 4 * self.dims
            ):
                foreign[i] = True
            else:
                out[i] = np.frombuffer(change.embedding, dtype=np.float32)
        return normalise_rows(out), foreign

    def _grow(self, extra: int) -> None:
        n = len(self._records)
        need = n + extra
        if need <= self._alive.shape[0]:
            return
        cap = max(need, n + max(n // 8, 256))
        alive = np.zeros(cap, dtype=np.bool_)
        alive[:n] = self._alive[:n]
        parts = np.full(cap, -1, dtype=np.int32)
        parts[:n] = self._parts[:n]
        self._alive, self._parts = alive, parts
        if self._matrix is not None and self.dims is not None:
            matrix = np.zeros((cap, self.dims), dtype=np.float32)
            matrix[:n] = self._matrix[:n]
            self._matrix = matrix

    def _append(
        self, change: Change, vector: npt.NDArray[np.float32] | None, foreign: bool
    ) -> tantivy.Document:
        row = len(self._records)
        code = self._part_codes.setdefault(change.partition, len(self._part_codes))
        self._alive[row] = True
        self._parts[row] = code
        if self._matrix is not None and vector is not None:
            self._matrix[row] = vector
        if foreign:
            self._foreign_rows.add(row)
        self._records.append(
            IndexedRecord(
                ref=change.ref,
                partition=change.partition,
                text=change.text,
                metadata=change.metadata,
                revision=change.revision,
                created_at=change.created_at,
                updated_at=change.updated_at,
                seq=change.seq,
                provenance=change.provenance,
            )
        )
        self._row_of_ref[change.ref] = row
        doc = tantivy.Document(
            ref=change.ref,
            part=change.partition,
            text=change.text,
            grams=" ".join(cjk_bigrams(change.text)),
        )
        doc.add_unsigned("key", row)
        return doc

    def apply(self, changes: Sequence[Change]) -> int:
        """Apply ``changes`` (in sequence order); return how many were new to this index."""
        fresh = [c for c in changes if c.seq > self.cursor]
        if not fresh:
            return 0
        self._grow(len(fresh))
        vectors, foreign = self._vectors(fresh)
        try:
            for i, change in enumerate(fresh):
                old = self._row_of_ref.pop(change.ref, None)
                if old is not None:
                    self._alive[old] = False
                    self._foreign_rows.discard(old)
                    self._writer.delete_documents_by_term("ref", change.ref)
                if not change.forgotten:
                    vector = None if vectors is None else vectors[i]
                    self._writer.add_document(self._append(change, vector, foreign[i]))
                self.cursor = max(self.cursor, change.seq)
            if self._needs_compaction():
                self._compact()
            else:
                self._writer.commit()
        except ValueError as exc:
            self._writer.rollback()
            raise LexicalIndexError(f"records indexing failed: {exc}") from exc
        self.foreign_vectors = len(self._foreign_rows)
        self._publish()
        return len(fresh)

    def _needs_compaction(self) -> bool:
        n = len(self._records)
        return n >= _MIN_COMPACT_ROWS and n - len(self._row_of_ref) > _MAX_DEAD_SHARE * n

    def _compact(self) -> None:
        """Rebuild rows and documents from the live rows only (row numbers change)."""
        keep = sorted(self._row_of_ref.values())
        records = [self._records[r] for r in keep]
        matrix = None if self._matrix is None else self._matrix[keep].copy()
        parts = self._parts[keep].copy()
        foreign = {i for i, r in enumerate(keep) if r in self._foreign_rows}
        self._records = records
        self._row_of_ref = {rec.ref: i for i, rec in enumerate(records)}
        self._alive = np.ones(len(records), dtype=np.bool_)
        self._parts = parts
        self._matrix = matrix
        self._foreign_rows = foreign
        self._writer.delete_all_documents()
        for row, rec in enumerate(records):
            doc = tantivy.Document(
                ref=rec.ref,
                part=rec.partition,
                text=rec.text,
                grams=" ".join(cjk_bigrams(rec.text)),
            )
            doc.add_unsigned("key", row)
            self._writer.add_document(doc)
        self._writer.commit()

    def _publish(self) -> None:
        self._index.reload()
        n = len(self._records)
        self._snap = Snapshot(
            n=n,
            searcher=self._index.searcher(),
            records=self._records,
            alive=self._alive[:n].copy(),
            parts=self._parts,
            matrix=self._matrix,
            part_codes=dict(self._part_codes),
        )

    def close(self) -> None:
        self._writer.wait_merging_threads()

    # -- reading ------------------------------------------------------------------

    def query_terms(self, text: str) -> list[str]:
        """The distinct analysed terms a query for ``text`` searches (as Memory Core's)."""
        terms = list(dict.fromkeys(self._query_analyzer.analyze(text)))
        return terms or list(dict.fromkeys(self._fallback_analyzer.analyze(text)))

    def _lexical_query(self, text: str, parts: frozenset[str] | None) -> tantivy.Query | None:
        schema = self._schema
        should = [
            (tantivy.Occur.Should, tantivy.Query.term_query(schema, "text", term))
            for term in self.query_terms(text)
            if not has_cjk(term)  # CJK runs are matched through their bigrams
        ]
        should.extend(
            (tantivy.Occur.Should, tantivy.Query.term_query(schema, "grams", g))
            for g in dict.fromkeys(cjk_bigrams(text))
        )
        if not should:
            return None
        clauses = [(tantivy.Occur.Must, tantivy.Query.boolean_query(should))]
        if parts is not None:
            clauses.append((tantivy.Occur.Must, any_of(schema, "part", parts)))
        return tantivy.Query.boolean_query(clauses)

    def search(
        self,
        query: str,
        query_vector: npt.NDArray[np.float32] | None,
        *,
        scope: PartitionFilter,
        offset: int,
        limit: int,
        min_score: float,
        vector_weight: float,
        text_weight: float,
        snap: Snapshot | None = None,
        sims: npt.NDArray[np.float32] | None = None,
    ) -> tuple[list[RankedRecord], bool]:
        """The hits of page ``offset..offset+limit`` and whether more follow.

        Hybrid when a query vector is given (the weighted sum of the BM25 component,
        normalised by the best lexical candidate, and the cosine), lexical otherwise.
        ``sims``, when given, are the cosines of ``snap``'s rows to the query vector,
        computed already (in row slices on several workers).
        """
        snap = self._snap if snap is None else snap
        n = snap.n
        if n == 0 or snap.searcher is None:
            return [], False
        parts = scope.resolve(snap.part_codes)
        if parts is not None and not parts:
            return [], False
        want = offset + limit
        k = max(want * CANDIDATE_MULTIPLIER, want)
        mask = snap.alive
        if parts is not None:
            codes = np.array([snap.part_codes[p] for p in parts if p in snap.part_codes])
            mask = mask & np.isin(snap.parts[:n], codes)

        text_scores: dict[int, float] = {}
        try:
            q = self._lexical_query(query, parts)
        except ValueError as exc:
            raise LexicalIndexError(f"cannot build a records query: {exc}") from exc
        if q is not None:
            hits = lexical_search(snap.searcher, q, k)
            best = max((s for _, s in hits), default=0.0)
            for row, s in hits:
                if row < n and best > 0 and mask[row]:
                    text_scores[row] = s / best

        vec_rows: list[int] = []
        use_vec = query_vector is not None and snap.matrix is not None
        if not use_vec:
            sims = None
        else:
            assert snap.matrix is not None and query_vector is not None
            if sims is None:
                sims = snap.matrix[:n] @ query_vector
            ranked = np.where(mask, sims, -np.inf).astype(np.float32)
            top = top_k(ranked, k)
            vec_rows = top[np.isfinite(ranked[top])].tolist()

        rows = list(text_scores) + [r for r in vec_rows if r not in text_scores]
        t = np.array([text_scores.get(r, 0.0) for r in rows], dtype=np.float64)
        if sims is not None:
            v = np.maximum(sims[rows].astype(np.float64), 0.0)
            total = vector_weight + text_weight
            scores = (vector_weight * v + text_weight * t) / total
        else:
            v = None
            scores = t
        records = snap.records
        order = sorted(
            (i for i in range(len(rows)) if scores[i] > 0.0 and scores[i] >= min_score),
            key=lambda i: (-scores[i], records[rows[i]].ref),
        )
        out = [
            RankedRecord(
                record=records[rows[i]],
                score=float(scores[i]),
                text_score=float(t[i]),
                vector_score=None if v is None else float(v[i]),
            )
            for i in order[offset:want]
        ]
        return out, len(order) > want
