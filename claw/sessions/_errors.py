"""Errors raised by the durable session store.

Each derives from :class:`claw._errors.ClawError` and from the nearest builtin, so
that ``except KeyError`` around a lookup or ``except ValueError`` around input
handling keeps working for callers that do not know claw.
"""

from __future__ import annotations

from .._errors import ClawError


class SessionError(ClawError):
    """Base class of every error the session store raises on purpose."""


class SessionNotFoundError(SessionError, KeyError):
    """An operation named a session key that has no row."""

    def __str__(self) -> str:
        # KeyError.__str__ shows the repr of its argument (quotes and all); our
        # argument is a sentence meant for people, so show it as written.
        return str(self.args[0]) if self.args else ""


def unknown_session(key: str, *, agent_id: str) -> SessionNotFoundError:
    """The error for a turn or run on ``key`` when it has no row: it says how to create it."""
    return SessionNotFoundError(
        f"no session {key!r}: create it before its first turn, e.g. "
        f"await host.sessions.create({key!r}, agent_id={agent_id!r}, chat_type='direct') "
        "(chat_type: direct, group, channel or thread; see docs/models.md)"
    )


class SessionExistsError(SessionError, ValueError):
    """A create or spawn named a session key that already has a row."""


class InvalidSessionError(SessionError, ValueError):
    """A write carried a malformed field; the message names the field and the value."""

    field: str

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"session {field}: {message}")


class SessionSchemaError(SessionError, RuntimeError):
    """The database on disk is not a session store this version of claw can read.

    Raised for a schema version newer than this code knows, for a foreign
    database, and for legacy rows a migration cannot carry over faithfully.
    """


class SessionStorageError(SessionError, OSError):
    """SQLite failed underneath the store (disk full, I/O error, locked by another process)."""
