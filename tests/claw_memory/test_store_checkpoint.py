"""A purge's scrub says soon that a reader pins the write-ahead log, rather than waiting
out the busy timeout at every try.

The index store has a busy timeout (another `claw serve` worker may open or write it at
the same moment), and a ``wal_checkpoint(TRUNCATE)`` calls the busy handler while a
reader pins the log: 50 tries would each wait the whole timeout against a reader that
never lets go. The tries pace themselves instead, with the busy handler off, and the
timeout is back once they end.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from claw_memory import _store
from claw_memory._errors import IndexStoreError
from claw_memory._store import Store


def test_a_scrub_gives_up_on_a_pinned_log_without_the_busy_handler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "index.sqlite3")
    reader = sqlite3.connect(store.path, isolation_level=None)
    try:
        store.scrub([])  # the log is empty once; the reader then pins a snapshot
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM chunks").fetchone()
        timeouts: list[int] = []

        def pause(seconds: float) -> None:  # between two tries: no real sleep
            timeouts.append(store._db.execute("PRAGMA busy_timeout").fetchone()[0])

        monkeypatch.setattr(_store.time, "sleep", pause)
        with pytest.raises(IndexStoreError, match="another process kept reading it"):
            store.scrub([])
        monkeypatch.undo()
        assert len(timeouts) == _store._CHECKPOINT_TRIES
        assert set(timeouts) == {0}  # no try waited on the busy handler
        assert store._db.execute("PRAGMA busy_timeout").fetchone()[0] == _store._BUSY_TIMEOUT_MS
        reader.execute("COMMIT")
        store.scrub([])  # with the reader gone, the log empties
    finally:
        reader.close()
        store.close()
