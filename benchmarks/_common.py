"""Helpers shared by the benchmarks: percentiles, tables, the JSON last line, machine facts."""

from __future__ import annotations

import json
import os
import platform
import resource
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table with right-aligned numeric columns."""

    def cell(v: object) -> str:
        if isinstance(v, float):
            return f"{v:.3f}" if abs(v) < 100 else f"{v:,.0f}"
        return str(v)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for r in cells:
        lines.append("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }


def peak_rss_mb() -> float:
    """Peak resident set size of this process's own memory so far, in MiB.

    On Linux this is ``VmHWM`` of ``/proc/self/status``: the high-water mark of the
    process's current address space, which starts afresh at ``exec``. ``ru_maxrss``
    would not do for a benchmark worker: the kernel folds the parent's high-water mark
    into it when the child is forked (or vforked) and execs, so every worker started by
    a large orchestrator would report the orchestrator's peak.
    """
    try:
        with Path("/proc/self/status").open(encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024.0 if sys.platform != "darwin" else kb / (1024.0 * 1024.0)


def load() -> float:
    """The machine's one-minute load average now (NaN where the OS has none).

    Printed beside every figure: on a shared machine a latency means little without it.
    """
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def emit_json(obj: dict[str, Any]) -> None:
    """Print ``obj`` as one JSON line (the last line of stdout)."""
    sys.stdout.flush()
    print(json.dumps(obj, sort_keys=True, default=float), flush=True)
