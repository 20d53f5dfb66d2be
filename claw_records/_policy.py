"""Who may read and write which records: partitions from the host-minted audience.

Every record lives in one *partition* of its agent: ``owner`` (the agent owner's
private memory) or ``conversation:<root session key>`` (what one conversation, a
group, channel or a non-owner's direct chat, keeps). The partition a caller reads and
writes is decided here from the caller's host-minted authority only, never from
request fields, session-key patterns or record ids:

* an operator with ``operator.read`` (or ``operator.admin``) reads every partition of
  the agent; with ``operator.write`` (or ``operator.admin``) it writes the owner's
  partition and may update or forget any record;
* a session whose audience is the owner's (``owner-private``) reads every partition
  (as Memory Core lets the owner read every transcript) and writes the owner's;
* a session with a ``conversation`` audience reads and writes only its root session's
  partition; a conversation recall pass adds the conversations it names, read-only;
* a session without an audience, a sandboxed session when ``deny_sandboxed`` is set,
  and a host authority read and write nothing. A sandboxed session never writes.

Owner records are the ``"memory"`` source; conversation records are ``"sessions"``
hits, so the host's ``authorize_search_hits`` gate applies to them as well.
"""

from __future__ import annotations

import attrs

from claw.plugin_sdk import (
    WRITE_SCOPES,
    MemoryCallerContext,
    OperatorAuthority,
    SessionAuthority,
)

OWNER = "owner"
_CONVERSATION = "conversation:"
READ_SCOPES = ("operator.read", "operator.admin")


def conversation_partition(session_key: str) -> str:
    """The partition of the conversation whose durable root session is ``session_key``."""
    return _CONVERSATION + session_key


def partition_session_key(partition: str) -> str | None:
    """The root session key of a conversation partition (``None`` for the owner's)."""
    return partition[len(_CONVERSATION) :] if partition.startswith(_CONVERSATION) else None


def source_of(partition: str) -> str:
    """The search source a partition's records are: ``memory`` (owner) or ``sessions``."""
    return "memory" if partition == OWNER else "sessions"


@attrs.frozen
class ReadScope:
    """The partitions a caller may read: every one (``everything``) or ``partitions``."""

    everything: bool = False
    partitions: frozenset[str] = frozenset()

    def admits(self, partition: str) -> bool:
        return self.everything or partition in self.partitions

    @property
    def empty(self) -> bool:
        return not self.everything and not self.partitions


NOTHING = ReadScope()
EVERYTHING = ReadScope(everything=True)


def read_scope(context: MemoryCallerContext, agent_id: str, *, deny_sandboxed: bool) -> ReadScope:
    """What ``context`` may read of ``agent_id``'s records (see the module docstring)."""
    authority = context.authority
    if isinstance(authority, OperatorAuthority):
        return EVERYTHING if any(authority.has_scope(s) for s in READ_SCOPES) else NOTHING
    if not isinstance(authority, SessionAuthority):
        return NOTHING
    if authority.sandboxed and deny_sandboxed:
        return NOTHING
    audience = authority.audience
    if audience is None or audience.agent_id != agent_id:
        return NOTHING
    if audience.kind == "owner-private":
        return EVERYTHING
    if audience.session_key is None:
        return NOTHING
    partitions = {conversation_partition(audience.session_key)}
    recall = authority.conversation_recall
    if recall is not None and recall.agent_id == agent_id:
        partitions.update(conversation_partition(k) for k in recall.conversation_keys)
    return ReadScope(partitions=frozenset(partitions))


@attrs.frozen
class WriteGrant:
    """Where a caller writes (``partition``) and whether it may change any record."""

    partition: str
    any_record: bool = False

    def may_change(self, partition: str) -> bool:
        return self.any_record or partition == self.partition


def write_grant(context: MemoryCallerContext, agent_id: str) -> WriteGrant | str:
    """Where ``context`` writes ``agent_id``'s records, or why it may not write."""
    authority = context.authority
    if isinstance(authority, OperatorAuthority):
        if any(authority.has_scope(s) for s in WRITE_SCOPES):
            return WriteGrant(partition=OWNER, any_record=True)
        return "writing memory records needs the operator.write scope"
    if not isinstance(authority, SessionAuthority):
        return "a host authority cannot write memory records"
    if authority.sandboxed:
        return "a sandboxed session has read-only access and cannot write memory records"
    audience = authority.audience
    if audience is None:
        return "this session has no memory audience, so it cannot write memory records"
    if audience.agent_id != agent_id:
        return "the memory audience belongs to another agent"
    if audience.kind == "owner-private":
        return WriteGrant(partition=OWNER)
    if audience.session_key is None:
        return "this conversation audience names no root session"
    return WriteGrant(partition=conversation_partition(audience.session_key))
