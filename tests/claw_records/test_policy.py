"""Who reads and writes which partition: decided from host-minted authority only."""

from __future__ import annotations

from pathlib import Path

from claw_records._policy import (
    EVERYTHING,
    NOTHING,
    OWNER,
    ReadScope,
    WriteGrant,
    conversation_partition,
    read_scope,
    write_grant,
)
from claw_testing import harness_config, open_harness_host


async def test_partitions_follow_the_audience_and_never_the_request(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    async with open_harness_host(harness_config(tmp_path / "ws", tmp_path / "st")) as host:
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        await host.sessions.create("grp:1", agent_id="main", chat_type="group")
        async with host.open_run("dm:alice", sender_is_owner=True) as owner:
            assert read_scope(owner.caller, "main", deny_sandboxed=False) == EVERYTHING
            assert write_grant(owner.caller, "main") == WriteGrant(partition=OWNER)
            # Another agent's records are not the owner's to read or write.
            assert read_scope(owner.caller, "other", deny_sandboxed=False) == NOTHING
            assert isinstance(write_grant(owner.caller, "other"), str)
        async with host.open_run("grp:1", sender_is_owner=False) as group:
            mine = conversation_partition("grp:1")
            assert read_scope(group.caller, "main", deny_sandboxed=False) == ReadScope(
                partitions=frozenset({mine})
            )
            assert write_grant(group.caller, "main") == WriteGrant(partition=mine)
        async with host.open_run(
            "grp:1", sender_is_owner=False, conversation_recall=["dm:alice"]
        ) as recall:
            scope = read_scope(recall.caller, "main", deny_sandboxed=False)
            assert scope.partitions == {conversation_partition("grp:1"),
                                        conversation_partition("dm:alice")}
            assert not scope.admits(OWNER)
        async with host.open_run("dm:alice", sender_is_owner=True, sandboxed=True) as boxed:
            assert read_scope(boxed.caller, "main", deny_sandboxed=False) == EVERYTHING
            assert read_scope(boxed.caller, "main", deny_sandboxed=True) == NOTHING
            assert "sandboxed" in str(write_grant(boxed.caller, "main"))
        async with host.open_scope("t") as scope_:
            status = scope_.mint_caller_context(scope_.mint_host_authority("status"))
            assert read_scope(status, "main", deny_sandboxed=False) == NOTHING
            assert isinstance(write_grant(status, "main"), str)
            reader = scope_.mint_caller_context(scope_.mint_operator_authority(["operator.read"]))
            assert read_scope(reader, "main", deny_sandboxed=False) == EVERYTHING
            assert isinstance(write_grant(reader, "main"), str)
            writer = scope_.mint_caller_context(
                scope_.mint_operator_authority(["operator.write"])
            )
            assert write_grant(writer, "main") == WriteGrant(partition=OWNER, any_record=True)
            assert read_scope(writer, "main", deny_sandboxed=False) == NOTHING
