"""A workspace builder: memory files written the way Memory Core reads them.

:class:`MemoryWorkspace` wraps a directory and writes ``MEMORY.md``, ``USER.md``,
dated ``memory/YYYY-MM-DD.md`` notes and any other workspace file, so a test states
what the agent remembers in one line. Markdown files are the source of truth of Memory
Core: a host opened on the directory indexes them, and a search after a write sees the
change (Memory Core re-syncs changed files before searching).
"""

from __future__ import annotations

import datetime
import shutil
from importlib import resources
from pathlib import Path, PurePosixPath

import attrs


def _day(day: datetime.date | str) -> str:
    if isinstance(day, datetime.datetime):
        day = day.date()
    if isinstance(day, datetime.date):
        return day.isoformat()
    try:
        return datetime.date.fromisoformat(day).isoformat()
    except ValueError:
        raise ValueError(f"a daily memory file is named YYYY-MM-DD, got {day!r}") from None


@attrs.define(eq=False)
class MemoryWorkspace:
    """A workspace directory and helpers to write the memory files in it.

    Paths given to the helpers are relative to :attr:`root`, with ``/`` separators;
    a path that would leave the workspace is refused with ``ValueError``.
    """

    root: Path = attrs.field(converter=Path)

    @classmethod
    def sample(cls, root: str | Path) -> MemoryWorkspace:
        """Copy claw's bundled sample workspace (a few days of an agent's notes) to ``root``."""
        target = Path(root)
        source = resources.files("claw").joinpath("_data/sample_workspace")
        with resources.as_file(source) as path:
            shutil.copytree(path, target, dirs_exist_ok=True)
        return cls(target)

    def path(self, relative_path: str) -> Path:
        """The absolute path of ``relative_path`` inside the workspace."""
        rel = PurePosixPath(relative_path)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise ValueError(f"{relative_path!r} is not a path inside the workspace")
        return self.root.joinpath(*rel.parts)

    def write(self, relative_path: str, text: str, *, append: bool = False) -> Path:
        """Write (or append to) a workspace file, creating its folders; returns its path."""
        target = self.path(relative_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if append and target.exists():
            existing = target.read_text(encoding="utf-8")
            if existing and not existing.endswith("\n"):
                existing += "\n"
            text = existing + text
        target.write_text(text, encoding="utf-8")
        return target

    def write_memory(self, text: str, *, append: bool = False) -> Path:
        """Write the durable ``MEMORY.md`` (owner-private facts)."""
        return self.write("MEMORY.md", text, append=append)

    def write_user(self, text: str, *, append: bool = False) -> Path:
        """Write ``USER.md`` (what the agent knows about its owner)."""
        return self.write("USER.md", text, append=append)

    def write_daily(self, day: datetime.date | str, text: str, *, append: bool = False) -> Path:
        """Write the dated note ``memory/YYYY-MM-DD.md`` for ``day`` (a date or ISO string)."""
        return self.write(f"memory/{_day(day)}.md", text, append=append)

    def read(self, relative_path: str) -> str:
        """The text of a workspace file."""
        return self.path(relative_path).read_text(encoding="utf-8")

    def remove(self, relative_path: str) -> None:
        """Delete a workspace file (Memory Core drops its chunks at the next sync)."""
        self.path(relative_path).unlink()

    def memory_files(self) -> list[str]:
        """The markdown files in the workspace (relative, sorted), ``.claw`` state excluded."""
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in self.root.rglob("*.md")
            if ".claw" not in p.relative_to(self.root).parts
        )
