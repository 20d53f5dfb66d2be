"""Memory Core settings: one frozen value, validated on construction."""

from __future__ import annotations

from typing import Literal

import attrs

from claw.plugin_sdk import ConfigError

#: The default of :attr:`MemoryCoreSettings.approximate_rows`.
DEFAULT_APPROXIMATE_ROWS = 500_000

SourceKind = Literal["memory", "sessions"]
SearchMode = Literal["hybrid", "lexical", "vector"]

SOURCE_KINDS: tuple[SourceKind, ...] = ("memory", "sessions")


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"memory_core.{name}", f"must be positive, got {value!r}", value=value)


def _unit(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(
            f"memory_core.{name}", f"must be between 0 and 1, got {value!r}", value=value
        )


@attrs.frozen
class MemoryCoreSettings:
    """Everything that tunes indexing and retrieval.

    Chunking, the source set and the transcript document shape are part of the index
    identity: changing them rebuilds the index into a new generation on the next open.
    Ranking settings apply per search and can change freely.
    """

    sources: tuple[SourceKind, ...] = ("memory",)
    extra_paths: tuple[str, ...] = ()
    chunk_tokens: int = 400
    chunk_overlap: int = 80
    chars_per_token: int = 4
    max_file_bytes: int = 2 * 1024 * 1024
    # Transcript documents: turns per chunk and neighbouring turns in the context field.
    transcript_turns_per_chunk: int = 1
    transcript_context_turns: int = 2
    # Ranking. context_boost weighs the transcript context field (neighbouring turns)
    # against the turn's own text; 0.8 measured best on LoCoMo turn recall (lexical
    # recall_any@10 0.705 at 0.35, 0.736 at 0.8, 0.733 at 1.0).
    # Hybrid fusion weights; ``None`` takes the embedder's own hint (an embedder with a
    # ``fusion_vector_weight`` attribute, as the built-in hash embedder has), else 0.5.
    # Measured on LoCoMo turn recall_any@10: MiniLM 0.776 at 0.7/0.3, 0.800 at 0.5/0.5;
    # the hash embedder (lexical overlap, like BM25) 0.758 at 0.7/0.3, 0.784 at 0.3/0.7.
    vector_weight: float | None = None
    text_weight: float | None = None
    # What a cosine means alone (_ranking.meaning_scores): the cosine below which a
    # text is taken to be unrelated to the query, and the one from which it is taken
    # to be about it. ``None`` takes the embedder's own (``similarity_floor`` and
    # ``similarity_match`` attributes, as claw-static has); without either a hit
    # found only by its vector scores what hybrid fusion gives it.
    similarity_floor: float | None = None
    similarity_match: float | None = None
    context_boost: float = 0.8
    far_context_boost: float = 0.4
    speaker_boost: float = 1.0
    # The session date of a transcript turn as a field of its own ("8 May 2023").
    # Measured on the LoCoMo tuning split, hash hybrid, turn recall_any@1 / @10:
    # 0.459 / 0.832 without it, 0.461 / 0.834 at 0.3, 0.464 / 0.836 at 0.6 and 1.0,
    # 0.462 / 0.837 at 2.5.
    date_boost: float = 0.6
    path_boost: float = 0.5
    # Second stage: the share of the query's terms (weighted by IDF) that a candidate's
    # own text covers, that it and its adjacent turns cover, and that it and the turns
    # up to two away cover (a transcript turn's terms include its session date).
    # Measured on the LoCoMo tuning split (benchmarks/README.md): hash hybrid turn
    # recall_any@1 0.374 -> 0.458 and @10 0.789 -> 0.829 at 0.3 / 0.5 / 0.2.
    coverage_weight: float = 0.3
    near_coverage_weight: float = 0.5
    far_coverage_weight: float = 0.2
    # Second stage, for a question that asks when ("When did ...", "what year"): a
    # bonus for a transcript turn whose own text states a time ("yesterday", "last
    # Friday", "in June", "2022"), as 84% of the evidence turns of such questions do
    # on the LoCoMo tuning split (19% of all turns). Tuning split, hash hybrid, turn
    # recall_any@1 / @10 / session @5: 0.464 / 0.836 / 0.928 without it, 0.472 / 0.837
    # / 0.925 at 0.1, 0.472 / 0.841 / 0.925 at 0.25, 0.471 / 0.839 / 0.928 at 0.3,
    # 0.466 / 0.838 / 0.926 at 0.4, 0.466 / 0.834 / 0.926 at 0.5.
    when_weight: float = 0.3
    # Second stage: the bonus for a chunk dated inside the span a relative date in the
    # query points at ("ten days ago", "last Saturday": claw_memory/_when.py), measured
    # from the search's time. LongMemEval tuning, default, session recall_any@1 / @10,
    # turn @1 / @10: 0.887 / 0.983, 0.555 / 0.912 without; 0.887 / 0.983, 0.555 / 0.912
    # at 0.3; 0.895 / 0.992, 0.559 / 0.920 at 0.5; 0.891 / 0.996, 0.559 / 0.920 at 1;
    # 0.895 / 0.992, 0.559 / 0.916 at 2 and 4. (Its haystacks put ten or more sessions
    # within a day of each evidence session, so a date narrows, but rarely decides.)
    window_weight: float = 0.5
    # Priors on what a transcript turn is (_ranking.priors): the factor on an
    # assistant's turn, and on a turn that only echoes the query (a question whose
    # content words are the query's: "Who is the release manager?" asked again answers
    # nothing, the memory file or the reply does). A query that asks what the
    # assistant said ("remind me of the restaurant you recommended") turns the first
    # around: the user's turns count assistant_weight and the reply counts 1
    # (LongMemEval tuning, default: turn recall_any@1 0.500 -> 0.555, @10 0.899 -> 0.912;
    # its questions about a reply 0.185 -> 0.667 at @1; no LoCoMo question asks so).
    # The factor, swept on the LongMemEval tuning split (LoCoMo's speakers are people,
    # so no LoCoMo figure moves), default, turn recall_any@1 / @5 / @10, session @5 /
    # @10: 0.613 / 0.870 / 0.929, 0.975 / 0.996 at 0.8; 0.613 / 0.874 / 0.937, 0.975 /
    # 1.000 at 0.75; 0.613 / 0.887 / 0.941, 0.975 / 1.000 at 0.7 (0.72 and 0.68 alike);
    # 0.613 / 0.891 / 0.950, 0.971 / 1.000 at 0.65; 0.613 / 0.887 / 0.950, 0.971 / 0.996
    # at 0.6. 0.7 is the middle of the plateau where no figure falls.
    assistant_weight: float = 0.7
    echo_weight: float = 0.5
    candidate_multiplier: int = 4
    # First-stage candidates per retriever: at least candidate_multiplier x the page, and
    # at least candidate_growth per 1,000 rows of the index, so the cut keeps agreeing
    # with exhaustive fusion as the index grows (benchmarks/README.md: 400 candidates for
    # a page of 10 agree on 0.987 of the top 10 at 100k chunks for 4% more p50, the
    # page-only 40 on 0.849). Linear in rows, as the matrix product is: the candidates'
    # extra cost stays a share of the search (a square-root depth, 125 at 10k, doubled
    # the 10k p50). It stops growing at 300k rows (1,200 candidates; _ranking.GROWTH_ROWS):
    # at 1M rows 1,000 already agree on 0.994, 2,000 on 0.999. 0 turns the growth off.
    candidate_growth: float = 4.0
    # From this many rows up, the vector stage scans a sign-bit sketch of the rows and
    # scores only the rows it ranks nearest (48 bytes a row read per search instead of
    # the whole float32 matrix: 1.5 GB at 1M rows of 384 dimensions). Approximate: at
    # 1M synthetic rows the hybrid top 10 agreed with exhaustive fusion on 0.990, a
    # vector-only top 10 held 0.77 of the exact one (benchmarks/README.md). 0 keeps the
    # vector stage exact at every size.
    approximate_rows: int = DEFAULT_APPROXIMATE_ROWS
    min_score: float = 0.35
    max_results: int = 6
    temporal_decay: bool = False
    half_life_days: float = 30.0
    mmr: bool = False
    mmr_lambda: float = 0.7
    # Operation.
    sync_on_open: bool = True
    sync_on_search: bool = True
    embedding_cache_max_entries: int = 50_000
    embed_batch_size: int = 64
    read_max_chars: int = 64_000

    def __attrs_post_init__(self) -> None:
        for kind in self.sources:
            if kind not in SOURCE_KINDS:
                raise ConfigError(
                    "memory_core.sources",
                    f"unknown source {kind!r}; use 'memory' and/or 'sessions'",
                    value=kind,
                )
        for name in (
            "chunk_tokens",
            "chars_per_token",
            "max_file_bytes",
            "transcript_turns_per_chunk",
            "candidate_multiplier",
            "max_results",
            "half_life_days",
            "embedding_cache_max_entries",
            "embed_batch_size",
            "read_max_chars",
        ):
            _positive(name, getattr(self, name))
        if not 0 <= self.chunk_overlap < self.chunk_tokens:
            raise ConfigError(
                "memory_core.chunk_overlap",
                f"must be at least 0 and below chunk_tokens ({self.chunk_tokens}),"
                f" got {self.chunk_overlap}",
                value=self.chunk_overlap,
            )
        rows = self.approximate_rows
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise ConfigError(
                "memory_core.approximate_rows",
                f"must be a whole number of rows, at least 0 (0 keeps the vector stage exact"
                f" at every size), got {rows!r}",
                value=rows,
            )
        if self.transcript_context_turns < 0:
            raise ConfigError(
                "memory_core.transcript_context_turns",
                "must not be negative",
                value=self.transcript_context_turns,
            )
        for name in (
            "vector_weight",
            "text_weight",
            "min_score",
            "mmr_lambda",
            "assistant_weight",
            "echo_weight",
            "similarity_floor",
            "similarity_match",
        ):
            value = getattr(self, name)
            if value is not None:
                _unit(name, value)
        if (
            self.similarity_floor is not None
            and self.similarity_match is not None
            and not self.similarity_floor < self.similarity_match < 1.0
        ):
            raise ConfigError(
                "memory_core.similarity_match",
                "must lie above similarity_floor and below 1",
                value=self.similarity_match,
            )
        if (
            self.vector_weight is not None
            and self.text_weight is not None
            and self.vector_weight + self.text_weight <= 0
        ):
            raise ConfigError(
                "memory_core.vector_weight", "vector_weight + text_weight must be positive"
            )
        for name in (
            "context_boost",
            "far_context_boost",
            "speaker_boost",
            "date_boost",
            "path_boost",
        ):
            value = getattr(self, name)
            if not value >= 0:
                raise ConfigError(
                    f"memory_core.{name}",
                    f"boosts must not be negative, got {value!r}",
                    value=value,
                )
        for name in (
            "coverage_weight",
            "near_coverage_weight",
            "far_coverage_weight",
            "when_weight",
            "window_weight",
            "candidate_growth",
        ):
            value = getattr(self, name)
            if not value >= 0:
                raise ConfigError(
                    f"memory_core.{name}", f"must not be negative, got {value!r}", value=value
                )

    def similarity_calibration(self, embedder: object | None) -> tuple[float, float] | None:
        """``(floor, match)`` cosines of :attr:`similarity_floor` and
        :attr:`similarity_match`, each unset one the embedder's own; ``None`` when
        either is still unknown (the vector side alone then never outweighs fusion)."""
        floor = self.similarity_floor
        match = self.similarity_match
        if floor is None:
            floor = _hint(embedder, "similarity_floor")
        if match is None:
            match = _hint(embedder, "similarity_match")
        if floor is None or match is None or not 0.0 <= floor < match < 1.0:
            return None
        return floor, match

    def fusion_weights(self, embedder: object | None) -> tuple[float, float]:
        """``(vector, text)`` weights of hybrid ranking with ``embedder``.

        A weight left unset is the complement of the other; both unset take the
        embedder's ``fusion_vector_weight`` hint, or an even split.
        """
        if self.vector_weight is not None and self.text_weight is not None:
            return self.vector_weight, self.text_weight
        if self.vector_weight is not None:
            return self.vector_weight, 1.0 - self.vector_weight
        if self.text_weight is not None:
            return 1.0 - self.text_weight, self.text_weight
        hint = getattr(embedder, "fusion_vector_weight", None)
        v = float(hint) if isinstance(hint, int | float) and 0.0 < hint <= 1.0 else 0.5
        return v, 1.0 - v


def _hint(embedder: object | None, name: str) -> float | None:
    value = getattr(embedder, name, None)
    return float(value) if isinstance(value, int | float) and 0.0 <= value < 1.0 else None
