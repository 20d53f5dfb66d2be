"""The built-in embedder: deterministic feature hashing, no model, no dependencies."""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

import attrs
import numpy as np
import numpy.typing as npt
import trio

from ..._workers import WorkerPool
from ._chunking import has_cjk, is_cjk
from ._stopwords import QUERY_STOPWORDS

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_SUFFIXES = (
    "ational",
    "ization",
    "fulness",
    "ousness",
    "iveness",
    "ations",
    "ingly",
    "ments",
    "ation",
    "ness",
    "ment",
    "ings",
    "edly",
    "ing",
    "ies",
    "ied",
    "ers",
    "est",
    "ed",
    "ly",
    "er",
    "es",
    "s",
)
# Function words carry no topic: the same list the lexical index drops from queries,
# applied to documents and queries alike (a vector is a bag of features).
_STOP = QUERY_STOPWORDS


def stem(word: str) -> str:
    """A light suffix-stripping stem (keeps at least three characters of the word)."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouls":
        word = word[:-1]  # running -> runn -> run
    return word


@functools.lru_cache(maxsize=1 << 16)
def _bucket(feature: str, dims: int) -> tuple[int, float]:
    # Cached: n-grams and words recur across texts, and hashing dominated embedding.
    h = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
    return h % dims, (1.0 if (h >> 63) & 1 else -1.0)


@attrs.frozen
class HashEmbedder:
    """Deterministic bag-of-features vectors by signed feature hashing.

    What it captures: lexical and morphological overlap. Each text is normalised
    (Unicode NFKC, case-folded), split into words, lightly stemmed; features are
    stemmed word unigrams, adjacent-word bigrams (stop words dropped), character
    3- and 4-grams of each word (so ``colour``/``colours``/``coloured`` and typos
    share mass) and character bigrams of CJK runs. Each feature is hashed into
    ``dims`` buckets with a hashed sign, weighted by ``1 + log(count)`` (sublinear, so
    a repeated word does not dominate) and down-weighted by type (unigrams 1.0,
    bigrams 0.3, n-grams 0.35); the vector is L2-normalised.

    What it does not capture: meaning. Synonyms (``car``/``automobile``),
    paraphrases, translations and world knowledge score as unrelated unless they
    share word forms; hash collisions add small noise between unrelated features.
    It is the default because it is deterministic, instant and needs nothing
    installed, and it complements BM25 with fuzzy, subword matching; configure a
    real model (HTTP or sentence-transformers) for semantic recall.

    ``workers``, when given, is where batches are computed (off the event loop).
    """

    dims: int = 384
    workers: WorkerPool | None = None
    id: str = "claw-hash"
    model: str = "hash-ngrams-v2"
    max_input_bytes: int = 64 * 1024
    # Hybrid weight of these vectors against BM25 when the settings leave it open: they
    # mostly restate lexical overlap, so they refine BM25 rather than lead it.
    fusion_vector_weight: float = 0.3

    def embed_sync(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed on the calling thread."""
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for row, text in enumerate(texts):
            acc: dict[int, float] = {}
            for feature, weight in self._features(text).items():
                col, sign = _bucket(feature, self.dims)
                acc[col] = acc.get(col, 0.0) + sign * weight
            if acc:
                out[row, list(acc)] = list(acc.values())
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        result: npt.NDArray[np.float32] = out / norms
        return result

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self.workers is not None:
            return await self.workers.run_sync(self.embed_sync, list(texts))
        await trio.lowlevel.checkpoint()
        return self.embed_sync(texts)

    def _features(self, text: str) -> dict[str, float]:
        norm = unicodedata.normalize("NFKC", text).casefold()
        counts: Counter[str] = Counter()
        kept: list[str] = []
        for token in _TOKEN.findall(norm):
            if has_cjk(token):
                chars = [ch for ch in token if is_cjk(ch)]
                if len(chars) == 1:
                    counts["c:" + chars[0]] += 1
                for i in range(len(chars) - 1):
                    counts["c:" + chars[i] + chars[i + 1]] += 1
                continue
            unigram, grams = _word_features(token)
            if unigram is not None:
                kept.append(unigram)
            counts.update(grams)
        counts.update(kept)
        for a, b in itertools.pairwise(kept):
            counts["b:" + a[2:] + " " + b[2:]] += 1
        return {f: _TYPE_WEIGHT[f[0]] * (1.0 + math.log(c)) for f, c in counts.items()}


_TYPE_WEIGHT = {"w": 1.0, "c": 1.0, "b": 0.3, "g": 0.35}


@functools.lru_cache(maxsize=1 << 15)
def _word_features(word: str) -> tuple[str | None, tuple[str, ...]]:
    """A word's unigram feature (``None`` for a stop word) and its character n-grams."""
    if word in _STOP:
        return None, ()
    unigram = "w:" + stem(word)
    if len(word) < 4:
        return unigram, ()
    padded = f"<{word}>"
    grams = tuple(f"g{n}:" + padded[i : i + n] for n in (3, 4) for i in range(len(padded) - n + 1))
    return unigram, grams
