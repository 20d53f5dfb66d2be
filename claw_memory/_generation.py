"""Search generations: immutable snapshots that searches hold while they read.

A generation is a tantivy searcher (a snapshot of one commit), the row-ordered chunk
records, a map from chunk key to row, and a normalised float32 matrix of vectors
with per-row filter columns. Nothing in it is mutated after construction, so a
search that picked a generation keeps reading a consistent index while the next
one is built and swapped in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import tantivy

from claw.plugin_sdk.search import normalise_rows

from ._records import ChunkRecord, dated_epoch


def _codes(values: Sequence[str | None], index: dict[str, int]) -> npt.NDArray[np.int32]:
    """Integer codes of ``values``; ``index`` (value -> code) is extended in place."""
    codes = np.full(len(values), -1, dtype=np.int32)
    for i, v in enumerate(values):
        if v is not None:
            codes[i] = index.setdefault(v, len(index))
    return codes


def _dated(records: Sequence[ChunkRecord]) -> npt.NDArray[np.float64]:
    return np.array(
        [
            np.nan if r.source != "memory" or (d := dated_epoch(r.path)) is None else d
            for r in records
        ],
        dtype=np.float64,
    )


def _by_provenance(records: Sequence[ChunkRecord], first_row: int) -> dict[str, list[int]]:
    rows: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        rows.setdefault(r.provenance, []).append(first_row + i)
    return rows


@attrs.define(eq=False)
class _VectorBuffer:
    """Backing storage that generations view a prefix of.

    ``used`` rows are taken by the newest generation; a derived generation writes its
    added rows after them and views the longer prefix. Rows a generation views are
    never written again, so searches holding older generations read stable data.
    """

    data: npt.NDArray[np.float32]
    used: int


def _headroom(rows: int) -> int:
    # Room to append about 6% more rows before the buffer must be copied.
    return rows + max(rows // 16, 256)


# The most rows whose analysed terms a generation keeps for the second ranking stage
# (which reads a few hundred per search, most of them again in the next search).
MAX_TERM_ROWS = 8192

# A derived generation is compacted (dead rows dropped, storage rebuilt) once dead
# rows pass this share of all rows; below it, derivation appends and marks rows dead.
_MAX_DEAD_SHARE = 0.125


@attrs.frozen(eq=False)
class Generation:
    """One immutable published state of the index.

    Rows are append-only between compactions: a replaced or forgotten chunk's row stays
    in ``records`` and ``matrix`` but is dead (``alive`` false; absent from
    ``row_of_key`` and ``rows_of_provenance``), so publishing a change costs the size of
    the change, not of the index. ``alive`` is ``None`` when every row is live.
    ``sources_present``, ``session_agents`` and ``session_keys`` may also name values
    of dead rows (a superset is safe: it only keeps a filter that could be dropped).
    """

    number: int
    index_generation: int
    searcher: tantivy.Searcher | None
    records: tuple[ChunkRecord, ...]
    row_of_key: Mapping[int, int]
    matrix: npt.NDArray[np.float32] | None
    is_session: npt.NDArray[np.bool_]
    agent_codes: npt.NDArray[np.int32]
    agent_index: Mapping[str, int]
    skey_codes: npt.NDArray[np.int32]
    skey_index: Mapping[str, int]
    dated: npt.NDArray[np.float64]
    # What the rows hold, so that a search filter that excludes nothing here can be
    # dropped before ranking (a per-agent index answers agent filters trivially).
    sources_present: frozenset[str] = frozenset()
    session_agents: frozenset[str | None] = frozenset()
    session_keys: frozenset[str | None] = frozenset()
    alive: npt.NDArray[np.bool_] | None = None
    live_count: int = 0
    rows_of_provenance: Mapping[str, Sequence[int]] = attrs.field(factory=dict)
    _buffer: _VectorBuffer | None = attrs.field(default=None, alias="buffer")
    # Derived read-only data computed on first use (see :meth:`columns`).
    _memo: dict[str, Any] = attrs.field(factory=dict, init=False, repr=False)

    @classmethod
    def build(
        cls,
        *,
        number: int,
        index_generation: int,
        searcher: tantivy.Searcher | None,
        records: Sequence[ChunkRecord],
        matrix: npt.NDArray[np.float32] | None,
    ) -> Generation:
        """Assemble a compact generation; ``matrix`` rows must already be normalised."""
        if matrix is not None and matrix.shape[0] != len(records):
            raise ValueError("one vector row per record is required")
        agent_index: dict[str, int] = {}
        skey_index: dict[str, int] = {}
        buffer = None
        view = None
        if matrix is not None:
            # The matrix itself backs this generation, without headroom: the first
            # derivation that adds rows moves them to a buffer that has some.
            data = np.ascontiguousarray(matrix, dtype=np.float32)
            # A mapped, read-only matrix (a published file) backs no buffer: the
            # first in-memory derivation copies it into one.
            buffer = _VectorBuffer(data=data, used=len(records)) if data.flags.writeable else None
            view = _read_only(data[: len(records)])
        sessions = [r for r in records if r.source == "sessions"]
        return cls(
            number=number,
            index_generation=index_generation,
            searcher=searcher,
            records=tuple(records),
            row_of_key={r.key: i for i, r in enumerate(records)},
            matrix=view,
            is_session=np.array([r.source == "sessions" for r in records], dtype=np.bool_),
            agent_codes=_codes([r.agent_id for r in records], agent_index),
            agent_index=agent_index,
            skey_codes=_codes([r.session_key for r in records], skey_index),
            skey_index=skey_index,
            dated=_dated(records),
            sources_present=frozenset(r.source for r in records),
            session_agents=frozenset(r.agent_id for r in sessions),
            session_keys=frozenset(r.session_key for r in sessions),
            alive=None,
            live_count=len(records),
            rows_of_provenance=_by_provenance(records, 0),
            buffer=buffer,
        )

    @classmethod
    def empty(cls, number: int, index_generation: int, dims: int | None) -> Generation:
        matrix = None if dims is None else np.zeros((0, dims), dtype=np.float32)
        return cls.build(
            number=number,
            index_generation=index_generation,
            searcher=None,
            records=(),
            matrix=matrix,
        )

    def columns(self) -> npt.NDArray[np.float32] | None:
        """The matrix transposed (one contiguous row per dimension), made once.

        A sparse query vector (the hash embedder's has a few dozen non-zero
        dimensions) is scored against only the rows of its non-zero dimensions here,
        a fraction of the memory a full product reads.
        """
        if self.matrix is None:
            return None
        cols = self._memo.get("columns")
        if cols is None:
            cols = np.ascontiguousarray(self.matrix.T)
            cols.setflags(write=False)
            self._memo["columns"] = cols
        result: npt.NDArray[np.float32] = cols
        return result

    def adjacent_rows(self, row: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The live rows one place and two places before and after ``row``.

        Places are counted within the row's provenance (a transcript session, a file)
        in start-line order: for a transcript these are the neighbouring turns. The
        order of each provenance is computed once, on first use.
        """
        found: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = self._memo.setdefault(
            "adjacent", {}
        )
        hit = found.get(row)
        if hit is not None:
            return hit
        ordered = sorted(
            self.rows_of_provenance.get(self.records[row].provenance, ()),
            key=lambda r: (self.records[r].start_line, r),
        )
        n = len(ordered)
        for p, r in enumerate(ordered):
            found[r] = (
                tuple(ordered[i] for i in (p - 1, p + 1) if 0 <= i < n),
                tuple(ordered[i] for i in (p - 2, p + 2) if 0 <= i < n),
            )
        return found.get(row, ((), ()))

    def rows_terms(
        self, rows: Sequence[int], analyse: Callable[[int], Iterable[str]]
    ) -> list[frozenset[str]]:
        """The analysed terms of each of ``rows`` (``analyse(row)``), computed once per row.

        At most :data:`MAX_TERM_ROWS` rows are kept (then the memo starts over): a
        long-lived generation of large chunks must not grow without bound.
        """
        terms: dict[int, frozenset[str]] = self._memo.setdefault("terms", {})
        out = []
        for row in rows:
            found = terms.get(row)
            if found is None:
                if len(terms) >= MAX_TERM_ROWS:
                    terms.clear()
                found = terms[row] = frozenset(analyse(row))
            out.append(found)
        return out

    def derive(
        self,
        *,
        number: int,
        searcher: tantivy.Searcher,
        replaced: frozenset[str] = frozenset(),
        removed_ids: frozenset[str] = frozenset(),
        added: Sequence[ChunkRecord] = (),
        added_vectors: npt.NDArray[np.float32] | None = None,
    ) -> Generation:
        """The next generation: rows of ``replaced`` provenances and of ``removed_ids``
        dropped, ``added`` appended.

        The rows that go are marked dead and the new ones appended after the existing
        rows (sharing their storage); once dead rows pass an eighth of the rows, the
        next generation is compacted instead.
        """
        dead = self.dead_rows(replaced, removed_ids)
        n_old = len(self.records)
        vectors = self.added_rows(added_vectors, len(added))
        if self.needs_compaction(dead, len(added)):
            return self._compacted(number, searcher, dead, added, vectors)

        n_new = n_old + len(added)
        view = None
        buffer = self._buffer
        if self.matrix is not None and vectors is not None:
            if buffer is None or buffer.used != n_old or buffer.data.shape[0] < n_new:
                # Someone else owns the tail (or it is full, or the matrix is a
                # read-only mapping): continue in a new buffer.
                data = np.empty((_headroom(n_new), self.matrix.shape[1]), dtype=np.float32)
                data[:n_old] = self.matrix
                buffer = _VectorBuffer(data=data, used=n_old)
            buffer.data[n_old:n_new] = vectors
            buffer.used = n_new
            view = _read_only(buffer.data[:n_new])
        return self._appended(number, searcher, dead=dead, added=added, view=view, buffer=buffer)

    def added_rows(
        self, vectors: npt.NDArray[np.float32] | None, count: int
    ) -> npt.NDArray[np.float32] | None:
        """``count`` new rows for this generation's matrix, normalised (``None``
        without a matrix)."""
        if self.matrix is None:
            return None
        rows = (
            normalise_rows(vectors)
            if vectors is not None and count
            else np.zeros((0, self.matrix.shape[1]), dtype=np.float32)
        )
        if rows.shape[0] != count:
            raise ValueError("one vector row per added record is required")
        return rows

    def dead_rows(
        self, replaced: frozenset[str] = frozenset(), removed_ids: frozenset[str] = frozenset()
    ) -> list[int]:
        """The live rows of ``replaced`` provenances and of ``removed_ids``, sorted."""
        dead = [r for prov in replaced for r in self.rows_of_provenance.get(prov, ())]
        if removed_ids:
            dead.extend(
                r
                for rows in self.rows_of_provenance.values()
                for r in rows
                if self.records[r].chunk_id in removed_ids
            )
        return sorted(set(dead))

    def needs_compaction(self, dead: Sequence[int], added: int) -> bool:
        """Whether a change killing ``dead`` rows and adding ``added`` should compact:
        once dead rows pass an eighth of all rows, storage is rebuilt without them."""
        n_old = len(self.records)
        dead_total = n_old - self.live_count + len(dead)
        return dead_total > _MAX_DEAD_SHARE * (n_old + added)

    def appended(
        self,
        *,
        number: int,
        searcher: tantivy.Searcher | None,
        dead: Sequence[int],
        added: Sequence[ChunkRecord],
        matrix: npt.NDArray[np.float32] | None,
    ) -> Generation:
        """The next generation over storage someone else extended: ``matrix`` holds
        this generation's rows followed by one (normalised) row per ``added`` record.

        This is how a process follows a published generation (a mapped matrix file
        the writer appended to) without copying a single vector.
        """
        n_new = len(self.records) + len(added)
        if matrix is not None:
            if matrix.shape[0] != n_new:
                raise ValueError("the matrix must hold one row per old and added record")
            matrix = _read_only(matrix)
        return self._appended(number, searcher, dead=dead, added=added, view=matrix, buffer=None)

    def _appended(
        self,
        number: int,
        searcher: tantivy.Searcher | None,
        *,
        dead: Sequence[int],
        added: Sequence[ChunkRecord],
        view: npt.NDArray[np.float32] | None,
        buffer: _VectorBuffer | None,
    ) -> Generation:
        n_old = len(self.records)
        n_new = n_old + len(added)
        dead_total = n_old - self.live_count + len(dead)
        alive = None
        if dead_total:
            alive = np.ones(n_new, dtype=np.bool_)
            if self.alive is not None:
                alive[:n_old] = self.alive
            alive[dead] = False

        row_of_key = dict(self.row_of_key)
        for r in dead:
            key = self.records[r].key
            if row_of_key.get(key) == r:  # a newer live row may hold the same key
                del row_of_key[key]
        for i, rec in enumerate(added):
            row_of_key[rec.key] = n_old + i
        rows_of_provenance = dict(self.rows_of_provenance)
        gone = set(dead)
        for prov in {self.records[r].provenance for r in dead}:
            left = [r for r in rows_of_provenance.get(prov, ()) if r not in gone]
            if left:
                rows_of_provenance[prov] = left
            else:
                rows_of_provenance.pop(prov, None)
        for prov, rows in _by_provenance(added, n_old).items():
            rows_of_provenance[prov] = [*rows_of_provenance.get(prov, ()), *rows]

        agent_index = dict(self.agent_index)
        skey_index = dict(self.skey_index)
        sessions = [r for r in added if r.source == "sessions"]
        return Generation(
            number=number,
            index_generation=self.index_generation,
            searcher=searcher,
            records=self.records + tuple(added),
            row_of_key=row_of_key,
            matrix=view,
            is_session=np.concatenate(
                [self.is_session, np.array([r.source == "sessions" for r in added], dtype=bool)]
            ),
            agent_codes=np.concatenate(
                [self.agent_codes, _codes([r.agent_id for r in added], agent_index)]
            ),
            agent_index=agent_index,
            skey_codes=np.concatenate(
                [self.skey_codes, _codes([r.session_key for r in added], skey_index)]
            ),
            skey_index=skey_index,
            dated=np.concatenate([self.dated, _dated(added)]),
            sources_present=self.sources_present | {r.source for r in added},
            session_agents=self.session_agents | {r.agent_id for r in sessions},
            session_keys=self.session_keys | {r.session_key for r in sessions},
            alive=alive,
            live_count=n_new - dead_total,
            rows_of_provenance=rows_of_provenance,
            buffer=buffer,
        )

    def _compacted(
        self,
        number: int,
        searcher: tantivy.Searcher,
        dead: Sequence[int],
        added: Sequence[ChunkRecord],
        vectors: npt.NDArray[np.float32] | None,
    ) -> Generation:
        keep = np.ones(len(self.records), dtype=np.bool_)
        if self.alive is not None:
            keep &= self.alive
        keep[list(dead)] = False
        rows = np.flatnonzero(keep)
        records = [self.records[i] for i in rows.tolist()] + list(added)
        matrix = None
        if self.matrix is not None and vectors is not None:
            matrix = np.concatenate([self.matrix[rows], vectors], axis=0)
        return Generation.build(
            number=number,
            index_generation=self.index_generation,
            searcher=searcher,
            records=records,
            matrix=matrix,
        )


def _read_only(view: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    view.setflags(write=False)
    return view
