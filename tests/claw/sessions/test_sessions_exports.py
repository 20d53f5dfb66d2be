"""Pins the public surface of claw.sessions."""

from __future__ import annotations

import types

import claw
import claw.sessions
import claw.turns
from claw.sessions import (
    InvalidSessionError,
    SessionError,
    SessionExistsError,
    SessionNotFoundError,
    SessionSchemaError,
    SessionStorageError,
)


def test_every_public_object_is_exported_under_one_name() -> None:
    seen: dict[int, str] = {}
    for name, obj in vars(claw.sessions).items():
        if name.startswith("_") or isinstance(obj, types.ModuleType | str | int | frozenset):
            continue
        assert id(obj) not in seen, f"{name} and {seen[id(obj)]} are the same object"
        seen[id(obj)] = name
    assert {"SessionRow", "resolve_audience", "is_lineage_current"} <= set(seen.values())


def test_the_sqlite_store_is_still_reached_through_claw_sessions() -> None:
    """Its home is the SQLite backend; the old names stay (imported on first use)."""
    import claw.state.sqlite

    assert claw.sessions.SessionStore is claw.state.sqlite.SessionStore
    assert claw.sessions.open_session_store is claw.state.sqlite.open_session_store
    assert claw.turns.TranscriptStore is claw.state.sqlite.TranscriptStore
    assert claw.turns.open_transcript_store is claw.state.sqlite.open_transcript_store


def test_session_errors_are_claw_errors_and_the_nearest_builtin() -> None:
    for cls, builtin in [
        (SessionNotFoundError, KeyError),
        (SessionExistsError, ValueError),
        (InvalidSessionError, ValueError),
        (SessionSchemaError, RuntimeError),
        (SessionStorageError, OSError),
    ]:
        assert issubclass(cls, SessionError)
        assert issubclass(cls, claw.ClawError)
        assert issubclass(cls, builtin)
