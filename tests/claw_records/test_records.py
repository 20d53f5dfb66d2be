"""Memory Records on a real PostgreSQL: writes, search, revisions, audience partitions."""

from __future__ import annotations

import pytest

import claw
from claw.memory import MemoryGetRequest, MemoryReference, MemorySearchRequest
from claw_records._store import MIGRATIONS

from .conftest import PLUGIN, OpenRecordsHost, call_tool, operator, service_of


def ref_of(tool_output: str) -> str:
    """``rec_...@N`` from a tool's answer (``... Ref: rec_...@N``)."""
    return tool_output.rsplit("Ref: ", 1)[1].strip()


async def search(host: claw.Host, caller: claw.MemoryCallerContext, query: str) -> list[str]:
    async with host.memory.open(caller) as handle:
        result = await handle.search(MemorySearchRequest(query=query, max_results=10))
    return [h.excerpt for h in result.hits]


async def test_an_operator_adds_gets_and_forgets_through_the_host_route(
    open_records_host: OpenRecordsHost,
) -> None:
    async with open_records_host() as host, operator(host) as op:
        added = await host.memory.add(op, "Alice prefers green tea in the afternoon")
        ref = added.reference
        assert ref.provider_id == PLUGIN and ref.id.startswith("rec_") and ref.revision == "1"
        assert await search(host, op, "green tea") == ["Alice prefers green tea in the afternoon"]
        async with host.memory.open(op) as handle:
            got = await handle.get(MemoryGetRequest(reference=ref))
            assert got.status == "ok" and got.text == "Alice prefers green tea in the afternoon"
        forgot = await host.memory.forget(op, MemoryReference(provider_id=PLUGIN, id=ref.id))
        assert forgot.removed_text == "Alice prefers green tea in the afternoon"
        assert await search(host, op, "green tea") == []
        async with host.memory.open(op) as handle:
            assert (await handle.get(MemoryGetRequest(reference=ref))).status == "not_found"
        # Forgetting erases the history as well: no revision of it can be read back.
        with pytest.raises(claw.UnsupportedRequestError, match="no memory record"):
            await host.memory.forget(op, MemoryReference(provider_id=PLUGIN, id=ref.id))


async def test_an_update_is_a_new_revision_and_get_reads_either(
    open_records_host: OpenRecordsHost,
) -> None:
    async with open_records_host() as host, host.open_run("dm:alice", sender_is_owner=True) as run:
        first = ref_of(await call_tool(host, run, "dm:alice", "record_add",
                                       text="The deploy window is Tuesday"))
        ref, _, rev = first.partition("@")
        assert rev == "1"
        updated = await call_tool(host, run, "dm:alice", "record_update", ref=first,
                                  text="The deploy window moved to Thursday")
        assert ref_of(updated) == f"{ref}@2"
        # An update naming a revision that is no longer current is refused, unless it
        # changes nothing (a retry of the update that made the current revision).
        stale = await call_tool(host, run, "dm:alice", "record_update", ref=first, text="x")
        assert "revision 2, not 1" in stale
        again = await call_tool(host, run, "dm:alice", "record_update", ref=first,
                                text="The deploy window moved to Thursday")
        assert ref_of(again) == f"{ref}@2"
        assert await search(host, run.caller, "deploy window") == [
            "The deploy window moved to Thursday"
        ]
        async with host.memory.open(run.caller) as handle:
            for revision, text in (("1", "The deploy window is Tuesday"),
                                   ("2", "The deploy window moved to Thursday"),
                                   (None, "The deploy window moved to Thursday")):
                got = await handle.get(MemoryGetRequest(
                    reference=MemoryReference(provider_id=PLUGIN, id=ref, revision=revision)))
                assert (got.status, got.text) == ("ok", text)
            missing = await handle.get(MemoryGetRequest(
                reference=MemoryReference(provider_id=PLUGIN, id=ref, revision="3")))
            assert missing.status == "not_found"
            # An id no record can have is not looked up at all.
            for odd in ("x" * 10_000, "../etc/passwd", ref.upper()):
                nothing = await handle.get(
                    MemoryGetRequest(reference=MemoryReference(provider_id=PLUGIN, id=odd))
                )
                assert nothing.status == "not_found"
            with pytest.raises(claw.UnsupportedRequestError, match="not a record revision"):
                await handle.get(MemoryGetRequest(
                    reference=MemoryReference(provider_id=PLUGIN, id=ref, revision="two")))


async def test_a_conversation_audience_sees_only_its_root_sessions_records(
    open_records_host: OpenRecordsHost,
) -> None:
    async with open_records_host() as host:
        async with host.open_run("dm:alice", sender_is_owner=True) as owner:
            secret = ref_of(await call_tool(host, owner, "dm:alice", "record_add",
                                            text="owner secret: the deploy pin is 4411"))
        async with host.open_run("grp:1", sender_is_owner=False) as group:
            await call_tool(host, group, "grp:1", "record_add",
                            text="group one agreed the deploy moves to Monday")
        async with host.open_run("grp:2", sender_is_owner=False) as other:
            await call_tool(host, other, "grp:2", "record_add",
                            text="group two deploy retro is on Friday")

        async with host.open_run("grp:1", sender_is_owner=False) as group:
            assert await search(host, group.caller, "deploy") == [
                "group one agreed the deploy moves to Monday"
            ]
            assert await search(host, group.caller, "pin 4411") == []
            assert "group two" not in await call_tool(host, group, "grp:1", "record_search",
                                                      query="deploy retro Friday")
            async with host.memory.open(group.caller) as handle:
                ref, _, _ = secret.partition("@")
                with pytest.raises(claw.CapabilityDeniedError):
                    await handle.get(MemoryGetRequest(
                        reference=MemoryReference(provider_id=PLUGIN, id=ref)))
        # The owner sees every partition: owner records as memory, the groups' as sessions.
        async with host.open_run("dm:alice", sender_is_owner=True) as owner:
            async with host.memory.open(owner.caller) as handle:
                result = await handle.search(MemorySearchRequest(query="deploy", max_results=10))
            by_source = sorted((h.source, h.metadata["session_key"]) for h in result.hits)
            assert by_source == [("memory", None), ("sessions", "grp:1"), ("sessions", "grp:2")]


async def test_a_conversation_audience_cannot_write_the_owners_memory(
    open_records_host: OpenRecordsHost,
) -> None:
    async with open_records_host() as host:
        async with host.open_run("dm:alice", sender_is_owner=True) as owner:
            secret = ref_of(await call_tool(host, owner, "dm:alice", "record_add",
                                            text="owner secret: the deploy pin is 4411"))
        async with host.open_run("grp:1", sender_is_owner=False) as group:
            changed = await call_tool(host, group, "grp:1", "record_update", ref=secret,
                                      text="the deploy pin is 0000")
            assert "not a memory record this conversation may change" in changed
            forgot = await call_tool(host, group, "grp:1", "record_forget", ref=secret)
            assert "not a memory record this conversation may change" in forgot
            with pytest.raises(claw.CapabilityDeniedError):
                await host.memory.add(group.caller, "written into the owner's memory")
        async with operator(host) as op:
            assert await search(host, op, "deploy pin") == ["owner secret: the deploy pin is 4411"]


async def test_a_read_only_operator_and_a_sandboxed_session_write_nothing(
    open_records_host: OpenRecordsHost,
) -> None:
    async with open_records_host() as host:
        async with operator(host, ("operator.read",)) as reader:
            with pytest.raises(claw.CapabilityDeniedError):
                await host.memory.add(reader, "an operator without write scope")
        async with host.open_run("dm:alice", sender_is_owner=True, sandboxed=True) as boxed:
            said = await call_tool(host, boxed, "dm:alice", "record_add", text="sandboxed")
            assert "sandboxed" in said and "refused" in said
        assert await service_of(host).index_for("main") is not None
        async with operator(host) as op:
            assert await search(host, op, "sandboxed operator") == []


async def test_health_reports_counts_and_the_indexed_sequence(
    open_records_host: OpenRecordsHost,
) -> None:
    async with open_records_host() as host, operator(host) as op:
        added = await host.memory.add(op, "one record")
        await host.memory.forget(op, MemoryReference(provider_id=PLUGIN, id=added.reference.id))
        await host.memory.add(op, "another record")
        async with host.memory.open(op) as handle:
            health = await handle.health()
        assert health.status == "ready"
        assert health.details["records"] == 1 and health.details["forgotten"] == 1
        assert health.details["sequence"] == health.details["indexedSequence"] == 3


async def test_a_schema_migrated_by_a_newer_claw_is_refused_at_start(
    open_records_host: OpenRecordsHost,
) -> None:
    async with open_records_host("a") as host:
        await service_of(host).database().transaction(
            lambda conn: conn.execute(
                "INSERT INTO claw_migrations (component, position, name)"
                " VALUES ('memory-records', %s, 'records-99-from-the-future')",
                (len(MIGRATIONS) + 1,),
            )
        )
    with pytest.raises(claw.SchemaVersionError, match="records-99-from-the-future"):
        async with open_records_host("b"):
            pass
