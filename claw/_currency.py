"""The currency checker: whether a capability is still current, and the release check.

Every part that must refuse a stale caller (the memory guard, the run opener, tool
dispatch, the gateway, the flush) receives one :class:`Currency` from ``open_host``
instead of the host. It answers three questions:

* :meth:`Currency.verify`: is this capability current by the host's own records (the
  registry, and through the capabilities' checks the session mirror)? Synchronous, no
  I/O; raises :class:`~claw.CurrencyPendingError` while a write of this process to a
  session it depends on is in flight.
* :meth:`Currency.verify_committed`: the release check. The same, and then the
  database's word on the lineage of the caller's audience and the conversations its
  recall pass names, so a reset committed by another process refuses the release even
  before this process heard of it.
* :meth:`Currency.wait_for_writes`: wait until this process's session writes are seen,
  so a pending check can be tried again (:meth:`await_current`, :meth:`await_committed`).

It also keeps what the release check re-reads: the lineage each audience was resolved
at and the conversations each recall pass names, recorded by the run opener when it
mints them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs

from ._capabilities import (
    CapabilityRegistry,
    ConversationRecallPass,
    MemoryAudience,
    MemoryCallerContext,
    SessionAuthority,
)
from ._errors import CurrencyPendingError
from ._weak import WeakIdentityMap
from .sessions import LineageLink, SessionView, is_lineage_current
from .state import SessionStorage

#: Why a recall pass went stale: a conversation it names was reset, reassigned or deleted.
RECALL_STALE_REASON = "a conversation it names changed incarnation"

RequestCheck = Callable[[], None]
"""A caller's own extra condition, checked with every currency check of a request (the
gateway's: its connection is still open and its client's authority not revoked; an
aborted request needs no condition of its own, its caller context is stale)."""


@attrs.frozen
class AudienceLineage:
    """What the release check re-reads for one audience: the incarnations it was minted
    for, and the audience it was delegated from (whose lineage must be current too)."""

    links: tuple[LineageLink, ...]
    parent: MemoryAudience | None

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(link.key for link in self.links)

    def current_in(self, view: SessionView) -> bool:
        return is_lineage_current(view, self.links)


def recall_current(view: SessionView, named: tuple[LineageLink, ...]) -> bool:
    """Whether every conversation a recall pass names keeps the incarnation it had at
    minting (each is a root conversation: a lineage of one)."""
    return bool(named) and all(is_lineage_current(view, (link,)) for link in named)


@attrs.define(eq=False)
class Currency:
    """The host's currency checker (see the module docstring); built by ``open_host``."""

    _registry: CapabilityRegistry
    _sessions: SessionStorage
    #: The lineage each minted audience was resolved at (see :meth:`verify_committed`).
    #: Weak tables whose references lead nowhere (``claw._weak``): a
    #: ``WeakKeyDictionary`` would hand every audience to whoever holds one.
    _lineages: WeakIdentityMap[MemoryAudience, AudienceLineage] = attrs.field(
        factory=WeakIdentityMap, init=False
    )
    #: The conversations (and incarnations) each minted recall pass names.
    _recalls: WeakIdentityMap[ConversationRecallPass, tuple[LineageLink, ...]] = attrs.field(
        factory=WeakIdentityMap, init=False
    )

    def verify(self, capability: object, *, session_key: str | None = None) -> None:
        """Return ``None`` while ``capability`` is current; raise otherwise.

        :class:`~claw.ForgedCapabilityError` for anything this host did not mint,
        :class:`~claw.StaleCapabilityError` once it was revoked or its incarnation
        changed, :class:`~claw.CapabilityDeniedError` when it is bound to another
        session than ``session_key``.
        """
        self._registry.verify(capability, session_key=session_key)

    def is_live(self, capability: object) -> bool:
        """Whether ``capability`` was minted here, is unaltered and still honoured
        (without running its incarnation check)."""
        return self._registry.is_live(capability)

    async def wait_for_writes(self) -> None:
        """Wait until no session write of this process is in flight."""
        await self._sessions.wait_for_writes()

    def record_audience(
        self,
        audience: MemoryAudience,
        links: tuple[LineageLink, ...],
        parent: MemoryAudience | None,
    ) -> None:
        """Remember the lineage ``audience`` was minted for (the run opener calls this)."""
        self._lineages[audience] = AudienceLineage(links, parent)

    def record_recall(self, recall: ConversationRecallPass, named: tuple[LineageLink, ...]) -> None:
        """Remember the conversations ``recall`` names (the run opener calls this)."""
        self._recalls[recall] = named

    def revoke_session(self, session_key: str, reason: str) -> None:
        """Revoke everything bound to ``session_key``'s incarnation (a session changed)."""
        self._registry.revoke_session(session_key, reason)

    async def verify_committed(self, context: MemoryCallerContext) -> None:
        """The release check: :meth:`verify`, and then the database's word on the lineage.

        For a context whose authority carries a memory audience, re-read from the
        session store (not the mirror) the committed incarnation of every session in
        the audience's lineage, and of the lineages it was delegated from; if any
        changed (a reset, reassignment or delete committed by any process), revoke the
        audience and raise :class:`~claw.StaleCapabilityError`. A conversation recall
        pass is checked in the same read: if a conversation it names changed
        incarnation, the pass is revoked and the check raises. Fail closed: a store
        that cannot answer raises too. Authorities with neither carry no lineage and
        cost no read. May raise :class:`~claw.CurrencyPendingError` (retryable)
        while a write of this process to the lineage is in flight.
        """
        self.verify(context)
        authority = context.authority
        if not isinstance(authority, SessionAuthority):
            return
        audience, recall = authority.audience, authority.conversation_recall
        if audience is None and recall is None:
            return
        chain: list[AudienceLineage] = []
        link: MemoryAudience | None = audience
        while link is not None:
            entry = self._lineages.get(link)
            if entry is None:  # pragma: no cover - every minted audience is recorded
                self._registry.revoke(link, "its lineage is unknown")
                break
            chain.append(entry)
            link = entry.parent
        named = self._recalls.get(recall, ()) if recall is not None else ()
        keys = dict.fromkeys(
            [*(key for entry in chain for key in entry.keys), *(n.key for n in named)]
        )
        committed = await self._sessions.read_committed(keys)
        if audience is not None and not all(entry.current_in(committed) for entry in chain):
            self._registry.revoke(
                audience,
                "a session in its lineage changed incarnation (committed in the session store)",
            )
        if recall is not None and not recall_current(committed, named):
            self._registry.revoke(recall, f"{RECALL_STALE_REASON} (committed in the session store)")
        # Raises for the revocation above, and for anything revoked while we read.
        self.verify(context)

    def current_now(self, context: MemoryCallerContext, also: RequestCheck | None = None) -> bool:
        """:meth:`verify` ``context`` (and ``also``) at once: ``True`` when current,
        ``False`` while a session write it depends on is in flight (:meth:`await_current`
        waits that out); raises as :meth:`verify` does otherwise. The common check, with
        nothing to wait for, costs no coroutine."""
        try:
            if also is not None:
                also()
            self.verify(context)
        except CurrencyPendingError:
            return False
        return True

    async def await_current(
        self, context: MemoryCallerContext, also: RequestCheck | None = None
    ) -> None:
        """:meth:`verify` ``context`` (and ``also``); while a session write is in flight,
        wait for it and check again. The check runs at once first: the common case does
        not wait (nor build the retry loop)."""
        if self.current_now(context, also):
            return

        def check() -> None:
            if also is not None:
                also()
            self.verify(context)

        await _retry_pending(check, self.wait_for_writes)

    def committed_now(self, context: MemoryCallerContext, also: RequestCheck | None = None) -> bool:
        """The release check at once, where it needs no read: ``True`` for a current
        caller whose authority carries no lineage (an operator, a host operation, a
        session without audience or recall pass: nothing committed to read, so its check
        is :meth:`verify`); ``False`` when the check must read the session store or wait
        for a session write (:meth:`await_committed` does both); raises as :meth:`verify`
        does otherwise."""
        # Read as any attribute: a forged context is refused by verify, not here.
        authority = getattr(context, "authority", None)
        if isinstance(authority, SessionAuthority) and (
            authority.audience is not None or authority.conversation_recall is not None
        ):
            return False
        # Nothing is awaited here: ``also`` once, with the capability check (the slow
        # path of await_committed checks it again after its read).
        return self.current_now(context, also)

    async def await_committed(
        self, context: MemoryCallerContext, also: RequestCheck | None = None
    ) -> None:
        """:meth:`verify_committed` (and ``also``), waiting out in-flight session writes:
        what a result's release and a write's effect are preceded by. A caller whose
        authority carries no lineage (an operator, a host operation, a session without
        audience or recall pass) has nothing committed to read: its check is
        :meth:`verify`, made at once."""
        if self.committed_now(context, also):
            return

        async def check() -> None:
            if also is not None:
                also()
            await self.verify_committed(context)
            if also is not None:
                also()

        await _retry_pending_async(check, self.wait_for_writes)


async def _retry_pending(
    check: Callable[[], None], wait_for_writes: Callable[[], Awaitable[None]]
) -> None:
    while True:
        try:
            check()
        except CurrencyPendingError:
            await wait_for_writes()
            continue
        return


async def _retry_pending_async(
    check: Callable[[], Awaitable[None]], wait_for_writes: Callable[[], Awaitable[None]]
) -> None:
    while True:
        try:
            await check()
        except CurrencyPendingError:
            await wait_for_writes()
            continue
        return
