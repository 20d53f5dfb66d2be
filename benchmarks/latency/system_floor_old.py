"""The floor of the earlier benchmark, kept so that old and new ratios come from one run.

One thread, queries parsed with the default tokenizer before timing, no cosine for
lexical-only candidates.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from benchmarks._common import peak_rss_mb

from ._shared import OLD_CANDIDATES, _dir_bytes, _load, _merge, _top
from ._worker import send, serve_commands
from .system_floor import _fill


def run_floor_old(root: Path, work: Path) -> None:
    import tantivy

    texts, qs, vecs, qvecs = _load(root)
    t0 = time.perf_counter()
    sb = tantivy.SchemaBuilder()
    sb.add_unsigned_field("id", stored=False, indexed=False, fast=True)
    sb.add_text_field("text", stored=False)
    schema = sb.build()
    index = tantivy.Index(schema, path=str(work))
    searcher = _fill(index, texts, "id")
    matrix = np.ascontiguousarray(vecs, dtype=np.float32)
    build = time.perf_counter() - t0
    parsed = [index.parse_query(q, ["text"]) for q in qs]

    def search(i: int) -> object:
        hits = searcher.search(parsed[i], limit=OLD_CANDIDATES).hits
        ids = searcher.fast_field_values("id", [a for _, a in hits]) if hits else []
        sims = matrix @ qvecs[i]
        top = _top(sims, OLD_CANDIDATES)
        return _merge(
            [(int(d), float(s)) for (s, _), d in zip(hits, ids, strict=True)],
            [(int(j), float(sims[j])) for j in top],
        )

    serve_commands({"floor-old": search}, len(qs), {"build_s": build})
    size = _dir_bytes(work) + matrix.nbytes
    send({"extra": {"floor-old": {"index_mb": size / 2**20, "rss_mb": peak_rss_mb()}}})
