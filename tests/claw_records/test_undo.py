"""Memory Records joins issue 24's contract: who wrote each record, and forget undone."""

from __future__ import annotations

import pytest

import claw
from claw.memory import MemoryGetRequest, MemoryReference, MemorySearchRequest

from .conftest import PLUGIN, OpenRecordsHost, call_tool, operator, service_of
from .test_records import ref_of, search


async def test_hits_and_get_say_who_wrote_a_record_and_the_journal_every_change(
    open_records_host: OpenRecordsHost,
) -> None:
    async with open_records_host() as host:
        async with host.open_run("dm:alice", sender_is_owner=True) as run:
            made = ref_of(
                await call_tool(host, run, "dm:alice", "record_add", text="The bike is blue")
            )
            row = host.sessions.get_nowait("dm:alice")
            assert row is not None
        async with operator(host) as op:
            await host.memory.add(op, "The car is grey")
            async with host.memory.open(op) as handle:
                result = await handle.search(MemorySearchRequest(query="bike car", max_results=5))
                writers = {h.excerpt: h.provenance for h in result.hits}
                got = await handle.get(
                    MemoryGetRequest(
                        reference=MemoryReference(provider_id=PLUGIN, id=made.split("@")[0])
                    )
                )
        (run_writer,) = writers["The bike is blue"]
        assert (run_writer.kind, run_writer.tool, run_writer.plugin_id) == (
            "run",
            "record_add",
            PLUGIN,
        )
        assert (run_writer.session_key, run_writer.session_id, run_writer.owner) == (
            "dm:alice",
            row.session_id,
            True,
        )
        assert run_writer.lifecycle_revision == row.lifecycle_revision
        (op_writer,) = writers["The car is grey"]
        assert (op_writer.kind, op_writer.tool) == ("operator", None)
        assert got.provenance == (run_writer,)
        journal = (
            await service_of(host)
            .database()
            .run(
                lambda conn: conn.execute(
                    "SELECT op, by->>'kind' FROM memory_record_journal ORDER BY n"
                ).fetchall()
            )
        )
        assert [tuple(r) for r in journal] == [("add", "run"), ("add", "operator")]


async def test_a_forgotten_record_is_listed_and_restored_under_its_own_reference(
    open_records_host: OpenRecordsHost,
) -> None:
    async with open_records_host() as host, operator(host) as op:
        added = await host.memory.add(op, "The spare key is under the blue pot")
        forgot = await host.memory.forget(
            op, MemoryReference(provider_id=PLUGIN, id=added.reference.id)
        )
        assert forgot.removal_id is not None and forgot.entries == 1
        assert await search(host, op, "spare key") == []
        listed = await host.memory.removals(op)
        assert [(r.id, r.status, r.text) for r in listed] == [
            (forgot.removal_id, "forgotten", "The spare key is under the blue pot")
        ]
        assert listed[0].by is not None and listed[0].by.kind == "operator"
        back = await host.memory.restore(op, forgot.removal_id[:8])
        assert (back.reference.id, back.already, back.mode) == (
            added.reference.id,
            False,
            "in-place",
        )
        assert await search(host, op, "spare key") == ["The spare key is under the blue pot"]
        async with host.memory.open(op) as handle:
            got = await handle.get(
                MemoryGetRequest(
                    reference=MemoryReference(provider_id=PLUGIN, id=back.reference.id)
                )
            )
        assert got.text == "The spare key is under the blue pot"
        assert got.provenance[0].kind == "operator"  # the writer it had, not the restorer
        again = await host.memory.restore(op, forgot.removal_id)
        assert again.already
        assert [r.status for r in await host.memory.removals(op)] == ["restored"]
        with pytest.raises(claw.ClawError, match="no removal"):
            await host.memory.restore(op, "0123456789ab")
        with pytest.raises(claw.ClawError, match="not a removal id"):
            await host.memory.restore(op, "x%")


async def test_a_conversation_cannot_restore_or_list_the_owners_removals(
    open_records_host: OpenRecordsHost,
) -> None:
    async with open_records_host() as host:
        async with operator(host) as op:
            added = await host.memory.add(op, "owner secret: the safe code is 0451")
            forgot = await host.memory.forget(
                op, MemoryReference(provider_id=PLUGIN, id=added.reference.id)
            )
        assert forgot.removal_id is not None
        async with host.open_run("grp:1", sender_is_owner=False) as group:
            with pytest.raises(claw.CapabilityDeniedError):
                await host.memory.restore(group.caller, forgot.removal_id)
            with pytest.raises(claw.CapabilityDeniedError):
                await host.memory.removals(group.caller)
        async with operator(host, ("operator.read",)) as reader:
            with pytest.raises(claw.CapabilityDeniedError, match="operator.write"):
                await host.memory.restore(reader, forgot.removal_id)
