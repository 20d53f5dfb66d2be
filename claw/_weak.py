"""Weak tables keyed by identity whose weak references lead nowhere.

The host keeps private tables keyed by the capabilities it minted (which registry minted
a caller context, the grant of every live capability, the lineage of every audience).
They must hold their keys weakly, and :class:`weakref.WeakKeyDictionary` does, but each
of its references carries a callback whose default argument is a weak reference to the
dictionary itself. Anyone holding a key can call ``weakref.getweakrefs(key)``, so from
one capability a plugin reached ``ref.__callback__.__defaults__[0]()``: the whole table,
every other key (other callers' capabilities) and every value (the registry, and with
it ``mint``). :class:`WeakSet` has the same shape.

Here a reference's callback is the ``append`` of a queue that only ever holds dead
references; the table removes their entries the next time it is written. From a key,
``getweakrefs`` and the callbacks lead to that queue and to dead references, nothing
else. Someone holding the queue can put references into it; a reference is acted on
only once it is dead, and then only its own entry goes, so doing that changes nothing.
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Iterator
from typing import Generic, TypeVar, overload

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")


class WeakIdentityMap(Generic[K, V]):
    """A mapping from objects (held weakly, compared by identity) to values.

    Keys must hash and compare by identity (capabilities do: ``eq=False``). ``data`` is
    the underlying dict (weak reference -> value), for lookups on hot paths:
    ``table.data.get(weakref.ref(key))``.
    """

    __slots__ = ("_dead", "data")

    def __init__(self) -> None:
        self.data: dict[weakref.ref[K], V] = {}
        self._dead: collections.deque[weakref.ref[K]] = collections.deque()

    def _drop_dead(self) -> None:
        dead = self._dead
        while dead:
            ref = dead.popleft()
            if ref() is None:
                self.data.pop(ref, None)

    def __setitem__(self, key: K, value: V) -> None:
        self._drop_dead()
        self.data[weakref.ref(key, self._dead.append)] = value

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: D) -> V | D: ...
    def get(self, key: K, default: object = None) -> object:
        return self.data.get(weakref.ref(key), default)

    def pop(self, key: K, default: V | None = None) -> V | None:
        self._drop_dead()
        return self.data.pop(weakref.ref(key), default)

    def __contains__(self, key: object) -> bool:
        try:
            return weakref.ref(key) in self.data
        except TypeError:
            return False

    def __len__(self) -> int:
        return sum(1 for ref in list(self.data) if ref() is not None)

    def keys(self) -> Iterator[K]:
        """The live keys (a snapshot taken as iteration starts)."""
        for ref in list(self.data):
            key = ref()
            if key is not None:
                yield key


class WeakIdentitySet(Generic[K]):
    """A set of objects held weakly and compared by identity (see :class:`WeakIdentityMap`)."""

    __slots__ = ("_map",)

    def __init__(self) -> None:
        self._map: WeakIdentityMap[K, None] = WeakIdentityMap()

    def add(self, item: K) -> None:
        self._map[item] = None

    def discard(self, item: K) -> None:
        self._map.pop(item)

    def __contains__(self, item: object) -> bool:
        return item in self._map

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[K]:
        return self._map.keys()
