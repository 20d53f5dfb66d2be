"""The durable owner of Memory Core: one SQLite database (WAL) per index directory.

It holds the index identity and generation number, every source's cheap stat and
hash (or skip reason), every chunk with its provenance and float32 vector, forget
tombstones, the embedding cache and the lexical journal (``lexical_pending``: the
provenances whose tantivy documents may lag behind SQLite after a crash). All
methods block; the index calls them on the worker pool, one at a time (a lock makes
a second caller wait: a sync reads the cache for one batch while it stores another).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import operator
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import numpy as np
import numpy.typing as npt

from claw.plugin_sdk import enter_wal, storage_problem

from ._errors import IndexCorruptError, IndexStoreError
from ._records import ChunkRecord, PreparedChunk
from ._settings import SourceKind

SCHEMA_VERSION = 1
# SQLite's page cache per connection, KiB.
_CACHE_KIB = 65_536
#: How long a statement waits for another connection's lock before SQLite says "locked".
_BUSY_TIMEOUT_MS = 5_000
#: How many times a purge tries to empty the write-ahead log (about 13 s of pauses).
_CHECKPOINT_TRIES = 50

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    provenance TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    path TEXT NOT NULL,
    size INTEGER,
    mtime_ns INTEGER,
    token TEXT,
    hash TEXT,
    skip_reason TEXT
);
CREATE TABLE IF NOT EXISTS chunks (
    id TEXT PRIMARY KEY,
    key INTEGER NOT NULL,
    provenance TEXT NOT NULL,
    source TEXT NOT NULL,
    path TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    hash TEXT NOT NULL,
    revision TEXT NOT NULL,
    text TEXT NOT NULL,
    context TEXT NOT NULL,
    agent_id TEXT,
    session_key TEXT,
    session_id TEXT,
    entry_ids TEXT NOT NULL,
    ts REAL,
    vector BLOB
);
CREATE INDEX IF NOT EXISTS chunks_by_provenance ON chunks (provenance);
CREATE TABLE IF NOT EXISTS tombstones (
    id TEXT PRIMARY KEY,
    provenance TEXT NOT NULL,
    path TEXT NOT NULL,
    forgotten_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS embedding_cache (
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    vector BLOB NOT NULL,
    used INTEGER NOT NULL,
    PRIMARY KEY (provider, model, text_hash)
);
CREATE INDEX IF NOT EXISTS embedding_cache_by_use ON embedding_cache (used);
CREATE TABLE IF NOT EXISTS lexical_pending (provenance TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS forgets (
    id TEXT PRIMARY KEY,
    criteria TEXT NOT NULL,
    paths TEXT NOT NULL,
    chunks INTEGER NOT NULL,
    at REAL NOT NULL,
    by TEXT
);
CREATE TABLE IF NOT EXISTS forget_chunks (
    forget_id TEXT NOT NULL,
    chunk_id TEXT NOT NULL,
    PRIMARY KEY (forget_id, chunk_id)
);
"""

_CHUNK_COLUMNS = (
    "id, key, provenance, source, path, start_line, end_line, hash, revision, text, context,"
    " agent_id, session_key, session_id, entry_ids, ts, vector"
)


@attrs.frozen
class IndexForget:
    """A forget of the index (a path, a session, a source): what it hid, when, by whom."""

    id: str
    criteria: Mapping[str, str]
    paths: tuple[str, ...]
    chunks: int
    at: float
    by: Mapping[str, Any] | None = None


@attrs.frozen
class SourceState:
    """What the store remembers about one source, for cheap change detection."""

    provenance: str
    source: SourceKind
    path: str
    size: int | None
    mtime_ns: int | None
    token: str | None
    hash: str | None
    skip_reason: str | None


@attrs.frozen
class SourceChange:
    """A replacement of one source's chunks (``chunks`` empty and ``state`` None: removal).

    ``removed`` None replaces every chunk of the source with ``chunks``; a set removes
    those chunk ids only and adds ``chunks``, keeping the source's other chunks as
    they are (a transcript that grew: its earlier turns' chunks do not change).
    """

    provenance: str
    state: SourceState | None
    chunks: Sequence[PreparedChunk]
    vectors: npt.NDArray[np.float32] | None
    removed: frozenset[str] | None = None


# The record fields stored before ``context``, in column order (one C call a chunk).
_LEADING_COLUMNS = operator.attrgetter(
    "chunk_id",
    "key",
    "provenance",
    "source",
    "path",
    "start_line",
    "end_line",
    "content_hash",
    "revision",
    "text",
)


def _row_to_record(row: Sequence[Any]) -> ChunkRecord:
    return ChunkRecord(
        chunk_id=row[0],
        key=row[1],
        provenance=row[2],
        source=row[3],
        path=row[4],
        start_line=row[5],
        end_line=row[6],
        content_hash=row[7],
        revision=row[8],
        text=row[9],
        agent_id=row[11],
        session_key=row[12],
        session_id=row[13],
        entry_ids=tuple(json.loads(row[14])),
        timestamp=row[15],
    )


T = TypeVar("T")


class _Txn:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back if the block raises."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self._db.execute("COMMIT")
        elif self._db.in_transaction:
            # SQLite may have rolled back already (disk full, I/O error): a second
            # ROLLBACK would then fail and hide the error that matters.
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")


def store_error(path: Path, exc: sqlite3.Error) -> IndexStoreError:
    """A SQLite failure as an error naming the database file (corruption recognised), and
    saying what is wrong when the directory is read-only or its disk is full (SQLite says
    only "unable to open database file" or "database or disk is full")."""
    name = getattr(exc, "sqlite_errorname", "")
    corrupt = name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or type(exc) is sqlite3.DatabaseError
    if corrupt:
        return IndexCorruptError(f"Memory Core index database {path}: {exc}")
    problem = storage_problem(path, exc)
    if problem is not None:
        return IndexStoreError(f"Memory Core index database {path}: {problem} (SQLite: {exc})")
    return IndexStoreError(f"Memory Core index database {path}: {exc}")


def _naming_the_file(fn: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(fn)
    def wrapper(self: Store, *args: Any, **kwargs: Any) -> T:
        try:
            return fn(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise store_error(self.path, exc) from exc

    return wrapper


def _one_at_a_time(fn: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(fn)
    def wrapper(self: Store, *args: Any, **kwargs: Any) -> T:
        with self._lock:
            return fn(self, *args, **kwargs)

    return wrapper


class Store:
    """The SQLite database of one index directory (one caller at a time: every method
    holds the store's lock, so a transaction is never interleaved with another call)."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.RLock()
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        try:
            # Another process (a second worker of `claw serve`) may open or write the
            # same index at this moment: wait for its lock rather than fail at once.
            self._db.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            enter_wal(self._db)
            self._db.execute("PRAGMA synchronous=NORMAL")
            # A batch of a first sync writes some 20 MB of chunks into two b-trees and an
            # index; with SQLite's default 2 MB page cache it spills dirty pages to the
            # WAL in the middle of the transaction and reads them back (64 MiB here).
            self._db.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
            self._db.executescript(_SCHEMA)
            self._adopt_tombstones()
        except BaseException:
            # Not left to the garbage collector: an open file keeps its directory busy.
            self._db.close()
            raise

    def _adopt_tombstones(self) -> None:
        """Give tombstones written before forgets were recorded a forget each (one per
        path), so that every hidden chunk is listed and can be brought back."""
        orphans = self._db.execute(
            "SELECT path, provenance, MIN(forgotten_at), COUNT(*) FROM tombstones"
            " WHERE id NOT IN (SELECT chunk_id FROM forget_chunks) GROUP BY path, provenance"
        ).fetchall()
        if not orphans:
            return
        with self._transaction():
            for path, prov, at, count in orphans:
                fid = hashlib.sha256(f"legacy\x1f{prov}".encode()).hexdigest()[:12]
                self._db.execute(
                    "INSERT OR IGNORE INTO forgets (id, criteria, paths, chunks, at, by)"
                    " VALUES (?, ?, ?, ?, ?, NULL)",
                    (fid, json.dumps({"path": path}), json.dumps([path]), count, at),
                )
                self._db.execute(
                    "INSERT OR IGNORE INTO forget_chunks (forget_id, chunk_id)"
                    " SELECT ?, id FROM tombstones WHERE provenance = ?"
                    " AND id NOT IN (SELECT chunk_id FROM forget_chunks)",
                    (fid, prov),
                )

    def close(self) -> None:
        self._db.close()

    # -- meta ---------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set_meta(self, key: str, value: str) -> None:
        self._db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def ensure_identity(self, identity: str) -> tuple[int, bool]:
        """Return the index generation for ``identity``, starting a new one on mismatch.

        A new generation drops sources, chunks and the lexical journal in one
        transaction (tombstones and the embedding cache survive); the caller then
        builds a fresh lexical index for it. Returns ``(generation, rebuilt)``.
        """
        current = self.get_meta("identity")
        gen = int(self.get_meta("generation") or "0")
        if current == identity and gen > 0:
            return gen, False
        with self._transaction():
            self._db.execute("DELETE FROM chunks")
            self._db.execute("DELETE FROM sources")
            self._db.execute("DELETE FROM lexical_pending")
            self._set_meta("identity", identity)
            self._set_meta("generation", str(gen + 1))
            self._set_meta("schema_version", str(SCHEMA_VERSION))
            self._bump_version()
        return gen + 1, True

    def version(self) -> int:
        """How many changes of the indexed content were committed (sources, chunks,
        identity): a published generation records the version it reflects, so a writer
        taking the lease over sees what its predecessor committed but never published."""
        return int(self.get_meta("version") or "0")

    def _bump_version(self) -> None:
        self._set_meta("version", str(self.version() + 1))

    def _transaction(self) -> _Txn:
        """``with store._transaction():`` runs the block in one immediate transaction."""
        return _Txn(self._db)

    # -- sources and chunks -------------------------------------------------------
    def load_sources(self) -> dict[str, SourceState]:
        rows = self._db.execute(
            "SELECT provenance, source, path, size, mtime_ns, token, hash, skip_reason FROM sources"
        )
        return {r[0]: SourceState(*r) for r in rows}

    def iter_chunks(
        self, batch: int = 8192
    ) -> Iterator[tuple[list[ChunkRecord], list[bytes | None]]]:
        """Every chunk record with its vector blob, ordered by provenance then line, a
        bounded batch at a time (a million chunks are never all in memory)."""
        cursor = self._db.execute(
            f"SELECT {_CHUNK_COLUMNS} FROM chunks ORDER BY provenance, start_line, id"
        )
        while rows := cursor.fetchmany(batch):
            yield [_row_to_record(r) for r in rows], [r[16] for r in rows]

    def chunks_for(self, provenances: Iterable[str] | None) -> list[tuple[ChunkRecord, str]]:
        """Records (with their lexical context) of the given provenances (``None``: all)."""
        out: list[tuple[ChunkRecord, str]] = []
        if provenances is None:
            for row in self._db.execute(f"SELECT {_CHUNK_COLUMNS} FROM chunks"):
                out.append((_row_to_record(row), row[10]))
            return out
        for prov in provenances:
            for row in self._db.execute(
                f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE provenance = ? ORDER BY start_line, id",
                (prov,),
            ):
                out.append((_row_to_record(row), row[10]))
        return out

    def apply_changes(self, changes: Sequence[SourceChange]) -> None:
        """Replace the chunks of each changed source (or, for a change that names what it
        removes, those chunks only) and journal it for the lexical index."""
        with self._transaction():
            self._bump_version()
            for ch in changes:
                if ch.removed is None:
                    self._db.execute("DELETE FROM chunks WHERE provenance = ?", (ch.provenance,))
                else:
                    self._db.executemany(
                        "DELETE FROM chunks WHERE id = ?", [(cid,) for cid in ch.removed]
                    )
                self._db.execute(
                    "INSERT OR IGNORE INTO lexical_pending (provenance) VALUES (?)",
                    (ch.provenance,),
                )
                if ch.state is None:
                    self._db.execute("DELETE FROM sources WHERE provenance = ?", (ch.provenance,))
                    continue
                s = ch.state
                self._db.execute(
                    "INSERT OR REPLACE INTO sources"
                    " (provenance, source, path, size, mtime_ns, token, hash, skip_reason)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        s.provenance,
                        s.source,
                        s.path,
                        s.size,
                        s.mtime_ns,
                        s.token,
                        s.hash,
                        s.skip_reason,
                    ),
                )
                vectors = ch.vectors
                rows = []
                for i, pc in enumerate(ch.chunks):
                    r = pc.record
                    rows.append(
                        (
                            *_LEADING_COLUMNS(r),
                            pc.context,
                            r.agent_id,
                            r.session_key,
                            r.session_id,
                            json.dumps(list(r.entry_ids)) if r.entry_ids else "[]",
                            r.timestamp,
                            None if vectors is None else vectors[i].tobytes(),
                        )
                    )
                self._db.executemany(
                    f"INSERT OR REPLACE INTO chunks ({_CHUNK_COLUMNS})"
                    f" VALUES ({', '.join('?' * 17)})",
                    rows,
                )

    def update_stats(self, states: Sequence[SourceState]) -> None:
        """Record new stat values for sources whose content hash did not change."""
        with self._transaction():
            self._db.executemany(
                "UPDATE sources SET size = ?, mtime_ns = ? WHERE provenance = ?",
                [(s.size, s.mtime_ns, s.provenance) for s in states],
            )
            self._set_meta("stats_version", str(int(self.get_meta("stats_version") or "0") + 1))

    def sources_mark(self) -> tuple[int, int, int]:
        """What changes whenever the sources table does: the index generation, the
        content version (every other write of sources bumps it) and the count of stat
        updates. A process whose copy of the sources was read (or kept in step by its
        own writes) at the current mark need not read them again."""
        meta = dict(
            self._db.execute(
                "SELECT key, value FROM meta"
                " WHERE key IN ('generation', 'version', 'stats_version')"
            ).fetchall()
        )
        return (
            int(meta.get("generation") or 0),
            int(meta.get("version") or 0),
            int(meta.get("stats_version") or 0),
        )

    def pending_lexical(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT provenance FROM lexical_pending")]

    def clear_pending(self, provenances: Iterable[str]) -> None:
        with self._transaction():
            self._db.executemany(
                "DELETE FROM lexical_pending WHERE provenance = ?", [(p,) for p in provenances]
            )

    def chunk_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])

    # -- forget -------------------------------------------------------------------
    def select_chunks(
        self,
        *,
        path: str | None,
        session_id: str | None,
        agent_id: str | None,
        source: str | None,
    ) -> list[tuple[str, str, str]]:
        """``(id, provenance, path)`` of chunks matching every given criterion."""
        clauses: list[str] = []
        args: list[str] = []
        for column, value in (
            ("path", path),
            ("session_id", session_id),
            ("agent_id", agent_id),
            ("source", source),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        where = " AND ".join(clauses) if clauses else "1 = 1"
        rows = self._db.execute(
            f"SELECT id, provenance, path FROM chunks WHERE {where} ORDER BY path, start_line",
            args,
        )
        return [(r[0], r[1], r[2]) for r in rows]

    def forget(
        self,
        chunks: Sequence[tuple[str, str, str]],
        forget: IndexForget | None = None,
    ) -> None:
        """Tombstone and delete chunks, journalling their provenances for the lexical
        index, and record the forget that hid them (what :meth:`forgets` lists and
        :meth:`unforget` takes back)."""
        now = time.time() if forget is None else forget.at
        with self._transaction():
            self._bump_version()
            self._db.executemany(
                "INSERT OR IGNORE INTO tombstones (id, provenance, path, forgotten_at)"
                " VALUES (?, ?, ?, ?)",
                [(cid, prov, path, now) for cid, prov, path in chunks],
            )
            if forget is not None:
                self._db.execute(
                    "INSERT INTO forgets (id, criteria, paths, chunks, at, by)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        forget.id,
                        json.dumps(dict(forget.criteria), sort_keys=True),
                        json.dumps(list(forget.paths)),
                        forget.chunks,
                        forget.at,
                        None if forget.by is None else json.dumps(dict(forget.by)),
                    ),
                )
                self._db.executemany(
                    "INSERT OR IGNORE INTO forget_chunks (forget_id, chunk_id) VALUES (?, ?)",
                    [(forget.id, c[0]) for c in chunks],
                )
            self._db.executemany("DELETE FROM chunks WHERE id = ?", [(c[0],) for c in chunks])
            self._db.executemany(
                "INSERT OR IGNORE INTO lexical_pending (provenance) VALUES (?)",
                [(prov,) for prov in {c[1] for c in chunks}],
            )

    def tombstones(self) -> set[str]:
        return {r[0] for r in self._db.execute("SELECT id FROM tombstones")}

    def forgets(self) -> list[IndexForget]:
        """The forgets in effect, newest first."""
        rows = self._db.execute(
            "SELECT id, criteria, paths, chunks, at, by FROM forgets ORDER BY at DESC, id"
        )
        return [
            IndexForget(
                id=r[0],
                criteria=json.loads(r[1]),
                paths=tuple(json.loads(r[2])),
                chunks=int(r[3]),
                at=float(r[4]),
                by=None if r[5] is None else json.loads(r[5]),
            )
            for r in rows
        ]

    def unforget(self, forget_id: str) -> IndexForget | None:
        """Take forget ``forget_id`` back (``None``: no such forget).

        Its tombstones go (those no other forget also holds), and the sources its chunks
        came from are forgotten as sources, so the next sync reads them again and
        indexes what they hold now.
        """
        found = [f for f in self.forgets() if f.id == forget_id]
        if not found:
            return None
        with self._transaction():
            self._bump_version()
            provs = [
                r[0]
                for r in self._db.execute(
                    "SELECT DISTINCT t.provenance FROM tombstones t JOIN forget_chunks f"
                    " ON f.chunk_id = t.id WHERE f.forget_id = ?",
                    (forget_id,),
                )
            ]
            self._db.execute(
                "DELETE FROM tombstones WHERE id IN (SELECT chunk_id FROM forget_chunks"
                " WHERE forget_id = ?) AND id NOT IN (SELECT chunk_id FROM forget_chunks"
                " WHERE forget_id != ?)",
                (forget_id, forget_id),
            )
            self._db.execute("DELETE FROM forget_chunks WHERE forget_id = ?", (forget_id,))
            self._db.execute("DELETE FROM forgets WHERE id = ?", (forget_id,))
            self._db.executemany("DELETE FROM sources WHERE provenance = ?", [(p,) for p in provs])
        return found[0]

    # -- embedding cache ----------------------------------------------------------
    def cached_vectors(
        self, provider: str, model: str, dims: int, text_hashes: Sequence[str]
    ) -> dict[str, npt.NDArray[np.float32]]:
        """Cached vectors for the given text hashes (marking them used)."""
        found: dict[str, npt.NDArray[np.float32]] = {}
        unique = list(dict.fromkeys(text_hashes))
        for i in range(0, len(unique), 500):
            batch = unique[i : i + 500]
            marks = ", ".join("?" * len(batch))
            for h, blob in self._db.execute(
                "SELECT text_hash, vector FROM embedding_cache"
                f" WHERE provider = ? AND model = ? AND text_hash IN ({marks})",
                [provider, model, *batch],
            ):
                vec = np.frombuffer(blob, dtype=np.float32)
                if vec.shape[0] == dims:
                    found[h] = vec
        if found:
            with self._transaction():
                use = self._next_use()
                self._db.executemany(
                    "UPDATE embedding_cache SET used = ?"
                    " WHERE provider = ? AND model = ? AND text_hash = ?",
                    [(use, provider, model, h) for h in found],
                )
        return found

    def _next_use(self) -> int:
        use = int(self.get_meta("cache_use") or "0") + 1
        self._set_meta("cache_use", str(use))
        return use

    def cache_vectors(
        self,
        provider: str,
        model: str,
        entries: Sequence[tuple[str, npt.NDArray[np.float32]]],
        max_entries: int,
    ) -> None:
        """Add vectors to the cache, then prune the least recently used past ``max_entries``."""
        with self._transaction():
            use = self._next_use()
            self._db.executemany(
                "INSERT OR REPLACE INTO embedding_cache"
                " (provider, model, text_hash, vector, used) VALUES (?, ?, ?, ?, ?)",
                [(provider, model, h, v.astype(np.float32).tobytes(), use) for h, v in entries],
            )
            count = int(self._db.execute("SELECT COUNT(*) FROM embedding_cache").fetchone()[0])
            if count > max_entries:
                self._db.execute(
                    "DELETE FROM embedding_cache WHERE rowid IN (SELECT rowid FROM"
                    " embedding_cache ORDER BY used, rowid LIMIT ?)",
                    (count - max_entries,),
                )

    def cache_size(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM embedding_cache").fetchone()[0])

    # -- purge --------------------------------------------------------------------
    def memory_hashes(self, paths: Iterable[str]) -> set[str]:
        """The content hashes of the memory-file chunks of ``paths`` (a purge compares
        them before and after, to drop the cached vectors of the chunks that went)."""
        found: set[str] = set()
        for path in paths:
            rows = self._db.execute(
                "SELECT hash FROM chunks WHERE source = 'memory' AND path = ?", (path,)
            )
            found.update(r[0] for r in rows)
        return found

    def purge_mark(self) -> int | None:
        """The workspace purge mark this index last scrubbed at (see MemoryFiles);
        ``None`` for an index that never recorded one (new, or older than purges)."""
        value = self.get_meta("purge_mark")
        return None if value is None else int(value)

    def set_purge_mark(self, mark: int) -> None:
        with self._transaction():
            self._set_meta("purge_mark", str(mark))

    def unreferenced_cache(self) -> set[str]:
        """Cached vectors' hashes no chunk has (a purge made elsewhere cannot say which
        went, so catching up with it drops all of these)."""
        return {
            r[0]
            for r in self._db.execute(
                "SELECT text_hash FROM embedding_cache"
                " WHERE text_hash NOT IN (SELECT hash FROM chunks)"
            )
        }

    def count_containing(self, text: str) -> int:
        """How many chunks still hold ``text`` (a purge reports what it could not reach)."""
        row = self._db.execute("SELECT COUNT(*) FROM chunks WHERE instr(text, ?) > 0", (text,))
        return int(row.fetchone()[0])

    def scrub(self, dropped_hashes: Iterable[str]) -> None:
        """Drop the cached vectors of ``dropped_hashes``, then rewrite the database so
        that no free page or WAL frame keeps a deleted chunk's bytes: ``VACUUM`` builds
        the file anew, and a ``TRUNCATE`` checkpoint empties the WAL (retried while a
        reader in another process pins it)."""
        hashes = sorted(set(dropped_hashes))
        with self._transaction():
            self._db.executemany(
                "DELETE FROM embedding_cache WHERE text_hash = ?", [(h,) for h in hashes]
            )
        self._db.execute("PRAGMA secure_delete = ON")
        try:
            self._db.execute("VACUUM")
        finally:
            self._db.execute("PRAGMA secure_delete = OFF")
        # The tries pace themselves: a checkpoint would otherwise wait out the busy
        # timeout for a reader at every try (50 tries of 5 s against one that never
        # lets go, where a purge should say so within seconds).
        self._db.execute("PRAGMA busy_timeout = 0")
        try:
            for attempt in range(_CHECKPOINT_TRIES):
                busy, _, _ = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                if not busy:
                    return
                time.sleep(0.01 * (attempt + 1))
        finally:
            self._db.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        raise IndexStoreError(
            f"Memory Core index database {self.path}: another process kept reading it, so "
            "its write-ahead log could not be emptied after a purge; run the purge again"
        )


# Every operation of the store names its file when SQLite fails, and holds its lock.
for _name, _fn in list(vars(Store).items()):
    if callable(_fn) and _name == "__init__":
        setattr(Store, _name, _naming_the_file(_fn))
    elif callable(_fn) and not _name.startswith("_"):
        setattr(Store, _name, _naming_the_file(_one_at_a_time(_fn)))
