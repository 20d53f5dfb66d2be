"""Hybrid ranking over one generation: pure, blocking, run on the worker pool.

Lexical candidates come from tantivy (BM25, normalised by the best candidate's score
so the component lies in 0..1), vector candidates from an exact matrix product over
the generation's normalised matrix. Every candidate gets both components (the cosine
of a lexical-only candidate is computed exactly; a vector-only candidate has no
lexical score), then the weighted sum, optional temporal decay of dated daily notes,
the ``min_score`` cut, tombstone filtering and optional MMR.
"""

from __future__ import annotations

import re
from collections.abc import Container

import attrs
import numpy as np
import numpy.typing as npt

from ._generation import Generation
from ._lexical import LexicalIndex, lexical_search
from ._settings import SearchMode
from ._types import SearchFilter

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
    path_boost: float
    candidate_multiplier: int
    min_score: float
    temporal_decay: bool
    half_life_days: float
    now: float
    mmr: bool
    mmr_lambda: float
    filter: SearchFilter


@attrs.frozen
class RankedRow:
    """A ranked candidate: its row in the generation and its scores."""

    row: int
    score: float
    text_score: float | None
    vector_score: float | None


def _filter_mask(gen: Generation, f: SearchFilter) -> npt.NDArray[np.bool_] | None:
    n = len(gen.records)
    mask: npt.NDArray[np.bool_] | None = None
    if f.sources is not None:
        mask = np.zeros(n, dtype=np.bool_)
        if "sessions" in f.sources:
            mask |= gen.is_session
        if "memory" in f.sources:
            mask |= ~gen.is_session
    for values, codes, index in (
        (f.agent_ids, gen.agent_codes, gen.agent_index),
        (f.session_keys, gen.skey_codes, gen.skey_index),
    ):
        if values is None:
            continue
        wanted = np.array([index[v] for v in values if v in index], dtype=np.int32)
        ok = ~gen.is_session | np.isin(codes, wanted)
        mask = ok if mask is None else (mask & ok)
    return mask


def _top_k(scores: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.intp]:
    n = scores.shape[0]
    idx = np.arange(n) if k >= n else np.argpartition(-scores, k)[:k]
    return idx[np.argsort(-scores[idx], kind="stable")]


def _words(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(text))


def _mmr(
    gen: Generation, ranked: list[RankedRow], want: int, lam: float, use_vectors: bool
) -> list[RankedRow]:
    """Greedy maximal marginal relevance: trade score against similarity to picks."""
    if len(ranked) <= 1:
        return ranked
    pool = ranked[: max(want * 4, want)]
    rest = ranked[len(pool) :]
    rows = [r.row for r in pool]
    if use_vectors and gen.matrix is not None:
        vecs = gen.matrix[rows]
        sim = np.clip(vecs @ vecs.T, 0.0, 1.0)
    else:
        sets = [_words(gen.records[r].text) for r in rows]
        sim = np.zeros((len(rows), len(rows)), dtype=np.float32)
        for i in range(len(rows)):
            for j in range(i + 1, len(rows)):
                union = len(sets[i] | sets[j])
                s = len(sets[i] & sets[j]) / union if union else 0.0
                sim[i, j] = sim[j, i] = s
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


def rank(
    gen: Generation,
    lexical: LexicalIndex | None,
    *,
    query: str,
    query_vector: npt.NDArray[np.float32] | None,
    params: RankParams,
    tombstones: Container[str],
    sims: npt.NDArray[np.float32] | None = None,
) -> tuple[list[RankedRow], bool]:
    """The hits of page ``offset..offset+limit`` and whether more ranked hits follow.

    ``sims``, when given, are the cosine similarities of every row to ``query_vector``,
    already computed (a batch of searches shares one matrix product).
    """
    n = len(gen.records)
    want = params.offset + params.limit
    k = max(want * params.candidate_multiplier, want)
    use_text = params.mode in ("hybrid", "lexical")
    use_vec = params.mode in ("hybrid", "vector") and query_vector is not None
    if n == 0:
        return [], False
    mask = _filter_mask(gen, params.filter)

    text_scores: dict[int, float] = {}
    if use_text and gen.searcher is not None and lexical is not None:
        f = params.filter
        q = lexical.build_query(
            query,
            context_boost=params.context_boost,
            far_context_boost=params.far_context_boost,
            speaker_boost=params.speaker_boost,
            path_boost=params.path_boost,
            sources=frozenset(f.sources) if f.sources is not None else None,
            agent_ids=f.agent_ids,
            session_keys=f.session_keys,
        )
        if q is not None:
            hits = lexical_search(gen.searcher, q, k)
            best = max((s for _, s in hits), default=0.0)
            for key, s in hits:
                row = gen.row_of_key.get(key)
                if row is not None and best > 0:
                    text_scores[row] = s / best

    vec_rows: list[int] = []
    if not use_vec:
        sims = None
    if use_vec and gen.matrix is not None and gen.matrix.shape[0] == n:
        assert query_vector is not None
        if sims is None:
            sims = gen.matrix @ query_vector
        ranked_sims = sims if mask is None else np.where(mask, sims, -np.inf).astype(np.float32)
        vec_rows = [int(i) for i in _top_k(ranked_sims, k) if np.isfinite(ranked_sims[i])]

    candidates = dict.fromkeys([*text_scores, *vec_rows])
    total_w = params.vector_weight + params.text_weight
    out: list[RankedRow] = []
    for row in candidates:
        record = gen.records[row]
        if record.chunk_id in tombstones:
            continue
        t = text_scores.get(row, 0.0) if use_text else None
        v = max(0.0, float(sims[row])) if sims is not None else None
        if params.mode == "lexical" or v is None:
            score = t or 0.0
        elif params.mode == "vector" or t is None:
            score = v
        else:
            score = (params.vector_weight * v + params.text_weight * t) / total_w
        if params.temporal_decay and not np.isnan(gen.dated[row]):
            age_days = max(0.0, (params.now - float(gen.dated[row])) / _DAY)
            score *= 0.5 ** (age_days / params.half_life_days)
        if score < params.min_score or score <= 0.0:
            continue
        out.append(RankedRow(row=row, score=score, text_score=t, vector_score=v))
    out.sort(key=lambda r: (-r.score, gen.records[r.row].chunk_id))
    if params.mmr:
        out = _mmr(gen, out, want, params.mmr_lambda, use_vectors=sims is not None)
    return out[params.offset : want], len(out) > want
