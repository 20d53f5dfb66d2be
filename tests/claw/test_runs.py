"""Runs: audience minting from trusted facts and lineage, currency, replay and revocation."""

from __future__ import annotations

import logging

import pytest
import trio

import claw
from claw._capabilities import AUDIENCE_STALE_MESSAGE
from claw.sessions import MAX_LINEAGE_HOPS
from claw_testing import SessionBuilder


async def test_owner_direct_run_gets_owner_private_audience(host: claw.Host) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    async with host.open_run("dm:alice", sender_is_owner=True, sandboxed=False) as run:
        assert run.audience is not None
        assert run.audience.kind == "owner-private"
        assert run.audience.agent_id == "main"
        run.caller.assert_current()
        host.verify(run.audience)
        host.verify(run.authority)
        assert run.authority.session_key == "dm:alice"
        assert run.authority.session_id == run.session.session_id  # type: ignore[union-attr]


async def test_non_owner_direct_run_gets_conversation_audience(host: claw.Host) -> None:
    row = await host.sessions.create("dm:bob", agent_id="main", chat_type="direct")
    async with host.open_run("dm:bob", sender_is_owner=False) as run:
        assert run.audience is not None
        assert run.audience.kind == "conversation"
        assert (run.audience.session_key, run.audience.session_id) == ("dm:bob", row.session_id)


@pytest.mark.parametrize("chat_type", ["group", "channel", "thread"])
async def test_shared_chat_runs_get_conversation_audience_even_for_the_owner(
    host: claw.Host, chat_type: str
) -> None:
    await host.sessions.create("c:1", agent_id="main", chat_type=chat_type)  # type: ignore[arg-type]
    async with host.open_run("c:1", sender_is_owner=True) as run:
        assert run.audience is not None
        assert run.audience.kind == "conversation"
        assert run.audience.session_key == "c:1"


async def test_child_of_owner_direct_inherits_root_audience(host: claw.Host) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    await host.sessions.spawn_child("dm:alice", "dm:alice/task-1", sender_is_owner=True)
    await host.sessions.spawn_child("dm:alice/task-1", "dm:alice/task-1/sub", sender_is_owner=True)
    async with host.open_run("dm:alice/task-1/sub", sender_is_owner=True) as run:
        assert run.audience is not None
        assert run.audience.kind == "owner-private"


async def test_child_of_group_gets_the_root_conversation(host: claw.Host) -> None:
    root = await host.sessions.create("grp:1", agent_id="main", chat_type="group")
    await host.sessions.spawn_child("grp:1", "grp:1/task", sender_is_owner=True)
    async with host.open_run("grp:1/task", sender_is_owner=False) as run:
        assert run.audience is not None
        assert (run.audience.session_key, run.audience.session_id) == ("grp:1", root.session_id)


async def test_stale_parent_revision_gives_no_audience(host: claw.Host) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    await host.sessions.spawn_child("dm:alice", "dm:alice/task-1", sender_is_owner=True)
    await host.sessions.reset("dm:alice")
    async with host.open_run("dm:alice/task-1", sender_is_owner=True) as run:
        assert run.audience is None
        run.caller.assert_current()


async def test_running_an_unknown_session_is_an_error(host: claw.Host) -> None:
    with pytest.raises(claw.sessions.SessionNotFoundError):
        async with host.open_run("nobody", sender_is_owner=True):
            pass  # pragma: no cover


async def test_sender_is_owner_must_be_a_real_bool(host: claw.Host) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    with pytest.raises(TypeError, match="sender_is_owner"):
        async with host.open_run("dm:alice", sender_is_owner="yes"):  # type: ignore[arg-type]
            pass  # pragma: no cover


async def test_reset_keeping_the_id_makes_the_audience_stale(host: claw.Host) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    async with host.open_run("dm:alice", sender_is_owner=True) as run:
        await host.sessions.reset("dm:alice")
        with pytest.raises(claw.StaleCapabilityError, match=AUDIENCE_STALE_MESSAGE):
            run.caller.assert_current()
        with pytest.raises(claw.StaleCapabilityError, match=AUDIENCE_STALE_MESSAGE):
            host.verify(run.audience)


async def test_parent_reset_after_minting_makes_the_child_audience_stale(host: claw.Host) -> None:
    await host.sessions.create("grp:1", agent_id="main", chat_type="group")
    await host.sessions.spawn_child("grp:1", "grp:1/task", sender_is_owner=True)
    async with host.open_run("grp:1/task", sender_is_owner=False) as run:
        run.caller.assert_current()
        await host.sessions.reset("grp:1", keep_session_id=False)
        with pytest.raises(claw.StaleCapabilityError, match=AUDIENCE_STALE_MESSAGE):
            run.caller.assert_current()


async def test_reassign_makes_the_audience_stale(host: claw.Host) -> None:
    await host.sessions.create("dm:bob", agent_id="main", chat_type="direct")
    async with host.open_run("dm:bob", sender_is_owner=False) as run:
        await host.sessions.reassign("dm:bob", chat_type="group")
        with pytest.raises(claw.StaleCapabilityError, match=AUDIENCE_STALE_MESSAGE):
            run.caller.assert_current()


async def test_audience_revocation_does_not_cancel_the_run(host: claw.Host) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    async with host.open_run("dm:alice", sender_is_owner=True) as run:
        await host.sessions.reset("dm:alice")
        assert not run.cancel_scope.cancel_called
        await trio.lowlevel.checkpoint()


async def test_the_end_of_the_run_makes_everything_stale(host: claw.Host) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    async with host.open_run("dm:alice", sender_is_owner=True) as run:
        audience, authority, caller = run.audience, run.authority, run.caller
    with pytest.raises(claw.StaleCapabilityError, match=AUDIENCE_STALE_MESSAGE):
        host.verify(audience)
    with pytest.raises(claw.StaleCapabilityError):
        host.verify(authority)
    with pytest.raises(claw.StaleCapabilityError):
        caller.assert_current()


async def test_audience_presented_for_another_session_is_refused(host: claw.Host) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    await host.sessions.create("grp:1", agent_id="main", chat_type="group")
    async with host.open_run("dm:alice", sender_is_owner=True) as run:
        host.verify(run.audience, session_key="dm:alice")
        with pytest.raises(claw.CapabilityDeniedError, match="bound to another session"):
            host.verify(run.audience, session_key="grp:1")


async def test_audience_replayed_into_a_later_run_of_the_same_session_is_refused(
    host: claw.Host,
) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    async with host.open_run("dm:alice", sender_is_owner=True) as run_a:
        captured = run_a.audience
    async with host.open_run("dm:alice", sender_is_owner=True) as run_b:
        assert run_b.audience is not captured
        with pytest.raises(claw.StaleCapabilityError):
            host.verify(captured, session_key="dm:alice")


async def test_audience_replayed_into_a_concurrent_run_of_another_session_is_refused(
    host: claw.Host,
) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    await host.sessions.create("grp:1", agent_id="main", chat_type="group")
    async with (
        host.open_run("dm:alice", sender_is_owner=True) as run_a,
        host.open_run("grp:1", sender_is_owner=False) as run_b,
    ):
        with pytest.raises(claw.CapabilityDeniedError):
            host.verify(run_a.audience, session_key=run_b.session_key)


async def test_forged_audience_is_refused_as_forged(host: claw.Host) -> None:
    forged = object.__new__(claw.MemoryAudience)
    object.__setattr__(forged, "kind", "owner-private")
    object.__setattr__(forged, "agent_id", "main")
    with pytest.raises(claw.ForgedCapabilityError):
        host.verify(forged, session_key="dm:alice")


async def test_child_run_gets_a_new_audience_sharing_the_parents_revocation(
    host: claw.Host,
) -> None:
    await host.sessions.create("grp:1", agent_id="main", chat_type="group")
    await host.sessions.spawn_child("grp:1", "grp:1/task", sender_is_owner=True)
    async with host.open_run("grp:1", sender_is_owner=False) as parent:
        async with parent.open_child_run("grp:1/task") as child:
            assert child.audience is not None
            assert child.audience is not parent.audience
            assert child.audience.session_key == "grp:1"
            child.caller.assert_current()
            await host.sessions.reset("grp:1/task")
            with pytest.raises(claw.StaleCapabilityError, match=AUDIENCE_STALE_MESSAGE):
                child.caller.assert_current()
            parent.caller.assert_current()


async def test_child_run_audience_dies_with_the_parent_audience(host: claw.Host) -> None:
    await host.sessions.create("grp:1", agent_id="main", chat_type="group")
    await host.sessions.spawn_child("grp:1", "grp:1/task", sender_is_owner=True)
    async with host.open_run("grp:1", sender_is_owner=False) as parent:
        async with parent.open_child_run("grp:1/task") as child:
            await host.sessions.reset("grp:1")
            with pytest.raises(claw.StaleCapabilityError, match=AUDIENCE_STALE_MESSAGE):
                child.caller.assert_current()


async def test_detached_child_run_is_stale_once_its_row_appears(host: claw.Host) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    async with host.open_run("dm:alice", sender_is_owner=True) as parent:
        async with parent.open_child_run("dm:alice/detached") as child:
            assert child.audience is not None
            assert child.audience.kind == "owner-private"
            assert child.session is None
            child.caller.assert_current()
            await host.sessions.spawn_child("dm:alice", "dm:alice/detached", sender_is_owner=True)
            with pytest.raises(claw.StaleCapabilityError, match=AUDIENCE_STALE_MESSAGE):
                child.caller.assert_current()


async def test_child_run_of_a_parent_without_audience_gets_none(host: claw.Host) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    await host.sessions.spawn_child("dm:alice", "dm:alice/task", sender_is_owner=True)
    await host.sessions.reassign("dm:alice", chat_type="group")  # child's parent link is stale now
    async with host.open_run("dm:alice/task", sender_is_owner=True) as run:
        assert run.audience is None
        async with run.open_child_run("dm:alice/task/sub") as child:
            assert child.audience is None


async def test_recall_pass_names_only_root_conversations_of_the_agent(host: claw.Host) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    await host.sessions.create("grp:1", agent_id="main", chat_type="group")
    await host.sessions.create("grp:other", agent_id="other", chat_type="group")
    async with host.open_run(
        "dm:alice", sender_is_owner=True, conversation_recall=["grp:1"]
    ) as run:
        recall = run.authority.conversation_recall
        assert recall is not None
        assert recall.conversation_keys == frozenset({"grp:1"})
        host.verify(recall, session_key="dm:alice")
    with pytest.raises(claw.StaleCapabilityError):
        host.verify(recall)
    with pytest.raises(claw.CapabilityDeniedError, match="belongs to agent 'other'"):
        async with host.open_run(
            "dm:alice", sender_is_owner=True, conversation_recall=["grp:other"]
        ):
            pass  # pragma: no cover


@pytest.mark.parametrize("change", ["reset", "reassign", "delete"])
async def test_a_change_of_a_recalled_conversation_revokes_the_recall_pass(
    host: claw.Host, change: str
) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    await host.sessions.create("grp:1", agent_id="main", chat_type="group")
    await host.sessions.create("grp:2", agent_id="main", chat_type="group")
    async with host.open_run(
        "dm:alice", sender_is_owner=True, conversation_recall=["grp:1", "grp:2"]
    ) as run:
        recall = run.authority.conversation_recall
        assert recall is not None
        if change == "reset":
            await host.sessions.reset("grp:2")
        elif change == "reassign":
            await host.sessions.reassign("grp:2", agent_id="other")
        else:
            await host.sessions.delete("grp:2")
        with pytest.raises(claw.StaleCapabilityError, match="conversation recall pass"):
            host.verify(recall)
        # The run's authority carries the pass: it fails closed as a whole.
        with pytest.raises(claw.StaleCapabilityError):
            await host.verify_committed(run.caller)
        assert run.audience is not None
        host.verify(run.audience)  # the run's own audience is untouched


async def test_operator_authority_never_carries_an_audience(host: claw.Host) -> None:
    async with host.open_scope("op") as scope:
        op = scope.mint_operator_authority({"operator.read", "operator.admin"})
        ctx = scope.mint_caller_context(op)
        assert ctx.audience is None
        assert ctx.session_key is None


async def test_the_host_clock_stamps_sessions_and_transcripts(
    host_config: claw.HostConfig,
) -> None:
    ticks = iter(range(1_000, 2_000))
    async with claw.open_host(host_config, clock=lambda: float(next(ticks))) as host:
        row = await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        assert row.created_at == 1_000.0
        (entry,) = await host.transcripts.append(
            "dm:alice", row.session_id, [claw.UserMessage("hi")]
        )
        assert 1_000.0 < entry.created_at < 2_000.0


# -- audience lineage: spawn receipts, delegation, depth, reasons -------------------------


async def test_a_lineage_started_by_a_non_owner_never_turns_owner_private(
    host: claw.Host,
) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    async with host.open_run("dm:alice", sender_is_owner=False) as turn:
        kid = await turn.spawn_child("dm:alice/task")
    assert kid.spawned_by_owner is False
    # A later run admitted on the child with an owner sender does not widen it.
    async with host.open_run("dm:alice/task", sender_is_owner=True) as run:
        assert run.audience is not None
        assert (run.audience.kind, run.audience.session_key) == ("conversation", "dm:alice")


async def test_an_owner_spawned_child_keeps_its_partition_whoever_runs_it_later(
    host: claw.Host,
) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    async with host.open_run("dm:alice", sender_is_owner=True) as turn:
        kid = await turn.spawn_child("dm:alice/task")
    assert kid.spawned_by_owner is True
    async with host.open_run("dm:alice/task", sender_is_owner=False) as run:
        assert run.audience is not None and run.audience.kind == "owner-private"


async def test_one_non_owner_receipt_anywhere_in_the_lineage_means_conversation(
    host: claw.Host,
) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    await host.sessions.spawn_child("dm:alice", "dm:alice/a", sender_is_owner=True)
    await host.sessions.spawn_child("dm:alice/a", "dm:alice/a/b", sender_is_owner=False)
    await host.sessions.spawn_child("dm:alice/a/b", "dm:alice/a/b/c", sender_is_owner=True)
    async with host.open_run("dm:alice/a/b/c", sender_is_owner=True) as run:
        assert run.audience is not None and run.audience.kind == "conversation"


async def test_a_child_run_never_gets_a_wider_audience_than_its_parent(host: claw.Host) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    await host.sessions.spawn_child("dm:alice", "dm:alice/task", sender_is_owner=True)
    async with host.open_run("dm:alice", sender_is_owner=False) as parent:
        assert parent.audience is not None and parent.audience.kind == "conversation"
        async with parent.open_child_run("dm:alice/task") as child:
            assert child.audience is not None
            assert (child.audience.kind, child.audience.session_key) == (
                "conversation",
                "dm:alice",
            )


async def test_a_child_run_for_a_session_of_another_agent_is_refused(host: claw.Host) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    await host.sessions.create("other:1", agent_id="other", chat_type="direct")
    async with host.open_run("dm:alice", sender_is_owner=True) as parent:
        with pytest.raises(claw.CapabilityDeniedError, match="belongs to agent 'other'"):
            parent.open_child_run("other:1")


async def test_delegating_from_a_stale_audience_raises(host: claw.Host) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    await host.sessions.spawn_child("dm:alice", "dm:alice/task", sender_is_owner=True)
    async with host.open_run("dm:alice", sender_is_owner=True) as parent:
        await host.sessions.reset("dm:alice")
        with pytest.raises(claw.StaleCapabilityError, match=AUDIENCE_STALE_MESSAGE):
            parent.open_child_run("dm:alice/task")
        with pytest.raises(claw.StaleCapabilityError, match=AUDIENCE_STALE_MESSAGE):
            parent.open_child_run("dm:alice/detached")
        with pytest.raises(claw.StaleCapabilityError, match=AUDIENCE_STALE_MESSAGE):
            parent.open_maintenance_run("flush:dm:alice")


async def test_a_root_and_sixty_four_chained_children_exceed_the_hop_bound(
    host: claw.Host, caplog: pytest.LogCaptureFixture
) -> None:
    await host.sessions.create("grp:1", agent_id="main", chat_type="group")
    chain = await SessionBuilder(host).child_chain("grp:1", MAX_LINEAGE_HOPS)
    async with host.open_run(chain[-2].session_key, sender_is_owner=False) as run:
        assert run.audience is not None  # a root and 63 children are within the bound
    with caplog.at_level(logging.DEBUG, logger="claw.runs"):
        async with host.open_run(chain[-1].session_key, sender_is_owner=False) as run:
            assert run.audience is None
            assert run.no_audience_reason is not None
            assert "too deep" in run.no_audience_reason
    assert any("too deep" in r.getMessage() for r in caplog.records)


async def test_a_run_without_audience_says_why(host: claw.Host) -> None:
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    await host.sessions.spawn_child("dm:alice", "dm:alice/task", sender_is_owner=True)
    async with host.open_run("dm:alice", sender_is_owner=True) as run:
        assert run.audience is not None and run.no_audience_reason is None
    await host.sessions.reset("dm:alice", keep_session_id=False)
    async with host.open_run("dm:alice/task", sender_is_owner=True) as run:
        assert run.audience is None
        assert run.no_audience_reason is not None
        assert "stale lineage" in run.no_audience_reason
        assert "respawn it from its parent session" in run.no_audience_reason
        async with run.open_child_run("dm:alice/task/sub") as child:
            assert child.audience is None
            assert child.no_audience_reason is not None
            assert "stale lineage" in child.no_audience_reason


async def test_a_caller_is_current_for_its_own_agent_only(host: claw.Host) -> None:
    # What every memory provider checks when it opens an agent's memory for a caller.
    await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    async with host.open_run("dm:alice", sender_is_owner=True, sandboxed=False) as run:
        run.caller.assert_current_for("main")
        with pytest.raises(claw.CapabilityDeniedError, match="another agent"):
            run.caller.assert_current_for("other")
    with pytest.raises(claw.StaleCapabilityError):
        run.caller.assert_current_for("main")
