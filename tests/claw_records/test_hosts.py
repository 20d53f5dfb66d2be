"""Several hosts on one database: propagation through NOTIFY, repair by catch-up."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import trio

from claw.memory import MemorySearchRequest
from claw_records import _store
from claw_records._policy import OWNER
from tests._processes import reap

from .conftest import OpenRecordsHost, operator, service_of

CHILD = Path(__file__).with_name("_host_child.py")


async def found(host: object, query: str) -> list[str]:
    async with operator(host) as op, host.memory.open(op) as handle:  # type: ignore[attr-defined]
        result = await handle.search(MemorySearchRequest(query=query, max_results=10))
    return [h.excerpt for h in result.hits]


async def eventually_found(host: object, query: str) -> list[str]:
    """Search until something is found (a real LISTEN thread is involved); 10 s at most.

    Polling, not an event: what is awaited happens in another host's thread.
    """
    with trio.fail_after(10):
        while not (hits := await found(host, query)):  # noqa: ASYNC110
            await trio.sleep(0.01)
    return hits


async def lost_write(host: object, text: str) -> None:
    """Write a record as a host would, except that its notification never goes out."""
    service = service_of(host)  # type: ignore[arg-type]
    vector = await service.embed(text)
    new = _store.NewRecord(
        ref=f"rec_lost{len(text)}", partition=OWNER, text=text, metadata={}, now=1.0,
        vector=vector,
    )
    await service.database().transaction(_store.add_record, "main", new, False)


def _spawn(dsn: str, root: Path, query: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), dsn, str(root), query],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _readline(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline()


async def test_a_memory_added_on_one_host_is_searchable_on_another_within_a_second(
    open_records_host: OpenRecordsHost, postgres_dsn: str, tmp_path: Path
) -> None:
    """Host B is a separate process; only the NOTIFY can reach it in time (its periodic
    catch-up is an hour away)."""
    proc = _spawn(postgres_dsn, tmp_path / "b", "lighthouse keeper")
    try:
        async with open_records_host("a") as a, operator(a) as op:
            with trio.fail_after(120):
                ready = await trio.to_thread.run_sync(_readline, proc)
            assert ready.strip() == "READY"
            await a.memory.add(op, "The lighthouse keeper retires in June")
            t0 = time.monotonic()
            assert proc.stdin is not None
            proc.stdin.write(f"GO {t0!r}\n")
            proc.stdin.flush()
            with trio.fail_after(60):
                report = json.loads(await trio.to_thread.run_sync(_readline, proc))
        assert report["found"], report
        print(f"propagation delay to another process: {report['delay'] * 1000:.1f} ms")
    finally:
        reap(proc)


async def test_a_lost_notification_is_repaired_by_the_next_catch_up(
    open_records_host: OpenRecordsHost,
) -> None:
    async with open_records_host("a") as a, open_records_host("b") as b:
        assert await found(b, "oolong") == []  # B's index exists, at A's sequence
        await lost_write(a, "alice likes oolong tea")
        assert await found(b, "oolong") == []  # nothing told B
        # A later write's notification makes B catch up from its cursor: both arrive.
        async with operator(a) as op:
            await a.memory.add(op, "bob likes coffee")
        assert await eventually_found(b, "coffee") == ["bob likes coffee"]
        assert await found(b, "oolong") == ["alice likes oolong tea"]


async def test_the_periodic_catch_up_repairs_a_lost_notification_with_no_later_write(
    open_records_host: OpenRecordsHost,
) -> None:
    async with open_records_host("a") as a, open_records_host(
        "b", plugin_config={"catch_up_interval": 0.05}
    ) as b:
        assert await found(b, "oolong") == []
        await lost_write(a, "alice likes oolong tea")
        assert await eventually_found(b, "oolong") == ["alice likes oolong tea"]


async def test_a_listener_that_reconnects_catches_up_what_it_missed(
    open_records_host: OpenRecordsHost,
) -> None:
    async with open_records_host("a") as a, open_records_host("b") as b:
        assert await found(b, "oolong") == []
        await lost_write(a, "alice likes oolong tea")
        # Every LISTEN connection is cut; the listeners reconnect and catch up.
        killed = await service_of(a).database().run(
            lambda conn: conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query LIKE 'LISTEN %'"
                " AND pid <> pg_backend_pid()"
            ).fetchall()
        )
        assert len(killed) == 2
        assert await eventually_found(b, "oolong") == ["alice likes oolong tea"]
        assert service_of(b).statistics().reconnects >= 1


async def test_a_host_that_starts_later_catches_up_from_the_sequence_with_stored_vectors(
    open_records_host: OpenRecordsHost,
) -> None:
    async with open_records_host("a") as a, operator(a) as op:
        for text in ("the heron nests by the weir", "otters visit at dusk", "kingfisher blue"):
            await a.memory.add(op, text)
        async with open_records_host("late") as late:
            assert await found(late, "heron weir") == ["the heron nests by the weir"]
            async with operator(late) as lop, late.memory.open(lop) as handle:
                health = await handle.health()
                result = await handle.search(MemorySearchRequest(query="otter dusk"))
            assert health.status == "ready" and health.details["indexedSequence"] == 3
            # The hit has a vector score: the writer's stored vector, not a missing one.
            assert result.hits[0].metadata["vector_score"] > 0
