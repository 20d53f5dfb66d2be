"""The sources of one index, listed: its memory files and its transcript sessions.

A sync, the freshness checks and a read all start from the same listing, filtered by
the settings' ``sources``: no memory files without ``"memory"``, no sessions without
``"sessions"`` or without a transcript source.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import attrs

from claw.plugin_sdk import WorkerPool

from ._changes import source_directories
from ._settings import MemoryCoreSettings
from ._sources import FileEntry, discover
from ._transcripts import TranscriptSession, TranscriptSource, TranscriptTurn


@attrs.frozen(eq=False)
class SourceListing:
    """Lists the memory files of ``workspace`` and the sessions of ``transcripts``."""

    workspace: Path
    settings: MemoryCoreSettings
    workers: WorkerPool
    transcripts: TranscriptSource | None

    async def scan_memory(self) -> dict[str, FileEntry]:
        """Every memory file, by virtual path (on a worker)."""
        if "memory" not in self.settings.sources:
            return {}
        return await self.workers.run_sync(discover, self.workspace, self.settings.extra_paths)

    async def list_sessions(self) -> list[TranscriptSession]:
        if "sessions" not in self.settings.sources or self.transcripts is None:
            return []
        return list(await self.transcripts.list_sessions())

    def sessions_version(self) -> object | None:
        """The transcript source's listing version, or None when it keeps none (then
        only a listing tells whether a session changed)."""
        # getattr, not isinstance: a protocol check costs more than the version itself
        # on every search (and ABC caching would pin the answer per class).
        version: Callable[[], object] | None = getattr(
            self.transcripts, "sessions_version", None
        )
        return None if version is None else version()

    async def read_turns(self, session: TranscriptSession) -> list[TranscriptTurn]:
        """The turns of ``session`` (none without a transcript source)."""
        if self.transcripts is None:
            return []
        return list(await self.transcripts.read_turns(session))

    def watch_directories(self) -> list[str]:
        """The directories whose entries can hold memory sources (blocking)."""
        extra_dirs = []
        for raw in self.settings.extra_paths:
            p = Path(raw).expanduser()
            if not p.is_absolute():
                p = self.workspace / p
            extra_dirs.append(os.fspath(p if p.is_dir() and not p.is_symlink() else p.parent))
        return source_directories(os.fspath(self.workspace), extra_dirs)
