"""Hybrid ranking over one generation: pure, blocking, run on the worker pool.

Lexical candidates come from tantivy (BM25, normalised by the best candidate's score
so the component lies in 0..1), vector candidates from an exact matrix product over
the generation's normalised matrix. Every candidate gets both components (the cosine
of a lexical-only candidate is computed exactly; a vector-only candidate has no
lexical score), then the weighted sum, a second stage over the candidates (how much of
the query their own text, and their text with their neighbouring turns', covers, and,
for a question asking when, whether a transcript turn's own text states a time),
optional temporal decay of dated daily notes, the ``min_score`` cut, tombstone
filtering and optional MMR.

The context fields (neighbouring turns) buy recall but also pull a neighbour of the
evidence to the top; the second stage gives the turn whose own text matches most of
the query the edge, and bounds what the neighbours add.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import tantivy

from claw.plugin_sdk import LexicalIndexError
from claw.plugin_sdk.search import has_cjk, lexical_search, top_k

from ._generation import Generation
from ._lexical import LexicalIndex
from ._records import SPEAKER
from ._settings import DEFAULT_APPROXIMATE_ROWS, SearchMode
from ._transcripts import date_text
from ._types import SearchFilter
from ._when import query_window

_WORD = re.compile(r"\w+")
_DAY = 86_400.0


@attrs.frozen
class RankParams:
    """Everything ranking needs besides the generation and the query."""

    mode: SearchMode
    offset: int
    limit: int
    vector_weight: float
    text_weight: float
    context_boost: float
    far_context_boost: float
    speaker_boost: float
    date_boost: float
    path_boost: float
    coverage_weight: float
    near_coverage_weight: float
    far_coverage_weight: float
    candidate_multiplier: int
    min_score: float
    temporal_decay: bool
    half_life_days: float
    now: float
    mmr: bool
    mmr_lambda: float
    filter: SearchFilter
    candidate_growth: float = 0.0
    when_weight: float = 0.0
    #: Bonus for a chunk dated where a relative date in the query points
    #: (:func:`claw_memory._when.query_window`, from ``now``).
    window_weight: float = 0.0
    #: Factor on an assistant turn's score (see :func:`priors`).
    assistant_weight: float = 1.0
    #: Factor on a transcript turn that only echoes the query (see :func:`is_echo`).
    echo_weight: float = 1.0
    #: See :func:`approximate`; ``None`` is :data:`APPROXIMATE_ROWS`.
    approximate_rows: int | None = None
    #: The embedder's ``(floor, match)`` cosines (:func:`meaning_scores`); ``None``:
    #: a hit's vector counts only through fusion.
    similarity: tuple[float, float] | None = None


@attrs.frozen
class RankedRow:
    """A ranked candidate: its row in the generation and its scores."""

    row: int
    score: float
    text_score: float | None
    vector_score: float | None


# The candidate depth grows with the index up to this many rows, then stays: at 1M rows
# 1,000 candidates agree with exhaustive fusion on 0.994 of the top 10 and 2,000 on
# 0.999 (4,000: 1.000), while 4,000 cost the lexical side about 4x what 1,000 do.
GROWTH_ROWS = 300_000


def candidate_count(want: int, multiplier: int, growth: float, rows: int) -> int:
    """How many candidates each retriever gives the merge for a page ending at ``want``:
    ``multiplier`` times the page, and at least ``growth`` per 1,000 of the index's
    ``rows``, counted up to :data:`GROWTH_ROWS` (a fixed count agrees less and less
    with exhaustive fusion as the index grows: 40 of 100k rows lose 15% of the
    exhaustive top 10)."""
    counted = min(max(rows, 0), GROWTH_ROWS)
    return max(want * multiplier, want, math.ceil(growth * counted / 1000))


# From this many rows up (unless a search's RankParams.approximate_rows, from the
# settings, says otherwise), the vector stage scans the generation's sign-bit sketch
# (:class:`~claw_memory._generation.SignSketch`, 48 bytes a row at 384 dimensions)
# instead of computing the cosine of every row: an exact product reads the whole
# float32 matrix per search (1.5 GB at 1M rows, 81 ms on two idle cores), the sketch a
# 32nd of it. The rows it ranks nearest are then scored exactly. Below, exact.
APPROXIMATE_ROWS = DEFAULT_APPROXIMATE_ROWS
# How many rows the sketch hands to exact scoring: this many per vector candidate
# wanted, and at least SKETCH_RESCORE_MIN.
SKETCH_RESCORE_FACTOR = 4
SKETCH_RESCORE_MIN = 8192


def approximate(gen: Generation, rows: int | None = None) -> bool:
    """Whether ``gen``'s vector stage scans its sketch: from ``rows`` rows up (0: never;
    ``None``: :data:`APPROXIMATE_ROWS`)."""
    threshold = APPROXIMATE_ROWS if rows is None else rows
    return gen.matrix is not None and 0 < threshold <= gen.matrix.shape[0]


def row_cosines(
    matrix: npt.NDArray[np.float32], rows: npt.NDArray[np.intp], query: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """The exact cosine of each of ``rows`` (of a normalised ``matrix``) to ``query``,
    read in row order (a mapped matrix is read page by page)."""
    if not len(rows):
        return np.empty(0, dtype=np.float32)
    order = np.argsort(rows, kind="stable")
    out = np.empty(len(rows), dtype=np.float32)
    out[order] = matrix[rows[order]] @ query
    return out


def exact_cosines(
    matrix: npt.NDArray[np.float32],
    rows: npt.NDArray[np.intp],
    query: npt.NDArray[np.float32],
    *,
    ascending: bool = False,
) -> npt.NDArray[np.float64]:
    """The cosine of each of ``rows`` to ``query``, each computed the same way whatever
    other rows come with it, so a search ranks alike alone or batched.

    A BLAS product rounds a row's cosine differently with the product's shape and the
    row's place in it (a search batched with others, a row gathered among more or fewer:
    up to ~1e-7 apart), and a near-tie then orders one way alone and the other under
    load. ``einsum`` sums each row with the same loop wherever it lies; it is slower than
    BLAS, so it scores candidates only (tens to hundreds of rows), never the matrix.
    """
    if not len(rows):
        return np.empty(0, dtype=np.float64)
    if ascending:  # ``rows`` already in row order (the caller knows): no sort
        found: npt.NDArray[np.float64] = np.einsum("ij,j->i", matrix[rows], query).astype(
            np.float64
        )
        return found
    order = np.argsort(rows, kind="stable")
    out = np.empty(len(rows), dtype=np.float64)
    out[order] = np.einsum("ij,j->i", matrix[rows[order]], query)
    return out


_EPS32 = float(np.finfo(np.float32).eps)


def cosine_slack(query: npt.NDArray[np.float32]) -> float:
    """How far a float32 cosine of a unit row to ``query`` from any product (BLAS,
    batched or not, or :func:`exact_cosines`) can lie from another's: each is within
    ``d * eps/2 * |query|`` of the true value (Cauchy-Schwarz bounds the sum of
    ``|row_i * query_i|`` by ``|query|``)."""
    # (The norm as np.linalg.norm computes a vector's, without its dispatch.)
    return float(query.shape[0] * _EPS32 * np.sqrt(query.dot(query)))


# From this many rows up, :func:`_nearest_pool` narrows the rows by a strided sample
# (as top_k does): one pass over every row instead of two.
_POOL_SAMPLE_ROWS = 1024
_POOL_STRIDE = 32


def _nearest_pool(
    approx: npt.NDArray[np.float32], k: int, margin: float
) -> npt.NDArray[np.intp] | None:
    """``np.flatnonzero(approx >= kth - margin)``, ``kth`` the ``k``-th best of
    ``approx``, found from the rows a strided sample says reach the top (one pass over
    ``approx`` instead of a partition and a second pass); ``None`` when the sample
    cannot vouch for it (too few rows reach its threshold, or a floor below it, or a
    ``k``-th best that is not finite): the caller then does it the long way."""
    n = approx.shape[0]
    if n < _POOL_SAMPLE_ROWS or k >= n:
        return None
    sample = approx[::_POOL_STRIDE]
    m = sample.shape[0]
    j = min(m, (k // _POOL_STRIDE) * 4 + 8)
    threshold = float(np.partition(sample, m - j)[m - j])
    reached = (approx >= threshold).nonzero()[0]
    if len(reached) < k:
        return None
    values = approx[reached]
    kth = float(np.partition(values, len(values) - k)[len(values) - k])
    if not math.isfinite(kth):
        return None
    floor = kth - margin
    if not floor >= threshold:  # (NaN: no)
        return None
    # Every row at or above the floor reached the threshold.
    pool: npt.NDArray[np.intp] = reached[values >= floor]
    return pool


def nearest_rows(
    approx: npt.NDArray[np.float32],
    rows: npt.NDArray[np.intp] | None,
    k: int,
    matrix: npt.NDArray[np.float32],
    query: npt.NDArray[np.float32],
) -> npt.NDArray[np.intp]:
    """The ``k`` of ``rows`` nearest ``query``, best first (ties: the lower row first),
    chosen by exact cosines, given ``approx``, their cosines from some product
    (``rows`` ``None``: ``approx`` holds every row of ``matrix``, in order).

    Every row whose approximate cosine lies within twice the rounding slack of the
    ``k``-th best could be in the exact top ``k`` (the ``k`` best approximate rows are
    all within the slack of their exact values, so the exact ``k``-th lies at most one
    slack below the approximate ``k``-th); those are scored exactly, and the top ``k``
    taken from the exact scores. So the answer does not depend on how ``approx`` was
    computed. ``-inf`` in ``approx`` (a filtered-out row) is never chosen.
    """
    return nearest_scored(approx, rows, k, matrix, query)[0]


def nearest_scored(
    approx: npt.NDArray[np.float32],
    rows: npt.NDArray[np.intp] | None,
    k: int,
    matrix: npt.NDArray[np.float32],
    query: npt.NDArray[np.float32],
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
    """:func:`nearest_rows` and the exact cosine of each row it gives
    (:func:`exact_cosines`' value: the ranking reuses it instead of computing it again)."""
    margin = 2 * cosine_slack(query)
    pool = _nearest_pool(approx, k, margin)
    if pool is None:
        picked = top_k(approx, k)
        picked = picked[np.isfinite(approx[picked])]
        if len(picked) == k and len(approx) > k:
            floor = float(approx[picked[-1]]) - margin
            pool = (approx >= floor).nonzero()[0]
        else:  # every finite row is already in
            pool = np.sort(picked)
    # Ascending (the pool is, and so are ``rows``' when given in order).
    candidates = pool if rows is None else rows[pool]
    exact = exact_cosines(matrix, candidates, query, ascending=rows is None)
    order = np.lexsort((candidates, -exact))[:k]
    return candidates[order], exact[order]


def sketch_nearest(
    gen: Generation,
    query: npt.NDArray[np.float32],
    k: int,
    mask: npt.NDArray[np.bool_] | None,
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
    """The approximate vector stage: the ``k`` rows nearest ``query`` among the rows
    ``gen``'s sketch ranks nearest (:data:`SKETCH_RESCORE_FACTOR` per candidate),
    ordered by their exact cosine, best first, with those cosines
    (:func:`nearest_scored`); only rows ``mask`` allows."""
    sketch = gen.sketch()
    assert sketch is not None and gen.matrix is not None
    pool = sketch.nearest(query, max(SKETCH_RESCORE_FACTOR * k, SKETCH_RESCORE_MIN), mask)
    return nearest_scored(row_cosines(gen.matrix, pool, query), pool, k, gen.matrix, query)


def narrow_filter(gen: Generation, f: SearchFilter) -> SearchFilter:
    """``f`` without the restrictions that exclude no row of ``gen``.

    Dropping them changes no result (every row passes them) but saves their cost: a
    provider searching its own agent's index passes that agent's id, which every
    transcript row already has.
    """
    sources = f.sources
    if sources is not None and gen.sources_present <= sources:
        sources = None
    agent_ids = f.agent_ids
    if agent_ids is not None and gen.session_agents <= agent_ids:
        agent_ids = None
    session_keys = f.session_keys
    if session_keys is not None and gen.session_keys <= session_keys:
        session_keys = None
    if (sources, agent_ids, session_keys) == (f.sources, f.agent_ids, f.session_keys):
        return f
    return SearchFilter(sources=sources, agent_ids=agent_ids, session_keys=session_keys)


def _filter_mask(gen: Generation, f: SearchFilter) -> npt.NDArray[np.bool_] | None:
    n = len(gen.records)
    mask: npt.NDArray[np.bool_] | None = gen.alive  # dead rows never match
    if f.sources is not None:
        wanted = np.zeros(n, dtype=np.bool_)
        if "sessions" in f.sources:
            wanted |= gen.is_session
        if "memory" in f.sources:
            wanted |= ~gen.is_session
        mask = wanted if mask is None else (mask & wanted)
    for values, codes, index in (
        (f.agent_ids, gen.agent_codes, gen.agent_index),
        (f.session_keys, gen.skey_codes, gen.skey_index),
    ):
        if values is None:
            continue
        known = np.array([index[v] for v in values if v in index], dtype=np.int32)
        ok = ~gen.is_session | np.isin(codes, known)
        mask = ok if mask is None else (mask & ok)
    return mask


# A filter that lets a search reach at most this share of a generation's rows has its
# vector stage read those rows only (:func:`reachable_rows`); a wider one scores every
# row and masks, which costs less than gathering most of the matrix.
REACH_SHARE = 0.25


# The rows each filter reaches, by generation (its memo ``"reaches"``): a hybrid
# search asks twice (whether its batch's product should score every row, then its own
# ranking), and an agent's searches in one generation ask again. A generation keeps
# this many filters' rows.
_MAX_REACHES = 256


def reachable_rows(gen: Generation, f: SearchFilter) -> npt.NDArray[np.intp] | None:
    """The live rows a search filtered by ``f`` (already narrowed by
    :func:`narrow_filter`) can reach, ascending and read-only, when its agent filter
    leaves at most :data:`REACH_SHARE` of ``gen``'s rows; else ``None``.

    An index holding many agents' transcripts (a host's, Memory Records' per-host
    index) is searched one agent at a time: found from the generation's per-agent
    rows (:meth:`~._generation.Generation.rows_of_agent`), the search costs that
    agent's share of the index instead of a cosine for every row and a mask over
    all of them. Memory-file chunks pass agent filters, as everywhere. Found once
    per generation and filter (a generation never changes).
    """
    if f.agent_ids is None:
        return None
    found: dict[SearchFilter, npt.NDArray[np.intp] | None] = gen.memo("reaches", dict)
    if f in found:
        return found[f]
    if len(found) >= _MAX_REACHES:
        found.clear()
    rows = found[f] = _reachable_rows(gen, f)
    return rows


def _reachable_rows(gen: Generation, f: SearchFilter) -> npt.NDArray[np.intp] | None:
    assert f.agent_ids is not None
    parts: list[npt.NDArray[np.intp]] = []
    if f.sources is None or "memory" in f.sources:
        parts.append(gen.memory_rows())
    if f.sources is None or "sessions" in f.sources:
        for agent in f.agent_ids:
            code = gen.agent_index.get(agent)
            if code is not None:
                parts.append(gen.rows_of_agent(code))
    n = len(gen.records)
    if sum(len(p) for p in parts) > REACH_SHARE * n:
        return None
    rows: npt.NDArray[np.intp] = (
        np.unique(np.concatenate(parts)) if parts else np.empty(0, dtype=np.intp)
    )
    if gen.alive is not None:
        rows = rows[gen.alive[rows]]
    if f.session_keys is not None:
        known = np.array([gen.skey_index[v] for v in f.session_keys if v in gen.skey_index])
        ok = ~gen.is_session[rows] | np.isin(gen.skey_codes[rows], known)
        rows = rows[ok]
    rows.setflags(write=False)
    return rows


def scores_every_row(gen: Generation, params: RankParams) -> bool:
    """Whether a search's exact vector stage wants the cosine of every row of ``gen``
    (so a batch may share one matrix product for it): not when its filter reaches a
    small share of the rows (:func:`reachable_rows`)."""
    return reachable_rows(gen, narrow_filter(gen, params.filter)) is None


# The fewest first-stage candidates the second stage re-scores.
_SECOND_STAGE_MIN = 32


# np.unique and np.isin cost tens of microseconds in Python around a sort of a few
# dozen values (a search calls them several times on that many rows); these give
# their answers with one sort or one search each.


def _unique(
    values: npt.NDArray[Any],
) -> tuple[npt.NDArray[Any], npt.NDArray[np.intp]]:
    """``np.unique(values, return_inverse=True)`` for a 1-D array without NaN: the
    distinct values ascending, and where each of ``values`` lies among them."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    first = np.empty(len(ordered), dtype=np.bool_)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    inverse = np.empty(len(values), dtype=np.intp)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse


def _sorted_unique(values: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """``np.unique(values)`` (the distinct values, ascending)."""
    ordered = np.sort(values)
    if len(ordered) > 1:
        ordered = ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
    return ordered


def _among(ascending: npt.NDArray[np.intp], values: npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
    """``np.isin(values, ascending)`` where ``ascending`` is sorted."""
    if not len(ascending):
        return np.zeros(len(values), dtype=np.bool_)
    place = np.minimum(np.searchsorted(ascending, values), len(ascending) - 1)
    found: npt.NDArray[np.bool_] = ascending[place] == values
    return found


def _rows_terms(
    gen: Generation, lexical: LexicalIndex, rows: Sequence[int]
) -> list[frozenset[str]]:
    def analyse(r: int) -> list[str]:
        rec = gen.records[r]
        text = rec.text
        if rec.source == "sessions" and rec.timestamp is not None:
            text = f"{text}\n{date_text(rec.timestamp)}"
        return lexical.document_terms(text)

    return gen.rows_terms(rows, analyse)


# A query term in at most this many documents has its rows read from the lexical index
# (one term query, kept for the generation); a commoner one is looked up in the rows'
# own analysed terms instead (reading its every document would cost more). A search
# whose filter reaches few rows (:func:`reachable_rows`) reads every term's rows among
# those only, however common the term.
TERM_ROWS_MAX_DF = 16_384
# The most row numbers the term-row memo of one generation keeps (then it starts over).
MAX_TERM_ROW_ENTRIES = 1 << 20


@attrs.frozen
class _Within:
    """What a filtered search reaches: its filter (already narrowed) and the live rows
    that pass it (:func:`reachable_rows`, ascending)."""

    filter: SearchFilter
    rows: npt.NDArray[np.intp] = attrs.field(eq=False)


@attrs.define(eq=False)
class _TermRows:
    """One generation's memo (:meth:`~._generation.Generation.memo` ``"term_rows"``):
    (term, filter or ``None``) -> the rows whose text has the term (among those the
    filter lets through); and the analysed text terms of the rows the generation added
    to the one it was derived from (see :func:`_carried_rows`), found once."""

    rows: dict[tuple[str, SearchFilter | None], npt.NDArray[np.intp]] = attrs.field(factory=dict)
    entries: int = 0
    added_terms: dict[int, frozenset[str]] = attrs.field(factory=dict)


# The most added rows a term's carried rows analyse (:func:`_carried_rows`): beyond
# that (a large sync's publication), reading the term's rows from tantivy costs less
# than analysing the added rows' text in Python.
_CARRY_MAX_ADDED = 256
# The analysed words of a transcript turn's date ("8 May 2023"), by date text, and by
# timestamp.
_DATE_TERMS: dict[str, frozenset[str]] = {}
_STAMP_TERMS: dict[float, frozenset[str]] = {}
_MAX_DATE_TERMS = 4096
# The timestamps kept: a turn has its session's, and an index of many agents' sessions
# holds tens of thousands (LongMemEval's tuning split about 12,000: a memo of 4,096
# started over every few searches). An entry is a float and a shared set.
_MAX_STAMP_TERMS = 1 << 16


def _term_rows(
    gen: Generation,
    lexical: LexicalIndex,
    memo: _TermRows,
    term: str,
    df: int,
    *,
    within: _Within | None = None,
) -> npt.NDArray[np.intp]:
    """The live rows of ``gen`` whose text field holds ``term``, ascending (``df``
    documents at most: its document frequency, which also counts deleted documents); with
    ``within``, only those its filter lets through, read by intersecting the term's
    postings with the filter's in tantivy: the cost of the rows reached, not of the
    term's every document in the index.

    Which documents match is all that is read, so they are not scored: under a
    constant score tantivy collects them without BM25 (22 instead of 34 us a term
    among an agent's rows of the LongMemEval index, 440 instead of 670 us for a term
    of thousands of documents). The rows read are still all its matches (a first
    limit that could cut them is followed by one that cannot).
    """
    f = None if within is None else within.filter
    found = memo.rows.get((term, f))
    if found is not None:
        return found
    found = _carried_rows(gen, lexical, memo, term, within)
    if found is None:
        found = _searched_rows(gen, lexical, term, df, within)
    found.setflags(write=False)
    if memo.entries + len(found) > MAX_TERM_ROW_ENTRIES:
        memo.rows.clear()
        memo.entries = 0
    memo.rows[(term, f)] = found
    memo.entries += len(found)
    return found


def _carried_rows(
    gen: Generation,
    lexical: LexicalIndex,
    memo: _TermRows,
    term: str,
    within: _Within | None,
) -> npt.NDArray[np.intp] | None:
    """:func:`_term_rows` from the generation ``gen`` was derived from by appending,
    when it had found them: its rows still live here, then the added rows (among those
    ``within`` reaches) whose text has the term. ``None`` when it had not.

    What a live host searches right after every appended turn: the term's rows of the
    whole index need not be read from tantivy again (thousands of documents for a
    common term), only the few added rows' text analysed, once a generation (``None``
    past :data:`_CARRY_MAX_ADDED` of them).
    """
    inherited = gen.inherited("term_rows")
    if inherited is None:
        return None
    start, before = inherited
    f = None if within is None else within.filter
    base: npt.NDArray[np.intp] | None = before.rows.get((term, f))
    if base is None:
        return None
    if gen.alive is not None:
        base = base[gen.alive[base]]
    if within is None:
        added = np.arange(start, len(gen.records), dtype=np.intp)
        if gen.alive is not None:
            added = added[gen.alive[added]]
    else:
        added = within.rows[np.searchsorted(within.rows, start) :]
    if not len(added):
        return base
    if len(added) > _CARRY_MAX_ADDED:
        return None
    terms = memo.added_terms
    for r in added.tolist():
        if r not in terms:
            terms[r] = frozenset(lexical.document_terms(gen.records[r].text))
    has = np.fromiter((term in terms[r] for r in added.tolist()), np.bool_, len(added))
    return np.concatenate([base, added[has]])


def _searched_rows(
    gen: Generation,
    lexical: LexicalIndex,
    term: str,
    df: int,
    within: _Within | None,
) -> npt.NDArray[np.intp]:
    """:func:`_term_rows` read from the lexical index."""
    f = None if within is None else within.filter
    searcher = gen.searcher
    assert searcher is not None
    keys: list[Any] = []
    if df > 0:
        try:
            if f is None:
                query = tantivy.Query.const_score_query(
                    tantivy.Query.term_query(lexical.schema, "text", term), 1.0
                )
                hits = searcher.search(query, limit=df, count=False).hits
            else:
                query = tantivy.Query.const_score_query(
                    lexical.text_term_query(
                        term, sources=f.sources, agent_ids=f.agent_ids, session_keys=f.session_keys
                    ),
                    1.0,
                )
                # One more than the rows reached: if that many documents pass (never
                # expected: a dead row's document is deleted with it), read them all.
                limit = min(df, len(within.rows) + 1) if within is not None else df
                hits = searcher.search(query, limit=limit, count=False).hits
                if len(hits) == limit < df:
                    hits = searcher.search(query, limit=df, count=False).hits
            if hits:
                keys = searcher.fast_field_values("key", [addr for _, addr in hits])
        except ValueError as exc:
            raise LexicalIndexError(f"lexical search failed: {exc}") from exc
    rows = np.array(gen.row_of_key.lookup(keys), dtype=np.intp)
    return _sorted_unique(rows[rows >= 0])


def _date_terms(lexical: LexicalIndex, text: str) -> frozenset[str]:
    found = _DATE_TERMS.get(text)
    if found is None:
        if len(_DATE_TERMS) >= _MAX_DATE_TERMS:
            _DATE_TERMS.clear()
        found = _DATE_TERMS[text] = frozenset(lexical.document_terms(text))
    return found


def _stamp_terms(lexical: LexicalIndex, stamp: float) -> frozenset[str]:
    """The analysed words of the date of ``stamp`` (a session's turns mostly share one:
    each is put in words once)."""
    found = _STAMP_TERMS.get(stamp)
    if found is None:
        if len(_STAMP_TERMS) >= _MAX_STAMP_TERMS:
            _STAMP_TERMS.clear()
        found = _STAMP_TERMS[stamp] = _date_terms(lexical, date_text(stamp))
    return found


def _membership(
    gen: Generation,
    lexical: LexicalIndex,
    rows: Sequence[int],
    terms: Sequence[str],
    dfs: Sequence[int],
    *,
    within: _Within | None = None,
) -> npt.NDArray[np.bool_]:
    """Whether each of ``rows``'s own terms holds each of ``terms`` (terms x rows).

    A row's own terms are those of its text and, for a transcript turn, of its date's
    words: the same set :func:`_rows_terms` analyses. A rare term's rows come from the
    lexical index (whose text field holds exactly the analysed text); only a common
    one needs the rows' text analysed. When every one of ``rows`` is among the rows
    ``within`` reaches, each term's rows are read among those only (the same
    membership for these rows, at the cost of the reached rows).
    """
    out = np.zeros((len(terms), len(rows)), dtype=np.bool_)
    memo = gen.memo("term_rows", _TermRows)
    at = np.asarray(rows, dtype=np.intp)
    if within is not None and not _among(within.rows, at).all():
        within = None
    analysed: list[frozenset[str]] | None = None
    # The dated rows (positions in ``rows``), the distinct time of each (an index into
    # ``words``) and each distinct time's date words.
    dated: tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], list[frozenset[str]]] | None = None
    for t, (term, df) in enumerate(zip(terms, dfs, strict=True)):
        if within is None and df > TERM_ROWS_MAX_DF:
            if analysed is None:
                analysed = _rows_terms(gen, lexical, rows)
            out[t] = [term in mine for mine in analysed]
            continue
        out[t] = _among(_term_rows(gen, lexical, memo, term, df, within=within), at)
        if dated is None:
            dated = _dated(gen, lexical, at)
        timed, which, words = dated
        if words:
            # The distinct times whose words hold the term, then their rows.
            has = np.fromiter((term in w for w in words), np.bool_, len(words))
            if has.any():
                out[t, timed[has[which]]] = True
    return out


def _dated(
    gen: Generation, lexical: LexicalIndex, at: npt.NDArray[np.intp]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], list[frozenset[str]]]:
    """The transcript turns among rows ``at`` that have a time (positions in ``at``),
    which of the distinct times each has, and the date words of each distinct time.

    From the columns: the rows' records (neighbours of the candidates, most of them)
    are not read, and each distinct time is put in words once (a session's turns
    mostly share one).
    """
    none = np.empty(0, dtype=np.intp)
    if "sessions" not in gen.sources_present:
        return none, none, []
    stamps = gen.stamps[at]
    timed = np.flatnonzero(gen.is_session[at] & ~np.isnan(stamps))
    times, which = _unique(stamps[timed])
    return timed, which, [_stamp_terms(lexical, stamp) for stamp in times.tolist()]


def coverage(
    gen: Generation,
    lexical: LexicalIndex,
    rows: Sequence[int],
    terms: Sequence[str],
    within: _Within | None = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The IDF-weighted share of ``terms`` each row covers, three ways (each 0..1).

    First its own text; then its text with the adjacent turns'; then with the turns
    up to two away. A transcript turn's own terms include the words of its date; rows
    that are not transcript turns have no neighbours here. IDF is BM25's, over the
    text field of the whole index. ``within``: the rows a filtered search reaches
    (:func:`_membership` then reads term rows among those only).
    """
    n = len(rows)
    zeros = np.zeros(n, dtype=np.float64)
    searcher = gen.searcher
    if not terms or not n or searcher is None:
        return zeros, zeros, zeros
    docs = max(int(searcher.num_docs), 1)
    dfs = [int(searcher.doc_freq("text", t)) for t in terms]
    idf = np.array([math.log(1.0 + (docs - df + 0.5) / (df + 0.5)) for df in dfs], dtype=np.float64)
    total = float(idf.sum())
    if total <= 0:
        return zeros, zeros, zeros
    weights = (idf / total).tolist()
    if not gen.is_session[rows].any():
        # No transcript turns: no neighbours, so every row covers the same three ways.
        mine = _membership(gen, lexical, rows, terms, dfs, within=within)
        own = np.zeros(n, dtype=np.float64)
        for t, w in enumerate(weights):
            # (Adding w where the row holds the term is adding 0.0 elsewhere.)
            np.add(own, w, out=own, where=mine[t])
        return own, own.copy(), own.copy()
    # Each row's neighbours (one place before and after, two places before and
    # after; -1: none, and a memory-file chunk has none here), gathered as arrays.
    at_rows = np.asarray(rows, dtype=np.intp)
    session = gen.is_session[at_rows]
    near_rows = np.full((n, 4), -1, dtype=np.intp)
    near_rows[session] = gen.neighbour_rows(at_rows[session].tolist())
    # Every row the coverage reads (the order changes no membership), and where each
    # row and neighbour lies among them; one more column, never set, for "none".
    wanted, where = _unique(np.concatenate([at_rows, near_rows[near_rows >= 0]]))
    member = np.zeros((len(terms), len(wanted) + 1), dtype=np.bool_)
    member[:, :-1] = _membership(gen, lexical, wanted.tolist(), terms, dfs, within=within)
    placed = np.full((n, 4), len(wanted), dtype=np.intp)
    placed[near_rows >= 0] = where[n:]
    mine = member[:, where[:n]]
    near_hit = mine | member[:, placed[:, 0]] | member[:, placed[:, 1]]
    far_hit = near_hit | member[:, placed[:, 2]] | member[:, placed[:, 3]]
    own = np.zeros(n, dtype=np.float64)
    near = np.zeros(n, dtype=np.float64)
    far = np.zeros(n, dtype=np.float64)
    # Term by term, in query order: the same sums, added in the same order, as one
    # row at a time would give.
    for t, w in enumerate(weights):
        np.add(own, w, out=own, where=mine[t])
        np.add(near, w, out=near, where=near_hit[t])
        np.add(far, w, out=far, where=far_hit[t])
    return own, near, far


# A question that asks for a time ("When did ...", "what year", "how long ago").
_ASKS_WHEN = re.compile(
    r"\bwhen\b|\bwhat (?:year|month|day|date|time)\b|\bhow long ago\b", re.IGNORECASE
)


def asks_when(query: str) -> bool:
    """Whether ``query`` asks for a time (English question words)."""
    return _ASKS_WHEN.search(query) is not None


# A query about what the assistant said: "you mentioned", "you told me", "the
# restaurant you recommended", "remind me", "our previous conversation". On the
# LongMemEval tuning split it names 26 of the 27 questions about an assistant's reply
# and no other question; no LoCoMo question (a chat between two people) matches.
_RECALLS_REPLY = re.compile(
    r"\byou\s+(?:\w+\s+){0,2}?(?:said|told|mentioned|recommended|suggested|wrote"
    r"|created|made|gave|provided|listed|explained|described|shared|proposed|came\s+up"
    r"|helped|showed|taught|offered|composed|generated|did)\b"
    r"|\bdid\s+you\s+(?:say|tell|mention|recommend|suggest|write|create|make|give|provide"
    r"|list|explain|describe|share|propose|come\s+up|show|teach|offer|compose|generate)\b"
    r"|\bremind\s+me\b"
    r"|\b(?:our|the)\s+(?:previous|last|earlier|past)\s+(?:conversation|chat|discussion)",
    re.IGNORECASE,
)


def recalls_reply(query: str) -> bool:
    """Whether ``query`` asks for something the assistant said (English phrasing):
    then the assistant's turns hold the answer (:func:`priors`)."""
    return _RECALLS_REPLY.search(query) is not None


# An echo may hold this many content terms the query lacks ("Who is the release
# manager again?" still echoes "Who is the release manager?").
ECHO_EXTRA_TERMS = 1
# How much of a long question :func:`is_echo` analyses first.
_ECHO_PREFIX_CHARS = 120


def is_echo(lexical: LexicalIndex, text: str, query_terms: AbstractSet[str]) -> bool:
    """Whether a transcript turn only repeats the query: it asks a question, and its
    own content terms (speaker left out) are the query's, but for at most
    :data:`ECHO_EXTRA_TERMS`. Such a line matches a query about as well as anything
    can, yet answers nothing: after a user asked "Who is the release manager?", the
    fact is in the memory file or the reply, not in the question."""
    if not text.rstrip().endswith("?"):
        return False
    text = SPEAKER.sub("", text, count=1)
    if len(text) > 2 * _ECHO_PREFIX_CHARS:
        # Most questions in a chat are no echo, and a long one shows it early: the
        # terms of a prefix cut at a space are terms of the whole (the analysers
        # split at every non-alphanumeric character and filter token by token, and
        # the date rewriting looks no further than the next word), so a prefix
        # holding more terms the query lacks than an echo may rules it out without
        # analysing the rest (about 40 us a question of 200 characters).
        cut = text.rfind(" ", 0, _ECHO_PREFIX_CHARS)
        if cut > 0:
            head = lexical.query_terms(text[:cut], fallback=False)
            if len(set(head).difference(query_terms)) > ECHO_EXTRA_TERMS:
                return False
    own = set(lexical.query_terms(text))
    return bool(own & query_terms) and len(own - query_terms) <= ECHO_EXTRA_TERMS


def priors(
    gen: Generation,
    lexical: LexicalIndex | None,
    rows: Sequence[int],
    params: RankParams,
    query_terms: AbstractSet[str],
    *,
    reply_wanted: bool = False,
) -> npt.NDArray[np.float64]:
    """The factor on each of ``rows``'s score for what it is rather than what it says.

    An assistant's turn (the host renders it ``assistant: ...``) counts
    ``assistant_weight``: what a memory needs is mostly what the user said, while a
    reply restates the question at length and matches it on many words. When the
    query asks what the assistant said (``reply_wanted``, :func:`recalls_reply`), the
    reply is the answer and the user's turns, which only asked for it, count
    ``assistant_weight`` instead. A turn that only echoes the query (:func:`is_echo`)
    counts ``echo_weight``. Memory files and other speakers' turns count 1.

    Only a user's question with no more terms than the query's and one can echo it
    (its count is a column, :attr:`~._records.ChunkRecord.question_terms`): only those
    have their records read and their text compared with the query.
    """
    out = np.ones(len(rows), dtype=np.float64)
    if params.assistant_weight == 1.0 and (params.echo_weight == 1.0 or lexical is None):
        return out
    # Who speaks and whether a turn asks are columns: only a question a user asked
    # has its record read (to compare its terms with the query's).
    at = np.asarray(rows, dtype=np.intp)
    assistant = gen.assistant_turns[at]
    if reply_wanted:
        # A transcript turn is the user's or the assistant's: the user's are the
        # session turns (a memory file keeps its 1) that are not the assistant's.
        sessions = gen.is_session[at] & ~assistant
        out[sessions] *= params.assistant_weight
    else:
        out[assistant] *= params.assistant_weight
    if params.echo_weight != 1.0 and lexical is not None and query_terms:
        records = gen.records
        counts = gen.question_terms[at]
        could = (counts > 0) & (counts <= len(query_terms) + ECHO_EXTRA_TERMS) & ~assistant
        for i in np.flatnonzero(could).tolist():
            if is_echo(lexical, records[rows[i]].text, query_terms):
                out[i] *= params.echo_weight
    return out


def meaning_scores(
    cosines: npt.NDArray[np.float64], floor: float, match: float
) -> npt.NDArray[np.float64]:
    """What each of ``cosines`` says alone, on the scale of a fused score: 0 up to
    ``floor`` (the cosine an unrelated text reaches), 0.5 at ``match`` (the cosine
    from which a text is about the query), rising linearly between and on to 1 at 1.

    Fusion gives the vector side a small weight (it ranks texts BM25 cannot tell
    apart), so a hit found by meaning alone, sharing no word with the query, fused to
    a tenth of its cosine and fell below any sensible ``min_score``: the paraphrases
    the embedder exists to find were cut. When no candidate shares a word with the
    query, a hit scores the larger of its fused score and this, so a strong match by
    meaning passes ``min_score`` on its own, while a query about nothing in the index
    still finds nothing.
    """
    rising = 0.5 * (cosines - floor) / (match - floor)
    beyond = 0.5 + 0.5 * (cosines - match) / (1.0 - match)
    out: npt.NDArray[np.float64] = np.clip(np.where(cosines < match, rising, beyond), 0.0, 1.0)
    return out


def _words(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(text))


def _jaccard(sets: Sequence[frozenset[str]]) -> npt.NDArray[np.float32]:
    """Each pair's Jaccard similarity ``|a & b| / |a | b|`` (0 for two empty sets and
    on the diagonal), the float32 of the exact quotient.

    By a product of the sets' incidence over the words more than one of them holds
    (the others add to no intersection): a pool of 240 sets has 28,680 pairs, which
    set operations in Python took 45 ms to compare. The counts are whole numbers far
    below 2**24, so the float32 product is exact whatever order it sums in, and the
    quotient of two exact counts in float64 is the one Python's division gives.
    """
    n = len(sets)
    seen: dict[str, int] = {}
    for words in sets:
        for w in words:
            seen[w] = seen.get(w, 0) + 1
    shared = {w: i for i, w in enumerate(w for w, count in seen.items() if count > 1)}
    incidence = np.zeros((n, len(shared)), dtype=np.float32)
    for i, words in enumerate(sets):
        incidence[i, [shared[w] for w in words if w in shared]] = 1.0
    inter = (incidence @ incidence.T).astype(np.float64)
    sizes = np.array([len(words) for words in sets], dtype=np.float64)
    union = sizes[:, None] + sizes[None, :] - inter
    sim = np.divide(inter, union, out=np.zeros_like(union), where=union > 0)
    np.fill_diagonal(sim, 0.0)
    return sim.astype(np.float32)


def _mmr(
    gen: Generation, ranked: list[RankedRow], want: int, lam: float, use_vectors: bool
) -> list[RankedRow]:
    """Greedy maximal marginal relevance: trade score against similarity to picks."""
    if len(ranked) <= 1:
        return ranked
    pool = ranked[: want * 4]
    rest = ranked[len(pool) :]
    rows = [r.row for r in pool]
    if use_vectors and gen.matrix is not None:
        vecs = gen.matrix[rows]
        sim = np.clip(vecs @ vecs.T, 0.0, 1.0)
    else:
        sim = _jaccard([_words(gen.records[r].text) for r in rows])
    top = max(r.score for r in pool) or 1.0
    rel = np.array([r.score / top for r in pool], dtype=np.float32)
    chosen: list[int] = []
    max_sim = np.zeros(len(pool), dtype=np.float32)
    available = np.ones(len(pool), dtype=np.bool_)
    while available.any() and len(chosen) < len(pool):
        value = lam * rel - (1.0 - lam) * max_sim
        value[~available] = -np.inf
        pick = int(np.argmax(value))
        chosen.append(pick)
        available[pick] = False
        max_sim = np.maximum(max_sim, sim[pick])
    return [pool[i] for i in chosen] + rest


def _text_candidates(
    hits: Sequence[tuple[int, float]], found: Sequence[int]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
    """The rows of BM25's ``hits`` (``found``: each hit's row, ``-1``: none) in hit
    order and their scores over the best hit's; none when no hit scores above 0. A row
    found twice keeps its first place and its last score (as a dict filled in hit
    order would)."""
    rows = np.fromiter(found, np.intp, len(found))
    scores = np.fromiter((s for _, s in hits), np.float64, len(hits))
    best = float(scores.max()) if len(scores) else 0.0
    if not best > 0:
        return np.empty(0, dtype=np.intp), np.empty(0, dtype=np.float64)
    keep = rows >= 0
    rows, scores = rows[keep], scores[keep]
    ordered = np.sort(rows)
    if (ordered[1:] == ordered[:-1]).any():
        kept = dict(zip(rows.tolist(), scores.tolist(), strict=True))
        rows = np.fromiter(kept, np.intp, len(kept))
        scores = np.fromiter(kept.values(), np.float64, len(kept))
    return rows, scores / best


def _head_order(
    gen: Generation,
    rows: npt.NDArray[np.intp],
    scores: npt.NDArray[np.float64],
    by_score: npt.NDArray[np.intp],
    head: int,
) -> list[int]:
    """The first ``head`` of ``by_score`` (candidates by descending score) with ties
    broken by chunk id: sorted by (score, id) is only the head that can reach the
    page, extended over any run of scores equal to its last one."""
    ranked = scores[by_score]
    cut = min(head, len(by_score))
    if 0 < cut < len(by_score) and ranked[cut] == ranked[cut - 1]:
        differ = np.flatnonzero(ranked[cut:] != ranked[cut - 1])
        cut = cut + int(differ[0]) if len(differ) else len(by_score)
    if cut < 2 or not (ranked[1:cut] == ranked[: cut - 1]).any():  # no tie: no sort
        found: list[int] = by_score[:head].tolist()
        return found
    order = _break_ties(gen, by_score[:cut].tolist(), scores.tolist(), rows.tolist())
    return order[:head]


def _break_ties(
    gen: Generation, order: list[int], score_of: list[float], row_of: list[int]
) -> list[int]:
    """``order`` (candidates by descending score) with each run of equal scores sorted
    by chunk id: what sorting by (score, chunk id) gives, reading the records (decoded
    from the publication log) of tied candidates only."""
    n = len(order)
    i = 0
    while i < n - 1:
        score = score_of[order[i]]
        j = i + 1
        while j < n and score_of[order[j]] == score:
            j += 1
        if j - i > 1:
            records = gen.records
            order[i:j] = sorted(order[i:j], key=lambda c: records[row_of[c]].chunk_id)
        i = j
    return order


def _lexical_head(
    gen: Generation,
    params: RankParams,
    want: int,
    use_vec: bool,
    tombstones: AbstractSet[str],
) -> int | None:
    """How many BM25 candidates a lexical-only search needs for the page it asks for,
    or ``None`` when it needs every candidate.

    Without a vector stage, a row's first-stage score is its BM25 score over the best
    one, and only the head of the ranking (``max(2 * want, 32)`` rows) is re-scored by
    the second stage, which only raises a score: a row below the head stays below it.
    So the head and one more row rank the same page, the same ``more``, as every
    candidate would, unless the row after the head scores as much as the page's last
    row (a run of equal scores from the page past the head: a row beyond the head
    could take a place on the page). A tie at the head's edge below the page changes
    nothing: tantivy orders equal scores by document at every depth, so the head is
    the same rows in the same order, the second stage re-scores the same ones, and the
    rows beyond keep scores below the page's. BM25 scores tie often (fieldnorms are
    quantised): at 100k rows, 128 of 150 benchmark queries tie at the head's edge, one
    across the page. tantivy then collects, and Python converts, a few dozen hits
    rather than hundreds (at 100k rows, 400 of them). Not so when something can lower
    a head row below the rows after it or drop one from it: temporal decay, MMR, the
    priors on transcript turns, tombstoned chunks.
    """
    if use_vec or params.temporal_decay or params.mmr or tombstones:
        return None
    if "sessions" in gen.sources_present and (
        params.assistant_weight != 1.0 or params.echo_weight != 1.0
    ):
        return None
    return max(2 * want, _SECOND_STAGE_MIN)


def rank(
    gen: Generation,
    lexical: LexicalIndex | None,
    *,
    query: str,
    query_vector: npt.NDArray[np.float32] | None,
    params: RankParams,
    tombstones: AbstractSet[str],
    sims: npt.NDArray[np.float32] | None = None,
) -> tuple[list[RankedRow], bool]:
    """The hits of page ``offset..offset+limit`` and whether more ranked hits follow.

    ``sims``, when given, are the cosine similarities of every row to ``query_vector``,
    already computed (a batch of searches shares one matrix product).
    """
    n = len(gen.records)
    want = params.offset + params.limit
    use_text = params.mode in ("hybrid", "lexical")
    use_vec = params.mode in ("hybrid", "vector") and query_vector is not None
    if n == 0:
        return [], False
    f = narrow_filter(gen, params.filter)
    reach = reachable_rows(gen, f)
    # The candidate depth grows with what the search can reach, not the whole index.
    k = candidate_count(
        want,
        params.candidate_multiplier,
        params.candidate_growth,
        n if reach is None else len(reach),
    )
    mask = _filter_mask(gen, f) if reach is None else None

    # The rows BM25 found and their scores over the best one's, in BM25's order.
    text_rows: npt.NDArray[np.intp] = np.empty(0, dtype=np.intp)
    text_vals: npt.NDArray[np.float64] = np.empty(0, dtype=np.float64)
    # Analysed once: the first stage's query and the second stage's coverage use them.
    query_terms = lexical.query_terms(query) if use_text and lexical is not None else []
    if use_text and gen.searcher is not None and lexical is not None:
        # Only transcript chunks have speaker, date and far-context fields: without
        # any, their clauses could match nothing and are left out. The context field
        # holds a turn's neighbours, or the headings a memory-file entry lies under.
        turns = "sessions" in gen.sources_present
        q = lexical.build_query(
            query,
            context_boost=params.context_boost,
            far_context_boost=params.far_context_boost if turns else 0.0,
            speaker_boost=params.speaker_boost if turns else 0.0,
            date_boost=params.date_boost if turns else 0.0,
            path_boost=params.path_boost,
            sources=f.sources,
            agent_ids=f.agent_ids,
            session_keys=f.session_keys,
            terms=query_terms,
        )
        if q is not None:
            head = _lexical_head(gen, params, want, use_vec, tombstones)
            short = head is not None and head < k
            hits = lexical_search(gen.searcher, q, head + 1 if short and head else k)
            found = gen.row_of_key.lookup([key for key, _ in hits])
            if short and head and len(hits) > head and (
                # A tie at the edge of the head that reaches the page (the rows beyond
                # the head could then take a place on it), or a hit that is no row of
                # this generation (the head would be short).
                hits[head][1] >= hits[want - 1][1] or min(found) < 0
            ):
                hits = lexical_search(gen.searcher, q, k)
                found = gen.row_of_key.lookup([key for key, _ in hits])
            text_rows, text_vals = _text_candidates(hits, found)

    vec_rows: npt.NDArray[np.intp] = np.empty(0, dtype=np.intp)
    vec_exact: npt.NDArray[np.float64] = np.empty(0, dtype=np.float64)
    if not use_vec:
        sims = None
    # The approximate vector stage (a large generation), or one over the rows a filter
    # reaches: no cosine of every row, the candidates' exact cosines are computed from
    # their own rows instead.
    scored = bool(use_vec and gen.matrix is not None and gen.matrix.shape[0] == n)
    if scored:
        assert gen.matrix is not None and query_vector is not None
        if reach is not None:
            reached = (
                sims[reach] if sims is not None else row_cosines(gen.matrix, reach, query_vector)
            )
            vec_rows, vec_exact = nearest_scored(reached, reach, k, gen.matrix, query_vector)
        elif sims is None and approximate(gen, params.approximate_rows):
            vec_rows, vec_exact = sketch_nearest(gen, query_vector, k, mask)
        else:
            if sims is None:
                sims = gen.matrix @ query_vector
            ranked = sims if mask is None else np.where(mask, sims, -np.inf).astype(np.float32)
            vec_rows, vec_exact = nearest_scored(ranked, None, k, gen.matrix, query_vector)

    # Candidates in first-seen order (lexical, then vector), scored all at once.
    n_text = len(text_rows)
    vec_only = ~_among(np.sort(text_rows), vec_rows)
    rows = np.concatenate([text_rows, vec_rows[vec_only]])
    t_arr = np.zeros(len(rows), dtype=np.float64)
    t_arr[:n_text] = text_vals
    # Every candidate's cosine computed exactly, the same way for every search: a
    # product's rounding (shared with other searches in a batch, or not) never reaches
    # a score. The vector candidates' were computed choosing them (exact_cosines gives
    # a row the same value whatever rows come with it): only the lexical ones' remain.
    v_arr = None
    if scored:
        assert gen.matrix is not None and query_vector is not None
        v_arr = np.maximum(
            np.concatenate(
                [
                    exact_cosines(gen.matrix, rows[:n_text], query_vector),
                    vec_exact[vec_only],
                ]
            ),
            0.0,
        )
    if tombstones:
        live = [gen.records[r].chunk_id not in tombstones for r in rows.tolist()]
        rows, t_arr = rows[live], t_arr[live]
        if v_arr is not None:
            v_arr = v_arr[live]
    if params.mode == "lexical" or v_arr is None:
        scores = t_arr if use_text else np.zeros(len(rows), dtype=np.float64)
    elif params.mode == "vector" or not use_text:
        scores = v_arr
    else:
        total_w = params.vector_weight + params.text_weight
        scores = (params.vector_weight * v_arr + params.text_weight * t_arr) / total_w
    weights = (params.coverage_weight, params.near_coverage_weight, params.far_coverage_weight)
    if use_text and lexical is not None and len(rows) and sum(weights) > 0:
        terms = [t for t in query_terms if not has_cjk(t)]
        if terms:
            # Only the head of the first stage is re-scored (the rest keeps its order
            # below it): what the page can reach, with room to move up into it.
            stage = np.argsort(-scores, kind="stable")[: max(2 * want, _SECOND_STAGE_MIN)]
            stage_rows = rows[stage].tolist()
            within = None if reach is None else _Within(f, reach)
            parts = coverage(gen, lexical, stage_rows, terms, within)
            bonus = np.zeros(len(rows), dtype=np.float64)
            bonus[stage] = sum(w * part for w, part in zip(weights, parts, strict=True))
            total = 1.0 + sum(weights)
            if params.when_weight > 0 and asks_when(query):
                # Transcript turns only (the column is false for any other chunk): a
                # memory-file chunk of hundreds of words nearly always names some
                # time, so the bonus would not discriminate.
                timed = gen.states_time[rows[stage]]
                bonus[stage] += params.when_weight * timed.astype(np.float64)
                total += params.when_weight
            window = query_window(query, params.now) if params.window_weight > 0 else None
            if window is not None:
                # Any dated chunk: a turn by its own time, a daily note by its day. (A
                # row without either is NaN, inside no window.)
                at = rows[stage]
                stamps = np.where(gen.is_session[at], gen.stamps[at], gen.dated[at])
                inside = (stamps >= window[0]) & (stamps <= window[1])
                bonus[stage] += params.window_weight * inside
                total += params.window_weight
            # Still 0..1: a candidate covering the query everywhere keeps its score.
            scores = (scores + bonus) / total
    if (
        params.mode == "hybrid"
        and not n_text
        and v_arr is not None
        and params.similarity is not None
    ):
        # Nothing shares a word with the query: every candidate is a match by meaning
        # alone, scored by what its cosine says (a query with lexical matches keeps
        # the fused order: on both benchmarks' tuning splits, letting strong cosines
        # outrank weak lexical matches cost turn recall@10 0.03 on LoCoMo).
        scores = np.maximum(scores, meaning_scores(v_arr, *params.similarity))
    if (
        (params.assistant_weight != 1.0 or params.echo_weight != 1.0)
        and len(rows)
        and ("sessions" in gen.sources_present)
    ):
        # The head the page can reach, as the second stage re-scores it.
        stage = np.argsort(-scores, kind="stable")[: max(2 * want, _SECOND_STAGE_MIN)]
        scores = scores.copy()
        scores[stage] *= priors(
            gen,
            lexical,
            rows[stage].tolist(),
            params,
            set(query_terms),
            reply_wanted=recalls_reply(query),
        )
    if params.temporal_decay:
        dated = gen.dated[rows]
        has_date = ~np.isnan(dated)
        if has_date.any():
            age_days = np.maximum(0.0, (params.now - np.where(has_date, dated, 0.0)) / _DAY)
            decay = np.where(has_date, 0.5 ** (age_days / params.half_life_days), 1.0)
            scores = scores * decay
    passed = np.flatnonzero((scores >= params.min_score) & (scores > 0.0))
    more = len(passed) > want
    by_score = passed[np.argsort(-scores[passed], kind="stable")]
    # MMR reorders a pool of four times the page; without it the page is the head.
    head = want * 4 if params.mmr else want
    order = np.array(_head_order(gen, rows, scores, by_score, head), dtype=np.intp)
    # Python values of the head's candidates only (a search has hundreds).
    row_of, score_of = rows[order].tolist(), scores[order].tolist()
    text_of = t_arr[order].tolist() if use_text else None
    vector_of = v_arr[order].tolist() if v_arr is not None else None
    out = [
        RankedRow(
            row=row_of[i],
            score=score_of[i],
            text_score=None if text_of is None else text_of[i],
            vector_score=None if vector_of is None else vector_of[i],
        )
        for i in range(len(order))
    ]
    if params.mmr:
        out = _mmr(gen, out, want, params.mmr_lambda, use_vectors=v_arr is not None)
    return out[params.offset : want], more
