"""The weak identity tables: keys held weakly, entries dropped with their keys, and weak
references that lead nowhere but to a queue of dead references."""

from __future__ import annotations

import gc
import weakref

from claw._weak import WeakIdentityMap, WeakIdentitySet

from ._reach import reaches


class Key:
    """A plain object: hashable by identity, weakly referenceable."""


def test_entries_go_with_their_keys() -> None:
    table: WeakIdentityMap[Key, str] = WeakIdentityMap()
    kept, dropped = Key(), Key()
    table[kept] = "kept"
    table[dropped] = "dropped"
    del dropped
    gc.collect()
    table[Key()] = "next write drops the dead entry"  # (and this key dies at once)
    gc.collect()
    table[kept] = "again"
    assert len(table.data) == 1
    assert table.get(kept) == "again" and kept in table and len(table) == 1
    assert table.pop(kept) == "again" and kept not in table


def test_a_keys_weak_references_do_not_lead_to_the_table_or_its_values() -> None:
    table: WeakIdentityMap[Key, object] = WeakIdentityMap()
    secret = object()
    key = Key()
    table[key] = secret
    refs = weakref.getweakrefs(key)
    assert refs
    for ref in refs:
        assert not reaches(ref, table)
        assert not reaches(ref, secret)
    # The same for the stdlib's table, which is why this module exists.
    stdlib: weakref.WeakKeyDictionary[Key, object] = weakref.WeakKeyDictionary({key: secret})
    assert any(reaches(ref, secret) for ref in weakref.getweakrefs(key))
    del stdlib


def test_a_live_reference_put_in_the_queue_removes_nothing() -> None:
    table: WeakIdentityMap[Key, str] = WeakIdentityMap()
    key = Key()
    table[key] = "value"
    [with_callback] = [r for r in weakref.getweakrefs(key) if r.__callback__ is not None]
    append = with_callback.__callback__
    assert append is not None
    append(with_callback)
    append(weakref.ref(key))
    table[Key()] = "a write drains the queue"
    assert table.get(key) == "value"


def test_the_set_holds_by_identity_and_weakly() -> None:
    items: WeakIdentitySet[Key] = WeakIdentitySet()
    a, b = Key(), Key()
    items.add(a)
    items.add(b)
    items.add(a)
    assert len(items) == 2 and a in items and list(items) in ([a, b], [b, a])
    items.discard(a)
    del b
    gc.collect()
    assert list(items) == [] and a not in items
