"""Lexical building blocks over tantivy: the analysers, CJK bigrams, filters, BM25 search.

Memory plugins index text with these so that documents and queries are analysed alike
everywhere: stemmed English (tantivy's simple tokenizer, long tokens dropped,
lower-cased), CJK text as overlapping bigrams in a field of its own, queries without
function words (:data:`QUERY_STOPWORDS`, falling back to the short standard list for a
query made only of them). A document needs a ``u64`` fast field ``key`` for
:func:`lexical_search` to name it. tantivy's bare ``ValueError``s are wrapped into
:class:`~claw.plugin_sdk.LexicalIndexError`.
"""

from __future__ import annotations

from collections.abc import Iterable

import tantivy

from ..._errors import LexicalIndexError
from ._chunking import has_cjk, is_cjk
from ._stopwords import QUERY_STOPWORDS

ANALYZER = "claw_en"


def cjk_bigrams(text: str) -> list[str]:
    """Overlapping bigrams of every CJK run (a lone CJK character is its own token).

    tantivy's simple tokenizer keeps a whole CJK run as one token, which would only
    match identical runs; bigrams make CJK text searchable by its parts.
    """
    grams: list[str] = []
    if not has_cjk(text):
        return grams
    run: list[str] = []

    def flush() -> None:
        if len(run) == 1:
            grams.append(run[0])
        grams.extend(run[i] + run[i + 1] for i in range(len(run) - 1))
        run.clear()

    for ch in text:
        if is_cjk(ch) and ch.isalnum():
            run.append(ch)
        elif run:
            flush()
    if run:
        flush()
    return grams


def document_analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def query_analyzer() -> tantivy.TextAnalyzer:
    # Queries drop function words (documents keep them, so phrases still index).
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.custom_stopword(sorted(QUERY_STOPWORDS)))
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def fallback_query_analyzer() -> tantivy.TextAnalyzer:
    # For a query made only of function words: the short standard list.
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stopword("english"))
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def any_of(schema: tantivy.Schema, field: str, values: Iterable[str]) -> tantivy.Query:
    """A filter clause matching documents whose raw ``field`` is one of ``values``.

    It scores zero, so filtering never shifts BM25 scores, and it is built from term
    queries, which intersect lazily with the text clauses (a term-set query would build
    a bitset over every matching document of the index on each search).
    """
    terms = [tantivy.Query.term_query(schema, field, v) for v in sorted(values)]
    if not terms:
        return tantivy.Query.empty_query()
    query = (
        terms[0]
        if len(terms) == 1
        else tantivy.Query.boolean_query([(tantivy.Occur.Should, t) for t in terms])
    )
    return tantivy.Query.const_score_query(query, 0.0)


def lexical_search(
    searcher: tantivy.Searcher, query: tantivy.Query, limit: int
) -> list[tuple[int, float]]:
    """``(chunk key, BM25 score)`` of the best ``limit`` documents, best first.

    ``limit`` is capped at the number of documents: tantivy allocates room for
    ``limit`` hits up front, and a deep page (offset plus page, times the candidate
    multiplier) must not turn into an allocation no process survives.
    """
    limit = min(limit, int(searcher.num_docs))
    if limit < 1:
        return []
    try:
        hits = searcher.search(query, limit=limit, count=False).hits
        if not hits:
            return []
        keys = searcher.fast_field_values("key", [addr for _, addr in hits])
    except ValueError as exc:
        raise LexicalIndexError(f"lexical search failed: {exc}") from exc
    return [(int(k), float(s)) for (s, _), k in zip(hits, keys, strict=True) if k is not None]
