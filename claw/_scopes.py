"""Host scopes: where capabilities are minted, and the host's open/closed state.

A :class:`HostScope` is a child nursery (or, for one short piece of work, none) and
the capabilities minted in it; leaving it revokes them, after its tasks have finished.
:class:`Scopes` opens them (``host.open_scope``, ``host.open_minting_scope``, and the
run opener for each run); :class:`Lifecycle` is whether the host is open, which every
part that may be called after close checks.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Iterable
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Any, TypeVar

import attrs
import trio

from ._capabilities import (
    CallerAuthority,
    Capability,
    CapabilityRegistry,
    HostAuthority,
    MemoryCallerContext,
    OperatorAuthority,
)
from ._errors import HostClosedError
from ._util import NoPublicConstructor, collapse_single_exception_group, final

C = TypeVar("C", bound=Capability)


@attrs.define(eq=False)
class Lifecycle:
    """Whether the host is open: ``open_host`` opens and closes it; parts check it."""

    _open: bool = attrs.field(default=False, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    def check_open(self) -> None:
        """Raise :class:`~claw.HostClosedError` unless the host is open."""
        if self._closed:
            raise HostClosedError("the host is closed")
        if not self._open:
            raise HostClosedError("the host is not open yet")

    @property
    def closed(self) -> bool:
        """Whether the host has shut down."""
        return self._closed

    def open(self) -> None:
        self._open = True

    def closing(self) -> None:
        """No new work from here on (the host's nursery is being cancelled)."""
        self._open = False

    def close(self) -> None:
        self._open = False
        self._closed = True


@final
class HostScope(metaclass=NoPublicConstructor):
    """A host-owned scope: a child nursery and the capabilities minted for it.

    Everything minted through the scope is revoked when the scope closes. Tasks started
    in :attr:`nursery` live no longer than the scope.
    """

    def __init__(self, registry: CapabilityRegistry, lifecycle: Lifecycle, name: str) -> None:
        self._registry = registry
        self._lifecycle = lifecycle
        self.name: str = name
        self._nursery: trio.Nursery | None = None
        self._minted: list[weakref.ref[Capability]] = []
        self._closed = False

    @property
    def nursery(self) -> trio.Nursery:
        """The scope's nursery; tasks here end before the scope's capabilities are revoked."""
        if self._nursery is None:
            raise HostClosedError(
                f"scope {self.name!r} has no nursery (a minting scope); use Host.open_scope"
            )
        return self._nursery

    @property
    def closed(self) -> bool:
        """Whether the scope has closed (and revoked what it minted)."""
        return self._closed

    def mint(self, cls: type[C], **fields: Any) -> C:
        """Mint a capability of kind ``cls`` in this scope, revoked when the scope closes.

        The host's own parts mint through it what they build from resolved facts (a
        run's authority, audience and recall pass, a flush identity); applications use
        the named methods below.
        """
        if self._closed:
            raise HostClosedError(f"scope {self.name!r} is closed; open a new scope to mint")
        self._lifecycle.check_open()
        cap = self._registry.mint(cls, scope_name=self.name, **fields)
        self._minted.append(weakref.ref(cap))
        return cap

    def mint_host_authority(self, operation: str) -> HostAuthority:
        """Mint the authority of a named host operation (``"status"``, ``"refresh"``, ...)."""
        if not isinstance(operation, str) or not operation:
            raise ValueError("a host authority needs a non-empty operation name")
        return self.mint(HostAuthority, operation=operation)

    def mint_operator_authority(
        self, scopes: Iterable[str], *, connection_id: str | None = None
    ) -> OperatorAuthority:
        """Mint an authenticated operator's authority with the given scopes."""
        scope_set = frozenset(scopes)
        if isinstance(scopes, str) or not all(isinstance(s, str) and s for s in scope_set):
            raise ValueError("operator scopes must be an iterable of non-empty strings")
        return self.mint(OperatorAuthority, scopes=scope_set, connection_id=connection_id)

    def mint_caller_context(
        self,
        authority: CallerAuthority,
        *,
        cancel_scope: trio.CancelScope | None = None,
        purpose: str = "read",
    ) -> MemoryCallerContext:
        """Mint the context a provider receives for ``authority``.

        ``cancel_scope`` stands for the request's abort signal (a fresh one if omitted);
        the context is stale once this scope closes or the authority goes stale.
        """
        self._registry.verify(authority)
        return self.mint(
            MemoryCallerContext,
            authority=authority,
            cancel_scope=cancel_scope if cancel_scope is not None else trio.CancelScope(),
            purpose=purpose,
        )

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        reason = f"scope {self.name!r} closed"
        for ref in self._minted:
            cap = ref()
            if cap is not None:
                self._registry.revoke(cap, reason)
        self._minted.clear()

    # A minting scope is its own context manager (see Scopes.open_minting): the gateway
    # opens one per request, and a generator-based one cost more than the scope.
    def __enter__(self) -> HostScope:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._close()


@attrs.define(eq=False)
class Scopes:
    """Opens host scopes (see the module docstring); built by ``open_host``."""

    _registry: CapabilityRegistry
    _lifecycle: Lifecycle

    @asynccontextmanager
    async def open(self, name: str) -> AsyncIterator[HostScope]:
        """A scope with its own nursery; leaving it revokes what it minted."""
        self._lifecycle.check_open()
        scope = HostScope._create(self._registry, self._lifecycle, name)
        try:
            with collapse_single_exception_group():
                async with trio.open_nursery() as nursery:
                    scope._nursery = nursery
                    yield scope
        finally:
            scope._close()

    def open_minting(self, name: str) -> AbstractContextManager[HostScope]:
        """A scope without a nursery, for what one short piece of work mints; entered
        with ``with``, which closes it (revoking what it minted) on the way out."""
        self._lifecycle.check_open()
        scope: HostScope = HostScope._create(self._registry, self._lifecycle, name)
        return scope
