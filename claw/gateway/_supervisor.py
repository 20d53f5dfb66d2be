"""``claw serve --workers N``: N worker processes on one port, kept alive.

The supervisor opens no host of its own. It reserves the port (:func:`reserve_port`:
bound with ``SO_REUSEPORT``, never listening), starts N workers
(:mod:`claw.gateway._worker`), each a process with its own Trio loop and host over the
shared state that listens on that port, and reports the address once every worker
listens. A worker that dies is started again after a backoff (doubling from
:data:`RESTART_DELAY` to :data:`MAX_RESTART_DELAY`, back to the start once a worker has
lived for :data:`CRASH_WINDOW`). A slot whose worker dies :data:`CRASH_LIMIT` times
within :data:`CRASH_WINDOW` seconds is in a crash loop: rather than spin, it is
*degraded* and waits :data:`DEGRADED_DELAY` (doubling up to :data:`MAX_DEGRADED_DELAY`)
before it tries again, while the healthy workers keep serving the port (the kernel
gives a slot with no listener no connections). Only when every slot is degraded at once
(nothing serves) does the crash loop stop the gateway, with
:class:`WorkerCrashLoopError`. Each slot's state is recorded for ``memory.status`` and
``claw doctor`` (:mod:`claw.gateway._slots`). A worker that exits before it first
listens (a bad config, a broken state directory) stops the gateway at once with
:class:`WorkerStartError`: its own error is on stderr.

On SIGINT or SIGTERM the supervisor sends each worker SIGTERM once; a worker closes its
connections with 1001 and exits; one that has not exited within :data:`STOP_GRACE`
seconds is killed. The supervisor returns only once every worker is reaped.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import signal
import socket
import subprocess
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path

import attrs
import trio

from .._config import HostConfig
from .._errors import ClawError
from ._listen import bind_addresses
from ._server import GatewayAddress
from ._slots import SlotState, SlotStatus, remove_status, status_path, write_status
from ._worker import READY, WorkerSpec, encode_spec, worker_command

RESTART_DELAY = 0.1
MAX_RESTART_DELAY = 5.0
CRASH_LIMIT = 5
CRASH_WINDOW = 60.0
DEGRADED_DELAY = 60.0
MAX_DEGRADED_DELAY = 600.0
STOP_GRACE = 15.0
# A worker's ready line is a few bytes; anything longer before a newline is not one.
_MAX_READY_BYTES = 1024


class WorkerStartError(ClawError, RuntimeError):
    """A worker exited before it listened; the gateway does not start."""


class WorkerCrashLoopError(ClawError, RuntimeError):
    """Every worker slot was in a crash loop at once; the supervisor stopped the gateway."""


def describe_exit(returncode: int) -> str:
    """``exit code 2`` or ``killed by SIGKILL``, for a worker's return code."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exit code {returncode}"


async def _write_in_thread(path: Path, pid: int, slots: list[SlotStatus]) -> None:
    await trio.to_thread.run_sync(write_status, path, pid, slots)


@attrs.define(eq=False)
class _Board:
    """The supervisor's record of every slot; each change is written for the workers and
    doctor to read (:mod:`claw.gateway._slots`)."""

    path: Path
    slots: list[SlotStatus]
    report: Callable[[str], None]
    #: Writes one record (in a worker thread: the file is replaced, not edited).
    write: Callable[[Path, int, list[SlotStatus]], Awaitable[None]] = _write_in_thread
    _unwritable: bool = attrs.field(default=False, init=False)
    _writing: trio.Lock = attrs.field(factory=trio.Lock, init=False)

    async def update(self, index: int, state: SlotState, **fields: object) -> None:
        """Record slot ``index``'s new state (and any other fields) and write the record.

        Writes take turns, and each writes the slots as they are when its turn comes:
        two slots changing at once (both workers listening at start) would otherwise
        write from two threads, and the one holding the older record could replace the
        file last, leaving ``memory.status`` a slot behind until the next change. A
        record that cannot be written is reported once and does not stop serving.
        """
        self.slots[index] = attrs.evolve(self.slots[index], state=state, **fields)  # type: ignore[arg-type]
        async with self._writing:
            try:
                await self.write(self.path, os.getpid(), list(self.slots))
            except OSError as exc:
                if not self._unwritable:
                    self._unwritable = True
                    self.report(
                        f"cannot record the workers' state at {self.path} "
                        f"({exc.strerror or exc}); memory.status and doctor will not show it"
                    )

    def all_degraded_but(self, index: int) -> bool:
        """Whether every slot other than ``index`` is degraded (none of them serves)."""
        return all(s.state == "degraded" for s in self.slots if s.index != index)


@attrs.define(eq=False)
class _Slot:
    """One worker position: the process filling it now, restarted as needed."""

    index: int
    spec: WorkerSpec
    report: Callable[[str], None]
    board: _Board
    crash_limit: int
    crash_window: float
    degraded_delay: float
    stop_grace: float
    crashes: collections.deque[float] = attrs.field(factory=collections.deque)

    async def keep(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the worker until cancelled; ``started`` once its first process listens."""
        delay = RESTART_DELAY
        degraded_delay = self.degraded_delay
        first = True
        deaths = 0
        while True:
            began = trio.current_time()
            ready, returncode = await self._run_once(task_status if first else None)
            how = describe_exit(returncode)
            if first and not ready:
                raise WorkerStartError(
                    f"worker {self.index} exited before it listened ({how}); its error is above"
                )
            first = False
            deaths += 1
            now = trio.current_time()
            if now - began >= self.crash_window:
                delay = RESTART_DELAY
                degraded_delay = self.degraded_delay
            self.crashes.append(now)
            while self.crashes and now - self.crashes[0] > self.crash_window:
                self.crashes.popleft()
            recent = len(self.crashes)
            if recent >= self.crash_limit:
                if self.board.all_degraded_but(self.index):
                    raise WorkerCrashLoopError(
                        f"worker {self.index} died {recent} times within "
                        f"{self.crash_window:g} s (last: {how}) and no other worker is "
                        "serving; stopping the gateway"
                    )
                state: SlotState = "degraded"
                wait = degraded_delay
                degraded_delay = min(degraded_delay * 2, MAX_DEGRADED_DELAY)
                self.crashes.clear()
                line = (
                    f"worker {self.index} died {recent} times within {self.crash_window:g} s "
                    f"(last: {how}); degraded: restarting in {wait:g} s while the other "
                    "workers serve"
                )
            else:
                state = "restarting"
                wait = delay
                delay = min(delay * 2, MAX_RESTART_DELAY)
                line = f"worker {self.index} died ({how}); restarting in {wait:g} s"
            await self.board.update(
                self.index,
                state,
                pid=None,
                restarts=deaths,
                recent_deaths=recent,
                last_exit=how,
                retry_in=wait,
            )
            self.report(line)
            await trio.sleep(wait)

    async def _run_once(self, task_status: trio.TaskStatus[None] | None) -> tuple[bool, int]:
        """Start one process and wait for it to exit: (did it listen, its return code)."""
        process = await trio.lowlevel.open_process(
            worker_command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            process_group=0,
        )
        ready = False
        try:
            assert process.stdin is not None and process.stdout is not None
            # A worker that died already reports its exit below.
            with contextlib.suppress(trio.BrokenResourceError):
                await process.stdin.send_all(encode_spec(self.spec))
            ready = await _read_ready(process.stdout)
            if ready:
                await self.board.update(self.index, "serving", pid=process.pid, retry_in=None)
                self.report(f"worker {self.index} (pid {process.pid}) listening")
                if task_status is not None:
                    task_status.started()
                # Drain (and ignore) the rest so a worker never blocks on its stdout.
                while await process.stdout.receive_some(4096):
                    pass
            return ready, await process.wait()
        finally:
            with trio.CancelScope(shield=True):
                await self._stop(process)

    async def _stop(self, process: trio.Process) -> None:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(self.stop_grace):
                await process.wait()
            if process.returncode is None:
                self.report(
                    f"worker {self.index} (pid {process.pid}) did not stop within "
                    f"{self.stop_grace:g} s; killing it"
                )
                process.kill()
                await process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                await stream.aclose()


async def _read_ready(stream: trio.abc.ReceiveStream) -> bool:
    """Whether the worker wrote its ready line before closing its stdout."""
    seen = b""
    while b"\n" not in seen and len(seen) < _MAX_READY_BYTES:
        chunk = await stream.receive_some(_MAX_READY_BYTES)
        if not chunk:
            return False
        seen += chunk
    return seen.startswith(READY)


def _worker_failure(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The first start or crash-loop error inside ``group`` (nested or not)."""
    for inner in group.exceptions:
        if isinstance(inner, WorkerStartError | WorkerCrashLoopError):
            return inner
        if isinstance(inner, BaseExceptionGroup):
            found = _worker_failure(inner)
            if found is not None:
                return found
    return None


async def supervise_gateway(
    config: HostConfig,
    workers: int,
    *,
    reserved: Sequence[socket.socket],
    report: Callable[[str], None],
    ready: Callable[[GatewayAddress], None],
    signals: Iterable[int] = (signal.SIGINT, signal.SIGTERM),
    crash_limit: int = CRASH_LIMIT,
    crash_window: float = CRASH_WINDOW,
    degraded_delay: float = DEGRADED_DELAY,
    stop_grace: float = STOP_GRACE,
) -> int:
    """Serve ``config.gateway`` from ``workers`` processes until a signal; return its number.

    ``reserved`` are the sockets :func:`reserve_port` bound for ``config.gateway``'s
    address; every worker listens on their addresses (the caller closes them).
    ``ready`` is called with the address once every worker listens (not at all when a
    signal arrives first); ``report`` receives one line per worker event (listening,
    died, restarting, degraded, stopping). A slot in a crash loop is degraded while the
    others serve; only when every slot is degraded at once does the crash loop stop the
    gateway. Raises :class:`WorkerStartError` or :class:`WorkerCrashLoopError` once the
    other workers are stopped. Must run in the main thread (it installs the signal
    handlers before starting a worker, so no signal is lost).
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    addresses = bind_addresses(reserved)
    address = GatewayAddress(host=config.gateway.host, port=addresses[0].sockaddr[1])
    board = _Board(
        path=status_path(config.resolved_state_dir, address.port),
        slots=[SlotStatus(index=i) for i in range(workers)],
        report=report,
    )
    slots = [
        _Slot(
            index=i,
            spec=WorkerSpec(config=config, addresses=addresses, index=i),
            report=report,
            board=board,
            crash_limit=crash_limit,
            crash_window=crash_window,
            degraded_delay=degraded_delay,
            stop_grace=stop_grace,
        )
        for i in range(workers)
    ]
    stopped_by: list[int] = []
    with trio.open_signal_receiver(*signals) as received:
        try:
            async with trio.open_nursery() as nursery:

                async def watch_signals() -> None:
                    async for signum in received:
                        report(f"stopping {workers} workers on signal {signum}")
                        stopped_by.append(int(signum))
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(watch_signals)
                async with trio.open_nursery() as starting:
                    for slot in slots:
                        starting.start_soon(nursery.start, slot.keep)
                ready(address)
                await trio.sleep(math.inf)
        except BaseExceptionGroup as group:
            failure = _worker_failure(group)
            if failure is None:
                raise
            raise failure from None
        finally:
            remove_status(board.path)
    return stopped_by[0]
