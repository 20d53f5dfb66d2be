"""The per-session lock of the SQLite backend: an ``flock`` per key, polled cancellably.

Two :class:`PolledSessionLocks` on one state directory stand for two processes (each
try opens its own file description, and ``flock`` locks of two descriptions conflict as
those of two processes do); the real processes are in ``tests/claw/multiprocess``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.testing

from claw._workers import InlineWorkerPool
from claw.state._session_locks import PolledSessionLocks
from claw.state.sqlite._session_locks import SESSION_LOCKS_DIR, SessionLockFiles, lock_file


def _locks(state: Path) -> PolledSessionLocks[Any]:
    return SessionLockFiles(state).locks(InlineWorkerPool())


async def test_a_session_held_elsewhere_waits_until_it_is_released(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    here, there = _locks(tmp_path), _locks(tmp_path)
    order: list[str] = []
    release = trio.Event()

    async def holder(task_status: trio.TaskStatus[None]) -> None:
        async with there.hold("dm:alice"):
            order.append("there")
            task_status.started()
            await release.wait()
        order.append("there released")

    async with trio.open_nursery() as nursery:
        await nursery.start(holder)

        async def waiter() -> None:
            async with here.hold("dm:alice"):
                order.append("here")

        nursery.start_soon(waiter)
        await trio.sleep(5)  # virtual: the waiter polls all along
        assert order == ["there"]
        release.set()
    assert order == ["there", "there released", "here"]


async def test_other_sessions_are_not_held_up(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    here, there = _locks(tmp_path), _locks(tmp_path)
    async with there.hold("dm:alice"), here.hold("dm:bob"):
        pass


async def test_a_cancelled_wait_holds_nothing_afterwards(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    here, there = _locks(tmp_path), _locks(tmp_path)
    files = SessionLockFiles(tmp_path)
    async with there.hold("dm:alice"):
        with trio.move_on_after(3) as waited:
            async with here.hold("dm:alice"):
                raise AssertionError("held while another holder has it")  # pragma: no cover
        assert waited.cancelled_caught
    # Neither the cancelled waiter nor the released holder keeps the lock.
    fd = files.try_acquire("dm:alice")
    assert fd is not None
    files.release(fd)
    async with here.hold("dm:alice"):
        assert files.try_acquire("dm:alice") is None


async def test_a_holder_that_raises_releases_the_session(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    here = _locks(tmp_path)
    files = SessionLockFiles(tmp_path)
    try:
        async with here.hold("dm:alice"):
            raise ValueError("the turn failed")
    except ValueError:
        pass
    fd = files.try_acquire("dm:alice")
    assert fd is not None
    files.release(fd)


def test_lock_files_are_named_by_digest_inside_the_state_dir(tmp_path: Path) -> None:
    path = lock_file(tmp_path, "../../etc/passwd")
    assert path.parent == tmp_path / SESSION_LOCKS_DIR
    assert path.suffix == ".lock" and lock_file(tmp_path, "dm:a") != lock_file(tmp_path, "dm:b")


async def test_the_first_gates_go_with_their_last_user(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # A long-lived host serves ever new session keys: the in-process gates must not
    # keep one lock per key it ever saw (before, every key's lock stayed forever).
    locks = _locks(tmp_path)
    for n in range(50):
        async with locks.hold(f"dm:user-{n}"):
            assert locks.gates_in_use() == 1
    assert locks.gates_in_use() == 0

    entered = trio.Event()
    release = trio.Event()

    async def holder() -> None:
        async with locks.hold("dm:alice"):
            entered.set()
            await release.wait()

    async def waiter(task_status: trio.TaskStatus[None]) -> None:
        task_status.started()
        async with locks.hold("dm:alice"):
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(holder)
        await entered.wait()
        await nursery.start(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert locks.gates_in_use() == 1  # one key, two users: one lock shared
        release.set()
    assert locks.gates_in_use() == 0

    with trio.move_on_after(1):
        async with locks.hold("dm:alice"):
            await trio.sleep_forever()  # cancelled while held
    assert locks.gates_in_use() == 0
