"""Progress of a long first index, drawn on a terminal (the only place claw draws it)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import Any, TextIO

from tqdm import tqdm

from .._capabilities import MemoryCallerContext
from .._host import Host

_STAGES = {
    "scan": ("scanning", "sources"),
    "chunk": ("chunking", "sources"),
    "embed": ("embedding", "chunks"),
    "publish": ("publishing", "steps"),
}


class Progress:
    """Progress of a long sync on a terminal (tqdm bars, one per stage); silent otherwise.

    Called as ``progress(stage, done, total)``. Nothing is drawn for a sync that only
    scanned (nothing changed), so an up-to-date search stays quiet.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        enabled: bool | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._stream = stream
        self._enabled = stream.isatty() if enabled is None else enabled
        self._clock = clock
        self._stage: str | None = None
        self._bar: Any = None
        self._scanned: tuple[int, int] | None = None
        self._scan_started: float | None = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self._enabled:
            return
        if stage == "scan" and self._bar is None:
            # The scan is drawn only once something else follows it; its bar then starts
            # at the first scan report, so its rate is sources per second of scanning.
            if self._scan_started is None:
                self._scan_started = self._clock()
            self._scanned = (done, total)
            return
        if self._scanned is not None:
            scanned, self._scanned = self._scanned, None
            self._show("scan", *scanned)
        self._show(stage, done, total)

    def _show(self, stage: str, done: int, total: int) -> None:
        if stage != self._stage or self._bar is None:
            self.close()
            label, unit = _STAGES.get(stage, (stage, "items"))
            self._stage = stage
            # A terminal that reports no size (some ptys) would get an empty or hidden bar.
            size = shutil.get_terminal_size((80, 24))
            self._bar = tqdm(
                total=total,
                desc=f"{label:<10}",
                unit=f" {unit}",
                file=self._stream,
                leave=True,
                ncols=min(100, size.columns),
                nrows=max(2, size.lines),
            )
            if stage == "scan" and self._scan_started is not None:
                self._bar.start_t = self._scan_started
        bar = self._bar
        if bar.total != total:
            bar.total = total
        bar.update(max(0, done - bar.n))

    def close(self) -> None:
        """End the current bar (call when the work is done)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            self._stage = None


async def warm(host: Host, caller: MemoryCallerContext, agent: str | None, err: TextIO) -> None:
    """Do a first search's implicit indexing now, where it can show progress (through the
    memory guard: an unknown agent is refused before the provider makes it an index)."""
    if not host.memory.offers("warm"):
        return
    progress = Progress(err)
    try:
        await host.memory.warm(caller, agent_id=agent or None, progress=progress)
    finally:
        progress.close()
