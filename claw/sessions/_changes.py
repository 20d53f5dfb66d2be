"""The incarnation rules: what each change makes of a session row, once for every backend.

The SQLite store (:mod:`claw.state.sqlite._sessions`) and the PostgreSQL store
(:mod:`claw.state.postgres._sessions`) differ in how they lock, write and notify; what a
create, reset, reassignment or spawn *means* (which fields a change keeps, what a
child inherits from its parent, which arguments are refused before any transaction)
is one contract, kept here as pure functions over :class:`SessionRow`. Each store
validates a change's arguments with the ``check_*`` functions before it opens a
transaction, and builds the new row with the others inside it.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Callable, Iterable, Sequence

import attrs

from ._errors import InvalidSessionError
from ._rows import (
    ChatType,
    SessionRow,
    validate_chat_type,
    validate_flag,
    validate_key,
    validate_session_id,
)

SessionListener = Callable[[str], None]


def new_session_id() -> str:
    """A fresh session id (canonical lowercase UUID text)."""
    return str(uuid.uuid4())


def root_row(
    key: str,
    *,
    agent_id: str,
    chat_type: ChatType,
    session_id: str | None,
    peer_is_owner: bool,
    now: float,
) -> SessionRow:
    """The row a create writes; its lifecycle revision is set by the store (the key's
    revision sequence continues across delete-then-create)."""
    return SessionRow(
        agent_id=validate_key("agent_id", agent_id),
        session_key=validate_key("session_key", key),
        session_id=(
            new_session_id()
            if session_id is None
            else validate_session_id("session_id", session_id)
        ),
        lifecycle_revision=0,
        chat_type=validate_chat_type("chat_type", chat_type),
        peer_is_owner=validate_flag("peer_is_owner", peer_is_owner),
        created_at=now,
        updated_at=now,
    )


def check_spawn(
    parent_key: str,
    child_key: str,
    *,
    sender_is_owner: bool,
    chat_type: ChatType | None,
    session_id: str | None,
) -> str:
    """Refuse a spawn's bad arguments; return the child's session id."""
    validate_flag("sender_is_owner", sender_is_owner)
    validate_key("parent_key", parent_key)
    validate_key("session_key", child_key)
    if parent_key == child_key:
        raise InvalidSessionError(
            "parent_key", f"a session cannot be its own parent, got {parent_key!r}"
        )
    if chat_type is not None:
        validate_chat_type("chat_type", chat_type)
    return new_session_id() if session_id is None else validate_session_id("session_id", session_id)


def child_row(
    parent: SessionRow,
    *,
    child_key: str,
    chat_type: str | None,
    session_id: str,
    sender_is_owner: bool,
    now: float,
) -> SessionRow:
    """The child of ``parent``'s current incarnation: it records the parent's key,
    session id and revision, takes its agent and owner flag and, unless given, its chat
    type; ``sender_is_owner`` is the spawn receipt that decides the child's audience."""
    if chat_type is None:
        if parent.chat_type is None:
            raise InvalidSessionError(
                "chat_type",
                f"parent {parent.session_key!r} has no chat type to inherit; "
                "pass chat_type explicitly",
            )
        chat_type = parent.chat_type
    return SessionRow(
        agent_id=parent.agent_id,
        session_key=child_key,
        session_id=session_id,
        lifecycle_revision=0,  # set by the store, as for a create
        chat_type=chat_type,
        peer_is_owner=parent.peer_is_owner,
        parent_key=parent.session_key,
        parent_session_id=parent.session_id,
        parent_revision=parent.lifecycle_revision,
        created_at=now,
        updated_at=now,
        spawned_by_owner=sender_is_owner,
    )


def reset_row(old: SessionRow, *, keep_session_id: bool, now: float) -> SessionRow:
    """The next incarnation after a reset: revision + 1, a new session id unless kept."""
    return attrs.evolve(
        old,
        session_id=old.session_id if keep_session_id else new_session_id(),
        lifecycle_revision=old.lifecycle_revision + 1,
        created_at=old.created_at if keep_session_id else now,
        updated_at=now,
    )


def check_reassign(
    *, agent_id: str | None, chat_type: ChatType | None, peer_is_owner: bool | None
) -> None:
    """Refuse a reassignment that names nothing, or names a bad value."""
    if agent_id is None and chat_type is None and peer_is_owner is None:
        raise InvalidSessionError(
            "reassign", "name at least one of agent_id, chat_type, peer_is_owner"
        )
    if agent_id is not None:
        validate_key("agent_id", agent_id)
    if chat_type is not None:
        validate_chat_type("chat_type", chat_type)
    if peer_is_owner is not None:
        validate_flag("peer_is_owner", peer_is_owner)


def reassigned_row(
    old: SessionRow,
    *,
    agent_id: str | None,
    chat_type: str | None,
    peer_is_owner: bool | None,
    now: float,
) -> SessionRow:
    """The next incarnation after a reassignment: always a new lifecycle revision."""
    return attrs.evolve(
        old,
        agent_id=old.agent_id if agent_id is None else agent_id,
        chat_type=old.chat_type if chat_type is None else chat_type,
        peer_is_owner=old.peer_is_owner if peer_is_owner is None else peer_is_owner,
        lifecycle_revision=old.lifecycle_revision + 1,
        updated_at=now,
    )


def notify_listeners(listeners: Sequence[SessionListener], keys: Iterable[str]) -> None:
    """Call every listener for every key, in order; then raise what they raised.

    A failing listener does not stop the others: the change is already committed, so
    each of them must hear of it. One error is raised as itself, several as a group.
    """
    errors: builtins.list[Exception] = []
    keys = tuple(keys)
    for key in keys:
        for listener in builtins.list(listeners):
            try:
                listener(key)
            except Exception as exc:
                errors.append(exc)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        named = ", ".join(map(repr, keys))
        raise ExceptionGroup(f"session listeners failed for {named}", errors)
