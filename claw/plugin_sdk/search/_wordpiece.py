"""BERT's uncased WordPiece tokenisation, in pure Python.

The static embedder (:mod:`._static_embedder`) looks up one vector per WordPiece token
of the vocabulary its table was distilled with (MiniLM's, BERT's uncased vocabulary),
so a text must be cut exactly as that model cut it: lower-cased, accents stripped,
split on white space and around punctuation, every CJK ideograph a word of its own,
then each word cut greedily into the longest pieces the vocabulary holds (``##`` marks
a piece inside a word), a word that cannot be cut becoming ``[UNK]``.

Words recur far more than texts do, so a word's pieces are cached: tokenising a chunk
is a regular-expression split and a dictionary lookup per word.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Sequence

import attrs

# A run of letters and digits, or one punctuation or symbol character: BERT's basic
# tokeniser splits around every character that is not a letter, digit or space, and
# counts ``_`` as punctuation.
_WORD = re.compile(r"[^\W_]+|[^\w\s]|_")
# BERT leaves a word longer than this as one [UNK].
MAX_WORD_CHARS = 100
# The characters BERT's tokeniser makes words of their own (its "Chinese characters":
# CJK ideographs, not kana or hangul).
_CHINESE = re.compile(
    "[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df"
    "\U0002a700-\U0002ceaf\U0002f800-\U0002fa1f]"
)
# Control and format characters BERT's tokeniser deletes before splitting.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\ufeff]")


def _strip_accents(word: str) -> str:
    decomposed = unicodedata.normalize("NFD", word)
    return "".join(c for c in decomposed if unicodedata.category(c) != "Mn")


@attrs.frozen(eq=False, repr=False)
class WordPiece:
    """A WordPiece tokeniser over ``vocab`` (token strings in id order).

    :meth:`ids` gives the token ids of a text without ``[CLS]``/``[SEP]``.
    """

    vocab: Sequence[str]
    unknown: str = "[UNK]"
    _ids: dict[str, int] = attrs.field(init=False, repr=False)
    _unknown_id: int = attrs.field(init=False, repr=False)
    #: The piece ids of one lower-cased word (cached per tokeniser: the vocabulary
    #: decides the pieces).
    word_ids: Callable[[str], tuple[int, ...]] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        ids = {token: i for i, token in enumerate(self.vocab)}
        if self.unknown not in ids:
            raise ValueError(f"the vocabulary has no unknown token {self.unknown!r}")
        object.__setattr__(self, "_ids", ids)
        object.__setattr__(self, "_unknown_id", ids[self.unknown])
        object.__setattr__(self, "word_ids", functools.lru_cache(maxsize=1 << 17)(self._word))

    def _word(self, word: str) -> tuple[int, ...]:
        """The piece ids of one lower-cased word (greedy longest match first)."""
        if not word.isascii():
            word = _strip_accents(word)
            if not word:
                return ()
        if len(word) > MAX_WORD_CHARS:
            return (self._unknown_id,)
        ids = self._ids
        out: list[int] = []
        start, end = 0, len(word)
        while start < end:
            stop = end
            found = -1
            while start < stop:
                piece = word[start:stop] if start == 0 else "##" + word[start:stop]
                found = ids.get(piece, -1)
                if found >= 0:
                    break
                stop -= 1
            if found < 0:
                return (self._unknown_id,)
            out.append(found)
            start = stop
        return tuple(out)

    def words(self, text: str) -> list[str]:
        """The words of ``text`` as BERT's basic tokeniser splits them (lower-cased)."""
        text = text.lower()
        if not text.isascii():
            text = _CHINESE.sub(r" \g<0> ", _CONTROL.sub("", text))
        return _WORD.findall(text)

    def ids(self, text: str) -> list[int]:
        """The token ids of ``text``."""
        word_ids = self.word_ids
        out: list[int] = []
        for w in self.words(text):
            out.extend(word_ids(w))
        return out
