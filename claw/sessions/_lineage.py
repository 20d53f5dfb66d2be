"""Pure memory-audience resolution over durable session lineage.

Nothing here does I/O or keeps state: every function reads a
:class:`~claw.sessions.SessionView` (or a mapping / lookup function) and returns a
value. The capability layer mints audiences from :func:`resolve_audience` and
asks :func:`is_lineage_current` before and after each provider call.

The rules, from the seed's "Memory audience" section:

* a direct turn whose sender the embedding application asserts is the agent's
  trusted owner has ``owner-private`` audience for the agent;
* a direct turn from anyone else, and any group, channel or thread turn, has
  ``conversation`` audience for the durable *root* session;
* a spawned child inherits its root's audience only when each recorded parent
  key, parent session id and parent lifecycle revision matches the parent's
  current row, hop by hop, for at most :data:`MAX_LINEAGE_HOPS` hops;
* missing, malformed, cross-agent, cyclic or stale lineage, and an unknown or
  missing chat type anywhere in it, give no audience (``None``).

Whose ownership counts: for a run on a *root*, ``sender_is_owner`` is the
fact asserted for the invocation being admitted. For a run on a spawned
*child*, the partition comes from the root's durable chat type and the spawn
receipts recorded on the way down (``SessionRow.spawned_by_owner``: whether
the sender of the turn that spawned each child was the owner), never from the
sender flag of a later run admitted on the child: owner-private needs a direct
root and an owner receipt on every child of the lineage. A child written
before receipts existed resolves to no audience until it is respawned.

When there is no audience, :func:`explain_audience` and
:func:`explain_detached_child` say why (a :class:`NoAudience` reason), so a
user can tell why memory is silent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, TypeAlias

import attrs

from ._errors import InvalidSessionError
from ._rows import (
    SessionRow,
    SessionRows,
    SessionView,
    as_view,
    row_is_well_formed,
    validate_row,
)

AudienceKind: TypeAlias = Literal["owner-private", "conversation"]

#: The most sessions a lineage may have, invocation to root inclusive (so a root and at
#: most 63 chained children; a root with 64 chained children is too deep).
MAX_LINEAGE_HOPS: Final[int] = 64

RESPAWN_HINT: Final[str] = "respawn it from its parent session"


@attrs.frozen
class LineageLink:
    """One session of a resolved lineage, pinned to the incarnation it had when resolved.

    For a *detached child* (a child run whose key has no row) the link is
    ``LineageLink(child_key, None, w)`` where ``w`` is
    ``last_revision_nowait(child_key)`` at resolution: it stays current only
    while the key still has no row and never had one since.
    """

    key: str
    session_id: str | None
    lifecycle_revision: int

    @property
    def is_detached(self) -> bool:
        """Whether this link is bound to the absence of a row."""
        return self.session_id is None


@attrs.frozen
class ResolvedAudience:
    """The audience a session resolved to, and the lineage it depends on.

    ``session_key`` and ``session_id`` are the root session's for a
    ``conversation`` audience and ``None`` for ``owner-private`` (which names
    only the agent). ``lineage`` runs from the invocation session (first) to
    the root (last); the audience is current exactly while
    :func:`is_lineage_current` holds for it.
    """

    kind: AudienceKind
    agent_id: str
    session_key: str | None
    session_id: str | None
    lineage: tuple[LineageLink, ...]

    @property
    def invocation_key(self) -> str:
        """The session key the audience was resolved for (and is bound to)."""
        return self.lineage[0].key

    @property
    def root(self) -> LineageLink:
        """The root session's link."""
        return self.lineage[-1]


@attrs.frozen
class NoAudience:
    """Why a session resolved to no audience (for the run's reason and the debug log)."""

    session_key: str
    reason: str


def _link(row: SessionRow) -> LineageLink:
    return LineageLink(row.session_key, row.session_id, row.lifecycle_revision)


def _malformed(row: SessionRow) -> str | None:
    """Why ``row`` cannot carry an audience, or ``None`` if it is well-formed."""
    try:
        validate_row(row)
    except InvalidSessionError as exc:
        if exc.field == "chat_type":
            return (
                f"session {row.session_key!r} has an ineligible chat type {row.chat_type!r} "
                "(only direct, group, channel and thread chats get an audience)"
            )
        if exc.field in ("session_id", "parent_session_id"):
            return f"session {row.session_key!r} has an unverified session id ({exc})"
        return f"session {row.session_key!r} is malformed ({exc})"
    return None


def _walk(view: SessionView, start: SessionRow, max_sessions: int) -> list[SessionRow] | str:
    """The rows from ``start`` up to its root, or why the lineage gives no audience."""
    chain = [start]
    seen = {start.session_key}
    row = start
    while True:
        malformed = _malformed(row)
        if malformed is not None:
            return malformed
        if row.is_root:
            return chain
        if row.spawned_by_owner is None:
            return (
                f"session {row.session_key!r} predates spawn receipts (it records no "
                f"owner fact for the turn that spawned it); {RESPAWN_HINT}"
            )
        if len(chain) >= max_sessions:
            return (
                f"the lineage of {start.session_key!r} is too deep: more than "
                f"{MAX_LINEAGE_HOPS} sessions from it to its root"
            )
        assert row.parent_key is not None  # a well-formed non-root has all three
        if row.parent_key in seen:
            return f"the lineage of {start.session_key!r} has a cycle at {row.parent_key!r}"
        parent = view.get_nowait(row.parent_key)
        if parent is None or parent.session_key != row.parent_key:
            return f"stale lineage: the parent {row.parent_key!r} of {row.session_key!r} is gone"
        if parent.agent_id != row.agent_id:
            return f"the parent {row.parent_key!r} of {row.session_key!r} belongs to another agent"
        if (
            parent.session_id != row.parent_session_id
            or parent.lifecycle_revision != row.parent_revision
        ):
            return (
                f"stale lineage: the parent {row.parent_key!r} of {row.session_key!r} changed "
                f"incarnation since the spawn; {RESPAWN_HINT}"
            )
        seen.add(parent.session_key)
        chain.append(parent)
        row = parent


def _audience(
    chain: Sequence[SessionRow], links: tuple[LineageLink, ...], *, sender_is_owner: bool
) -> ResolvedAudience:
    root = chain[-1]
    if len(chain) == 1:
        owner = sender_is_owner
    else:
        # A child's partition: the receipts recorded at each spawn, never a later sender.
        owner = all(row.spawned_by_owner is True for row in chain[:-1])
    if owner and root.chat_type == "direct":
        return ResolvedAudience("owner-private", root.agent_id, None, None, links)
    return ResolvedAudience("conversation", root.agent_id, root.session_key, root.session_id, links)


def _check_flag(sender_is_owner: object) -> bool:
    if not isinstance(sender_is_owner, bool):
        raise TypeError(f"sender_is_owner must be True or False, got {sender_is_owner!r}")
    return sender_is_owner


def explain_audience(
    rows: SessionRows, session_key: str, *, sender_is_owner: bool
) -> ResolvedAudience | NoAudience:
    """Resolve the memory audience of a turn in ``session_key``, or say why there is none.

    ``sender_is_owner`` is the trusted fact the embedding application asserted
    when it admitted the invocation; it must be a real ``bool``. It decides the
    partition only for a root session (see the module docstring).
    """
    _check_flag(sender_is_owner)
    view = as_view(rows)
    start = view.get_nowait(session_key)
    if start is None or start.session_key != session_key:
        return NoAudience(session_key, f"session {session_key!r} has no row")
    chain = _walk(view, start, MAX_LINEAGE_HOPS)
    if isinstance(chain, str):
        return NoAudience(session_key, chain)
    return _audience(chain, tuple(_link(r) for r in chain), sender_is_owner=sender_is_owner)


def resolve_audience(
    rows: SessionRows, session_key: str, *, sender_is_owner: bool
) -> ResolvedAudience | None:
    """Resolve the memory audience of a turn in ``session_key``, or ``None``.

    See :func:`explain_audience` for the reason when there is none.
    """
    found = explain_audience(rows, session_key, sender_is_owner=sender_is_owner)
    return found if isinstance(found, ResolvedAudience) else None


def explain_detached_child(
    rows: SessionRows, child_key: str, parent_key: str, *, sender_is_owner: bool
) -> ResolvedAudience | NoAudience:
    """Resolve the audience of a detached child run, or say why there is none.

    ``child_key`` has no row, ``parent_key`` does. The result is the parent's
    audience with the lineage extended by a detached link for ``child_key``
    (see :class:`LineageLink`), so it stops being current when a row for
    ``child_key`` appears, when the parent's lineage changes, or when the run
    ends (the capability layer's part). The child link counts as a session of
    the lineage.
    """
    _check_flag(sender_is_owner)
    if not child_key or child_key == parent_key:
        return NoAudience(child_key, "a detached child needs its own non-empty key")
    view = as_view(rows)
    if view.get_nowait(child_key) is not None:
        return NoAudience(child_key, f"{child_key!r} has a row: it is not a detached child")
    parent = view.get_nowait(parent_key)
    if parent is None or parent.session_key != parent_key:
        return NoAudience(child_key, f"the parent session {parent_key!r} has no row")
    chain = _walk(view, parent, MAX_LINEAGE_HOPS - 1)
    if isinstance(chain, str):
        return NoAudience(child_key, chain)
    detached = LineageLink(child_key, None, view.last_revision_nowait(child_key))
    links = (detached, *(_link(r) for r in chain))
    return _audience(chain, links, sender_is_owner=sender_is_owner)


def resolve_detached_child(
    rows: SessionRows, child_key: str, parent_key: str, *, sender_is_owner: bool
) -> ResolvedAudience | None:
    """The audience of a detached child run, or ``None``; see :func:`explain_detached_child`."""
    found = explain_detached_child(rows, child_key, parent_key, sender_is_owner=sender_is_owner)
    return found if isinstance(found, ResolvedAudience) else None


def is_lineage_current(rows: SessionRows, lineage: Sequence[LineageLink]) -> bool:
    """Whether every session of ``lineage`` still has the incarnation it was resolved at.

    Beyond comparing each link's session id and revision, this re-checks the
    structure (each row still names the next link as its parent, one agent,
    well-formed rows, the last link a root), so a view that was edited by hand
    without bumping revisions cannot keep a stale lineage alive. A detached
    link is current while its key has no row and its last revision is
    unchanged. An empty lineage is never current.
    """
    if not lineage or len(lineage) > MAX_LINEAGE_HOPS:
        return False
    view = as_view(rows)
    agent_id: str | None = None
    for index, link in enumerate(lineage):
        is_last = index == len(lineage) - 1
        if link.is_detached:
            # Only the invocation end of a lineage can be detached.
            if index != 0 or is_last:
                return False
            if view.get_nowait(link.key) is not None:
                return False
            if view.last_revision_nowait(link.key) != link.lifecycle_revision:
                return False
            continue
        row = view.get_nowait(link.key)
        if (
            row is None
            or row.session_key != link.key
            or row.session_id != link.session_id
            or row.lifecycle_revision != link.lifecycle_revision
            or not row_is_well_formed(row)
        ):
            return False
        if agent_id is None:
            agent_id = row.agent_id
        elif row.agent_id != agent_id:
            return False
        if is_last:
            if not row.is_root:
                return False
        else:
            nxt = lineage[index + 1]
            if (
                row.parent_key != nxt.key
                or row.parent_session_id != nxt.session_id
                or row.parent_revision != nxt.lifecycle_revision
            ):
                return False
    return True
