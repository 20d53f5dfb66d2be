"""Search generations: immutable snapshots that searches hold while they read.

A generation is a tantivy searcher (a snapshot of one commit), the row-ordered chunk
records, a map from chunk key to row, and a normalised float32 matrix of vectors
with per-row filter columns. Nothing in it is mutated after construction, so a
search that picked a generation keeps reading a consistent index while the next
one is built and swapped in.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import attrs
import numpy as np
import numpy.typing as npt
import tantivy

from claw.plugin_sdk.search import normalise_rows

from ._records import ASSISTANT_PREFIX, ChunkRecord, dated_epoch

T = TypeVar("T")


class RowColumns:
    """Per-row metadata of a run of rows, gathered in one pass over their records.

    A generation keeps what filters, key lookups and provenance grouping need as
    compact arrays (a few bytes per row) rather than as one Python object per chunk:
    at a million chunks the objects alone would hold more memory than the matrix.
    String values (provenances, agents, session keys) are coded in first-seen order.
    """

    def __init__(self) -> None:
        self.keys = array("q")
        self.is_session = bytearray()
        self.dated = array("d")
        self.start_lines = array("i")
        self.stamps = array("d")
        self.assistant_turns = bytearray()
        self.states_time = bytearray()
        self.question_terms = array("i")
        self.provenances: dict[str, int] = {}
        self.prov_codes = array("i")
        self.agents: dict[str, int] = {}
        self.agent_codes = array("i")
        self.skeys: dict[str, int] = {}
        self.skey_codes = array("i")
        self.sources: set[str] = set()
        self.session_agents: set[str | None] = set()
        self.session_keys: set[str | None] = set()

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def of(cls, records: Iterable[ChunkRecord]) -> RowColumns:
        cols = cls()
        cols.extend(records)
        return cols

    def extend(self, records: Iterable[ChunkRecord]) -> None:
        # What add does, with the per-record lookups hoisted (a first sync gathers a
        # million records) and the date of each path parsed once.
        keys, is_session, dated = self.keys, self.is_session, self.dated
        start_lines, stamps = self.start_lines, self.stamps
        assistant_turns = self.assistant_turns
        states_time, question_terms = self.states_time, self.question_terms
        provenances, prov_codes = self.provenances, self.prov_codes
        agents, agent_codes = self.agents, self.agent_codes
        skeys, skey_codes = self.skeys, self.skey_codes
        sources, session_agents, session_keys = (
            self.sources,
            self.session_agents,
            self.session_keys,
        )
        dates: dict[str, float] = {}
        nan = np.nan
        for r in records:
            keys.append(r.key)
            source = r.source
            session = source == "sessions"
            is_session.append(session)
            if source == "memory":
                d = dates.get(r.path)
                if d is None:
                    epoch = dated_epoch(r.path)
                    d = dates[r.path] = nan if epoch is None else epoch
                dated.append(d)
            else:
                dated.append(nan)
            start_lines.append(r.start_line)
            stamp = r.timestamp
            stamps.append(nan if stamp is None else stamp)
            assistant_turns.append(session and r.text.startswith(ASSISTANT_PREFIX))
            states_time.append(r.states_time)
            question_terms.append(r.question_terms)
            prov_codes.append(provenances.setdefault(r.provenance, len(provenances)))
            agent = r.agent_id
            agent_codes.append(-1 if agent is None else agents.setdefault(agent, len(agents)))
            skey = r.session_key
            skey_codes.append(-1 if skey is None else skeys.setdefault(skey, len(skeys)))
            sources.add(source)
            if session:
                session_agents.add(agent)
                session_keys.add(skey)

    def add(self, r: ChunkRecord) -> None:
        self.extend((r,))

    def rows_by_provenance(self, first_row: int) -> dict[str, list[int]]:
        names = list(self.provenances)
        rows: dict[str, list[int]] = {}
        for i, code in enumerate(self.prov_codes):
            found = rows.get(names[code])
            if found is None:
                rows[names[code]] = [first_row + i]
            else:
                found.append(first_row + i)
        return rows

    @staticmethod
    def _global(
        local: array[int], values: Mapping[str, int], index: dict[str, int]
    ) -> npt.NDArray[np.int32]:
        codes = np.frombuffer(local, dtype=np.int32) if len(local) else np.zeros(0, np.int32)
        if not values:
            return np.full(len(codes), -1, dtype=np.int32)
        table = np.array([index.setdefault(v, len(index)) for v in values], dtype=np.int32)
        return np.where(codes >= 0, table[np.maximum(codes, 0)], -1).astype(np.int32)

    def agent_column(self, index: dict[str, int]) -> npt.NDArray[np.int32]:
        """Agent codes in ``index`` (value -> code, extended in place; -1: none)."""
        return self._global(self.agent_codes, self.agents, index)

    def skey_column(self, index: dict[str, int]) -> npt.NDArray[np.int32]:
        return self._global(self.skey_codes, self.skeys, index)

    def key_column(self) -> npt.NDArray[np.int64]:
        return np.frombuffer(self.keys, dtype=np.int64).copy() if len(self.keys) else _NO_KEYS

    def session_column(self) -> npt.NDArray[np.bool_]:
        return np.frombuffer(bytes(self.is_session), dtype=np.bool_).copy()

    def dated_column(self) -> npt.NDArray[np.float64]:
        return np.array(self.dated, dtype=np.float64)

    def start_line_column(self) -> npt.NDArray[np.int32]:
        return np.array(self.start_lines, dtype=np.int32)

    def stamp_column(self) -> npt.NDArray[np.float64]:
        return np.array(self.stamps, dtype=np.float64)

    def prov_column(self, index: dict[str, int]) -> npt.NDArray[np.int32]:
        """Provenance codes in ``index`` (value -> code, extended in place)."""
        return self._global(self.prov_codes, self.provenances, index)

    def assistant_column(self) -> npt.NDArray[np.bool_]:
        return np.frombuffer(bytes(self.assistant_turns), dtype=np.bool_).copy()

    def states_time_column(self) -> npt.NDArray[np.bool_]:
        return np.frombuffer(bytes(self.states_time), dtype=np.bool_).copy()

    def question_terms_column(self) -> npt.NDArray[np.int32]:
        return np.array(self.question_terms, dtype=np.int32)


_NO_KEYS: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
_ABSENT = -1


class KeyIndex(Mapping[int, int]):
    """Chunk key -> live row, as sorted arrays plus a small overlay of later changes.

    The base (sorted keys and their rows) is built from a generation's live rows; the
    rows a derived generation adds or kills since then live in ``overlay`` (``-1``: the
    key is gone), so publishing a change costs its size, until the overlay passes a
    sixteenth of the rows and the base is built again. Where two live rows share a key,
    the later row wins, as it would in a dict filled in row order. An index is not
    changed once made (:meth:`lookup` keeps a sorted copy of its overlay): a change is
    a new index (:meth:`changed`).
    """

    def __init__(
        self,
        sorted_keys: npt.NDArray[np.int64],
        rows: npt.NDArray[np.int64],
        overlay: dict[int, int] | None = None,
    ) -> None:
        self._keys = sorted_keys
        self._rows = rows
        self.overlay: dict[int, int] = overlay if overlay is not None else {}
        self._sorted_overlay: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None

    @classmethod
    def build(cls, keys: npt.NDArray[np.int64], alive: npt.NDArray[np.bool_] | None) -> KeyIndex:
        rows = np.arange(len(keys), dtype=np.int64)
        if alive is not None:
            rows = rows[alive]
        live = keys[rows]
        order = np.argsort(live, kind="stable")
        sk, sr = live[order], rows[order]
        if len(sk) > 1:
            last = np.ones(len(sk), dtype=np.bool_)
            last[:-1] = sk[1:] != sk[:-1]
            sk, sr = sk[last], sr[last]
        return cls(sk, sr)

    def changed(self, changes: Mapping[int, int]) -> KeyIndex:
        """This index with ``changes`` (key -> row, ``-1``: the key is gone) laid over it."""
        return KeyIndex(self._keys, self._rows, {**self.overlay, **changes})

    def _base(self, key: int) -> int:
        i = int(np.searchsorted(self._keys, key))
        if i < len(self._keys) and int(self._keys[i]) == key:
            return int(self._rows[i])
        return _ABSENT

    def __getitem__(self, key: int) -> int:
        row = self.overlay.get(key)
        if row is None:
            row = self._base(key)
        if row == _ABSENT:
            raise KeyError(key)
        return row

    def lookup(self, keys: Sequence[int]) -> list[int]:
        """The live row of each key (``-1`` where none), vectorised over the base."""
        if not keys:
            return []
        # (fromiter reads a list of ints in a fraction of asarray's time; the
        # comparisons and writes are in place: a term's rows can be thousands.)
        q = np.fromiter(keys, np.int64, len(keys))
        base = self._keys
        if len(base):
            pos = base.searchsorted(q)
            np.minimum(pos, len(base) - 1, out=pos)
            found = self._rows[pos]
            found[base[pos] != q] = _ABSENT
        else:
            found = np.full(len(q), _ABSENT, dtype=np.int64)
        if self.overlay:
            # The overlay as sorted arrays, searched like the base: a term's rows are
            # looked up by the thousand, and a dict probe per key cost more than the
            # rest of the lookup in every generation derived by an append.
            if self._sorted_overlay is None:
                over = self.overlay
                ok = np.fromiter(over.keys(), np.int64, len(over))
                orows = np.fromiter(over.values(), np.int64, len(over))
                order = np.argsort(ok)
                self._sorted_overlay = (ok[order], orows[order])
            ok, orows = self._sorted_overlay
            pos = ok.searchsorted(q)
            np.minimum(pos, len(ok) - 1, out=pos)
            hit = ok[pos] == q
            found[hit] = orows[pos[hit]]
        out: list[int] = found.tolist()
        return out

    def __iter__(self) -> Iterator[int]:
        over = self.overlay
        for k in self._keys.tolist():
            if k not in over:
                yield k
        for k, row in over.items():
            if row != _ABSENT:
                yield k

    def __len__(self) -> int:
        over = self.overlay
        shadowed = int(np.isin(self._keys, np.fromiter(over, np.int64, len(over))).sum())
        return len(self._keys) - shadowed + sum(1 for r in over.values() if r != _ABSENT)


def _concat(a: Sequence[ChunkRecord], b: Sequence[ChunkRecord]) -> Sequence[ChunkRecord]:
    """``a`` followed by ``b``: one log view where both are views of the same log."""
    if not b:
        return a
    if not a:
        return b
    joined = getattr(a, "joined", None)
    if joined is not None:
        out: Sequence[ChunkRecord] | None = joined(b)
        if out is not None:
            return out
    return (*a, *b)


@attrs.define(eq=False)
class _VectorBuffer:
    """Backing storage that generations view a prefix of.

    ``used`` rows are taken by the newest generation; a derived generation writes its
    added rows after them and views the longer prefix. Rows a generation views are
    never written again, so searches holding older generations read stable data.
    """

    data: npt.NDArray[np.float32]
    used: int


# Rows a sketch is computed from at a time (bounds the temporary copies to a few MiB).
_SKETCH_BLOCK = 16_384
# Bits set in each byte value (the popcount where numpy has no ``bitwise_count``).
_BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def _sign_words(
    matrix: npt.NDArray[np.float32], centre: npt.NDArray[np.float32], start: int, stop: int
) -> npt.NDArray[np.uint64]:
    """The sign bits of rows ``start:stop`` of ``matrix`` minus ``centre``, packed into
    64-bit words, one contiguous array per word (words x rows)."""
    dims = matrix.shape[1]
    words = -(-dims // 64)
    out = np.empty((words, stop - start), dtype=np.uint64)
    block = np.zeros((_SKETCH_BLOCK, words * 8), dtype=np.uint8)
    for a in range(start, stop, _SKETCH_BLOCK):
        b = min(stop, a + _SKETCH_BLOCK)
        bits = np.packbits(matrix[a:b] > centre, axis=1)
        block[: b - a, : bits.shape[1]] = bits
        out[:, a - start : b - start] = block[: b - a].view(np.uint64).T
    return out


def _query_words(query: npt.NDArray[np.float32], words: int) -> npt.NDArray[np.uint64]:
    bits = np.zeros(words * 8, dtype=np.uint8)
    packed = np.packbits(np.asarray(query) > 0)
    bits[: packed.shape[0]] = packed
    return bits.view(np.uint64)


# Rows a scan takes at a time: its temporaries (a word and a count per row) stay in
# the CPU's cache instead of being fresh arrays the size of the index.
_SCAN_BLOCK = 16_384
# The stride of the sample that estimates how far the nearest rows reach.
_CUT_STRIDE = 16


def _hamming(
    words: npt.NDArray[np.uint64], query: npt.NDArray[np.uint64]
) -> npt.NDArray[np.uint16]:
    """The Hamming distance of each row of ``words`` (words x rows) to ``query``."""
    n = words.shape[1]
    acc = np.zeros(n, dtype=np.uint16)
    x = np.empty(min(n, _SCAN_BLOCK), dtype=np.uint64)
    count = getattr(np, "bitwise_count", None)
    c = np.empty(x.shape[0], dtype=np.uint8)
    for a in range(0, n, _SCAN_BLOCK):
        b = min(n, a + _SCAN_BLOCK)
        xa, ca, out = x[: b - a], c[: b - a], acc[a:b]
        for w in range(words.shape[0]):
            np.bitwise_xor(words[w, a:b], query[w], out=xa)
            if count is not None:
                count(xa, out=ca)
            else:  # numpy < 2: a byte table
                ca[:] = _BYTE_BITS[xa.view(np.uint8)].reshape(-1, 8).sum(axis=1, dtype=np.uint8)
            np.add(out, ca, out=out)
    return acc


def _nearest_rows(dist: npt.NDArray[np.uint16], count: int, far: int) -> npt.NDArray[np.intp]:
    """The ``count`` rows of smallest ``dist`` (below ``far``), ascending; of the rows
    at the cut's distance, the first ones in row order.

    Distances are small integers: the cut comes from a histogram, not a sort or a
    partition of every row. A strided sample bounds the rows that can be nearest, so
    the histogram is of those only; should they be fewer than ``count`` (an unlucky
    sample), every row is taken instead, so the answer is always the same.
    """
    n = dist.shape[0]
    cand: npt.NDArray[np.intp] | None = None
    if n >= 32 * _CUT_STRIDE and count * 4 < n:
        sample = dist[::_CUT_STRIDE]
        cum = np.cumsum(np.bincount(sample, minlength=far + 1))
        reach = int(np.searchsorted(cum, min(sample.shape[0], 2 * (count // _CUT_STRIDE) + 64)))
        if reach < far:
            cand = np.flatnonzero(dist <= reach)
            if cand.shape[0] < count:
                cand = None
    if cand is None:
        cand = np.flatnonzero(dist < far)
    d = dist[cand]
    count = min(count, cand.shape[0])
    if count <= 0:
        return np.empty(0, dtype=np.intp)
    cut = int(np.searchsorted(np.cumsum(np.bincount(d, minlength=far + 1)), count))
    below = cand[d < cut]
    at = cand[d == cut][: count - below.shape[0]]
    rows: npt.NDArray[np.intp] = np.concatenate([below, at])
    rows.sort()
    return rows


@attrs.frozen(eq=False)
class SignSketch:
    """A compact per-row sketch of a generation's matrix: one bit per dimension.

    Bit ``d`` of a row says whether the row's dimension ``d`` lies above the centre's
    (the mean row when the sketch was first made), and likewise for a query: the
    Hamming distance between the two estimates the angle between the row and the
    query, both taken from the centre. Rows share a large common direction (the
    mean of normalised embeddings is far from zero), which would otherwise set most
    bits alike in every row; ranking by ``q . (x - centre)`` is ranking by the cosine
    ``q . x`` (``q . centre`` is the same for every row). At 384 dimensions
    a row costs 48 bytes, a 32nd of its float32 vector, so a scan over every row reads
    a 32nd of the bytes a full product reads; the rows it ranks nearest are then
    scored exactly. Rows are only ever appended (as in the matrix), so a generation
    derived by appending extends its parent's sketch instead of making it again.
    """

    centre: npt.NDArray[np.float32]
    # One contiguous array per 64 dimensions (words x rows).
    words: npt.NDArray[np.uint64]

    @property
    def rows(self) -> int:
        return int(self.words.shape[1])

    @classmethod
    def of(cls, matrix: npt.NDArray[np.float32]) -> SignSketch:
        """The sketch of every row of ``matrix``, centred on its mean row."""
        n = matrix.shape[0]
        total = np.zeros(matrix.shape[1], dtype=np.float64)
        for a in range(0, n, _SKETCH_BLOCK):
            total += matrix[a : a + _SKETCH_BLOCK].sum(axis=0, dtype=np.float64)
        centre = (total / max(n, 1)).astype(np.float32)
        centre.setflags(write=False)
        return cls(centre, _sign_words(matrix, centre, 0, n))

    def extended(self, matrix: npt.NDArray[np.float32]) -> SignSketch:
        """This sketch with the rows of ``matrix`` past its own appended (``matrix``
        begins with the rows this sketch was made from)."""
        n = matrix.shape[0]
        if n == self.rows:
            return self
        if n < self.rows:
            raise ValueError("a sketch is extended only by appended rows")
        more = _sign_words(matrix, self.centre, self.rows, n)
        return SignSketch(self.centre, np.concatenate([self.words, more], axis=1))

    def distances(self, query: npt.NDArray[np.float32]) -> npt.NDArray[np.uint16]:
        """The Hamming distance of every row's bits to ``query``'s (both from the centre)."""
        q = _query_words(np.asarray(query, dtype=np.float32) - self.centre, self.words.shape[0])
        return _hamming(self.words, q)

    def nearest(
        self,
        query: npt.NDArray[np.float32],
        count: int,
        mask: npt.NDArray[np.bool_] | None = None,
    ) -> npt.NDArray[np.intp]:
        """The (at most) ``count`` rows nearest ``query`` by the sketch, among those
        ``mask`` allows, in ascending row order (an unordered candidate set); of the
        rows at the cut's distance, the first ones in row order."""
        dist = self.distances(query)
        far = self.words.shape[0] * 64 + 1  # beyond any distance: excluded rows
        if mask is not None:
            dist[~mask] = far
        return _nearest_rows(dist, count, far)


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
class _Parent:
    """What a generation derived by appending inherits from the one it was derived
    from: that generation's row count (its rows keep their numbers), its memos as they
    were (searches of it may still add to them) and the provenance codes whose rows
    the change added or killed (their neighbours moved).

    A live host derives a generation for every appended turn, and the next search runs
    on it: without this, that search found again every query term's rows, every
    agent's rows and every neighbour its candidates have (on an index of 51k chunks, an
    unfiltered search after an append cost 1.3x one on an unchanged generation, most
    of it term lookups of thousands of documents). Only one generation back: the
    parent's own inheritance is not kept, so no chain of generations stays alive.
    """

    rows: int
    memo: Mapping[str, Any]
    touched: frozenset[int]


# The memos a derived generation inherits: those it reads back through its parent
# (here, and the ranking's term rows through :meth:`Generation.inherited`). Not the
# matrix's (it changed), the parent's own inheritance, nor memos no child reads.
_INHERITED = frozenset({"agent_rows", "memory_rows", "neighbours", "terms", "term_rows"})


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
    # Row-ordered records: a tuple, or a view of the publication log that decodes a
    # row when it is read (a search reads a few dozen).
    records: Sequence[ChunkRecord]
    row_of_key: KeyIndex
    keys: npt.NDArray[np.int64]
    matrix: npt.NDArray[np.float32] | None
    is_session: npt.NDArray[np.bool_]
    agent_codes: npt.NDArray[np.int32]
    agent_index: Mapping[str, int]
    skey_codes: npt.NDArray[np.int32]
    skey_index: Mapping[str, int]
    dated: npt.NDArray[np.float64]
    # Each row's first line (a transcript chunk's first turn) and timestamp (NaN: none):
    # what ordering a provenance's rows and a turn's date words need, so that a search
    # decodes no record of the neighbouring turns it scores (see :meth:`adjacent_rows`).
    start_lines: npt.NDArray[np.int32]
    stamps: npt.NDArray[np.float64]
    # Each row's provenance as a code of ``prov_index`` (codes in the index's order),
    # and whether it is an assistant's transcript turn: what adjacency and the priors
    # on turns need without reading the row's record.
    prov_codes: npt.NDArray[np.int32]
    prov_index: Mapping[str, int]
    assistant_turns: npt.NDArray[np.bool_]
    # The records' index-time facts (:class:`~._records.ChunkRecord`): whether a
    # transcript turn says when, and how many terms a question turn has.
    states_time: npt.NDArray[np.bool_]
    question_terms: npt.NDArray[np.int32]
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
        columns: RowColumns | None = None,
    ) -> Generation:
        """Assemble a compact generation; ``matrix`` rows must already be normalised.

        ``columns`` are the records' metadata when the caller gathered them already
        (otherwise they are read from ``records``, once each).
        """
        if matrix is not None and matrix.shape[0] != len(records):
            raise ValueError("one vector row per record is required")
        cols = RowColumns.of(records) if columns is None else columns
        if len(cols) != len(records):
            raise ValueError("one column entry per record is required")
        agent_index: dict[str, int] = {}
        skey_index: dict[str, int] = {}
        prov_index: dict[str, int] = {}
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
        keys = cols.key_column()
        return cls(
            number=number,
            index_generation=index_generation,
            searcher=searcher,
            records=records if not isinstance(records, list) else tuple(records),
            row_of_key=KeyIndex.build(keys, None),
            keys=keys,
            matrix=view,
            is_session=cols.session_column(),
            agent_codes=cols.agent_column(agent_index),
            agent_index=agent_index,
            skey_codes=cols.skey_column(skey_index),
            skey_index=skey_index,
            dated=cols.dated_column(),
            start_lines=cols.start_line_column(),
            stamps=cols.stamp_column(),
            prov_codes=cols.prov_column(prov_index),
            prov_index=prov_index,
            assistant_turns=cols.assistant_column(),
            states_time=cols.states_time_column(),
            question_terms=cols.question_terms_column(),
            sources_present=frozenset(cols.sources),
            session_agents=frozenset(cols.session_agents),
            session_keys=frozenset(cols.session_keys),
            alive=None,
            live_count=len(records),
            rows_of_provenance=cols.rows_by_provenance(0),
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

    def memo(self, name: str, make: Callable[[], T]) -> T:
        """The memo ``name`` of this generation (what another module derives from it
        and keeps for its life), made by ``make()`` on first use."""
        found: T | None = self._memo.get(name)
        if found is None:
            found = self._memo[name] = make()
        return found

    def inherited(self, name: str) -> tuple[int, Any] | None:
        """The memo ``name`` of the generation this one was derived from by appending,
        with that generation's row count (rows below it are the same rows here, some
        of them dead now, see :attr:`alive`); ``None`` when there is none."""
        parent: _Parent | None = self._memo.get("parent")
        if parent is None:
            return None
        found = parent.memo.get(name)
        return None if found is None else (parent.rows, found)

    def sketch(self) -> SignSketch | None:
        """The sign-bit sketch of the matrix (see :class:`SignSketch`), made on first
        use: from the parent's sketch plus the appended rows where this generation
        was derived by appending, else from the whole matrix (a new or compacted
        generation, or a parent nobody searched approximately)."""
        if self.matrix is None:
            return None
        found: SignSketch | None = self._memo.get("sketch")
        if found is None:
            base: SignSketch | None = self._memo.get("sketch_base")
            found = SignSketch.of(self.matrix) if base is None else base.extended(self.matrix)
            self._memo["sketch"] = found
            self._memo.pop("sketch_base", None)
        return found

    def adjacent_rows(self, row: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The live rows one place and two places before and after ``row``.

        Places are counted within the row's provenance (a transcript session, a file)
        in start-line order (then row order): for a transcript these are the
        neighbouring turns. The order of each provenance is computed once, on first
        use, from the provenance and start-line columns: no record is read (a
        search scoring a few hundred turns decoded every turn of their sessions for
        this, most of its cost in an index of many agents).
        """
        before, after, before2, after2 = self._neighbours(row)
        return (
            tuple(r for r in (before, after) if r >= 0),
            tuple(r for r in (before2, after2) if r >= 0),
        )

    def neighbour_rows(self, rows: Sequence[int]) -> npt.NDArray[np.intp]:
        """For each of ``rows``, the rows one place before and after it and two places
        before and after it (the places of :meth:`adjacent_rows`), as the columns of a
        ``len(rows) x 4`` array; ``-1`` where there is none."""
        neighbours = self._neighbours
        out = np.array([neighbours(r) for r in rows], dtype=np.intp)
        return out.reshape(len(rows), 4)

    def _neighbours(self, row: int) -> tuple[int, int, int, int]:
        """``row``'s neighbours one place before, after, two places before, after
        (``-1``: none); each provenance's are computed together, on first use."""
        found: dict[int, tuple[int, int, int, int]] = self._memo.setdefault("neighbours", {})
        hit = found.get(row)
        if hit is not None:
            return hit
        parent: _Parent | None = self._memo.get("parent")
        if parent is not None and row < parent.rows and int(self.prov_codes[row]) not in (
            parent.touched
        ):
            before: dict[int, tuple[int, int, int, int]] = parent.memo.get("neighbours", {})
            hit = before.get(row)
            if hit is not None:
                found[row] = hit
                return hit
        names: list[str] | None = self._memo.get("prov_names")
        if names is None:
            # Codes count in the index's insertion order: the names, by code.
            names = self._memo["prov_names"] = list(self.prov_index)
        rows = np.asarray(
            self.rows_of_provenance.get(names[self.prov_codes[row]], ()), dtype=np.intp
        )
        ordered = rows[np.lexsort((rows, self.start_lines[rows]))]
        # The ordered rows with two places of -1 on each side: shifted views of it
        # are every row's neighbours.
        padded = np.concatenate([[-1, -1], ordered, [-1, -1]]).tolist()
        n = len(ordered)
        found.update(
            zip(
                padded[2 : n + 2],
                zip(padded[1 : n + 1], padded[3 : n + 3], padded[:n], padded[4:], strict=True),
                strict=True,
            )
        )
        return found.get(row, (-1, -1, -1, -1))

    def rows_of_agent(self, code: int) -> npt.NDArray[np.intp]:
        """The rows (dead ones included, ascending) whose agent is ``code`` of
        :attr:`agent_index` (``-1``: rows without an agent, memory-file chunks among
        them). Found by one scan of the agent column on first use, then kept: a
        search filtered to one agent reads that agent's rows only."""
        found: dict[int, npt.NDArray[np.intp]] = self._memo.setdefault("agent_rows", {})
        rows = found.get(code)
        if rows is None:
            inherited = self.inherited("agent_rows")
            base = None if inherited is None else inherited[1].get(code)
            if base is None:
                rows = np.flatnonzero(self.agent_codes == code)
            else:
                start = inherited[0]  # type: ignore[index]
                added = np.flatnonzero(self.agent_codes[start:] == code) + start
                rows = np.concatenate([base, added])
            rows.setflags(write=False)
            found[code] = rows
        return rows

    def memory_rows(self) -> npt.NDArray[np.intp]:
        """The rows (dead ones included, ascending) that are not transcript turns,
        found once."""
        rows: npt.NDArray[np.intp] | None = self._memo.get("memory_rows")
        if rows is None:
            inherited = self.inherited("memory_rows")
            if inherited is None:
                rows = np.flatnonzero(~self.is_session)
            else:
                start, base = inherited
                rows = np.concatenate([base, np.flatnonzero(~self.is_session[start:]) + start])
            rows.setflags(write=False)
            self._memo["memory_rows"] = rows
        return rows

    def rows_terms(
        self, rows: Sequence[int], analyse: Callable[[int], Iterable[str]]
    ) -> list[frozenset[str]]:
        """The analysed terms of each of ``rows`` (``analyse(row)``), computed once per row.

        At most :data:`MAX_TERM_ROWS` rows are kept (then the memo starts over): a
        long-lived generation of large chunks must not grow without bound.
        """
        terms: dict[int, frozenset[str]] = self._memo.setdefault("terms", {})
        # (A row's text never changes: the parent's analysis of a row it had holds.)
        inherited = self.inherited("terms")
        below, before = (0, {}) if inherited is None else inherited
        out = []
        for row in rows:
            found = terms.get(row)
            if found is None:
                if len(terms) >= MAX_TERM_ROWS:
                    terms.clear()
                found = before.get(row) if row < below else None
                if found is None:
                    found = frozenset(analyse(row))
                terms[row] = found
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
        self,
        replaced: frozenset[str] = frozenset(),
        removed_ids: frozenset[str] = frozenset(),
        within: Iterable[str] | None = None,
    ) -> list[int]:
        """The live rows of ``replaced`` provenances and of ``removed_ids``, sorted;
        ``within`` (the provenances ``removed_ids`` belong to) spares reading the other
        rows' records."""
        dead = [r for prov in replaced for r in self.rows_of_provenance.get(prov, ())]
        if removed_ids:
            groups = (
                self.rows_of_provenance.values()
                if within is None
                else [self.rows_of_provenance.get(p, ()) for p in within]
            )
            dead.extend(
                r for rows in groups for r in rows if self.records[r].chunk_id in removed_ids
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
        columns: RowColumns | None = None,
    ) -> Generation:
        """The next generation over storage someone else extended: ``matrix`` holds
        this generation's rows followed by one (normalised) row per ``added`` record.

        This is how a process follows a published generation (a mapped matrix file
        the writer appended to) without copying a single vector. ``dead`` may name
        added rows too (it is applied after the addition); ``columns`` are the added
        records' metadata when the caller has them.
        """
        n_new = len(self.records) + len(added)
        if matrix is not None:
            if matrix.shape[0] != n_new:
                raise ValueError("the matrix must hold one row per old and added record")
            matrix = _read_only(matrix)
        return self._appended(
            number, searcher, dead=dead, added=added, view=matrix, buffer=None, columns=columns
        )

    def _appended(
        self,
        number: int,
        searcher: tantivy.Searcher | None,
        *,
        dead: Sequence[int],
        added: Sequence[ChunkRecord],
        view: npt.NDArray[np.float32] | None,
        buffer: _VectorBuffer | None,
        columns: RowColumns | None = None,
    ) -> Generation:
        n_old = len(self.records)
        n_new = n_old + len(added)
        cols = RowColumns.of(added) if columns is None else columns
        if len(cols) != len(added):
            raise ValueError("one column entry per added record is required")
        dead = sorted(set(dead))
        dead_total = n_old - self.live_count + len(dead)
        alive = None
        if dead_total:
            alive = np.ones(n_new, dtype=np.bool_)
            if self.alive is not None:
                alive[:n_old] = self.alive
            alive[dead] = False
        keys = np.concatenate([self.keys, cols.key_column()])

        index = self.row_of_key.changed({key: n_old + i for i, key in enumerate(cols.keys)})
        vanished = {
            key: _ABSENT
            for r, key in zip(dead, keys[dead].tolist(), strict=True)
            if index.get(key) == r  # a newer live row may hold the same key
        }
        if vanished:
            index = index.changed(vanished)
        if len(index.overlay) > max(4096, n_new // 16):
            index = KeyIndex.build(keys, alive)

        rows_of_provenance = dict(self.rows_of_provenance)
        added_by_prov = cols.rows_by_provenance(n_old)
        for prov, rows in added_by_prov.items():
            rows_of_provenance[prov] = [*rows_of_provenance.get(prov, ()), *rows]
        gone = set(dead)
        records = _concat(self.records, added)
        touched = {self.records[r].provenance for r in dead if r < n_old}
        touched |= {added[r - n_old].provenance for r in dead if r >= n_old}
        for prov in touched:
            left = [r for r in rows_of_provenance.get(prov, ()) if r not in gone]
            if left:
                rows_of_provenance[prov] = left
            else:
                rows_of_provenance.pop(prov, None)

        agent_index = dict(self.agent_index)
        skey_index = dict(self.skey_index)
        prov_index = dict(self.prov_index)
        gen = Generation(
            number=number,
            index_generation=self.index_generation,
            searcher=searcher,
            records=records,
            row_of_key=index,
            keys=keys,
            matrix=view,
            is_session=np.concatenate([self.is_session, cols.session_column()]),
            agent_codes=np.concatenate([self.agent_codes, cols.agent_column(agent_index)]),
            agent_index=agent_index,
            skey_codes=np.concatenate([self.skey_codes, cols.skey_column(skey_index)]),
            skey_index=skey_index,
            dated=np.concatenate([self.dated, cols.dated_column()]),
            start_lines=np.concatenate([self.start_lines, cols.start_line_column()]),
            stamps=np.concatenate([self.stamps, cols.stamp_column()]),
            prov_codes=np.concatenate([self.prov_codes, cols.prov_column(prov_index)]),
            prov_index=prov_index,
            assistant_turns=np.concatenate([self.assistant_turns, cols.assistant_column()]),
            states_time=np.concatenate([self.states_time, cols.states_time_column()]),
            question_terms=np.concatenate([self.question_terms, cols.question_terms_column()]),
            sources_present=self.sources_present | cols.sources,
            session_agents=self.session_agents | cols.session_agents,
            session_keys=self.session_keys | cols.session_keys,
            alive=alive,
            live_count=n_new - dead_total,
            rows_of_provenance=rows_of_provenance,
            buffer=buffer,
        )
        # The rows before the added ones are this generation's, unchanged: a sketch
        # of them (made, or inherited and not yet extended) is the next one's start.
        base = self._memo.get("sketch", self._memo.get("sketch_base"))
        if base is not None and view is not None:
            gen._memo["sketch_base"] = base
        memo = {k: v for k, v in self._memo.items() if k in _INHERITED}
        if memo:
            moved = touched | set(added_by_prov)
            gen._memo["parent"] = _Parent(
                rows=n_old, memo=memo, touched=frozenset(prov_index[p] for p in moved)
            )
        return gen

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
