"""Audience resolution rules, one test per rule, over hand-built rows and a real store."""

from __future__ import annotations

import uuid
from typing import Any

import attrs
import pytest

from claw import InlineWorkerPool
from claw.sessions import (
    MAX_LINEAGE_HOPS,
    LineageLink,
    NoAudience,
    SessionRow,
    SessionSnapshot,
    explain_audience,
    is_lineage_current,
    open_session_store,
    resolve_audience,
    resolve_detached_child,
)


def sid(n: int) -> str:
    return str(uuid.UUID(int=n))


def root(key: str, n: int, *, chat_type: str | None = "direct", agent: str = "main") -> SessionRow:
    return SessionRow(agent, key, sid(n), 1, chat_type)


def child(
    key: str,
    n: int,
    parent: SessionRow,
    *,
    agent: str | None = None,
    spawned_by_owner: bool | None = True,
) -> SessionRow:
    return SessionRow(
        agent or parent.agent_id,
        key,
        sid(n),
        1,
        parent.chat_type,
        parent_key=parent.session_key,
        parent_session_id=parent.session_id,
        parent_revision=parent.lifecycle_revision,
        spawned_by_owner=spawned_by_owner,
    )


def rows(*items: SessionRow) -> dict[str, SessionRow]:
    return {r.session_key: r for r in items}


def chain(hops: int) -> tuple[dict[str, SessionRow], str]:
    """A lineage with ``hops`` parent links; returns the rows and the deepest key."""
    current = root("r", 0, chat_type="group")
    out = [current]
    for i in range(hops):
        current = child(f"c{i}", i + 1, current)
        out.append(current)
    return rows(*out), current.session_key


def test_direct_turn_from_owner_is_owner_private_for_the_agent() -> None:
    dm = root("dm:alice", 1)
    audience = resolve_audience(rows(dm), "dm:alice", sender_is_owner=True)
    assert audience is not None
    assert (audience.kind, audience.agent_id) == ("owner-private", "main")
    assert (audience.session_key, audience.session_id) == (None, None)
    assert audience.lineage == (LineageLink("dm:alice", sid(1), 1),)


def test_direct_turn_from_another_sender_is_conversation_for_the_session() -> None:
    dm = root("dm:bob", 1)
    audience = resolve_audience(rows(dm), "dm:bob", sender_is_owner=False)
    assert audience is not None
    assert audience.kind == "conversation"
    assert (audience.agent_id, audience.session_key, audience.session_id) == (
        "main",
        "dm:bob",
        sid(1),
    )


@pytest.mark.parametrize("chat_type", ["group", "channel", "thread"])
@pytest.mark.parametrize("sender_is_owner", [True, False])
def test_group_channel_and_thread_turns_are_conversation_even_from_the_owner(
    chat_type: str, sender_is_owner: bool
) -> None:
    shared = root("grp:1", 7, chat_type=chat_type)
    audience = resolve_audience(rows(shared), "grp:1", sender_is_owner=sender_is_owner)
    assert audience is not None
    assert (audience.kind, audience.session_key, audience.session_id) == (
        "conversation",
        "grp:1",
        sid(7),
    )


def test_peer_is_owner_flag_alone_does_not_make_a_turn_owner_private() -> None:
    """Only the admitted turn's asserted sender ownership decides owner-private."""
    dm = attrs.evolve(root("dm:alice", 1), peer_is_owner=True)
    audience = resolve_audience(rows(dm), "dm:alice", sender_is_owner=False)
    assert audience is not None
    assert audience.kind == "conversation"


def test_child_of_owner_direct_inherits_owner_private() -> None:
    dm = root("dm:alice", 1)
    task = child("dm:alice/task-1", 2, dm)
    audience = resolve_audience(rows(dm, task), "dm:alice/task-1", sender_is_owner=True)
    assert audience is not None
    assert audience.kind == "owner-private"
    assert audience.invocation_key == "dm:alice/task-1"
    assert [link.key for link in audience.lineage] == ["dm:alice/task-1", "dm:alice"]


def test_child_decides_by_root_chat_type_not_its_own() -> None:
    """A child recorded as direct under a group root still gets the group's conversation."""
    grp = root("grp:1", 1, chat_type="group")
    task = attrs.evolve(child("grp:1/t", 2, grp), chat_type="direct")
    audience = resolve_audience(rows(grp, task), "grp:1/t", sender_is_owner=True)
    assert audience is not None
    assert (audience.kind, audience.session_key) == ("conversation", "grp:1")


def test_grandchild_gets_the_root_conversation() -> None:
    grp = root("grp:1", 1, chat_type="group")
    mid = child("grp:1/a", 2, grp)
    leaf = child("grp:1/a/b", 3, mid)
    audience = resolve_audience(rows(grp, mid, leaf), "grp:1/a/b", sender_is_owner=False)
    assert audience is not None
    assert (audience.kind, audience.session_key, audience.session_id) == (
        "conversation",
        "grp:1",
        sid(1),
    )
    assert [link.key for link in audience.lineage] == ["grp:1/a/b", "grp:1/a", "grp:1"]
    assert audience.root == LineageLink("grp:1", sid(1), 1)


def test_missing_session_has_no_audience() -> None:
    assert resolve_audience({}, "nope", sender_is_owner=True) is None


def test_missing_parent_has_no_audience() -> None:
    dm = root("dm:alice", 1)
    task = child("dm:alice/t", 2, dm)
    assert resolve_audience(rows(task), "dm:alice/t", sender_is_owner=True) is None


def test_cycle_has_no_audience() -> None:
    a = SessionRow("main", "a", sid(1), 1, "group", parent_key="b",
                   parent_session_id=sid(2), parent_revision=1)  # fmt: skip
    b = SessionRow("main", "b", sid(2), 1, "group", parent_key="a",
                   parent_session_id=sid(1), parent_revision=1)  # fmt: skip
    assert resolve_audience(rows(a, b), "a", sender_is_owner=False) is None
    assert resolve_audience(rows(a, b), "b", sender_is_owner=False) is None


def test_self_parent_has_no_audience() -> None:
    a = SessionRow("main", "a", sid(1), 1, "group", parent_key="a",
                   parent_session_id=sid(1), parent_revision=1)  # fmt: skip
    assert resolve_audience(rows(a), "a", sender_is_owner=False) is None


def test_cross_agent_parent_has_no_audience() -> None:
    dm = root("dm:alice", 1, agent="main")
    task = child("dm:alice/t", 2, dm, agent="other")
    assert resolve_audience(rows(dm, task), "dm:alice/t", sender_is_owner=True) is None


def test_stale_parent_revision_has_no_audience() -> None:
    dm = root("dm:alice", 1)
    task = child("dm:alice/t", 2, dm)
    reset_dm = attrs.evolve(dm, lifecycle_revision=2)
    assert resolve_audience(rows(reset_dm, task), "dm:alice/t", sender_is_owner=True) is None


def test_stale_parent_session_id_has_no_audience() -> None:
    dm = root("dm:alice", 1)
    task = child("dm:alice/t", 2, dm)
    new_dm = attrs.evolve(dm, session_id=sid(99))
    assert resolve_audience(rows(new_dm, task), "dm:alice/t", sender_is_owner=True) is None


@pytest.mark.parametrize("chat_type", [None, "dm", "DIRECT", ""])
def test_unknown_or_missing_chat_type_has_no_audience(chat_type: str | None) -> None:
    legacy = root("old", 1, chat_type=chat_type)
    assert resolve_audience(rows(legacy), "old", sender_is_owner=True) is None
    assert resolve_audience(rows(legacy), "old", sender_is_owner=False) is None


def test_unknown_chat_type_in_the_middle_of_a_lineage_has_no_audience() -> None:
    grp = root("g", 1, chat_type="group")
    mid = attrs.evolve(child("g/a", 2, grp), chat_type="weird")
    leaf = child("g/a/b", 3, mid)
    assert resolve_audience(rows(grp, mid, leaf), "g/a/b", sender_is_owner=False) is None


@pytest.mark.parametrize(
    "damage",
    [
        {"session_id": "not-a-uuid"},
        {"session_id": str(uuid.UUID(int=2**128 - 1)).upper()},
        {"agent_id": ""},
        {"lifecycle_revision": -1},
        {"parent_key": "x"},  # partial parent fields
        {"peer_is_owner": 1},
    ],
)
def test_malformed_row_has_no_audience(damage: dict[str, Any]) -> None:
    bad = attrs.evolve(root("dm:alice", 1), **damage)
    assert resolve_audience(rows(bad), "dm:alice", sender_is_owner=True) is None


def test_row_filed_under_another_key_has_no_audience() -> None:
    dm = root("dm:alice", 1)
    assert resolve_audience({"dm:mallory": dm}, "dm:mallory", sender_is_owner=True) is None


def test_a_root_and_sixty_three_chained_children_resolve() -> None:
    view, leaf = chain(MAX_LINEAGE_HOPS - 1)
    audience = resolve_audience(view, leaf, sender_is_owner=False)
    assert audience is not None
    assert len(audience.lineage) == MAX_LINEAGE_HOPS
    assert is_lineage_current(view, audience.lineage)


def test_a_root_and_sixty_four_chained_children_exceed_the_bound() -> None:
    view, leaf = chain(MAX_LINEAGE_HOPS)
    assert resolve_audience(view, leaf, sender_is_owner=False) is None
    found = explain_audience(view, leaf, sender_is_owner=False)
    assert isinstance(found, NoAudience) and "too deep" in found.reason
    # A lineage that long is never current either, even if resolved by hand.
    links = tuple(LineageLink(r.session_key, r.session_id, r.lifecycle_revision) for r in
                  reversed(list(view.values())))
    assert not is_lineage_current(view, links)


def test_sender_is_owner_must_be_a_real_bool() -> None:
    with pytest.raises(TypeError, match="sender_is_owner"):
        resolve_audience({}, "x", sender_is_owner=1)  # type: ignore[arg-type]


def test_lookup_function_and_snapshot_are_accepted_as_row_sources() -> None:
    dm = root("dm:alice", 1)
    by_key = rows(dm)
    via_fn = resolve_audience(by_key.get, "dm:alice", sender_is_owner=True)
    via_snapshot = resolve_audience(SessionSnapshot(by_key), "dm:alice", sender_is_owner=True)
    assert via_fn == via_snapshot == resolve_audience(by_key, "dm:alice", sender_is_owner=True)


# ---- currency ---------------------------------------------------------------------------


def test_resolved_lineage_is_current_until_the_parent_is_reset() -> None:
    dm = root("dm:alice", 1)
    task = child("dm:alice/t", 2, dm)
    audience = resolve_audience(rows(dm, task), "dm:alice/t", sender_is_owner=True)
    assert audience is not None
    assert is_lineage_current(rows(dm, task), audience.lineage)
    reset_dm = attrs.evolve(dm, lifecycle_revision=2)
    assert not is_lineage_current(rows(reset_dm, task), audience.lineage)


def test_lineage_is_not_current_when_a_row_changes_agent_without_a_new_revision() -> None:
    """Currency re-checks structure, not just (id, revision) pairs."""
    dm = root("dm:alice", 1)
    task = child("dm:alice/t", 2, dm)
    audience = resolve_audience(rows(dm, task), "dm:alice/t", sender_is_owner=True)
    assert audience is not None
    moved = attrs.evolve(task, agent_id="other")
    assert not is_lineage_current(rows(dm, moved), audience.lineage)


def test_empty_or_overlong_lineage_is_never_current() -> None:
    view, _ = chain(3)
    assert not is_lineage_current(view, ())
    link = LineageLink("r", sid(0), 1)
    assert not is_lineage_current(view, (link,) * (MAX_LINEAGE_HOPS + 2))


async def test_parent_reset_after_resolution_makes_the_child_lineage_not_current() -> None:
    async with open_session_store(":memory:", workers=InlineWorkerPool()) as store:
        await store.create("dm:alice", agent_id="main", chat_type="direct")
        await store.spawn_child("dm:alice", "dm:alice/task-1", sender_is_owner=True)
        audience = resolve_audience(store, "dm:alice/task-1", sender_is_owner=True)
        assert audience is not None
        assert is_lineage_current(store, audience.lineage)
        await store.reset("dm:alice")  # keeps the session id
        assert not is_lineage_current(store, audience.lineage)
        assert resolve_audience(store, "dm:alice/task-1", sender_is_owner=True) is None


async def test_child_reset_makes_its_lineage_not_current_but_it_still_resolves() -> None:
    async with open_session_store(":memory:", workers=InlineWorkerPool()) as store:
        await store.create("grp:1", agent_id="main", chat_type="group")
        await store.spawn_child("grp:1", "grp:1/t", sender_is_owner=True)
        before = resolve_audience(store, "grp:1/t", sender_is_owner=False)
        assert before is not None
        await store.reset("grp:1/t", keep_session_id=False)
        assert not is_lineage_current(store, before.lineage)
        after = resolve_audience(store, "grp:1/t", sender_is_owner=False)
        assert after is not None
        assert after.lineage[0] != before.lineage[0]
        assert is_lineage_current(store, after.lineage)


async def test_child_reassign_makes_its_lineage_not_current() -> None:
    async with open_session_store(":memory:", workers=InlineWorkerPool()) as store:
        await store.create("dm:alice", agent_id="main", chat_type="direct")
        await store.spawn_child("dm:alice", "dm:alice/t", sender_is_owner=True)
        audience = resolve_audience(store, "dm:alice/t", sender_is_owner=True)
        assert audience is not None
        await store.reassign("dm:alice/t", peer_is_owner=True)
        assert not is_lineage_current(store, audience.lineage)


async def test_cross_agent_after_parent_reassign_has_no_audience() -> None:
    async with open_session_store(":memory:", workers=InlineWorkerPool()) as store:
        await store.create("dm:alice", agent_id="main", chat_type="direct")
        await store.spawn_child("dm:alice", "dm:alice/t", sender_is_owner=True)
        await store.reassign("dm:alice", agent_id="other")
        assert resolve_audience(store, "dm:alice/t", sender_is_owner=True) is None


# ---- detached children ------------------------------------------------------------------


async def test_detached_child_inherits_the_parent_audience_bound_to_no_row() -> None:
    async with open_session_store(":memory:", workers=InlineWorkerPool()) as store:
        await store.create("dm:alice", agent_id="main", chat_type="direct")
        audience = resolve_detached_child(store, "flush:dm:alice", "dm:alice", sender_is_owner=True)
        assert audience is not None
        assert audience.kind == "owner-private"
        assert audience.invocation_key == "flush:dm:alice"
        assert audience.lineage[0] == LineageLink("flush:dm:alice", None, 0)
        assert audience.lineage[0].is_detached
        assert is_lineage_current(store, audience.lineage)


async def test_detached_child_whose_row_appears_later_is_not_current() -> None:
    async with open_session_store(":memory:", workers=InlineWorkerPool()) as store:
        await store.create("grp:1", agent_id="main", chat_type="group")
        audience = resolve_detached_child(store, "grp:1/d", "grp:1", sender_is_owner=False)
        assert audience is not None
        await store.spawn_child("grp:1", "grp:1/d", sender_is_owner=True)
        assert not is_lineage_current(store, audience.lineage)


async def test_detached_child_stays_stale_after_its_row_comes_and_goes() -> None:
    async with open_session_store(":memory:", workers=InlineWorkerPool()) as store:
        await store.create("grp:1", agent_id="main", chat_type="group")
        audience = resolve_detached_child(store, "grp:1/d", "grp:1", sender_is_owner=False)
        assert audience is not None
        await store.spawn_child("grp:1", "grp:1/d", sender_is_owner=True)
        await store.delete("grp:1/d")
        assert store.get_nowait("grp:1/d") is None
        assert not is_lineage_current(store, audience.lineage)


async def test_detached_child_is_not_current_after_the_parent_resets() -> None:
    async with open_session_store(":memory:", workers=InlineWorkerPool()) as store:
        await store.create("grp:1", agent_id="main", chat_type="group")
        audience = resolve_detached_child(store, "grp:1/d", "grp:1", sender_is_owner=False)
        assert audience is not None
        await store.reset("grp:1")
        assert not is_lineage_current(store, audience.lineage)


def test_detached_child_with_an_existing_row_or_bad_parent_has_no_audience() -> None:
    dm = root("dm:alice", 1)
    task = child("dm:alice/t", 2, dm)
    view = rows(dm, task)
    assert resolve_detached_child(view, "dm:alice/t", "dm:alice", sender_is_owner=True) is None
    assert resolve_detached_child(view, "d", "missing", sender_is_owner=True) is None
    assert resolve_detached_child(view, "dm:alice", "dm:alice", sender_is_owner=True) is None
    legacy = root("old", 3, chat_type=None)
    assert resolve_detached_child(rows(legacy), "d", "old", sender_is_owner=True) is None


def test_detached_child_counts_as_a_hop() -> None:
    view, deepest = chain(MAX_LINEAGE_HOPS - 2)
    ok = resolve_detached_child(view, "detached", deepest, sender_is_owner=False)
    assert ok is not None
    assert len(ok.lineage) == MAX_LINEAGE_HOPS
    assert is_lineage_current(view, ok.lineage)
    view, deepest = chain(MAX_LINEAGE_HOPS - 1)
    assert resolve_detached_child(view, "detached", deepest, sender_is_owner=False) is None


def test_a_detached_link_anywhere_but_the_invocation_end_is_never_current() -> None:
    grp = root("g", 1, chat_type="group")
    audience = resolve_audience(rows(grp), "g", sender_is_owner=False)
    assert audience is not None
    assert not is_lineage_current(rows(grp), (*audience.lineage, LineageLink("x", None, 0)))
    assert not is_lineage_current(rows(grp), (LineageLink("x", None, 0),))


# ---- why there is no audience -------------------------------------------------------------


def _reason(view: dict[str, SessionRow], key: str) -> str:
    found = explain_audience(view, key, sender_is_owner=True)
    assert isinstance(found, NoAudience), found
    assert resolve_audience(view, key, sender_is_owner=True) is None
    return found.reason


def test_no_audience_reasons_name_what_is_wrong() -> None:
    dm = root("dm:alice", 1)
    legacy = root("legacy", 2, chat_type=None)
    odd = attrs.evolve(root("odd", 3), session_id="not-a-uuid")
    task = child("dm:alice/t", 4, dm)
    stale = attrs.evolve(child("dm:alice/s", 5, dm), parent_revision=99)
    old = child("dm:alice/old", 6, dm, spawned_by_owner=None)
    gone = child("orphan", 7, root("missing", 8))
    other = child("x/t", 9, dm, agent="other")
    view = rows(dm, legacy, odd, task, stale, old, gone, other)
    assert "ineligible chat type" in _reason(view, "legacy")
    assert "unverified session id" in _reason(view, "odd")
    assert "stale lineage" in _reason(view, "dm:alice/s")
    assert "respawn it from its parent session" in _reason(view, "dm:alice/s")
    assert "predates spawn receipts" in _reason(view, "dm:alice/old")
    assert "respawn it from its parent session" in _reason(view, "dm:alice/old")
    assert "is gone" in _reason(view, "orphan")
    assert "another agent" in _reason(view, "x/t")
    assert "has no row" in _reason(view, "nobody")
    assert explain_audience(view, "dm:alice/t", sender_is_owner=False) == resolve_audience(
        view, "dm:alice/t", sender_is_owner=False
    )


def test_a_cycle_is_a_reason_too() -> None:
    a = SessionRow("main", "a", sid(1), 1, "group", parent_key="b", parent_session_id=sid(2),
                   parent_revision=1, spawned_by_owner=True)  # fmt: skip
    b = SessionRow("main", "b", sid(2), 1, "group", parent_key="a", parent_session_id=sid(1),
                   parent_revision=1, spawned_by_owner=True)  # fmt: skip
    assert "cycle" in _reason(rows(a, b), "a")


def test_a_childs_partition_comes_from_its_receipts_not_the_later_sender() -> None:
    dm = root("dm:alice", 1)
    by_owner = child("dm:alice/o", 2, dm, spawned_by_owner=True)
    by_guest = child("dm:alice/g", 3, dm, spawned_by_owner=False)
    view = rows(dm, by_owner, by_guest)
    for sender in (True, False):
        owner = resolve_audience(view, "dm:alice/o", sender_is_owner=sender)
        guest = resolve_audience(view, "dm:alice/g", sender_is_owner=sender)
        assert owner is not None and owner.kind == "owner-private"
        assert guest is not None and guest.kind == "conversation"
