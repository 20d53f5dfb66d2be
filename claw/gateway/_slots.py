"""What each worker slot of ``claw serve --workers N`` is doing, for everyone who asks.

The supervisor keeps one :class:`SlotStatus` per worker slot and writes them all, with
its own pid, to ``<state_dir>/gateway/<port>.json`` whenever one changes (write, then
rename, so a reader sees the old file or the new one). The workers read that file to
answer ``memory.status`` (its ``gateway`` section), and ``claw doctor`` reads every such
file under the state directory; a file whose supervisor is no longer running is stale
and is ignored. The supervisor removes its file when it stops.

A slot is ``starting`` until its first process listens, ``serving`` while a process
listens, ``restarting`` in the short backoff after a death, and ``degraded`` while it
backs off after a crash loop (it died ``crash_limit`` times within ``crash_window``
seconds); the other slots keep serving meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

SlotState = Literal["starting", "serving", "restarting", "degraded"]

_STATUS_DIR = "gateway"
# The most a status file may hold; a larger one is not the supervisor's and is ignored.
_MAX_STATUS_BYTES = 256 * 1024


@attrs.frozen
class SlotStatus:
    """One worker slot: its state, its process, and how it last ended."""

    index: int
    state: SlotState = "starting"
    pid: int | None = None
    restarts: int = 0
    recent_deaths: int = 0
    last_exit: str | None = None
    retry_in: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The wire form (camelCase, as the gateway's payloads)."""
        shown: dict[str, Any] = {
            "index": self.index,
            "state": self.state,
            "pid": self.pid,
            "restarts": self.restarts,
            "recentDeaths": self.recent_deaths,
        }
        if self.last_exit is not None:
            shown["lastExit"] = self.last_exit
        if self.retry_in is not None:
            shown["retryIn"] = self.retry_in
        return shown


def status_path(state_dir: Path, port: int) -> Path:
    """Where the supervisor serving ``port`` over ``state_dir`` records its slots."""
    return state_dir / _STATUS_DIR / f"{port}.json"


def write_status(path: Path, supervisor_pid: int, slots: Sequence[SlotStatus]) -> None:
    """Record ``slots`` at ``path`` atomically (blocking: call it in a worker thread)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps(
        {"supervisorPid": supervisor_pid, "workers": [s.to_json() for s in slots]},
        sort_keys=True,
    )
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(body, encoding="utf-8")
    temporary.replace(path)


def remove_status(path: Path) -> None:
    """Remove the file a stopping supervisor wrote (one never written is fine)."""
    with contextlib.suppress(OSError):
        path.unlink()


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists; it is another user's
    return True


def read_status(path: Path) -> Mapping[str, Any] | None:
    """The recorded slots (``{"supervisorPid", "workers"}``), or ``None`` when there is no
    such file, it is not a supervisor's, or its supervisor is no longer running."""
    try:
        with path.open("rb") as file:
            raw = file.read(_MAX_STATUS_BYTES + 1)
    except OSError:
        return None
    if len(raw) > _MAX_STATUS_BYTES:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("workers"), list)
        or not _alive(data.get("supervisorPid"))
    ):
        return None
    return data


def gateway_section(path: Path) -> dict[str, Any] | None:
    """``memory.status``'s ``gateway`` section: ``{"status", "workers"}``, where status is
    ``"degraded"`` when any slot is not serving; ``None`` without a live supervisor."""
    data = read_status(path)
    if data is None:
        return None
    workers = [w for w in data["workers"] if isinstance(w, dict)]
    healthy = all(w.get("state") == "serving" for w in workers)
    return {"status": "ready" if healthy else "degraded", "workers": workers}


def running_gateways(state_dir: Path) -> list[tuple[int, Mapping[str, Any]]]:
    """Every live supervisor's record under ``state_dir`` as ``(port, record)``, by port
    (records whose supervisor is gone are left out)."""
    found: list[tuple[int, Mapping[str, Any]]] = []
    try:
        candidates = sorted((state_dir / _STATUS_DIR).glob("*.json"))
    except OSError:
        return found
    for path in candidates:
        if not path.stem.isdigit():
            continue
        data = read_status(path)
        if data is not None:
            found.append((int(path.stem), data))
    return found
