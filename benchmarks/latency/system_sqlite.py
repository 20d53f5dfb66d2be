"""The SQLite peers: FTS5 BM25 plus sqlite-vec KNN (``fts5+vec``) or plus a numpy cosine
scan over float32 blobs read from SQLite for every query (``fts5+scan``, the fallback when
no vector extension loads), merged with the same weights. apsw's SQLite can load
extensions.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import peak_rss_mb
from benchmarks._corpus import DIMS

from ._shared import _dir_bytes, _load, _merge, _top, claw_candidates
from ._worker import send, serve_commands


def _fts_match(query: str) -> str:
    terms = ['"' + t.replace('"', '""') + '"' for t in query.split()]
    return " OR ".join(terms)


def _connect(path: Path, *, extension: bool) -> Any:
    import apsw

    conn = apsw.Connection(str(path))
    if extension:
        import sqlite_vec

        conn.enable_load_extension(True)
        conn.load_extension(sqlite_vec.loadable_path())
    return conn


def run_sqlite(root: Path, work: Path, *, vec: bool) -> None:
    name = "fts5+vec" if vec else "fts5+scan"
    try:
        conn = _connect(work / "peer.db", extension=vec)
    except Exception as exc:  # the point is to report why the peer could not run
        send({"error": f"{type(exc).__name__}: {exc}"})
        return
    texts, qs, vecs, qvecs = _load(root)
    t0 = time.perf_counter()
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE VIRTUAL TABLE fts USING fts5(text, tokenize='porter')")
    conn.execute("CREATE TABLE chunks(id INTEGER PRIMARY KEY, text TEXT, embedding BLOB)")
    if vec:
        conn.execute(f"CREATE VIRTUAL TABLE vec USING vec0(embedding float[{DIMS}])")
    with conn:
        for i, text in enumerate(texts):
            blob = vecs[i].tobytes()
            conn.execute("INSERT INTO fts(rowid, text) VALUES (?, ?)", (i, text))
            conn.execute("INSERT INTO chunks VALUES (?, ?, ?)", (i, text, blob))
            if vec:
                conn.execute("INSERT INTO vec(rowid, embedding) VALUES (?, ?)", (i, blob))
    build = time.perf_counter() - t0
    size = sum(_dir_bytes(p) for p in work.glob("peer.db*"))
    candidates = claw_candidates(len(texts))
    local = threading.local()

    def cursor() -> Any:
        c = getattr(local, "conn", None)
        if c is None:
            c = local.conn = _connect(work / "peer.db", extension=vec)
        return c

    def search(i: int) -> object:
        c = cursor()
        text = [
            (int(r), -float(s))
            for r, s in c.execute(
                "SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT ?",
                (_fts_match(qs[i]), candidates),
            )
        ]
        if vec:
            near = [
                (int(r), 1.0 - float(d) ** 2 / 2.0)  # L2 distance of unit vectors -> cosine
                for r, d in c.execute(
                    "SELECT rowid, distance FROM vec WHERE embedding MATCH ? AND k = ?",
                    (qvecs[i].tobytes(), candidates),
                )
            ]
        else:
            rows = list(c.execute("SELECT id, embedding FROM chunks"))
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            m = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(-1, DIMS)
            sims = m @ qvecs[i]
            near = [(int(ids[j]), float(sims[j])) for j in _top(sims, candidates)]
        return _merge(text, near)

    serve_commands({name: search}, len(qs), {"build_s": build})
    send({"extra": {name: {"index_mb": size / 2**20, "rss_mb": peak_rss_mb()}}})
