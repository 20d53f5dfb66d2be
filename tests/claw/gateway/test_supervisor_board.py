"""The supervisor's record of its worker slots (what ``memory.status`` and doctor read)."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from claw.gateway._slots import SlotStatus, read_status
from claw.gateway._supervisor import _Board


async def test_the_last_record_written_holds_every_slot_change_made_before_it(
    tmp_path: Path,
) -> None:
    # Both workers listen at start, so both slots change at once. A write still in
    # flight with the older record must not land after the newer one: the file would
    # then say a serving slot is starting (memory.status "degraded") until the next
    # change. Found as a flaky supervisor test on a loaded machine.
    calls: list[list[str]] = []
    written: list[list[str]] = []
    first_write_may_finish = trio.Event()

    async def write(path: Path, pid: int, slots: list[SlotStatus]) -> None:
        calls.append([s.state for s in slots])
        if len(calls) == 1:
            await first_write_may_finish.wait()
        written.append([s.state for s in slots])

    board = _Board(
        path=tmp_path / "status.json",
        slots=[SlotStatus(index=0), SlotStatus(index=1)],
        report=lambda line: None,
        write=write,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(board.update, 0, "serving")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(board.update, 1, "serving")
        await trio.testing.wait_all_tasks_blocked()
        first_write_may_finish.set()
    assert written[-1] == ["serving", "serving"]
    assert written == [["serving", "starting"], ["serving", "serving"]]


async def test_the_record_on_disk_is_the_board_after_concurrent_changes(tmp_path: Path) -> None:
    board = _Board(
        path=tmp_path / "status.json",
        slots=[SlotStatus(index=i) for i in range(4)],
        report=lambda line: None,
    )
    async with trio.open_nursery() as nursery:
        for i in range(4):
            nursery.start_soon(board.update, i, "serving")
    data = read_status(board.path)
    assert data is not None
    assert [w["state"] for w in data["workers"]] == ["serving"] * 4
