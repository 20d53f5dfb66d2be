"""Derived data repairs itself: the lexical directory and the database, rebuilt.

The SQLite store is the durable owner; tantivy and the published files are derived
from it, and the store itself from the memory files and transcripts. So a tantivy
directory that cannot be opened or replayed is rebuilt from SQLite, and a corrupt
``index.sqlite3`` is set aside and rebuilt from the sources, each with a warning naming
the file. Everything here blocks and runs on the worker pool.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from pathlib import Path

from claw.plugin_sdk import LexicalIndexError

from ._lexical import LexicalIndex
from ._store import Store

logger = logging.getLogger("claw_memory")


def prepare_lexical_dir(root: Path, generation: int, fresh: bool) -> Path:
    """The tantivy directory of ``generation`` (emptied when ``fresh``); others removed."""
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"g{generation}"
    if fresh and target.exists():
        shutil.rmtree(target)
    for child in root.iterdir():
        if child != target and child.is_dir() and child.name.startswith("g"):
            shutil.rmtree(child, ignore_errors=True)
    return target


def _recover_lexical(store: Store, lexical: LexicalIndex) -> None:
    """Replay the lexical journal; rebuild tantivy from SQLite if the two still disagree."""
    pending = store.pending_lexical()
    if pending:
        lexical.replace(pending, store.chunks_for(pending))
        store.clear_pending(pending)
    if lexical.num_docs() != store.chunk_count():
        lexical.reset(store.chunks_for(None))


def open_lexical(store: Store, lex_dir: Path, recover: bool = True) -> LexicalIndex:
    """Open the tantivy directory and bring it up to SQLite; rebuild it when that fails.

    A kill inside a tantivy commit can leave files ``meta.json`` does not reference
    (a ``<segment>.<opstamp>.del``): replaying the journal then reaches the same
    opstamp and fails with ``FileAlreadyExists`` on every open. The lexical index is
    derived from SQLite, so a directory that cannot be opened or replayed is rebuilt.
    """
    lexical: LexicalIndex | None = None
    try:
        lexical = LexicalIndex(lex_dir)
        if recover:
            _recover_lexical(store, lexical)
    except LexicalIndexError as exc:
        return rebuild_lexical(store, lexical, lex_dir, exc)
    return lexical


def rebuild_lexical(
    store: Store, lexical: LexicalIndex | None, lex_dir: Path, cause: Exception | str
) -> LexicalIndex:
    """Replace the tantivy directory with one rebuilt from every chunk in SQLite
    (``cause``: the error that made it necessary, or why it was asked for)."""
    if isinstance(cause, str):
        logger.info("rebuilding lexical index %s from %s for %s", lex_dir, store.path, cause)
    else:
        logger.warning(
            "lexical index %s cannot be opened or updated (%s); rebuilding it from %s",
            lex_dir,
            cause,
            store.path,
        )
    if lexical is not None:
        with contextlib.suppress(Exception):
            lexical.close()
    shutil.rmtree(lex_dir, ignore_errors=True)
    fresh = LexicalIndex(lex_dir)
    fresh.reset(store.chunks_for(None))
    pending = store.pending_lexical()
    if pending:
        store.clear_pending(pending)
    return fresh


def set_aside_corrupt_database(index_dir: Path, cause: Exception) -> None:
    """Move a corrupt index database (and its WAL files) aside, so that it is rebuilt."""
    db = index_dir.resolve() / "index.sqlite3"
    aside = db.with_name(f"{db.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
    logger.warning(
        "%s; the index is derived from the memory files and transcripts: moving the "
        "database to %s and rebuilding it (chunks removed with forget must be "
        "forgotten again)",
        cause,
        aside,
    )
    db.rename(aside)
    for suffix in ("-wal", "-shm"):
        extra = db.with_name(db.name + suffix)
        if extra.exists():
            extra.rename(aside.with_name(aside.name + suffix))
    shutil.rmtree(db.parent / "lexical", ignore_errors=True)
