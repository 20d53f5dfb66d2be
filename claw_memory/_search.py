"""A search: follow the published pointer, check the sources are current, rank a page.

A search reads whichever generation was current when it started and never takes a
lock. Before ranking it follows the pointer (:mod:`._follow`) and asks
:mod:`._freshness` whether the sources moved (a sync then runs inline, or in the
background while this search answers from the current generation with a warning).
The ranking runs where :mod:`._schedule` decides; chunks forgotten meanwhile are left
out of the page with the latest tombstones.
"""

from __future__ import annotations

import functools
import math
import time

import attrs
import numpy as np
import numpy.typing as npt

from claw.plugin_sdk import EmbeddingProvider, WorkerPool
from claw.plugin_sdk.search import embed_texts, normalise_rows

from ._errors import InvalidSearchError
from ._follow import Follower
from ._freshness import Freshness
from ._ranking import RankedRow, RankParams, rank
from ._records import ChunkRecord
from ._schedule import BatchItem, RankScheduler
from ._settings import MemoryCoreSettings, SearchMode
from ._types import SearchFilter, SearchHit
from ._view import IndexView

_MAX_PAGE = 1000
_INLINE_QUERY_CHARS = 2048
# How many of the latest queries' vectors an index keeps (a query asked again, a page
# after the first, costs no embedding).
_QUERY_VECTORS = 1024


@attrs.frozen
class SearchPage:
    """A page of :meth:`MemoryIndex.search_page`: each hit's record and ranked row
    (tombstoned chunks already left out), where the next page starts, the generation
    searched and the warning of an answer behind its sources."""

    mode: SearchMode
    hits: list[tuple[ChunkRecord, RankedRow]]
    next_offset: int | None
    generation: int
    warning: str | None


def search_hit(rec: ChunkRecord, r: RankedRow) -> SearchHit:
    """The :class:`SearchHit` of a ranked row and its record."""
    return SearchHit(
        chunk_id=rec.chunk_id,
        path=rec.path,
        source=rec.source,
        start_line=rec.start_line,
        end_line=rec.end_line,
        excerpt=rec.text,
        score=r.score,
        text_score=r.text_score,
        vector_score=r.vector_score,
        content_hash=rec.content_hash,
        revision=rec.revision,
        agent_id=rec.agent_id,
        session_key=rec.session_key,
        session_id=rec.session_id,
        entry_ids=rec.entry_ids,
        timestamp=rec.timestamp,
    )


def _rank_params(
    settings: MemoryCoreSettings, embedder: EmbeddingProvider | None
) -> functools.partial[RankParams]:
    """The ranking parameters that come from the settings and the embedder, both fixed
    for the index's life: gathered once, not on every search. (A partial of
    :class:`RankParams`, so the type checker sees every field it fills.)"""
    vector_weight, text_weight = settings.fusion_weights(embedder)
    similarity = settings.similarity_calibration(embedder)
    return functools.partial(
        RankParams,
        vector_weight=vector_weight,
        text_weight=text_weight,
        similarity=similarity,
        context_boost=settings.context_boost,
        far_context_boost=settings.far_context_boost,
        speaker_boost=settings.speaker_boost,
        date_boost=settings.date_boost,
        path_boost=settings.path_boost,
        coverage_weight=settings.coverage_weight,
        near_coverage_weight=settings.near_coverage_weight,
        far_coverage_weight=settings.far_coverage_weight,
        candidate_multiplier=settings.candidate_multiplier,
        candidate_growth=settings.candidate_growth,
        when_weight=settings.when_weight,
        window_weight=settings.window_weight,
        assistant_weight=settings.assistant_weight,
        echo_weight=settings.echo_weight,
        approximate_rows=settings.approximate_rows,
        temporal_decay=settings.temporal_decay,
        half_life_days=settings.half_life_days,
        mmr=settings.mmr,
        mmr_lambda=settings.mmr_lambda,
    )


@attrs.define(eq=False)
class Searcher:
    """Answers searches over the generations :attr:`view` follows (see module docstring)."""

    view: IndexView
    settings: MemoryCoreSettings
    embedder: EmbeddingProvider | None
    workers: WorkerPool
    follower: Follower
    freshness: Freshness
    scheduler: RankScheduler
    #: Searches running now, for status.
    active: int = attrs.field(default=0, init=False)
    _rank_params: functools.partial[RankParams] = attrs.field(init=False)
    # The latest queries' vectors, oldest first (see _query_vector).
    _query_vectors: dict[str, npt.NDArray[np.float32]] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        self._rank_params = _rank_params(self.settings, self.embedder)

    @property
    def default_mode(self) -> SearchMode:
        """``hybrid`` with an embedder, ``lexical`` without one."""
        return "lexical" if self.embedder is None else "hybrid"

    async def search_page(
        self,
        query: str,
        *,
        mode: SearchMode | None = None,
        max_results: int | None = None,
        offset: int = 0,
        min_score: float | None = None,
        filter: SearchFilter | None = None,
        now: float | None = None,
    ) -> SearchPage:
        """Rank a page of chunks for ``query`` (see :meth:`MemoryIndex.search_page`),
        after checking the arguments: this is the index's own public API."""
        self.view.check_open()
        settings = self.settings
        limit = settings.max_results if max_results is None else max_results
        if not 1 <= limit <= _MAX_PAGE:
            raise InvalidSearchError(f"max_results must be between 1 and {_MAX_PAGE}, got {limit}")
        if offset < 0:
            raise InvalidSearchError(f"offset must not be negative, got {offset}")
        chosen: SearchMode = mode or self.default_mode
        if chosen not in ("hybrid", "lexical", "vector"):
            raise InvalidSearchError(
                f"unknown search mode {chosen!r}; use hybrid, lexical or vector"
            )
        if self.embedder is None and chosen == "vector":
            raise InvalidSearchError(
                "vector search needs an embedding provider; configure one or use lexical"
            )
        cut = settings.min_score if min_score is None else min_score
        if not 0.0 <= cut <= 1.0 or math.isnan(cut):
            raise InvalidSearchError(f"min_score must be between 0 and 1, got {cut}")
        return await self.rank_page(
            query, mode=chosen, limit=limit, offset=offset, min_score=cut, filter=filter, now=now
        )

    async def rank_page(
        self,
        query: str,
        *,
        mode: SearchMode | None,
        limit: int,
        offset: int,
        min_score: float | None,
        filter: SearchFilter | None = None,
        now: float | None = None,
    ) -> SearchPage:
        """:meth:`search_page` for arguments checked where the request entered (a
        provider handle's caller validated them): nothing is checked again. ``mode``
        ``None`` is the default mode; ``min_score`` ``None`` the settings'."""
        view = self.view
        view.check_open()
        chosen: SearchMode = mode or self.default_mode
        if self.embedder is None:
            chosen = "lexical"
        cut = self.settings.min_score if min_score is None else min_score
        settings = self.settings

        freshness = self.freshness
        await self.follower.follow()
        if settings.sync_on_search and await freshness.sessions_changed():
            await freshness.changed()
        if not query.strip():
            return SearchPage(chosen, [], None, view.generation.number, None)
        check_files = await freshness.must_stat()

        self.active += 1
        try:
            qvec: npt.NDArray[np.float32] | None = None
            if chosen != "lexical" and self.embedder is not None:
                qvec = await self._query_vector(query)
            params = self._rank_params(
                mode=chosen,
                offset=offset,
                limit=limit,
                min_score=cut,
                now=time.time() if now is None else now,
                filter=filter or SearchFilter(),
            )
            # A stat check, when one is due, rides the ranking call; only when it finds
            # a file moved does the search sync and rank again.
            gen = view.generation
            # A sync a search started has not published yet: this answer is behind.
            behind = freshness.syncing()
            item = BatchItem(
                gen=gen,
                query=query,
                query_vector=qvec,
                params=params,
                tombstones=view.tombstones,
                check=freshness.stat_check() if check_files else None,
                rank_stale=freshness.in_background,
            )
            outcome = await self.scheduler.rank(item)
            if item.stale:
                behind = await freshness.changed()
            if outcome is None:
                await freshness.sync_if_free()
                gen = view.generation
                ranked = await self.workers.run_sync(
                    functools.partial(
                        rank,
                        gen,
                        view.lexical,
                        query=query,
                        query_vector=qvec,
                        params=params,
                        tombstones=view.tombstones,
                    )
                )
            else:
                ranked = outcome
            rows, more = ranked
        finally:
            self.active -= 1
        # Tombstones may have grown while ranking ran: filter again with the latest set.
        tombstones = view.tombstones
        records = gen.records
        hits = []
        for r in rows:
            rec = records[r.row]
            if rec.chunk_id not in tombstones:
                hits.append((rec, r))
        return SearchPage(
            mode=chosen,
            hits=hits,
            next_offset=offset + limit if more else None,
            generation=gen.number,
            warning=None
            if not behind
            else (
                f"the sources changed; this answer is from generation {gen.number} while"
                " the index syncs in the background (a later search sees the change)"
            ),
        )

    async def _query_vector(self, query: str) -> npt.NDArray[np.float32]:
        """The query's normalised vector; those of the latest queries are kept (the
        embedder is the index's for its whole life, so a repeated query's vector is
        the same), read-only."""
        memo = self._query_vectors
        found = memo.pop(query, None)
        if found is None:
            found = normalise_rows(await self._embed_query(query))[0]
            found.setflags(write=False)
            if len(memo) >= _QUERY_VECTORS:
                del memo[next(iter(memo))]
        memo[query] = found
        return found

    async def _embed_query(self, query: str) -> npt.NDArray[np.float32]:
        """The query's vector; a local embedder with ``embed_sync`` runs inline for short
        queries, where a thread hand-off would cost more than the hashing itself."""
        embedder = self.embedder
        assert embedder is not None
        embed_sync = getattr(embedder, "embed_sync", None)
        if callable(embed_sync) and len(query) <= _INLINE_QUERY_CHARS:
            vectors = np.asarray(embed_sync([query]), dtype=np.float32)
            if vectors.shape == (1, embedder.dims):
                return vectors
        return await embed_texts(embedder, [query], self.settings.embed_batch_size)
