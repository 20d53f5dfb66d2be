"""A seeded synthetic corpus: Zipf-distributed words, chunks of 80-120 words, vectors.

Words are random letter strings (a vocabulary of ``vocab`` distinct words); each chunk
draws its words from a Zipf distribution over the vocabulary, so a few words are in
nearly every chunk and most are rare, as in real text. A chunk's vector is the
normalised sum of fixed random vectors of its words, so vector similarity follows
word overlap the way a real embedding follows topical overlap. The same function
embeds queries, for claw and for every peer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

DIMS = 384
WORDS_PER_CHUNK = (80, 120)
# Every chunk is one line of 600-1190 characters: with ``CHUNK_TOKENS`` (4 characters
# per token) Memory Core's line windows then hold exactly one line each, so claw and
# the peers index the same units.
CHUNK_CHARS = (600, 1190)
CHUNK_TOKENS = 300


class Corpus:
    """Vocabulary, word vectors and the chunk and query generators of one seed."""

    def __init__(self, *, seed: int = 7, vocab: int = 50_000, zipf_s: float = 1.07) -> None:
        rng = np.random.default_rng(seed)
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        words: dict[str, None] = {}
        while len(words) < vocab:
            n = int(rng.integers(3, 10))
            words.setdefault("".join(rng.choice(letters, n)), None)
        self.words = list(words)
        self.word_id = {w: i for i, w in enumerate(self.words)}
        ranks = np.arange(1, vocab + 1, dtype=np.float64)
        p = ranks**-zipf_s
        self.cdf = np.cumsum(p / p.sum())
        self.vectors = rng.standard_normal((vocab, DIMS)).astype(np.float32)
        self.seed = seed

    def chunk_word_ids(self, count: int, *, seed_offset: int = 0) -> list[npt.NDArray[np.int64]]:
        rng = np.random.default_rng(self.seed * 1_000_003 + seed_offset)
        lengths = rng.integers(WORDS_PER_CHUNK[0], WORDS_PER_CHUNK[1] + 1, size=count)
        flat = np.searchsorted(self.cdf, rng.random(int(lengths.sum())))
        flat = np.minimum(flat, len(self.words) - 1)
        return np.split(flat, np.cumsum(lengths)[:-1])

    def chunk_texts(self, count: int, *, seed_offset: int = 0) -> list[str]:
        words = self.words
        lo, hi = CHUNK_CHARS
        out = []
        for ids in self.chunk_word_ids(count, seed_offset=seed_offset):
            chosen = [words[i] for i in ids]
            text = " ".join(chosen)
            k = 0
            while len(text) < lo:
                chosen.append(words[int(ids[k % len(ids)])])
                text = " ".join(chosen)
                k += 1
            while len(text) > hi:
                chosen.pop()
                text = " ".join(chosen)
            out.append(text)
        return out

    def queries(self, texts: Sequence[str], count: int, *, seed: int = 11) -> list[str]:
        """``count`` queries of 2-4 words taken from random chunks (skipping the 200
        most frequent words, as a person would not search for those)."""
        rng = np.random.default_rng(seed)
        out = []
        while len(out) < count:
            words = [
                w for w in texts[int(rng.integers(len(texts)))].split() if self.word_id[w] >= 200
            ]
            if len(words) < 4:
                continue
            k = int(rng.integers(2, 5))
            picks = rng.choice(len(words), size=k, replace=False)
            out.append(" ".join(words[i] for i in sorted(picks)))
        return out

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Normalised sums of word vectors; unknown words hash to a fixed vector row."""
        out = np.zeros((len(texts), DIMS), dtype=np.float32)
        vocab = len(self.words)
        for row, text in enumerate(texts):
            ids = []
            for w in text.split():
                i = self.word_id.get(w)
                if i is None:
                    i = (
                        int.from_bytes(
                            hashlib.blake2b(w.encode(), digest_size=4).digest(), "little"
                        )
                        % vocab
                    )
                ids.append(i)
            if ids:
                out[row] = self.vectors[np.asarray(ids)].sum(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        result: npt.NDArray[np.float32] = out / norms
        return result
