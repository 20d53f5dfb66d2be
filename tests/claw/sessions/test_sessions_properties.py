"""Properties over random lineage graphs and random store histories.

The oracle here restates the seed's rules as a bounded recursion (a lineage is
valid when its row is well-formed and either a root or a child whose recorded
parent incarnation matches a valid parent, within 64 hops); it shares no code
with the resolver, whose walk is iterative with an explicit cycle check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs
import hypothesis.strategies as st
from hypothesis import HealthCheck, event, given, settings

from claw import InlineWorkerPool
from claw.sessions import (
    LineageLink,
    ResolvedAudience,
    SessionError,
    SessionRow,
    SessionStore,
    is_lineage_current,
    open_session_store,
    resolve_audience,
    resolve_detached_child,
)

PROPERTY_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
IDS = [f"{n:08x}-0000-4000-8000-000000000000" for n in range(3)]
KEYS = [f"s{n}" for n in range(6)]
GOOD_CHAT = ("direct", "group", "channel", "thread")


def oracle_valid(rows: Mapping[str, SessionRow], key: str, hops_left: int = 63) -> bool:
    row = rows.get(key)
    if row is None or row.session_key != key:
        return False
    if not (
        isinstance(row.agent_id, str)
        and row.agent_id.strip()
        and isinstance(row.session_id, str)
        and UUID.fullmatch(row.session_id)
        and type(row.lifecycle_revision) is int
        and row.lifecycle_revision >= 0
        and row.chat_type in GOOD_CHAT
        and type(row.peer_is_owner) is bool
    ):
        return False
    parent_fields = (row.parent_key, row.parent_session_id, row.parent_revision)
    if all(f is None for f in parent_fields):
        return True
    if any(f is None for f in parent_fields) or hops_left == 0:
        return False
    if type(row.spawned_by_owner) is not bool:
        return False  # a child without a spawn receipt
    if not (isinstance(row.parent_session_id, str) and UUID.fullmatch(row.parent_session_id)):
        return False
    assert row.parent_key is not None
    parent = rows.get(row.parent_key)
    return (
        parent is not None
        and parent.agent_id == row.agent_id
        and parent.session_id == row.parent_session_id
        and parent.lifecycle_revision == row.parent_revision
        and oracle_valid(rows, row.parent_key, hops_left - 1)
    )


def oracle_owner_private(rows: Mapping[str, SessionRow], key: str, sender_is_owner: bool) -> bool:
    """Owner-private: a direct root, and the sender (for a root) or every receipt (below it)."""
    row = rows[key]
    if row.parent_key is None:
        return sender_is_owner and row.chat_type == "direct"
    receipts = []
    while row.parent_key is not None:
        receipts.append(row.spawned_by_owner)
        row = rows[row.parent_key]
    return row.chat_type == "direct" and all(receipts)


def oracle_root(rows: Mapping[str, SessionRow], key: str) -> SessionRow:
    row = rows[key]
    while row.parent_key is not None:
        row = rows[row.parent_key]
    return row


def oracle_lineage(rows: Mapping[str, SessionRow], key: str) -> list[str]:
    """The keys reachable by parent links from ``key`` (for test statistics only)."""
    seen: list[str] = []
    current: str | None = key
    while current is not None and current not in seen and current in rows:
        seen.append(current)
        current = rows[current].parent_key
    return seen


FAULTS = (
    "bad-id",
    "agent",
    "chat",
    "parent-anywhere",
    "stale-id",
    "stale-rev",
    "partial",
    "no-receipt",
)


@st.composite
def lineage_graphs(draw: st.DrawFn) -> dict[str, SessionRow]:
    """A few rows forming a forest of spawned children, each row with at most one fault.

    Without a fault a row is a root or a child of an earlier row with the
    parent's exact incarnation recorded, so most lineages are valid by
    construction. A fault gives the row a bad session id, another (or empty)
    agent, a missing or unknown chat type, a parent that may be itself, a later
    row (so cycles happen) or a missing key, a stale parent session id or
    revision, or partial parent fields.
    """
    count = draw(st.integers(1, len(KEYS)))
    keys = KEYS[:count]
    out: dict[str, SessionRow] = {}
    for i, k in enumerate(keys):
        fault = draw(st.sampled_from([None] * 6 + list(FAULTS)))
        sid = "bad-id" if fault == "bad-id" else f"{i:08x}-0000-4000-8000-0000000000aa"
        agent = draw(st.sampled_from(["other", ""])) if fault == "agent" else "main"
        chat = draw(st.sampled_from([None, "dm"] if fault == "chat" else GOOD_CHAT))
        if fault == "parent-anywhere":
            parent: str | None = draw(st.sampled_from(KEYS))
        elif i > 0 and (fault in {"stale-id", "stale-rev", "partial"} or not draw(st.booleans())):
            parent = draw(st.sampled_from(keys[:i]))
        else:
            parent = None
        pfields: tuple[Any, Any, Any] = (None, None, None)
        if parent is not None:
            known = out.get(parent)
            real_sid = f"{KEYS.index(parent):08x}-0000-4000-8000-0000000000aa"
            real_rev = draw(st.integers(0, 2))
            if known is not None:
                real_sid, real_rev = known.session_id, known.lifecycle_revision
            pfields = (
                parent,
                IDS[2] if fault == "stale-id" else real_sid,
                real_rev + 1 if fault == "stale-rev" else real_rev,
            )
            if fault == "partial":
                blank = draw(st.integers(1, 2))
                pfields = tuple(None if j == blank else f for j, f in enumerate(pfields))  # type: ignore[assignment]
        receipt = None if fault == "no-receipt" or pfields[0] is None else draw(st.booleans())
        out[k] = SessionRow(
            agent, k, sid, draw(st.integers(0, 2)), chat, False, *pfields, spawned_by_owner=receipt
        )
    return out


@PROPERTY_SETTINGS
@given(graph=lineage_graphs(), owner=st.booleans(), data=st.data())
def test_random_graphs_resolve_exactly_when_the_lineage_is_valid(
    graph: dict[str, SessionRow], owner: bool, data: st.DataObject
) -> None:
    key = data.draw(st.sampled_from([*reversed(graph), "absent"]))
    audience = resolve_audience(graph, key, sender_is_owner=owner)
    event(f"lineage of {len(oracle_lineage(graph, key))} valid={oracle_valid(graph, key)}")
    if not oracle_valid(graph, key):
        assert audience is None
        return
    assert audience is not None
    root = oracle_root(graph, key)
    assert audience.agent_id == root.agent_id
    assert audience.root == LineageLink(root.session_key, root.session_id, root.lifecycle_revision)
    if oracle_owner_private(graph, key, owner):
        assert (audience.kind, audience.session_key) == ("owner-private", None)
    else:
        assert (audience.kind, audience.session_key) == ("conversation", root.session_key)
    assert is_lineage_current(graph, audience.lineage)


def incarnation_changes(row: SessionRow) -> list[SessionRow | None]:
    """Every way one row can change incarnation (None: the row is deleted)."""
    other_id = IDS[2] if row.session_id != IDS[2] else IDS[1]
    bumped = row.lifecycle_revision + 1
    return [
        None,
        attrs.evolve(row, lifecycle_revision=bumped),
        attrs.evolve(row, session_id=other_id, lifecycle_revision=bumped),
        attrs.evolve(row, agent_id="elsewhere", lifecycle_revision=bumped),
        attrs.evolve(row, chat_type="thread", lifecycle_revision=bumped),
    ]


@PROPERTY_SETTINGS
@given(graph=lineage_graphs(), data=st.data())
def test_any_incarnation_change_in_a_resolved_lineage_makes_it_not_current(
    graph: dict[str, SessionRow], data: st.DataObject
) -> None:
    key = data.draw(st.sampled_from(list(reversed(graph))))
    audience = resolve_audience(graph, key, sender_is_owner=True)
    event(f"resolved={audience is not None}")
    if audience is None:
        return
    member = data.draw(st.sampled_from([link.key for link in audience.lineage]))
    change = data.draw(st.sampled_from(incarnation_changes(graph[member])))
    changed = {k: v for k, v in graph.items() if k != member}
    if change is not None:
        changed[member] = change
    assert not is_lineage_current(changed, audience.lineage)
    # A change outside the lineage leaves it current.
    outsiders = [k for k in graph if k not in {link.key for link in audience.lineage}]
    if outsiders:
        outsider = data.draw(st.sampled_from(outsiders))
        elsewhere = dict(graph)
        del elsewhere[outsider]
        assert is_lineage_current(elsewhere, audience.lineage)


# ---- random store histories ---------------------------------------------------------------

KEY = st.sampled_from(KEYS)
SID = st.sampled_from([None, *IDS])  # a small pool, so an old session id does come back
OPS = st.one_of(
    st.tuples(st.just("create"), KEY, st.sampled_from(["main", "other"]),
              st.sampled_from(GOOD_CHAT), SID),
    st.tuples(st.just("spawn"), KEY, KEY, SID, st.booleans()),
    st.tuples(st.just("reset"), KEY, st.booleans()),
    st.tuples(st.just("reassign"), KEY, st.sampled_from([None, "main", "other"]),
              st.sampled_from([None, *GOOD_CHAT]), st.sampled_from([None, True, False])),
    st.tuples(st.just("delete"), KEY),
)  # fmt: skip


async def apply(store: SessionStore, op: tuple[Any, ...]) -> None:
    kind, *args = op
    if kind == "create":
        key, agent, chat, sid = args
        await store.create(key, agent_id=agent, chat_type=chat, session_id=sid)
    elif kind == "spawn":
        parent, child, sid, owner = args
        await store.spawn_child(parent, child, session_id=sid, sender_is_owner=owner)
    elif kind == "reset":
        key, keep = args
        await store.reset(key, keep_session_id=keep)
    elif kind == "reassign":
        key, agent, chat, peer = args
        await store.reassign(key, agent_id=agent, chat_type=chat, peer_is_owner=peer)
    else:
        (key,) = args
        await store.delete(key)


def resolve_everything(store: SessionStore) -> list[ResolvedAudience]:
    found: list[ResolvedAudience] = []
    for key in KEYS:
        for owner in (True, False):
            audience = resolve_audience(store, key, sender_is_owner=owner)
            if audience is not None:
                found.append(audience)
            for parent in KEYS:
                detached = resolve_detached_child(store, key, parent, sender_is_owner=owner)
                if detached is not None:
                    found.append(detached)
    return found


@PROPERTY_SETTINGS
@given(ops=st.lists(OPS, max_size=30))
async def test_store_histories_never_revive_a_changed_lineage(ops: list[tuple[Any, ...]]) -> None:
    async with open_session_store(":memory:", workers=InlineWorkerPool()) as store:
        changed: list[str] = []
        store.add_listener(changed.append)
        live: list[ResolvedAudience] = []
        dead: list[ResolvedAudience] = []
        for op in ops:
            changed.clear()
            try:
                await apply(store, op)
            except SessionError:
                assert changed == []  # a refused operation changes nothing
            snapshot = store.snapshot()
            for key in KEYS:
                assert (await store.get(key)) == store.get_nowait(key)  # mirror == disk
                audience = resolve_audience(snapshot.rows, key, sender_is_owner=False)
                assert (audience is not None) == oracle_valid(snapshot.rows, key)
            still_live: list[ResolvedAudience] = []
            for audience in live:
                touched = {link.key for link in audience.lineage} & set(changed)
                current = is_lineage_current(store, audience.lineage)
                assert current == (not touched), (audience, changed)
                (still_live if current else dead).append(audience)
            live = still_live
            event(f"dead audiences checked: {min(len(dead), 5)}+")
            for audience in dead:
                assert not is_lineage_current(store, audience.lineage)
            for audience in resolve_everything(store):
                assert is_lineage_current(store, audience.lineage)
                live.append(audience)
