"""An index over one agent's transcript sessions, for the retrieval tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from claw.plugin_sdk import InlineWorkerPool
from claw_memory._index import open_memory_index
from claw_memory._settings import MemoryCoreSettings
from claw_memory._transcripts import InMemoryTranscriptSource, TranscriptTurn

#: Transcripts only, every hit kept: the ranking alone decides what a test sees.
SESSIONS_ONLY = MemoryCoreSettings(min_score=0.0, sources=("sessions",))


def sessions_index(
    tmp_path: Path, sessions: Mapping[str, Sequence[TranscriptTurn]], **settings: Any
) -> Any:
    """Memory Core over ``sessions`` (session id -> turns) of agent ``a``, with
    :data:`SESSIONS_ONLY` and ``settings`` over it; an async context manager."""
    src = InMemoryTranscriptSource()
    for sid, turns in sessions.items():
        src.put("a", f"agent:a:{sid}", sid, turns)
    ws = tmp_path / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    return open_memory_index(
        workspace_dir=ws,
        index_dir=tmp_path / "idx",
        workers=InlineWorkerPool(),
        settings=attrs.evolve(SESSIONS_ONLY, **settings),
        transcripts=src,
    )
