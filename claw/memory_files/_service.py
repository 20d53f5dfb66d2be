"""``host.memory_files``: the host's one writer of workspace memory files, for everyone.

Every route that changes a memory file goes through this object: the pre-compaction
flush's file arm (``write``), Memory Core's add, section insert, forget and restore
(``host.memory.*``, its ``memory_add`` tool, MCP, the ``claw`` command and
``claw.open_memory`` all reach Memory Core), so they share one discipline
(:mod:`claw.memory_files._writer`) and one journal (:mod:`._journal`).

Plugins receive it as ``api.memory_files`` (``claw.plugin_sdk.MemoryFiles``). Every call
names its caller (a host-minted :class:`~claw.MemoryCallerContext`), checked current
right before the change, and the host, not the plugin, turns that caller into the
provenance the journal records: a plugin cannot write in another's name. Whether the
caller may write at all is the caller's route's policy (Memory Core's writer rule, the
flush's workspace access); this object records and serialises, it does not authorize.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from .._util import final
from ..memory._types import MemoryProvenance, MemoryRemoval
from ._journal import Journal
from ._writer import (
    MemoryFileWriter,
    Placement,
    Removal,
    Restoration,
    Written,
    live,
    provenance_map,
)

if TYPE_CHECKING:
    from .._capabilities import MemoryCallerContext
    from .._workers import WorkerPool


class DescribeWriter(Protocol):
    """How the host turns a caller into provenance (see ``claw.memory.describe_writer``)."""

    def __call__(
        self,
        caller: MemoryCallerContext,
        *,
        flush_id: str | None = None,
        tool: str | None = None,
        plugin_id: str | None = None,
    ) -> MemoryProvenance: ...


@final
@attrs.define(eq=False)
class MemoryFiles:
    """The writer of one workspace's memory files (see the module docstring).

    ``path`` arguments are workspace-relative POSIX paths (``memory/2026-12-01.md``);
    a path outside the workspace, into ``.claw`` or through a symlink is refused.
    """

    _writer: MemoryFileWriter
    _workers: WorkerPool
    _describe: DescribeWriter
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _writers: dict[str, Any] = attrs.field(factory=dict, init=False)
    _journal_seen: tuple[int, int] = attrs.field(default=(0, 0), init=False)

    @classmethod
    def create(
        cls,
        workspace_dir: Path,
        *,
        workers: WorkerPool,
        describe: DescribeWriter,
        now: Callable[[], float],
    ) -> MemoryFiles:
        """The writer of ``workspace_dir`` (the host makes one; plugins get it)."""
        return cls(MemoryFileWriter(Path(workspace_dir), now=now), workers, describe)

    @property
    def workspace_dir(self) -> Path:
        return self._writer.workspace

    @property
    def home(self) -> Path:
        """``<workspace>/.claw/memory-writes``: the lock file and the journal."""
        return self._writer.home

    def _by(
        self,
        caller: MemoryCallerContext,
        flush_id: str | None,
        tool: str | None,
        plugin_id: str | None,
    ) -> dict[str, Any]:
        caller.assert_current()
        return self._describe(caller, flush_id=flush_id, tool=tool, plugin_id=plugin_id).to_wire()

    async def _run(self, fn: Callable[[], Any]) -> Any:
        async with self._lock:
            return await self._workers.run_sync(fn)

    async def ensure(self, path: str) -> None:
        """Create ``path`` (and its directories) empty when it is missing; never truncates.

        No content is written, so no caller is named (the flush creates its target before
        its run starts).
        """
        await self._run(lambda: self._writer.ensure(path))

    async def append(
        self,
        caller: MemoryCallerContext,
        path: str,
        text: str,
        *,
        flush_id: str | None = None,
        tool: str | None = None,
        plugin_id: str | None = None,
        max_bytes: int | None = None,
    ) -> Written:
        """Append ``text`` to ``path`` as one whole write (created when missing)."""
        by = self._by(caller, flush_id, tool, plugin_id)
        result: Written = await self._run(
            lambda: self._writer.append(path, text, by=by, max_bytes=max_bytes)
        )
        return result

    async def place(
        self,
        caller: MemoryCallerContext,
        path: str,
        compose: Callable[[str], Placement],
        *,
        flush_id: str | None = None,
        tool: str | None = None,
        plugin_id: str | None = None,
        max_bytes: int | None = None,
    ) -> Written:
        """Add the entry ``compose(current_text)`` places (at the end, or inside the file).

        ``compose`` runs under the workspace's writer lock on a worker thread: it must be
        a pure function of the text it is given.
        """
        by = self._by(caller, flush_id, tool, plugin_id)
        result: Written = await self._run(
            lambda: self._writer.place(path, compose, by=by, max_bytes=max_bytes)
        )
        return result

    async def remove(
        self,
        caller: MemoryCallerContext,
        path: str,
        start: int,
        end: int,
        *,
        revision: str | None = None,
        also_matches: Callable[[Sequence[str]], bool] | None = None,
        whole_range: bool = False,
        dry_run: bool = False,
        tool: str | None = None,
        plugin_id: str | None = None,
    ) -> Removal:
        """Forget lines ``start..end`` of ``path``, keeping the undo (see
        :meth:`MemoryFileWriter.remove` for the revision and matched-entry rules)."""
        by = self._by(caller, None, tool, plugin_id)
        result: Removal = await self._run(
            lambda: self._writer.remove(
                path,
                start,
                end,
                by=by,
                revision=revision,
                also_matches=also_matches,
                whole_range=whole_range,
                dry_run=dry_run,
            )
        )
        return result

    async def restore(
        self,
        caller: MemoryCallerContext,
        removal_id: str,
        *,
        dry_run: bool = False,
        tool: str | None = None,
        plugin_id: str | None = None,
    ) -> Restoration:
        """Put a forget's lines back: in place when unambiguous, else appended under a
        marked heading; never over anything."""
        by = self._by(caller, None, tool, plugin_id)
        result: Restoration = await self._run(
            lambda: self._writer.restore(removal_id, by=by, dry_run=dry_run)
        )
        return result

    async def removals(
        self, caller: MemoryCallerContext, *, limit: int = 50
    ) -> list[MemoryRemoval]:
        """The most recent forgets, newest first, with what became of each."""
        caller.assert_current()
        result: list[MemoryRemoval] = await self._workers.run_sync(
            lambda: self._writer.removals(limit=limit)
        )
        return result

    async def recover(self) -> None:
        """Settle what a killed writer left behind (every write does this first anyway)."""
        await self._run(self._writer.recover)

    async def writers(self) -> Mapping[str, Any]:
        """Entry hash -> who wrote it (wire form), from the journal; read incrementally."""
        journal = Journal(self.home)

        def refresh() -> None:
            try:
                st = journal.path.stat()
            except FileNotFoundError:
                self._writers, self._journal_seen = {}, (0, 0)
                return
            ino, offset = self._journal_seen
            if st.st_ino != ino or st.st_size < offset:
                self._writers, offset = {}, 0  # rewritten by a purge: read it again
            if st.st_size == offset:
                return
            records, end = journal.read_from(offset)
            if offset == 0:
                records = live(records)
            self._writers.update(provenance_map(records))
            self._journal_seen = (st.st_ino, end)

        await self._workers.run_sync(refresh)
        return self._writers
