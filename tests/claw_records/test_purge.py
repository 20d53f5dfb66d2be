"""Purge on Memory Records: no row, revision, kept copy or host's index keeps the text."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import claw
from claw.memory import MemoryReference

from ..claw_memory.test_purge import occurrences, report
from .conftest import PLUGIN, OpenRecordsHost, call_tool, operator, service_of
from .test_records import ref_of, search

ADMIN = ("operator.read", "operator.write", "operator.admin")
TABLES = (
    "memory_records",
    "memory_record_revisions",
    "memory_record_removals",
    "memory_record_journal",
)


async def test_a_purged_text_is_in_no_row_and_no_hosts_index(
    open_records_host: OpenRecordsHost, tmp_path: Path
) -> None:
    marker = f"zq9rec{uuid.uuid4().hex[:12]}"
    async with open_records_host("a") as a, open_records_host("b") as b:
        async with operator(a, ADMIN) as op:
            await a.memory.add(op, f"The alarm code is {marker}")
            gone = await a.memory.add(op, f"Old note: {marker}")
            await a.memory.forget(op, MemoryReference(provider_id=PLUGIN, id=gone.reference.id))
            await a.memory.add(op, "The boiler is serviced in March")
        async with a.open_run("dm:alice", sender_is_owner=True) as run:
            first = ref_of(await call_tool(a, run, "dm:alice", "record_add", text=f"Gate {marker}"))
            # The current revision no longer says it; the first one still does.
            await call_tool(a, run, "dm:alice", "record_update", ref=first, text="Gate 1234")
        await service_of(b).catch_up("main")
        async with operator(b, ADMIN) as op:
            assert any(marker in hit for hit in await search(b, op, marker))

        async def rows_holding() -> int:
            db = service_of(a).database()
            total = 0
            for table in TABLES:
                row = await db.run(
                    lambda conn, t=table: conn.execute(
                        f"SELECT count(*) FROM {t} t WHERE strpos(t::text, %s) > 0", (marker,)
                    ).fetchone()
                )
                total += int(row[0])
            return total

        rows_before = await rows_holding()
        files_before = occurrences([tmp_path / "a", tmp_path / "b"], marker.encode())
        assert rows_before >= 4
        async with operator(a, ("operator.read", "operator.write")) as writer:
            with pytest.raises(claw.CapabilityDeniedError, match="operator.admin"):
                await a.memory.purge(writer, text=marker)
        async with operator(a, ADMIN) as op:
            dry = await a.memory.purge(op, text=marker, dry_run=True)
            assert (dry.entries, len(dry.removals)) == (1, 1)
            done = await a.memory.purge(op, text=marker)
            assert (done.entries, len(done.removals)) == (1, 1)
            assert [r.status for r in await a.memory.removals(op)] == ["purged"]
        rows_after = await rows_holding()
        assert rows_after == 0
        await service_of(b).catch_up("main")
        for host in (a, b):
            async with operator(host, ADMIN) as op:
                assert not any(marker in hit for hit in await search(host, op, marker))
                assert await search(host, op, "boiler") == ["The boiler is serviced in March"]
        after = occurrences([tmp_path / "a", tmp_path / "b"], marker.encode())
        dirs = [tmp_path / "a", tmp_path / "b"]
        line = report("Memory Records, both hosts", files_before, dirs, after)
        print(f"\n{line}; rows holding it in {len(TABLES)} tables: {rows_before} -> {rows_after}")
        assert after == {}
