"""The capability kernel: unforgeable, unreplayable grants that only the host mints.

Every access to memory in claw is made with a capability object: a caller authority
(operator, session or host), a memory audience, a flush identity, a conversation
recall pass, and the :class:`MemoryCallerContext` that carries an authority to a
provider. This module defines those classes and the registry that decides whether a
presented object is one the host minted and still honours.

Threat model. The kernel guards against mistakes, against buggy or over-reaching
plugins running in the same process, and (through the gateway, which never sends a
capability over the wire) against every remote caller. It does *not* guard against
hostile code in the same interpreter: Python has no in-process isolation, and such
code can reach the host's registry like anything else. Real isolation needs a process
boundary.

What the kernel enforces, and how:

* No public constructor: calling a capability class raises :class:`TypeError`; the
  host mints through the private ``_create`` factory (the shape trio uses for
  ``Nursery`` and ``Task``).
* Final at runtime: subclassing a capability class raises :class:`TypeError` at class
  creation, so no plugin can make a look-alike that passes ``isinstance``.
* Identity, not value: ``eq=False`` makes equality and hashing by identity;
  ``copy.copy``/``copy.deepcopy`` return the same object, and pickling refuses, so a
  capability cannot be duplicated or carried out of the process.
* Validity is identity membership in the registry of the host that minted it, never
  ``isinstance`` or field equality: an instance built with ``object.__new__`` (and
  fields poked in) is refused with :class:`~claw.ForgedCapabilityError`.
* Unaltered: the registry records each capability's field values at minting and
  compares them by identity on every verification, so a field rewritten through
  ``object.__setattr__`` (which ``frozen`` cannot stop) is refused as forged, for good.
* Nothing leads back: a caller context does not hold the registry (``assert_current``
  finds it in a module-private table), and the weak references the host's tables hold
  to capabilities carry no callback that leads back to a table (:mod:`claw._weak`), so
  no attribute or weak-reference path from what a plugin holds reaches minting power
  or another caller's capability (docs/threat-model.md says exactly what remains).
* Everything is minted inside a host-owned scope (a run, a gateway connection, a
  detached flush session, a host operation); when the scope closes, what it minted is
  revoked and is refused with :class:`~claw.StaleCapabilityError` from then on.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Literal, NoReturn, TypeVar

import attrs
import trio

from ._errors import CapabilityDeniedError, ForgedCapabilityError, StaleCapabilityError
from ._weak import WeakIdentityMap, WeakIdentitySet

AUDIENCE_STALE_MESSAGE = "memory audience is no longer current"

C = TypeVar("C", bound="Capability")


class _CapabilityMeta(type):
    """Refuses public construction and subclassing of final capability classes."""

    def __new__(
        mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any
    ) -> _CapabilityMeta:
        for base in bases:
            if base.__dict__.get("_claw_final", False):
                raise TypeError(
                    f"{base.__module__}.{base.__qualname__} is final: capability classes "
                    "cannot be subclassed"
                )
        return super().__new__(mcls, name, bases, namespace, **kwargs)

    def __call__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} has no public constructor: "
            "capabilities are minted by the host"
        )

    def _create(cls, *args: Any, **kwargs: Any) -> Any:
        return super().__call__(*args, **kwargs)


def _final(cls: type[C]) -> type[C]:
    cls._claw_final = True  # type: ignore[attr-defined]
    return cls


class Capability(metaclass=_CapabilityMeta):
    """Base of every capability class; never instantiated itself.

    Instances are values the host minted; hold them, pass them to the host, but do
    not expect to build, copy or pickle them.
    """

    __slots__ = ("__weakref__",)

    kind_name: ClassVar[str] = "capability"

    def __copy__(self: C) -> C:
        return self

    def __deepcopy__(self: C, memo: dict[int, Any]) -> C:
        return self

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise TypeError(
            f"{type(self).__qualname__} cannot be pickled: capabilities do not leave the host"
        )

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            f"{type(self).__qualname__} cannot be pickled: capabilities do not leave the host"
        )


_cap = attrs.frozen(eq=False, slots=True, weakref_slot=False, repr=True)


@_final
@_cap
class MemoryAudience(Capability):
    """Whose memory a turn may see: the agent owner's private memory, or one conversation's.

    ``kind`` is ``"owner-private"`` (a direct turn from the agent's trusted owner) or
    ``"conversation"`` (any other direct sender, or a group, channel or thread turn),
    in which case ``session_key`` and ``session_id`` name the durable *root* session.
    The host binds each audience to the session it was minted for and to the
    incarnation of every session in its lineage; it goes stale when any of them
    changes or when the run that owns it ends.
    """

    kind_name: ClassVar[str] = "memory audience"

    kind: Literal["owner-private", "conversation"]
    agent_id: str
    session_key: str | None = None
    session_id: str | None = None


@_final
@_cap
class ConversationRecallPass(Capability):
    """A bounded pass to recall named conversations, granted to one session's tool context.

    Minted by the host for a run (for example an Active Memory recall run); it names the
    agent, the holder session and the root conversation keys it admits. There is no way
    to build one from model output or request data.
    """

    kind_name: ClassVar[str] = "conversation recall pass"

    agent_id: str
    holder_session_key: str
    conversation_keys: frozenset[str]
    purpose: str = "recall"


@_final
@_cap
class FlushIdentity(Capability):
    """The deterministic id of one pre-compaction flush cycle.

    Derived from the source session incarnation and its compaction count, so retries
    and model fallbacks in one cycle share it. It lets providers deduplicate retried
    mutations; it grants no authority.
    """

    kind_name: ClassVar[str] = "flush identity"

    flush_id: str
    source_session_key: str


@_final
@_cap
class OperatorAuthority(Capability):
    """An authenticated operator: the scopes it was granted and its connection, if any."""

    kind_name: ClassVar[str] = "operator authority"

    scopes: frozenset[str]
    connection_id: str | None = None

    @property
    def kind(self) -> Literal["operator"]:
        return "operator"

    def has_scope(self, scope: str) -> bool:
        """Whether this authority was granted ``scope`` (for example ``operator.read``)."""
        return scope in self.scopes


@_final
@_cap
class SessionAuthority(Capability):
    """The authority of one admitted session run.

    Carries the real session key and id, whether the run is sandboxed, the audience
    the host resolved (``None``: no private or conversation grant) and the conversation
    recall pass the host granted the run's tool context, if any. ``lifecycle_revision``
    is the session's lifecycle revision when the run was admitted: with ``session_id``,
    the incarnation the run belongs to (what a memory write's provenance records).
    """

    kind_name: ClassVar[str] = "session authority"

    session_key: str
    agent_id: str
    session_id: str | None = None
    sandboxed: bool = False
    audience: MemoryAudience | None = None
    conversation_recall: ConversationRecallPass | None = None
    lifecycle_revision: int | None = None

    @property
    def kind(self) -> Literal["session"]:
        return "session"


@_final
@_cap
class HostAuthority(Capability):
    """A named host operation (``"status"``, ``"refresh"``, ...).

    Not an operator and not a private-session grant: it admits health checks and the
    host's own maintenance, never private or conversation memory.
    """

    kind_name: ClassVar[str] = "host authority"

    operation: str

    @property
    def kind(self) -> Literal["host"]:
        return "host"


CallerAuthority = OperatorAuthority | SessionAuthority | HostAuthority


@_final
@_cap
class MemoryCallerContext(Capability):
    """What a memory provider receives with every call: who is asking, and whether they still may.

    ``authority`` is the caller's authority. ``cancel_scope`` stands for the request's
    abort signal: request abort and connection close cancel it. ``assert_current()``
    raises :class:`~claw.StaleCapabilityError` once the context, its authority or its
    audience is no longer current; audience revocation does not cancel the scope, so
    providers call it immediately before each effect, including after their own awaits.
    """

    kind_name: ClassVar[str] = "memory caller context"

    authority: CallerAuthority
    cancel_scope: trio.CancelScope
    purpose: str = "read"

    def assert_current(self) -> None:
        """Raise unless this context, its authority and audience are all still current."""
        registry = _CONTEXT_REGISTRY_DATA.get(weakref.ref(self))
        if registry is None:
            raise ForgedCapabilityError(
                "this memory caller context was not minted by a host (forged)"
            )
        registry.verify(self)

    def assert_current_for(self, agent_id: str) -> None:
        """:meth:`assert_current`, and refuse a caller whose audience is another agent's.

        What a memory provider checks when it opens agent ``agent_id``'s memory for this
        caller; the providers call it rather than each spelling the rule.
        """
        audience = self.audience
        if audience is not None and audience.agent_id != agent_id:
            raise CapabilityDeniedError("memory audience belongs to another agent")
        self.assert_current()

    @property
    def session_key(self) -> str | None:
        """The caller's session key, for session authority; else ``None``."""
        return self.authority.session_key if isinstance(self.authority, SessionAuthority) else None

    @property
    def audience(self) -> MemoryAudience | None:
        """The caller's memory audience, for session authority; else ``None``."""
        return self.authority.audience if isinstance(self.authority, SessionAuthority) else None


CAPABILITY_CLASSES: tuple[type[Capability], ...] = (
    MemoryAudience,
    ConversationRecallPass,
    FlushIdentity,
    OperatorAuthority,
    SessionAuthority,
    HostAuthority,
    MemoryCallerContext,
)


def _field_reader(cls: type[Capability]) -> Callable[[Capability], tuple[object, ...]]:
    names = [a.name for a in attrs.fields(cls)]  # type: ignore[arg-type]
    if len(names) == 1:
        read_one = operator.attrgetter(names[0])
        return lambda cap: (read_one(cap),)
    read_all: Callable[[Capability], tuple[object, ...]] = operator.attrgetter(*names)
    return read_all


def _same(now: tuple[object, ...], minted: tuple[object, ...]) -> bool:
    """Whether two field snapshots hold the very same objects, position by position."""
    return all(map(operator.is_, now, minted))


#: How to read each capability class's fields, for the snapshot taken at minting.
_FIELD_READERS: dict[type[Capability], Callable[[Capability], tuple[object, ...]]] = {
    cls: _field_reader(cls) for cls in CAPABILITY_CLASSES
}

#: Which registry minted each caller context. It lives here, not on the context, so that
#: no attribute path from a context (which every provider and tool receives) leads to
#: the registry and its minting power; ``assert_current`` looks it up. A
#: ``WeakIdentityMap``, not a ``WeakKeyDictionary``: the latter's weak references (which
#: ``weakref.getweakrefs(context)`` hands to anyone) lead back to the table through
#: their callback. See docs/threat-model.md for what remains reachable.
_CONTEXT_REGISTRIES: WeakIdentityMap[MemoryCallerContext, CapabilityRegistry] = WeakIdentityMap()
# Its dict (weak reference -> registry), read directly by ``assert_current``.
_CONTEXT_REGISTRY_DATA: dict[weakref.ref[MemoryCallerContext], CapabilityRegistry] = (
    _CONTEXT_REGISTRIES.data
)


@attrs.define(eq=False)
class _Grant:
    """The host's private record of one minted capability.

    ``fields`` is the capability's field values at minting (compared by identity on
    every verification, so a rewrite through ``object.__setattr__`` is refused).
    """

    scope_name: str
    fields: tuple[object, ...]
    bound_session_key: str | None = None
    check: Callable[[], bool] | None = None
    stale_message: str | None = None
    # The capability class's field reader, kept here so a verification looks up nothing.
    read: Callable[[Capability], tuple[object, ...]] = attrs.field(kw_only=True)

    def fields_unchanged(self, cap: Capability) -> bool:
        return _same(self.read(cap), self.fields)


@attrs.define(eq=False)
class CapabilityRegistry:
    """The host's record of what it minted and what it still honours.

    Membership is by identity (capabilities compare by identity and are held weakly
    here, by references whose callbacks lead nowhere: :mod:`claw._weak`), so a forged or
    copied object is never found. Owned by one host; presenting another host's
    capability is treated as forgery.
    """

    _live: WeakIdentityMap[Capability, _Grant] = attrs.field(factory=WeakIdentityMap, init=False)
    _revoked: WeakIdentityMap[Capability, str] = attrs.field(factory=WeakIdentityMap, init=False)
    _by_session: dict[str, WeakIdentitySet[Capability]] = attrs.field(factory=dict, init=False)
    _altered: WeakIdentitySet[Capability] = attrs.field(factory=WeakIdentitySet, init=False)
    # ``_live``'s own dict (weak reference -> grant): a verification looks a capability
    # up there directly, without the mapping's Python-level ``get``.
    _live_data: dict[weakref.ref[Capability], _Grant] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._live_data = self._live.data

    def mint(
        self,
        cls: type[C],
        *,
        scope_name: str,
        bound_session_key: str | None = None,
        lineage_keys: Iterable[str] = (),
        check: Callable[[], bool] | None = None,
        stale_message: str | None = None,
        **fields: Any,
    ) -> C:
        """Create and record one capability (host-internal)."""
        cap: C = cls._create(**fields)
        if isinstance(cap, MemoryCallerContext):
            _CONTEXT_REGISTRIES[cap] = self
        read = _FIELD_READERS[cls]
        self._live[cap] = _Grant(
            scope_name=scope_name,
            fields=read(cap),
            bound_session_key=bound_session_key,
            check=check,
            stale_message=stale_message,
            read=read,
        )
        for key in lineage_keys:
            self._by_session.setdefault(key, WeakIdentitySet()).add(cap)
        return cap

    def revoke(self, cap: Capability, reason: str = "its scope closed") -> None:
        """Stop honouring ``cap``; later presentations raise StaleCapabilityError."""
        if self._live.pop(cap, None) is not None:
            self._revoked[cap] = reason

    def revoke_session(self, session_key: str, reason: str) -> int:
        """Revoke everything bound to ``session_key``'s incarnation; returns how many."""
        caps = self._by_session.pop(session_key, None)
        if not caps:
            return 0
        count = 0
        for cap in list(caps):
            if cap in self._live:
                self.revoke(cap, reason)
                count += 1
        return count

    def is_live(self, cap: object) -> bool:
        """Whether ``cap`` is a capability this registry minted, unaltered, and still honours."""
        if not isinstance(cap, Capability):
            return False
        grant = self._live.get(cap)
        return grant is not None and grant.fields_unchanged(cap)

    def _refuse_altered(self, cap: Capability) -> NoReturn:
        self._live.pop(cap, None)
        self._altered.add(cap)
        raise ForgedCapabilityError(
            f"this {cap.kind_name} was altered after minting: its fields differ from what "
            "the host minted"
        )

    def verify(
        self,
        cap: object,
        *,
        expected: type[Capability] | tuple[type[Capability], ...] | None = None,
        session_key: str | None = None,
    ) -> None:
        """Return ``None`` if ``cap`` is current; raise otherwise.

        Raises :class:`~claw.ForgedCapabilityError` for an object this registry never
        minted, :class:`~claw.StaleCapabilityError` for one it revoked or whose bound
        incarnation changed, and :class:`~claw.CapabilityDeniedError` for a current one
        presented where it does not belong (wrong kind, or an audience or context bound
        to another session than ``session_key``). Nested capabilities (a session
        authority's audience and recall pass, a caller context's authority) are verified
        too.
        """
        if expected is not None and not isinstance(cap, expected):
            names = (
                expected.__name__
                if isinstance(expected, type)
                else " or ".join(e.__name__ for e in expected)
            )
            raise CapabilityDeniedError(f"expected a {names}, got {type(cap).__name__}")
        if not isinstance(cap, Capability):
            raise ForgedCapabilityError(f"{type(cap).__name__} is not a claw capability")
        self._verify_grant(cap, session_key)
        # Capability classes are final, so the exact type says which nested ones to check.
        kind = type(cap)
        if kind is MemoryCallerContext:
            if cap.cancel_scope.cancel_called:  # type: ignore[attr-defined]
                raise StaleCapabilityError("the caller's request was aborted")
            authority = cap.authority  # type: ignore[attr-defined]
            if not isinstance(authority, Capability):
                raise ForgedCapabilityError(f"{type(authority).__name__} is not a claw capability")
            self._verify_grant(authority, None)
            if type(authority) is SessionAuthority:
                self._verify_parts(authority)
        elif kind is SessionAuthority:
            self._verify_parts(cap)  # type: ignore[arg-type]

    def _verify_grant(self, cap: Capability, session_key: str | None) -> None:
        """The checks of :meth:`verify` on ``cap`` itself (not the capabilities it holds)."""
        grant = self._live_data.get(weakref.ref(cap))
        if grant is None:
            if cap in self._altered:
                self._refuse_altered(cap)
            reason = self._revoked.get(cap)
            if reason is not None:
                raise StaleCapabilityError(self._stale_text(cap, reason))
            raise ForgedCapabilityError(
                f"this {cap.kind_name} was not minted by this host (forged or foreign)"
            )
        # _same, inlined: every verification compares two snapshots.
        if not all(map(operator.is_, grant.read(cap), grant.fields)):
            self._refuse_altered(cap)
        if grant.check is not None and not grant.check():
            self.revoke(cap, grant.stale_message or "its incarnation changed")
            raise StaleCapabilityError(self._stale_text(cap, grant.stale_message))
        if (
            session_key is not None
            and grant.bound_session_key is not None
            and grant.bound_session_key != session_key
        ):
            raise CapabilityDeniedError(
                f"this {cap.kind_name} is bound to another session and cannot be presented "
                f"for session {session_key!r}"
            )

    def _verify_parts(self, authority: SessionAuthority) -> None:
        """A session authority's audience and recall pass, bound to its session."""
        if authority.audience is not None:
            self.verify(authority.audience, session_key=authority.session_key)
        if authority.conversation_recall is not None:
            self.verify(authority.conversation_recall, session_key=authority.session_key)

    @staticmethod
    def _stale_text(cap: Capability, reason: str | None) -> str:
        if isinstance(cap, MemoryAudience):
            return AUDIENCE_STALE_MESSAGE
        return f"this {cap.kind_name} is no longer current ({reason or 'revoked'})"
