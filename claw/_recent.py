"""A bounded keep of what was read last, by key: the caches of readers that read a
session again only past what they kept (the transcript reader's turns, a transcript
store's visible history, Memory Core's names of a session's cut). Not thread-safe:
a keep shared by threads is held under its owner's lock."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import attrs

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@attrs.define(eq=False)
class RecentlyRead(Generic[K, V]):
    """Values by key, up to ``limit`` items in all (``size`` tells a value's): the
    least recently kept go first, and a value larger than the limit alone is not kept.
    """

    limit: int
    size: Callable[[V], int]
    _kept: dict[K, V] = attrs.field(factory=dict, init=False)
    _total: int = attrs.field(default=0, init=False)

    def take(self, key: K) -> V | None:
        """The value kept for ``key`` (no longer kept), if any."""
        found = self._kept.pop(key, None)
        if found is not None:
            self._total -= self.size(found)
        return found

    def keep(self, key: K, value: V) -> None:
        """Keep ``value`` for ``key``, as the most recently read."""
        self.take(key)
        size = self.size(value)
        if size > self.limit:
            return
        self._kept[key] = value
        self._total += size
        while self._total > self.limit:
            oldest = next(iter(self._kept))
            self._total -= self.size(self._kept.pop(oldest))

    def sizes(self) -> dict[K, int]:
        """Each kept key's size, least recently kept first."""
        return {key: self.size(value) for key, value in self._kept.items()}
