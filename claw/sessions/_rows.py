"""Session rows, incarnations, and the read-only view lineage resolution works over.

A :class:`SessionRow` is a plain record of what the store holds. Its constructor
does not validate: resolution must be able to look at a row that is wrong (a
legacy row with no chat type, a hand-built snapshot in a test) and refuse it,
so validation lives in :func:`validate_row` and runs on every write instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from .._display import html_record, utc_text
from ._errors import InvalidSessionError

ChatType: TypeAlias = Literal["direct", "group", "channel", "thread"]

#: The durable chat types. A row whose chat type is outside this set (or
#: missing) is never given an audience.
CHAT_TYPES: Final[frozenset[str]] = frozenset({"direct", "group", "channel", "thread"})

#: Canonical lowercase UUID text. Stricter than "36 characters of hex and
#: hyphens": the hyphens must sit where a UUID has them.
SESSION_ID_PATTERN: Final[re.Pattern[str]] = re.compile(
    r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)

#: Longest session key or agent id the store accepts.
MAX_KEY_LENGTH: Final[int] = 512


@attrs.frozen
class Incarnation:
    """One incarnation of a session key: its session id and lifecycle revision.

    For a given key the lifecycle revision only ever grows, across resets,
    reassignments and even delete-then-create (the store remembers the last
    revision a deleted key had), so two incarnations of one key are ordered by
    their revisions and an incarnation never comes back once it has changed.
    """

    session_id: str
    lifecycle_revision: int

    def supersedes(self, other: Incarnation) -> bool:
        """Whether this incarnation of a key came after ``other`` (same key assumed)."""
        return self.lifecycle_revision > other.lifecycle_revision


@attrs.frozen
class SessionRow:
    """One durable session, as stored.

    ``chat_type`` is typed ``str | None`` rather than :data:`ChatType` because
    a row read back from a migrated store may lack one; such a row resolves
    to no audience. ``peer_is_owner`` records whether the direct peer of this
    session is the agent's trusted owner; it is a fact about the session, kept
    for the host, and is not what decides owner-private audience (the turn's
    asserted ``sender_is_owner`` is). The three ``parent_*`` fields are all
    set for a spawned child and all ``None`` for a root. ``spawned_by_owner``
    is a child's *spawn receipt*: whether the sender of the turn that spawned
    it was the agent's owner, recorded at spawn time (``None`` for a root, and
    for a child written before receipts existed, which then resolves to no
    audience until it is respawned). Times are Unix seconds.
    """

    agent_id: str
    session_key: str
    session_id: str
    lifecycle_revision: int
    chat_type: str | None
    peer_is_owner: bool = False
    parent_key: str | None = None
    parent_session_id: str | None = None
    parent_revision: int | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    spawned_by_owner: bool | None = None

    @property
    def incarnation(self) -> Incarnation:
        """This row's (session id, lifecycle revision)."""
        return Incarnation(self.session_id, self.lifecycle_revision)

    def row(self) -> dict[str, Any]:
        """The session as one flat row (``claw.jupyter.table(rows)`` draws several)."""
        return {
            "key": self.session_key,
            "agent": self.agent_id,
            "chat": self.chat_type,
            "revision": self.lifecycle_revision,
            "session id": self.session_id,
            "owner peer": self.peer_is_owner,
            "parent": self.parent_key,
            "created": utc_text(self.created_at),
            "updated": utc_text(self.updated_at),
        }

    def _repr_html_(self) -> str:
        return html_record(f"session {self.session_key}", self.row())

    @property
    def is_root(self) -> bool:
        """Whether this row records no parent (it may still be malformed)."""
        return (
            self.parent_key is None
            and self.parent_session_id is None
            and self.parent_revision is None
        )


def validate_key(field: str, value: object) -> str:
    """Check a session key or agent id: a non-empty string without NUL, of sane length."""
    if not isinstance(value, str):
        raise InvalidSessionError(field, f"must be a string, got {value!r}")
    if not value or not value.strip():
        raise InvalidSessionError(field, f"must not be empty, got {value!r}")
    if "\x00" in value:
        raise InvalidSessionError(field, f"must not contain NUL, got {value!r}")
    if len(value) > MAX_KEY_LENGTH:
        raise InvalidSessionError(
            field, f"must be at most {MAX_KEY_LENGTH} characters, got {len(value)}"
        )
    return value


def validate_session_id(field: str, value: object) -> str:
    """Check a session id: canonical lowercase UUID text."""
    if not isinstance(value, str) or not SESSION_ID_PATTERN.fullmatch(value):
        raise InvalidSessionError(
            field, f"must be a lowercase UUID string like 8-4-4-4-12 hex digits, got {value!r}"
        )
    return value


def validate_chat_type(field: str, value: object) -> ChatType:
    """Check a chat type is one of the durable chat types."""
    if value == "direct":
        return "direct"
    if value == "group":
        return "group"
    if value == "channel":
        return "channel"
    if value == "thread":
        return "thread"
    raise InvalidSessionError(
        field, f"must be one of 'channel', 'direct', 'group', 'thread', got {value!r}"
    )


def validate_revision(field: str, value: object) -> int:
    """Check a lifecycle revision: a non-negative int (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidSessionError(field, f"must be a non-negative integer, got {value!r}")
    return value


def validate_flag(field: str, value: object) -> bool:
    """Check a boolean flag is really a bool (not 0/1 or a string)."""
    if not isinstance(value, bool):
        raise InvalidSessionError(field, f"must be True or False, got {value!r}")
    return value


def validate_row(row: SessionRow, *, allow_missing_chat_type: bool = False) -> SessionRow:
    """Check every field of ``row``; raise :class:`InvalidSessionError` naming the first bad one.

    ``allow_missing_chat_type`` is for rows carried over from a legacy schema,
    which may lack a chat type; such rows are kept (and resolve to no
    audience) rather than invented a chat type.
    """
    validate_key("agent_id", row.agent_id)
    validate_key("session_key", row.session_key)
    validate_session_id("session_id", row.session_id)
    validate_revision("lifecycle_revision", row.lifecycle_revision)
    if row.chat_type is not None or not allow_missing_chat_type:
        validate_chat_type("chat_type", row.chat_type)
    validate_flag("peer_is_owner", row.peer_is_owner)
    parents = (row.parent_key, row.parent_session_id, row.parent_revision)
    if any(p is not None for p in parents):
        if any(p is None for p in parents):
            raise InvalidSessionError(
                "parent",
                "parent_key, parent_session_id and parent_revision must be all set or all "
                f"None, got {parents!r}",
            )
        validate_key("parent_key", row.parent_key)
        validate_session_id("parent_session_id", row.parent_session_id)
        validate_revision("parent_revision", row.parent_revision)
        if row.parent_key == row.session_key:
            raise InvalidSessionError(
                "parent_key", f"a session cannot be its own parent, got {row.parent_key!r}"
            )
        if row.spawned_by_owner is not None:
            validate_flag("spawned_by_owner", row.spawned_by_owner)
    elif row.spawned_by_owner is not None:
        raise InvalidSessionError(
            "spawned_by_owner", f"a root session has no spawn receipt, got {row.spawned_by_owner!r}"
        )
    for field in ("created_at", "updated_at"):
        value = getattr(row, field)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidSessionError(field, f"must be a number of seconds, got {value!r}")
    return row


def row_is_well_formed(row: SessionRow) -> bool:
    """Whether ``row`` passes :func:`validate_row` (chat type required)."""
    try:
        validate_row(row)
    except InvalidSessionError:
        return False
    return True


@runtime_checkable
class SessionView(Protocol):
    """A synchronous, read-only view of committed session rows.

    This is what lineage resolution and currency checks read. The store is one
    (answered from its in-memory mirror of committed rows); a
    :class:`SessionSnapshot` is another.
    """

    def get_nowait(self, key: str) -> SessionRow | None:
        """The committed row for ``key``, or ``None``."""
        ...

    def last_revision_nowait(self, key: str) -> int:
        """The highest lifecycle revision ``key`` has ever had; 0 if it never had a row.

        For a key with a row this is the row's revision; for a deleted key it
        is the revision the row had when deleted. It lets a check bound to the
        *absence* of a row notice that a row came and went in between.
        """
        ...


#: What resolution accepts: a view, a plain mapping of rows by key, or a lookup function.
SessionRows: TypeAlias = SessionView | Mapping[str, SessionRow] | Callable[[str], SessionRow | None]


@attrs.frozen
class SessionSnapshot:
    """An immutable :class:`SessionView` over given rows and deleted-key watermarks."""

    rows: Mapping[str, SessionRow] = attrs.field(factory=dict)
    watermarks: Mapping[str, int] = attrs.field(factory=dict)

    def get_nowait(self, key: str) -> SessionRow | None:
        return self.rows.get(key)

    def last_revision_nowait(self, key: str) -> int:
        row = self.rows.get(key)
        if row is not None:
            return row.lifecycle_revision
        return self.watermarks.get(key, 0)


@attrs.frozen
class _LookupView:
    """Adapts a mapping or a lookup function to :class:`SessionView`.

    Such a source knows nothing of deleted keys, so ``last_revision_nowait`` of
    a key without a row is 0.
    """

    lookup: Callable[[str], SessionRow | None]

    def get_nowait(self, key: str) -> SessionRow | None:
        return self.lookup(key)

    def last_revision_nowait(self, key: str) -> int:
        row = self.lookup(key)
        return 0 if row is None else row.lifecycle_revision


def as_view(rows: SessionRows) -> SessionView:
    """Turn any accepted row source into a :class:`SessionView`."""
    # The same test as ``isinstance(rows, SessionView)``, without the runtime protocol
    # machinery: this runs on every currency check, which is on the search hot path.
    if callable(getattr(rows, "get_nowait", None)) and callable(
        getattr(rows, "last_revision_nowait", None)
    ):
        return rows  # type: ignore[return-value]
    if isinstance(rows, Mapping):
        return _LookupView(rows.get)
    if callable(rows):
        return _LookupView(rows)
    raise TypeError(f"expected a SessionView, a mapping or a lookup function, got {rows!r}")
