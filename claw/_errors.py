"""The one exception hierarchy of claw.

Every error raised on purpose by claw, Memory Core or the harness derives from
:class:`ClawError` and also from the nearest builtin, so that generic handlers
(``except PermissionError``) keep working. Messages name the thing that was
wrong and, where there is one, the fix.
"""

from __future__ import annotations

from typing import Any


class ClawError(Exception):
    """Base class of every error claw raises on purpose."""


class ForgedCapabilityError(ClawError, PermissionError):
    """A capability was presented that the host never minted (or minted for another host)."""


class StaleCapabilityError(ClawError, PermissionError):
    """A capability was minted by the host but is no longer current.

    Its scope or run ended, or an incarnation it was bound to changed.
    """


class CurrencyPendingError(StaleCapabilityError):
    """Currency cannot be decided right now: a write to a session in the lineage is in flight.

    Retryable: wait for the write and check again (the host's memory guard does). It is a
    :class:`StaleCapabilityError`, so code that does not retry fails closed.
    """


class CapabilityDeniedError(ClawError, PermissionError):
    """A current capability does not grant what was asked (wrong session, scope or agent)."""


class SlotConflictError(ClawError, RuntimeError):
    """Two plugins tried to occupy one exclusive slot."""


class ContractError(ClawError, ValueError):
    """A plugin registered something its manifest does not declare, or broke a contract."""


class ConfigError(ClawError, ValueError):
    """Configuration is invalid; names the key path and the bad value."""

    key_path: str
    value: Any

    def __init__(self, key_path: str, message: str, *, value: Any = None) -> None:
        self.key_path = key_path
        self.value = value
        super().__init__(f"config {key_path}: {message}")


class UnsupportedRequestError(ClawError, ValueError):
    """A request asks a provider for something its declared capabilities do not support.

    Raised by the host before any provider code runs.
    """


class UnknownAgentError(ClawError, LookupError):
    """A caller named an agent the host does not know.

    The host knows its default agent (``default_agent_id``) and every agent that has
    sessions; nothing else may be addressed, so no caller can make a provider create
    state for a name it made up.
    """


class ProviderError(ClawError, RuntimeError):
    """A memory provider failed; never turned into an empty success."""


class EmbeddingError(ProviderError):
    """An embedding provider failed or returned something that breaks its contract."""


class LexicalIndexError(ProviderError):
    """tantivy failed while indexing or searching; the message carries its reason."""


class HostClosedError(ClawError, RuntimeError):
    """The host, scope or run was used after it closed."""


class DatabaseUnavailableError(ClawError, ConnectionError):
    """The state database cannot be reached, or the connection to it was lost.

    Retryable once the server is back. The message names the server (never the DSN's
    password) and the driver's cause.
    """


class DatabaseError(ClawError, RuntimeError):
    """A statement against the state database failed; names the operation and the SQLSTATE."""

    sqlstate: str | None

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        self.sqlstate = sqlstate
        super().__init__(message)


class StorageError(ClawError, OSError):
    """A local store (the state directory, an index directory) could not be written; the
    message names the file, the directory and what is wrong with it. ``path`` is the file."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class StorageReadOnlyError(StorageError, PermissionError):
    """The directory is on a read-only file system, or this user may not write there."""


class StorageFullError(StorageError):
    """The disk (or the quota) holding the directory is full; what was written before stays."""


class SchemaVersionError(ClawError, RuntimeError):
    """The state database's schema is older than, or unknown to, this build of claw.

    Names the migration that is missing or unknown and what to do about it.
    """
