"""Run by test_sessions_crash.py in a subprocess: reset a session and stop mid-way.

Usage: ``python crash_child.py PATH KEY before-commit|after-commit``. The child
opens the store through the real code path and resets KEY with a new session
id. With ``before-commit`` it pauses once the reset's work is done but before
the transaction's final COMMIT (so an intermediate commit inside the reset
would already be durable and the test would see it); with ``after-commit`` it
pauses right after that COMMIT returns. It prints ``paused`` and then waits on
stdin forever; the test SIGKILLs it there.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from typing import Any

import attrs
import trio

from claw import InlineWorkerPool
from claw.state.sqlite import _sessions as _store


def pause() -> None:
    print("paused", flush=True)
    sys.stdin.read()  # the test never writes; it kills us here
    raise SystemExit("stdin closed before the kill")


class PauseAfterCommit:
    """Delegates to a real connection; once armed, pauses right after a COMMIT."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.armed = False

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        cursor = self._conn.execute(sql, params)
        if self.armed and sql == "COMMIT":
            pause()
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


async def main(path: str, key: str, where: str) -> None:
    proxy = PauseAfterCommit(_store._connect(path))
    store = await _store.SessionStore._from_connection(
        proxy,  # type: ignore[arg-type]
        workers=InlineWorkerPool(),
        where=path,
        clock=time.time,
    )
    real_reset = _store.SessionStore._ops.reset

    def reset_then_pause(conn: sqlite3.Connection, **kwargs: Any) -> Any:
        change = real_reset(conn, **kwargs)
        if where == "before-commit":
            pause()
        proxy.armed = True
        return change

    # The store runs the reset transaction its class names; this process's copy pauses.
    _store.SessionStore._ops = attrs.evolve(_store.SessionStore._ops, reset=reset_then_pause)
    await store.reset(key, keep_session_id=False)
    raise SystemExit("the reset should have paused")


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3])
