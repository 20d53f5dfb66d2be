"""One worker process of ``claw serve --workers N`` (``python -m claw.gateway._worker``).

The supervisor (:mod:`claw.gateway._supervisor`) starts this module with a pipe on
stdin and one on stdout. Over stdin it sends a :class:`WorkerSpec` (length-prefixed,
pickled: both ends are claw, and the pipe is private to them; the token travels here
rather than in the command line or the environment another user could read), then
keeps the pipe open: end of file on it means the supervisor is gone, and the worker
stops as on SIGTERM, so a killed supervisor leaves no orphan serving. The worker opens
its own host over the shared state, listens on the supervisor's port with
``SO_REUSEPORT`` and writes :data:`READY` on stdout; it writes nothing else there.

A worker runs in its own process group, so a terminal's Ctrl-C reaches only the
supervisor, which stops every worker with SIGTERM once (a second signal arriving
while connections close would interrupt the close).
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import struct
import sys

import attrs
import trio
from threadpoolctl import threadpool_limits

from .._config import HostConfig
from .._errors import ClawError
from .._host import open_host
from ._listen import BindAddress, open_reuse_port_listeners
from ._server import Gateway, run_gateway_until_signal
from ._slots import status_path

READY = b"ready\n"
EXIT_OK = 0
EXIT_ERROR = 2
_LENGTH = struct.Struct("!Q")

logger = logging.getLogger("claw.gateway")


@attrs.frozen
class WorkerSpec:
    """What a worker serves: the host config (its gateway section resolved), where, who."""

    config: HostConfig
    addresses: tuple[BindAddress, ...]
    index: int


def worker_command() -> list[str]:
    """The command that starts a worker with this interpreter.

    ``-P``: ``python -m`` would otherwise put the current directory first on
    ``sys.path``, and a ``claw/`` folder or ``claw.py`` there would be imported instead
    of the installed claw (``'claw' is not a package``, ``Can't get attribute
    'HostConfig'``). The worker imports what the supervisor runs, whatever the
    directory it was started in.
    """
    return [sys.executable, "-P", "-m", "claw.gateway._worker"]


def encode_spec(spec: WorkerSpec) -> bytes:
    """``spec`` as the supervisor writes it to a worker's stdin."""
    body = pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


def _read_exactly(fd: int, count: int) -> bytes:
    chunks: list[bytes] = []
    while count:
        chunk = os.read(fd, count)
        if not chunk:
            raise EOFError("the supervisor closed the pipe before sending the worker's spec")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def read_spec(fd: int) -> WorkerSpec:
    """Read the spec the supervisor sent on ``fd``."""
    (length,) = _LENGTH.unpack(_read_exactly(fd, _LENGTH.size))
    spec = pickle.loads(_read_exactly(fd, length))
    if not isinstance(spec, WorkerSpec):
        raise TypeError(f"expected a WorkerSpec, got {type(spec).__name__}")
    return spec


async def serve_worker(spec: WorkerSpec, parent: trio.lowlevel.FdStream) -> None:
    """Serve until SIGTERM/SIGINT or end of file on ``parent``, then close every connection."""
    async with open_host(spec.config) as host, trio.open_nursery() as nursery:
        gateway = Gateway(
            host,
            config=spec.config.gateway,
            worker_index=spec.index,
            workers_status=status_path(
                spec.config.resolved_state_dir, spec.addresses[0].sockaddr[1]
            ),
        )
        listeners = await open_reuse_port_listeners(spec.addresses)
        done = trio.Event()

        async def run(task_status: trio.TaskStatus[object] = trio.TASK_STATUS_IGNORED) -> None:
            await run_gateway_until_signal(gateway, listeners=listeners, task_status=task_status)
            done.set()

        await nursery.start(run)
        os.write(sys.stdout.fileno(), READY)
        nursery.start_soon(_watch_parent, parent, nursery.cancel_scope)
        await done.wait()
        nursery.cancel_scope.cancel()


async def _watch_parent(parent: trio.lowlevel.FdStream, serving: trio.CancelScope) -> None:
    async with parent:
        while await parent.receive_some(4096):
            pass
    logger.warning("the supervisor is gone; stopping")
    serving.cancel()


def main() -> int:
    """Read the spec from stdin, serve, and return the exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        spec = read_spec(sys.stdin.fileno())
    except (EOFError, TypeError, pickle.UnpicklingError, struct.error) as exc:
        sys.stderr.write(f"claw: worker: {exc}\n")
        return EXIT_ERROR
    logging.basicConfig(
        level=logging.WARNING,
        format=f"claw: worker {spec.index} (pid {os.getpid()}): %(levelname)s: %(message)s",
    )
    parent = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    try:
        # One BLAS thread, as the CLI runs (see claw._cli._app.main).
        with threadpool_limits(limits=1, user_api="blas"):
            trio.run(serve_worker, spec, parent)
    except (ClawError, OSError) as exc:
        sys.stderr.write(f"claw: worker {spec.index}: error: {_one_line(exc)}\n")
        return EXIT_ERROR
    return EXIT_OK


def _one_line(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


if __name__ == "__main__":
    # Run as a script this module is ``__main__``, whose WorkerSpec is not the class the
    # supervisor pickled; the imported module's is.
    from claw.gateway._worker import main as _imported_main

    sys.exit(_imported_main())
