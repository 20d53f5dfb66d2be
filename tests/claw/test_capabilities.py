"""The forgery battery and revocation rules of the capability kernel (one technique per test)."""

from __future__ import annotations

import copy
import pickle
import weakref

import attrs
import pytest
import trio

import claw
from claw._capabilities import CAPABILITY_CLASSES


async def test_calling_a_capability_class_raises_type_error(host: claw.Host) -> None:
    for cls in CAPABILITY_CLASSES:
        with pytest.raises(TypeError, match="no public constructor"):
            cls()
    with pytest.raises(TypeError, match="no public constructor"):
        claw.HostAuthority(operation="status")  # type: ignore[call-arg]


@pytest.mark.parametrize("cls", CAPABILITY_CLASSES, ids=lambda c: c.__name__)
def test_subclassing_a_capability_class_raises_at_class_creation(cls: type) -> None:
    with pytest.raises(TypeError, match="final"):
        type("LookAlike", (cls,), {})


async def test_copy_returns_the_same_object(host: claw.Host) -> None:
    async with host.open_scope("t") as scope:
        auth = scope.mint_host_authority("status")
        assert copy.copy(auth) is auth


async def test_deepcopy_returns_the_same_object_even_nested(host: claw.Host) -> None:
    async with host.open_scope("t") as scope:
        op = scope.mint_operator_authority({"operator.read"})
        ctx = scope.mint_caller_context(op)
        assert copy.deepcopy(op) is op
        clone = copy.deepcopy({"ctx": ctx})
        assert clone["ctx"] is ctx


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
async def test_pickling_refuses(host: claw.Host, protocol: int) -> None:
    async with host.open_scope("t") as scope:
        auth = scope.mint_operator_authority({"operator.read"}, connection_id="c1")
        with pytest.raises(TypeError, match="cannot be pickled"):
            pickle.dumps(auth, protocol=protocol)


async def test_fields_cannot_be_reassigned(host: claw.Host) -> None:
    async with host.open_scope("t") as scope:
        op = scope.mint_operator_authority({"operator.read"})
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            op.scopes = frozenset({"operator.admin"})  # type: ignore[misc]
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            del op.connection_id  # type: ignore[misc]


async def test_equality_and_hash_are_by_identity(host: claw.Host) -> None:
    async with host.open_scope("t") as scope:
        a = scope.mint_operator_authority({"operator.read"}, connection_id="c1")
        b = scope.mint_operator_authority({"operator.read"}, connection_id="c1")
        assert a == a
        assert a != b
        assert len({a, b}) == 2
        assert hash(a) == object.__hash__(a)


async def test_object_new_forgery_is_refused_as_forged(host: claw.Host) -> None:
    forged = object.__new__(claw.HostAuthority)
    object.__setattr__(forged, "operation", "status")
    with pytest.raises(claw.ForgedCapabilityError):
        host.verify(forged)


async def test_forged_audience_with_matching_fields_is_refused(host: claw.Host) -> None:
    forged = object.__new__(claw.MemoryAudience)
    for name, value in {
        "kind": "owner-private",
        "agent_id": "main",
        "session_key": None,
        "session_id": None,
    }.items():
        object.__setattr__(forged, name, value)
    with pytest.raises(claw.ForgedCapabilityError):
        host.verify(forged)


async def test_attrs_evolve_cannot_copy_a_capability(host: claw.Host) -> None:
    async with host.open_scope("t") as scope:
        op = scope.mint_operator_authority({"operator.read"})
        with pytest.raises(TypeError):
            attrs.evolve(op, scopes=frozenset({"operator.admin"}))


async def test_a_plain_object_is_refused_as_forged(host: claw.Host) -> None:
    with pytest.raises(claw.ForgedCapabilityError):
        host.verify({"kind": "owner-private", "agent_id": "main"})


async def test_another_hosts_capability_is_refused_as_forged(
    host: claw.Host, host_config: claw.HostConfig, tmp_path: object
) -> None:
    other_config = attrs.evolve(host_config, state_dir=host_config.resolved_state_dir / "other")
    async with claw.open_host(other_config) as other, other.open_scope("t") as scope:
        foreign = scope.mint_host_authority("status")
        other.verify(foreign)
        with pytest.raises(claw.ForgedCapabilityError):
            host.verify(foreign)


async def test_verify_returns_none_while_current(host: claw.Host) -> None:
    async with host.open_scope("status") as scope:
        auth = scope.mint_host_authority("status")
        op = scope.mint_operator_authority({"operator.read"}, connection_id="c1")
        assert host.verify(auth) is None
        assert host.verify(op) is None
        assert op.has_scope("operator.read")
        assert not op.has_scope("operator.write")


async def test_leaving_a_scope_normally_revokes_what_it_minted(host: claw.Host) -> None:
    async with host.open_scope("status") as scope:
        auth = scope.mint_host_authority("status")
        ctx = scope.mint_caller_context(auth)
    with pytest.raises(claw.StaleCapabilityError):
        host.verify(auth)
    with pytest.raises(claw.StaleCapabilityError):
        ctx.assert_current()


async def test_leaving_a_scope_by_error_revokes_what_it_minted(host: claw.Host) -> None:
    minted: list[claw.HostAuthority] = []
    with pytest.RaisesGroup(ValueError, allow_unwrapped=True, flatten_subgroups=True):
        async with host.open_scope("status") as scope:
            minted.append(scope.mint_host_authority("status"))
            raise ValueError("boom")
    with pytest.raises(claw.StaleCapabilityError):
        host.verify(minted[0])


async def test_leaving_a_scope_by_cancellation_revokes_what_it_minted(host: claw.Host) -> None:
    minted: list[claw.HostAuthority] = []
    with trio.CancelScope() as cancel:
        async with host.open_scope("status") as scope:
            minted.append(scope.mint_host_authority("status"))
            cancel.cancel()
            await trio.sleep_forever()
    assert cancel.cancelled_caught
    with pytest.raises(claw.StaleCapabilityError):
        host.verify(minted[0])


async def test_scope_tasks_still_hold_current_capabilities_until_they_finish(
    host: claw.Host,
) -> None:
    seen: list[bool] = []
    event = trio.Event()

    async def worker(auth: claw.HostAuthority) -> None:
        await event.wait()
        host.verify(auth)
        seen.append(True)

    async with host.open_scope("work") as scope:
        auth = scope.mint_host_authority("work")
        scope.nursery.start_soon(worker, auth)
        await trio.testing.wait_all_tasks_blocked()
        event.set()
    assert seen == [True]
    with pytest.raises(claw.StaleCapabilityError):
        host.verify(auth)


async def test_a_closed_scope_cannot_mint(host: claw.Host) -> None:
    async with host.open_scope("s") as scope:
        pass
    with pytest.raises(claw.HostClosedError):
        scope.mint_host_authority("status")


async def test_caller_context_refuses_stale_authority_at_mint(host: claw.Host) -> None:
    async with host.open_scope("a") as first:
        auth = first.mint_host_authority("status")
    async with host.open_scope("b") as second:
        with pytest.raises(claw.StaleCapabilityError):
            second.mint_caller_context(auth)


async def test_caller_context_goes_stale_with_its_authoritys_scope(host: claw.Host) -> None:
    async with host.open_scope("outer") as outer:
        auth = outer.mint_operator_authority({"operator.read"})
        async with host.open_scope("inner") as inner:
            ctx = inner.mint_caller_context(auth)
            ctx.assert_current()
        with pytest.raises(claw.StaleCapabilityError):
            ctx.assert_current()


async def test_caller_context_is_stale_once_its_request_is_aborted(host: claw.Host) -> None:
    async with host.open_scope("req") as scope:
        auth = scope.mint_operator_authority({"operator.read"})
        ctx = scope.mint_caller_context(auth)
        ctx.assert_current()
        ctx.cancel_scope.cancel()
        with pytest.raises(claw.StaleCapabilityError, match="aborted"):
            ctx.assert_current()
        host.verify(auth)


async def test_capabilities_do_not_keep_themselves_alive(host: claw.Host) -> None:
    async with host.open_scope("s") as scope:
        ref = weakref.ref(scope.mint_host_authority("status"))
        import gc

        gc.collect()
        assert ref() is None


async def test_host_closes_and_refuses_new_scopes(host_config: claw.HostConfig) -> None:
    async with claw.open_host(host_config) as h:
        pass
    assert h.closed
    with pytest.raises(claw.HostClosedError):
        async with h.open_scope("late"):
            pass  # pragma: no cover


async def test_two_hosts_share_a_state_dir_and_see_each_others_sessions(
    host: claw.Host, host_config: claw.HostConfig
) -> None:
    async with claw.open_host(host_config) as second:
        row = await second.sessions.create("dm:a", agent_id="main", chat_type="direct")
        assert await host.sessions.get("dm:a") == row


def test_errors_subclass_the_nearest_builtin() -> None:
    assert issubclass(claw.ForgedCapabilityError, PermissionError)
    assert issubclass(claw.StaleCapabilityError, PermissionError)
    assert issubclass(claw.CapabilityDeniedError, PermissionError)
    assert issubclass(claw.ConfigError, ValueError)
    assert issubclass(claw.SlotConflictError, RuntimeError)
    for err in (
        claw.ForgedCapabilityError,
        claw.StaleCapabilityError,
        claw.SlotConflictError,
        claw.ContractError,
        claw.ConfigError,
    ):
        assert issubclass(err, claw.ClawError)


# -- field rewrites through object.__setattr__ ------------------------------------------


def _other_value(value: object) -> object:
    """A value of the same shape that differs from ``value`` (an escalation, where one exists)."""
    if isinstance(value, bool):
        return not value
    if value == "conversation":
        return "owner-private"
    if isinstance(value, str):
        return value + "-rewritten"
    if isinstance(value, frozenset):
        return value | {"operator.read", "operator.admin"}
    if value is None:
        return "rewritten"
    return object()


async def _one_of_each(host: claw.Host, scope: claw.HostScope) -> dict[str, claw.Capability]:
    run = await scope.nursery.start(_open_group_run, host)
    flush = scope.mint(
        claw.FlushIdentity, flush_id="f1", source_session_key="grp:1", bound_session_key="x"
    )
    op = scope.mint_operator_authority({"operator.status"}, connection_id="c1")
    return {
        "MemoryAudience": run.audience,
        "ConversationRecallPass": run.authority.conversation_recall,
        "FlushIdentity": flush,
        "OperatorAuthority": op,
        "SessionAuthority": run.authority,
        "HostAuthority": scope.mint_host_authority("status"),
        "MemoryCallerContext": scope.mint_caller_context(op),
    }


async def _open_group_run(host: claw.Host, task_status: trio.TaskStatus[claw.Run]) -> None:
    async with host.open_run("grp:1", sender_is_owner=False, conversation_recall=["grp:1"]) as run:
        task_status.started(run)
        await trio.sleep_forever()


def _field_cases() -> list[tuple[str, str]]:
    return [
        (cls.__name__, field.name)
        for cls in CAPABILITY_CLASSES
        for field in attrs.fields(cls)  # type: ignore[arg-type]
    ]


@pytest.mark.parametrize(("cls_name", "field"), _field_cases())
async def test_a_field_rewritten_with_object_setattr_is_refused(
    host: claw.Host, cls_name: str, field: str
) -> None:
    await host.sessions.create("grp:1", agent_id="main", chat_type="group")
    async with host.open_scope("t") as scope:
        caps = await _one_of_each(host, scope)
        cap = caps[cls_name]
        host.verify(cap)
        old = getattr(cap, field)
        new = _other_value(old)
        if field == "authority":
            new = scope.mint_host_authority("status")  # another live capability
        elif field in {"audience", "conversation_recall"}:
            new = None  # dropping a nested capability also changes what was minted
        elif field == "cancel_scope":
            new = trio.CancelScope()
        object.__setattr__(cap, field, new)
        with pytest.raises(claw.ForgedCapabilityError, match="altered after minting"):
            host.verify(cap)
        # Putting the minted value back does not revive it.
        object.__setattr__(cap, field, old)
        with pytest.raises(claw.ForgedCapabilityError, match="altered after minting"):
            host.verify(cap)
        scope.nursery.cancel_scope.cancel()


async def test_a_rewritten_audience_fails_the_context_check_of_its_run(host: claw.Host) -> None:
    await host.sessions.create("grp:1", agent_id="main", chat_type="group")
    async with host.open_run("grp:1", sender_is_owner=False) as run:
        assert run.audience is not None
        object.__setattr__(run.audience, "kind", "owner-private")
        with pytest.raises(claw.ForgedCapabilityError):
            run.caller.assert_current()
        with pytest.raises(claw.ForgedCapabilityError):
            host.verify(run.authority)


async def test_widened_operator_scopes_fail_the_context_check(host: claw.Host) -> None:
    async with host.open_scope("gw") as scope:
        op = scope.mint_operator_authority({"operator.status"})
        ctx = scope.mint_caller_context(op)
        object.__setattr__(op, "scopes", frozenset({"operator.status", "operator.read"}))
        assert op.has_scope("operator.read")  # the rewrite took effect on the object...
        with pytest.raises(claw.ForgedCapabilityError):
            ctx.assert_current()  # ...and the host refuses it


async def test_a_minting_scope_revokes_what_it_minted_on_exit_and_has_no_nursery(
    host: claw.Host,
) -> None:
    with host.open_minting_scope("request") as scope:
        authority = scope.mint_operator_authority({"operator.read"})
        context = scope.mint_caller_context(authority)
        host.verify(context)
        with pytest.raises(claw.HostClosedError, match="has no nursery"):
            scope.nursery  # noqa: B018
    assert scope.closed
    with pytest.raises(claw.StaleCapabilityError, match="scope 'request' closed"):
        host.verify(context)
    with pytest.raises(claw.HostClosedError, match="is closed"):
        scope.mint_host_authority("status")


async def test_a_minting_scope_left_by_an_error_revokes_too(host: claw.Host) -> None:
    with pytest.raises(RuntimeError, match="boom"), host.open_minting_scope("request") as scope:
        context = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
        raise RuntimeError("boom")
    with pytest.raises(claw.StaleCapabilityError, match="scope 'request' closed"):
        host.verify(context)
