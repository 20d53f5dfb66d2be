"""Helpers for tests that start real child processes."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any


def reap(proc: subprocess.Popen[Any]) -> None:
    """Kill ``proc`` if it still runs, wait for it, and close its pipes.

    Called from a ``finally`` so a failing test leaves no process and no open pipe
    behind (an unclosed pipe is a ResourceWarning, an error under the suite's filters).
    """
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None and not stream.closed:
            stream.close()


def gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs: no such process, or a zombie awaiting its parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"
