"""The tantivy lexical index of one index generation.

Documents carry the chunk's text (stemmed English with CJK bigrams), its lexical
context (lower weight), its path, and raw fields for deletion and filtering. User
queries are never handed to tantivy's query parser: they are analysed with the same
analyser as the documents and turned into term queries, so operators and punctuation
are just text. tantivy's bare ``ValueError``s are wrapped into
:class:`LexicalIndexError`. ``IndexWriter`` is not safe for concurrent use: the index
serialises every writer call behind one lock, while searchers are shared freely.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs
import tantivy

from claw.plugin_sdk import LexicalIndexError
from claw.plugin_sdk.search import ANALYZER as _ANALYZER
from claw.plugin_sdk.search import any_of as _any_of
from claw.plugin_sdk.search import cjk_bigrams, has_cjk
from claw.plugin_sdk.search import document_analyzer as _analyzer
from claw.plugin_sdk.search import fallback_query_analyzer as _fallback_query_analyzer
from claw.plugin_sdk.search import query_analyzer as _query_analyzer

from ._records import ChunkRecord

# The shape of a lexical document (fields and what the transcript context holds).
# It is part of the index identity: a change rebuilds the index on the next open.
DOCUMENT_VERSION = 3
_WRITER_HEAP = 32_000_000
_CONTEXT_MARK = "\x1e"


@attrs.frozen
class LexicalContext:
    """What a chunk's lexical document holds besides its own text.

    ``speakers`` are who wrote a transcript chunk's turns (a field of its own, so that
    a query naming a person favours what that person said); ``near`` is the text of
    the adjacent turns and ``far`` that of turns further out, weighed less; ``date``
    is the day of a transcript turn in words ("8 May 2023"), a field of its own so that
    a question naming a day or month finds that session's turns.
    A memory-file chunk has none of these.
    """

    speakers: str = ""
    near: str = ""
    far: str = ""
    date: str = ""

    def encode(self) -> str:
        """The one string the store keeps for the chunk (see :meth:`decode`)."""
        parts = (self.speakers, self.near, self.far, self.date)
        if not any(parts):
            return ""
        return _CONTEXT_MARK + _CONTEXT_MARK.join(parts)

    @classmethod
    def decode(cls, context: str) -> LexicalContext:
        """Parse :meth:`encode`'s output; any other string is all ``near`` context."""
        if not context.startswith(_CONTEXT_MARK):
            return cls(near=context)
        parts = context[1:].split(_CONTEXT_MARK)
        parts += [""] * (4 - len(parts))
        return cls(speakers=parts[0], near=parts[1], far=parts[2], date=parts[3])


_NO_CONTEXT = LexicalContext()

# Dates in a query: "May" next to a number is the month, not the modal verb the
# function words drop ("on May 23, 2023", "8 May"); an ordinal day ("4th October") is
# the number documents' dates hold.
_MONTH_MAY = re.compile(r"\b[Mm]ay(?=,?\s+\d)|(?<=\d\s)[Mm]ay\b")
_ORDINAL = re.compile(r"(?<=\d)(?:st|nd|rd|th)\b")
# Stands in for the month through the function-word filter (and the stemmer).
_MAY_TOKEN = "claw0may0month"


_DIGIT = re.compile(r"\d")


def _date_aware(text: str) -> str:
    # Both patterns need a digit: a query without one (most) is returned as it is.
    if _DIGIT.search(text) is None:
        return text
    return _ORDINAL.sub("", _MONTH_MAY.sub(" " + _MAY_TOKEN + " ", text))


# The query analysers hold no state between calls: one pair serves every index (and
# the index-time facts of a chunk, :mod:`claw_memory._records`, analyse as a query does).
_QUERY_ANALYZER = _query_analyzer()
_FALLBACK_QUERY_ANALYZER = _fallback_query_analyzer()


def query_terms(text: str, *, fallback: bool = True) -> list[str]:
    """The distinct analysed terms a query for ``text`` searches, in query order.

    A text made only of function words is analysed with the short standard list
    instead (``fallback=False``: it has no terms)."""
    analysed = _QUERY_ANALYZER.analyze(_date_aware(text))
    terms = list(dict.fromkeys("may" if t == _MAY_TOKEN else t for t in analysed))
    if terms or not fallback:
        return terms
    return list(dict.fromkeys(_FALLBACK_QUERY_ANALYZER.analyze(text)))


def _schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("cid", stored=True, tokenizer_name="raw")
    sb.add_unsigned_field("key", stored=False, indexed=False, fast=True)
    sb.add_text_field("prov", tokenizer_name="raw", index_option="basic")
    sb.add_text_field("source", tokenizer_name="raw", index_option="basic")
    sb.add_text_field("agent", tokenizer_name="raw", index_option="basic")
    sb.add_text_field("skey", tokenizer_name="raw", index_option="basic")
    sb.add_text_field("text", tokenizer_name=_ANALYZER, index_option="freq")
    sb.add_text_field("context", tokenizer_name=_ANALYZER, index_option="freq")
    sb.add_text_field("far", tokenizer_name=_ANALYZER, index_option="freq")
    sb.add_text_field("speaker", tokenizer_name=_ANALYZER, index_option="freq")
    sb.add_text_field("date", tokenizer_name=_ANALYZER, index_option="freq")
    sb.add_text_field("path", tokenizer_name=_ANALYZER, index_option="freq")
    sb.add_text_field("grams", tokenizer_name="whitespace", index_option="freq")
    return sb.build()


class LexicalIndex:
    """One tantivy index directory with its single writer (blocking; run on workers).

    ``writable=False`` opens it for searching only (no writer, no tantivy writer lock):
    how every process that does not hold the index's writer lease reads it.
    """

    def __init__(self, path: Path, *, writable: bool = True) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.schema = _schema()
        try:
            self._index = tantivy.Index(self.schema, path=str(path), reuse=True)
            self._index.register_tokenizer(_ANALYZER, _analyzer())
            self._index.config_reader(reload_policy="Manual")
            self._writer: tantivy.IndexWriter | None = (
                self._index.writer(heap_size=_WRITER_HEAP, num_threads=1) if writable else None
            )
        except ValueError as exc:
            raise LexicalIndexError(f"cannot open the lexical index at {path}: {exc}") from exc
        self._document_analyzer = _analyzer()

    @classmethod
    def open_reader(cls, path: Path) -> LexicalIndex:
        """Open an existing index for searching only (see the class docstring)."""
        if not (path / "meta.json").is_file():
            raise LexicalIndexError(f"there is no lexical index at {path}")
        return cls(path, writable=False)

    def _require_writer(self) -> tantivy.IndexWriter:
        if self._writer is None:
            raise LexicalIndexError("the lexical index writer is closed")
        return self._writer

    def replace(
        self,
        provenances: Iterable[str],
        documents: Sequence[tuple[ChunkRecord, str]],
        *,
        removed_ids: Iterable[str] = (),
        commit: bool = True,
    ) -> None:
        """Delete every document of ``provenances`` and those of ``removed_ids``, add
        ``documents``, and commit (``commit=False``: leave that to :meth:`commit`, so
        that a long first index given in batches commits once)."""
        writer = self._require_writer()
        try:
            for prov in provenances:
                writer.delete_documents_by_term("prov", prov)
            for cid in removed_ids:
                writer.delete_documents_by_term("cid", cid)
            for record, context in documents:
                writer.add_document(self._document(record, context))
            if commit:
                writer.commit()
        except ValueError as exc:
            writer.rollback()
            raise LexicalIndexError(f"lexical indexing failed: {exc}") from exc

    def commit(self) -> None:
        """Commit what :meth:`replace` staged."""
        writer = self._require_writer()
        try:
            writer.commit()
        except ValueError as exc:
            writer.rollback()
            raise LexicalIndexError(f"lexical indexing failed: {exc}") from exc

    def reset(self, documents: Sequence[tuple[ChunkRecord, str]]) -> None:
        """Replace the whole index content with ``documents``."""
        writer = self._require_writer()
        try:
            writer.delete_all_documents()
            for record, context in documents:
                writer.add_document(self._document(record, context))
            writer.commit()
        except ValueError as exc:
            writer.rollback()
            raise LexicalIndexError(f"lexical indexing failed: {exc}") from exc

    def _document(self, record: ChunkRecord, context: str) -> tantivy.Document:
        ctx = LexicalContext.decode(context) if context else _NO_CONTEXT
        doc = tantivy.Document(
            cid=record.chunk_id,
            prov=record.provenance,
            source=record.source,
            text=record.text,
            context=ctx.near,
            far=ctx.far,
            speaker=ctx.speakers,
            date=ctx.date,
            path=record.path,
            grams=" ".join(cjk_bigrams(record.text)),
        )
        doc.add_unsigned("key", record.key)
        if record.agent_id is not None:
            doc.add_text("agent", record.agent_id)
        if record.session_key is not None:
            doc.add_text("skey", record.session_key)
        return doc

    def searcher(self) -> tantivy.Searcher:
        """A searcher over the last commit; it stays valid (a snapshot) after later commits."""
        self._index.reload()
        return self._index.searcher()

    def num_docs(self) -> int:
        return int(self.searcher().num_docs)

    def close(self) -> None:
        """Let the writer finish merging and release it."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.wait_merging_threads()

    def query_terms(self, text: str, *, fallback: bool = True) -> list[str]:
        """The distinct analysed terms a query for ``text`` searches, in query order
        (:func:`query_terms`)."""
        return query_terms(text, fallback=fallback)

    def document_terms(self, text: str) -> list[str]:
        """``text`` analysed as a document's text is (every word kept, stemmed)."""
        return list(self._document_analyzer.analyze(text))

    def _filter_clauses(
        self,
        sources: frozenset[str] | None,
        agent_ids: frozenset[str] | None,
        session_keys: frozenset[str] | None,
    ) -> list[tuple[tantivy.Occur, tantivy.Query]]:
        """The clauses that keep a query to the documents a search filter lets through
        (none without a filter). They score zero (:func:`any_of`)."""
        schema = self.schema
        clauses: list[tuple[tantivy.Occur, tantivy.Query]] = []
        if sources is not None:
            clauses.append((tantivy.Occur.Must, _any_of(schema, "source", sources)))
        session_clauses: list[tuple[tantivy.Occur, tantivy.Query]] = []
        if agent_ids is not None:
            session_clauses.append((tantivy.Occur.Must, _any_of(schema, "agent", agent_ids)))
        if session_keys is not None:
            session_clauses.append((tantivy.Occur.Must, _any_of(schema, "skey", session_keys)))
        if session_clauses:
            # Memory-file chunks pass agent/session filters; transcript chunks must match.
            clauses.append(
                (
                    tantivy.Occur.Must,
                    tantivy.Query.boolean_query(
                        [
                            (tantivy.Occur.Should, _any_of(schema, "source", {"memory"})),
                            (tantivy.Occur.Should, tantivy.Query.boolean_query(session_clauses)),
                        ]
                    ),
                )
            )
        return clauses

    def text_term_query(
        self,
        term: str,
        *,
        sources: frozenset[str] | None,
        agent_ids: frozenset[str] | None,
        session_keys: frozenset[str] | None,
    ) -> tantivy.Query:
        """The documents whose text holds the analysed ``term`` and that a search
        filter lets through: tantivy intersects the term's postings with the filter's
        (the smaller leads, skipping through the other), so the documents of other
        agents are never collected."""
        try:
            query = tantivy.Query.term_query(self.schema, "text", term)
            clauses = self._filter_clauses(sources, agent_ids, session_keys)
            if not clauses:
                return query
            return tantivy.Query.boolean_query([(tantivy.Occur.Must, query), *clauses])
        except ValueError as exc:
            raise LexicalIndexError(f"cannot build a lexical query for {term!r}: {exc}") from exc

    def build_query(
        self,
        text: str,
        *,
        context_boost: float,
        far_context_boost: float = 0.0,
        speaker_boost: float = 0.0,
        date_boost: float = 0.0,
        path_boost: float,
        sources: frozenset[str] | None,
        agent_ids: frozenset[str] | None,
        session_keys: frozenset[str] | None,
        terms: Sequence[str] | None = None,
    ) -> tantivy.Query | None:
        """A term-level OR query for ``text``, or ``None`` when it has no searchable terms.

        Nothing in ``text`` is interpreted: quotes, ``AND``, ``-``, ``field:`` and
        brackets are tokenised away like any punctuation. ``terms``, when given, are
        ``query_terms(text)`` already computed (ranking needs them again).
        """
        if terms is None:
            terms = self.query_terms(text)
        grams = list(dict.fromkeys(cjk_bigrams(text)))
        schema = self.schema
        should: list[tuple[tantivy.Occur, tantivy.Query]] = []
        try:
            for term in terms:
                if has_cjk(term):
                    continue  # CJK runs are matched through their bigrams
                should.append(
                    (tantivy.Occur.Should, tantivy.Query.term_query(schema, "text", term))
                )
                for field, boost in (
                    ("context", context_boost),
                    ("far", far_context_boost),
                    ("speaker", speaker_boost),
                    ("date", date_boost),
                    ("path", path_boost),
                ):
                    if boost > 0:
                        should.append(
                            (
                                tantivy.Occur.Should,
                                tantivy.Query.boost_query(
                                    tantivy.Query.term_query(schema, field, term), boost
                                ),
                            )
                        )
            should.extend(
                (tantivy.Occur.Should, tantivy.Query.term_query(schema, "grams", g)) for g in grams
            )
            if not should:
                return None
            clauses: list[tuple[tantivy.Occur, tantivy.Query]] = [
                (tantivy.Occur.Must, tantivy.Query.boolean_query(should)),
                *self._filter_clauses(sources, agent_ids, session_keys),
            ]
            return tantivy.Query.boolean_query(clauses)
        except ValueError as exc:
            raise LexicalIndexError(f"cannot build a lexical query for {text!r}: {exc}") from exc
