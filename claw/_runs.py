"""Runs: one admitted invocation of a session, and the capabilities minted for it alone.

``async with host.open_run(session_key, sender_is_owner=..., sandboxed=...) as run:``
opens a host-owned scope (a nursery) for the run and mints, for it only, the run's
:class:`~claw.SessionAuthority`, its :class:`~claw.MemoryAudience` (or none) and the
:class:`~claw.MemoryCallerContext` its tools and the host's memory consumers use.
Leaving the run revokes all of it.

``sender_is_owner`` is a fact the embedding application (the channel layer) asserts
when it admits the turn; it never comes from the model or from message text. The
audience is resolved once, from that fact and the durable session lineage, by the
rules in :mod:`claw.sessions`; it is bound to the run's session and to the incarnation
of every session in its lineage, so a reset, a reassignment, a delete, or the end of
the run makes it stale (``assert_current()`` raises "memory audience is no longer
current"). A conversation recall pass is bound the same way to the incarnation of every
conversation it names. Audience revocation does not cancel the run: providers must call
``assert_current()`` before each effect.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import attrs
import trio

from ._capabilities import (
    AUDIENCE_STALE_MESSAGE,
    ConversationRecallPass,
    FlushIdentity,
    MemoryAudience,
    MemoryCallerContext,
    SessionAuthority,
)
from ._currency import RECALL_STALE_REASON, Currency, recall_current
from ._errors import CapabilityDeniedError, CurrencyPendingError
from ._scopes import HostScope, Scopes
from ._util import NoPublicConstructor, final
from .sessions import (
    ChatType,
    LineageLink,
    NoAudience,
    ResolvedAudience,
    SessionNotFoundError,
    SessionRow,
    explain_audience,
    explain_detached_child,
    is_lineage_current,
    resolve_audience,
)
from .sessions._errors import unknown_session
from .state import SessionStorage

logger = logging.getLogger("claw.runs")


@final
class Run(metaclass=NoPublicConstructor):
    """One admitted run of a session; see the module docstring.

    ``authority``, ``audience`` and ``caller`` are valid only inside the ``async with``
    block that opened the run. ``nursery`` runs the run's tasks; ``cancel_scope``
    aborts the run (and is the caller context's abort signal).
    """

    def __init__(
        self,
        opener: RunOpener,
        scope: HostScope,
        *,
        session_key: str,
        agent_id: str,
        session: SessionRow | None,
        authority: SessionAuthority,
        caller: MemoryCallerContext,
        sender_is_owner: bool,
        no_audience_reason: str | None,
    ) -> None:
        self._opener = opener
        self._scope = scope
        #: Why the run has no memory audience (``None`` when it has one): stale
        #: lineage, an ineligible chat type, an unverified session id, a lineage too
        #: deep, a child that predates spawn receipts, ... so a user can tell why
        #: memory is silent.
        self.no_audience_reason: str | None = no_audience_reason
        self.session_key: str = session_key
        self.agent_id: str = agent_id
        self.session: SessionRow | None = session
        self.authority: SessionAuthority = authority
        self.caller: MemoryCallerContext = caller
        self.sender_is_owner: bool = sender_is_owner

    @property
    def audience(self) -> MemoryAudience | None:
        """The run's memory audience, or ``None`` (no private or conversation grant)."""
        return self.authority.audience

    @property
    def nursery(self) -> trio.Nursery:
        """The run's nursery; its tasks end before the run's capabilities are revoked."""
        return self._scope.nursery

    @property
    def cancel_scope(self) -> trio.CancelScope:
        """Cancelling this aborts the run."""
        return self.caller.cancel_scope

    @property
    def scope(self) -> HostScope:
        """The host scope that minted the run's capabilities (host-internal use)."""
        return self._scope

    async def spawn_child(self, child_key: str, *, chat_type: ChatType | None = None) -> SessionRow:
        """Spawn ``child_key`` under this run's session, recording this turn's spawn receipt.

        The receipt is this run's ``sender_is_owner`` (the channel layer's fact for the
        spawning turn); the child's audience comes from it and the root's chat type.
        """
        return await self._opener.sessions.spawn_child(
            self.session_key, child_key, sender_is_owner=self.sender_is_owner, chat_type=chat_type
        )

    def _check_delegable(self) -> None:
        audience = self.audience
        if audience is not None:
            # Delegating from a stale audience is an error, never a silent "no audience".
            self._opener.currency.verify(audience, session_key=self.session_key)

    def open_child_run(
        self, child_key: str, *, sandboxed: bool | None = None
    ) -> AbstractAsyncContextManager[Run]:
        """Open a host-mediated child run of ``child_key`` inside this run.

        The child gets a new audience bound to the child session's current incarnation
        (or, when ``child_key`` has no row, to the absence of one: a detached child),
        sharing this run's lineage and revocation: it is stale once this run's audience
        is, and a reset or reassignment of the child rejects it too. It is never wider
        than this run's audience. A child session of another agent is refused
        (:class:`~claw.CapabilityDeniedError`), and so is delegating from an audience that
        is no longer current (:class:`~claw.StaleCapabilityError`).
        """
        self._check_delegable()
        row = self._opener.sessions.get_nowait(child_key)
        if row is not None and row.agent_id != self.agent_id:
            raise CapabilityDeniedError(
                f"session {child_key!r} belongs to agent {row.agent_id!r}; a run of agent "
                f"{self.agent_id!r} cannot open a child run for it"
            )
        return self._opener._open(
            child_key,
            sender_is_owner=self.sender_is_owner,
            sandboxed=self.authority.sandboxed if sandboxed is None else sandboxed,
            _parent=self,
            _detached_parent_key=None if row is not None else self.session_key,
        )

    def open_maintenance_run(self, detached_key: str) -> AbstractAsyncContextManager[Run]:
        """Open a detached internal run for host maintenance (the memory flush) of this run.

        ``detached_key`` must have no session row. The run's audience is this run's,
        resolved from the source's trusted session facts and sender ownership and
        delegated to ``detached_key``, keeping the source lineage and revocation (it is
        stale once this run's audience is, or once a row appears for ``detached_key``).
        The maintenance copy itself has ``sender_is_owner = False``: providers authorize
        through the supplied audience, never through that flag.
        """
        self._check_delegable()
        if self._opener.sessions.get_nowait(detached_key) is not None:
            raise CapabilityDeniedError(
                f"{detached_key!r} is a stored session; a maintenance run needs a detached key"
            )
        return self._opener._open(
            detached_key,
            sender_is_owner=self.sender_is_owner,
            sandboxed=self.authority.sandboxed,
            _parent=self,
            _detached_parent_key=self.session_key,
            _maintenance=True,
        )

    def mint_flush_identity(self, flush_id: str, source_session_key: str) -> FlushIdentity:
        """Mint this (maintenance) run's flush identity, revoked when the run ends."""
        return self._scope.mint(
            FlushIdentity,
            flush_id=flush_id,
            source_session_key=source_session_key,
            bound_session_key=self.session_key,
        )


@attrs.define(eq=False)
class RunOpener:
    """Opens runs and mints their capabilities; built by ``open_host``.

    It receives what a run needs and nothing else: the scopes to mint in, the session
    store (lineage resolution reads its mirror), the currency checker (which keeps
    each audience's lineage for the release check) and the default agent's id (for the
    advice an unknown session's error gives).
    """

    scopes: Scopes
    sessions: SessionStorage
    currency: Currency
    #: The agent named in the advice an unknown session's error gives.
    default_agent_id: str

    def open(
        self,
        session_key: str,
        *,
        sender_is_owner: bool,
        sandboxed: bool = False,
        conversation_recall: Iterable[str] | None = None,
        recall_purpose: str = "active-memory-recall",
    ) -> AbstractAsyncContextManager[Run]:
        """Open a run of ``session_key``; see :meth:`claw.Host.open_run`."""
        return self._open(
            session_key,
            sender_is_owner=sender_is_owner,
            sandboxed=sandboxed,
            conversation_recall=conversation_recall,
            recall_purpose=recall_purpose,
        )

    def _mint_audience(
        self,
        scope: HostScope,
        resolved: ResolvedAudience | None,
        *,
        session_key: str,
        parent: MemoryAudience | None = None,
    ) -> MemoryAudience | None:
        if resolved is None:
            return None
        store = self.sessions
        currency = self.currency
        lineage = resolved.lineage
        keys = tuple(link.key for link in lineage)

        def current() -> bool:
            if store.pending_nowait(keys):
                # The database may already hold a new incarnation the mirror does not show.
                raise CurrencyPendingError(
                    "memory audience currency is unavailable while a write to a session in "
                    "its lineage is in flight; retry once it finishes"
                )
            if parent is not None and not currency.is_live(parent):
                return False
            return is_lineage_current(store, lineage)

        audience = scope.mint(
            MemoryAudience,
            kind=resolved.kind,
            agent_id=resolved.agent_id,
            session_key=resolved.session_key,
            session_id=resolved.session_id,
            bound_session_key=session_key,
            lineage_keys=keys,
            check=current,
            stale_message=AUDIENCE_STALE_MESSAGE,
        )
        currency.record_audience(audience, lineage, parent)
        return audience

    def _mint_recall_pass(
        self,
        scope: HostScope,
        *,
        agent_id: str,
        session_key: str,
        conversations: Iterable[str],
        purpose: str,
    ) -> ConversationRecallPass:
        keys = frozenset(conversations)
        if isinstance(conversations, str) or not keys:
            raise ValueError("a conversation recall pass names at least one conversation key")
        store = self.sessions
        links: list[LineageLink] = []
        for key in sorted(keys):
            row = store.get_nowait(key)
            if row is None:
                raise SessionNotFoundError(key)
            if row.agent_id != agent_id:
                raise CapabilityDeniedError(
                    f"conversation {key!r} belongs to agent {row.agent_id!r}, not {agent_id!r}"
                )
            if row.parent_key is not None:
                raise CapabilityDeniedError(
                    f"conversation {key!r} is a child session; a recall pass names root "
                    "conversations"
                )
            links.append(LineageLink(key, row.session_id, row.lifecycle_revision))
        named = tuple(links)
        names = tuple(link.key for link in named)

        def current() -> bool:
            if store.pending_nowait(names):
                raise CurrencyPendingError(
                    "conversation recall pass currency is unavailable while a write to a "
                    "conversation it names is in flight; retry once it finishes"
                )
            return recall_current(store, named)

        recall = scope.mint(
            ConversationRecallPass,
            agent_id=agent_id,
            holder_session_key=session_key,
            conversation_keys=keys,
            purpose=purpose,
            bound_session_key=session_key,
            lineage_keys=names,
            check=current,
            stale_message=RECALL_STALE_REASON,
        )
        self.currency.record_recall(recall, named)
        return recall

    @asynccontextmanager
    async def _open(
        self,
        session_key: str,
        *,
        sender_is_owner: bool,
        sandboxed: bool = False,
        conversation_recall: Iterable[str] | None = None,
        recall_purpose: str = "active-memory-recall",
        _parent: Run | None = None,
        _detached_parent_key: str | None = None,
        _maintenance: bool = False,
    ) -> AsyncIterator[Run]:
        if not isinstance(sender_is_owner, bool):
            raise TypeError(f"sender_is_owner must be True or False, got {sender_is_owner!r}")
        if not isinstance(sandboxed, bool):
            raise TypeError(f"sandboxed must be True or False, got {sandboxed!r}")
        store = self.sessions
        # Start from the committed rows: another process may have created, reset or
        # deleted a session of this run since the watcher last looked.
        await store.refresh()
        row = store.get_nowait(session_key)
        found: ResolvedAudience | NoAudience
        if _detached_parent_key is not None:
            parent_row = store.get_nowait(_detached_parent_key)
            if parent_row is None:
                raise SessionNotFoundError(_detached_parent_key)
            agent_id = parent_row.agent_id
            found = (
                explain_detached_child(
                    store, session_key, _detached_parent_key, sender_is_owner=sender_is_owner
                )
                if row is None
                else explain_audience(store, session_key, sender_is_owner=sender_is_owner)
            )
        else:
            if row is None:
                raise unknown_session(session_key, agent_id=self.default_agent_id)
            agent_id = row.agent_id
            found = explain_audience(store, session_key, sender_is_owner=sender_is_owner)
        parent_audience = _parent.audience if _parent is not None else None
        if _parent is not None and isinstance(found, ResolvedAudience):
            found = _inherit(store, _parent, found)
        resolved = found if isinstance(found, ResolvedAudience) else None
        reason = found.reason if isinstance(found, NoAudience) else None
        if reason is not None:
            logger.debug("run of %s has no memory audience: %s", session_key, reason)
        async with self.scopes.open(f"run:{session_key}") as scope:
            audience = self._mint_audience(
                scope, resolved, session_key=session_key, parent=parent_audience
            )
            recall = (
                self._mint_recall_pass(
                    scope,
                    agent_id=agent_id,
                    session_key=session_key,
                    conversations=conversation_recall,
                    purpose=recall_purpose,
                )
                if conversation_recall is not None
                else None
            )
            authority = scope.mint(
                SessionAuthority,
                session_key=session_key,
                agent_id=agent_id,
                session_id=row.session_id if row is not None else None,
                lifecycle_revision=row.lifecycle_revision if row is not None else None,
                sandboxed=sandboxed,
                audience=audience,
                conversation_recall=recall,
                bound_session_key=session_key,
            )
            caller = scope.mint_caller_context(
                authority, cancel_scope=scope.nursery.cancel_scope, purpose="run"
            )
            yield Run._create(
                self,
                scope,
                session_key=session_key,
                agent_id=agent_id,
                session=row,
                authority=authority,
                caller=caller,
                sender_is_owner=False if _maintenance else sender_is_owner,
                no_audience_reason=reason,
            )


def _inherit(
    store: SessionStorage, parent: Run, resolved: ResolvedAudience
) -> ResolvedAudience | NoAudience:
    """A child inherits only within its parent's audience and root conversation, never wider."""
    key = resolved.invocation_key
    parent_audience = parent.audience
    if parent_audience is None:
        reason = parent.no_audience_reason or "no audience"
        return NoAudience(key, f"its parent run of {parent.session_key!r} has none ({reason})")
    parent_resolved = resolve_audience(store, parent.session_key, sender_is_owner=False)
    if parent_resolved is None or parent_resolved.root.key != resolved.root.key:
        return NoAudience(
            key, f"{key!r} is not in the conversation of its parent run {parent.session_key!r}"
        )
    if parent_audience.kind == "conversation" and resolved.kind == "owner-private":
        root = parent_resolved.root
        return attrs.evolve(
            resolved, kind="conversation", session_key=root.key, session_id=root.session_id
        )
    return resolved
