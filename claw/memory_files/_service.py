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
    Cited,
    MemoryFileWriter,
    Placement,
    Purged,
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


@attrs.define(eq=False)
class _Shared:
    """What every view of one workspace's writer shares: the writer, this process's
    queue in front of the workspace's lock, and the journal's provenance cache."""

    writer: MemoryFileWriter
    workers: WorkerPool
    describe: DescribeWriter
    lock: trio.Lock = attrs.field(factory=trio.Lock)
    writers: dict[str, Any] = attrs.field(factory=dict)
    #: The journal's inode and the offset after the last record read from it.
    journal_seen: tuple[int, int] = (0, 0)
    journal_path: Path = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.journal_path = Journal(self.writer.home).path


@final
@attrs.define(eq=False)
class MemoryFiles:
    """The writer of one workspace's memory files (see the module docstring).

    ``path`` arguments are workspace-relative POSIX paths (``memory/2026-12-01.md``);
    a path outside the workspace, into ``.claw`` or through a symlink is refused. A
    change made through a ``tool`` is recorded as that tool of this view's owner: the
    host's view is ``claw``'s, each plugin's (``api.memory_files``) its own, so no
    plugin can record a write in another's name.
    """

    _shared: _Shared
    _plugin_id: str

    @classmethod
    def create(
        cls,
        workspace_dir: Path,
        *,
        workers: WorkerPool,
        describe: DescribeWriter,
        now: Callable[[], float],
    ) -> MemoryFiles:
        """The host's writer of ``workspace_dir`` (plugins get views of it)."""
        return cls(
            _Shared(MemoryFileWriter(Path(workspace_dir), now=now), workers, describe), "claw"
        )

    def for_plugin(self, plugin_id: str) -> MemoryFiles:
        """This writer, for plugin ``plugin_id`` (its tools' writes are recorded as its)."""
        return MemoryFiles(self._shared, plugin_id)

    @property
    def workspace_dir(self) -> Path:
        return self._shared.writer.workspace

    @property
    def home(self) -> Path:
        """``<workspace>/.claw/memory-writes``: the lock file and the journal."""
        return self._shared.writer.home

    @property
    def _writer(self) -> MemoryFileWriter:
        return self._shared.writer

    def describe(
        self, caller: MemoryCallerContext, *, flush_id: str | None = None, tool: str | None = None
    ) -> MemoryProvenance:
        """Who ``caller`` is, as the host records a write's provenance (for a provider
        that keeps its own records and stores who wrote each)."""
        caller.assert_current()
        plugin_id = None if tool is None else self._plugin_id
        return self._shared.describe(caller, flush_id=flush_id, tool=tool, plugin_id=plugin_id)

    def _by(self, caller: MemoryCallerContext, flush_id: str | None, tool: str | None) -> Any:
        return self.describe(caller, flush_id=flush_id, tool=tool).to_wire()

    async def _run(self, fn: Callable[[], Any]) -> Any:
        async with self._shared.lock:
            return await self._shared.workers.run_sync(fn)

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
        max_bytes: int | None = None,
    ) -> Written:
        """Append ``text`` to ``path`` as one whole write (created when missing)."""
        by = self._by(caller, flush_id, tool)
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
        max_bytes: int | None = None,
    ) -> Written:
        """Add the entry ``compose(current_text)`` places (at the end, or inside the file).

        ``compose`` runs under the workspace's writer lock on a worker thread: it must be
        a pure function of the text it is given.
        """
        by = self._by(caller, flush_id, tool)
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
    ) -> Removal:
        """Forget lines ``start..end`` of ``path``, keeping the undo (see
        :meth:`MemoryFileWriter.remove` for the revision and matched-entry rules)."""
        by = self._by(caller, None, tool)
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
    ) -> Restoration:
        """Put a forget's lines back: in place when unambiguous, else appended under a
        marked heading; never over anything."""
        by = self._by(caller, None, tool)
        result: Restoration = await self._run(
            lambda: self._writer.restore(removal_id, by=by, dry_run=dry_run)
        )
        return result

    async def purge(
        self,
        caller: MemoryCallerContext,
        paths: Sequence[str],
        *,
        text: str | None = None,
        cited: Cited | None = None,
        removal_id: str | None = None,
        dry_run: bool = False,
    ) -> Purged:
        """Delete for good, with no undo, what one of ``text`` / ``cited`` /
        ``removal_id`` names from ``paths`` and from the journal (see
        :meth:`MemoryFileWriter.purge`). Derived copies are the caller's to scrub."""
        by = self._by(caller, None, None)
        result: Purged = await self._run(
            lambda: self._writer.purge(
                paths, by=by, text=text, cited=cited, removal_id=removal_id, dry_run=dry_run
            )
        )
        return result

    async def purge_mark(self) -> int:
        """What :meth:`MemoryFileWriter.purge_mark` says (a number that grows with every
        purge of this workspace)."""
        mark: int = await self._shared.workers.run_sync(self._writer.purge_mark)
        return mark

    def purge_mark_nowait(self) -> int:
        """:meth:`purge_mark` without a worker: one ``stat`` of a small local file (for a
        check on every use, where the hop to a worker would cost more)."""
        return self._writer.purge_mark()

    async def removals(
        self, caller: MemoryCallerContext, *, limit: int = 50
    ) -> list[MemoryRemoval]:
        """The most recent forgets, newest first, with what became of each."""
        caller.assert_current()
        result: list[MemoryRemoval] = await self._shared.workers.run_sync(
            lambda: self._writer.removals(limit=limit)
        )
        return result

    async def recover(self) -> None:
        """Settle what a killed writer left behind (every write does this first anyway)."""
        await self._run(self._writer.recover)

    def writers_nowait(self) -> Mapping[str, Any] | None:
        """:meth:`writers` without a worker when the journal has not changed since it was
        last read (one ``stat`` of a local file, made on every search that found a memory
        file: the hop to a worker would cost more); ``None`` when it has, and
        :meth:`writers` must read what was added."""
        shared = self._shared
        try:
            st = shared.journal_path.stat()
        except FileNotFoundError:
            shared.writers, shared.journal_seen = {}, (0, 0)
            return shared.writers
        if (st.st_ino, st.st_size) == shared.journal_seen:
            return shared.writers
        return None

    async def writers(self) -> Mapping[str, Any]:
        """Entry hash -> who wrote it (wire form), from the journal; read incrementally."""
        shared = self._shared
        journal = Journal(self.home)

        def refresh() -> None:
            try:
                st = journal.path.stat()
            except FileNotFoundError:
                shared.writers, shared.journal_seen = {}, (0, 0)
                return
            ino, offset = shared.journal_seen
            if st.st_ino != ino or st.st_size < offset:
                shared.writers, offset = {}, 0  # rewritten by a purge: read it again
            if st.st_size == offset:
                return
            records, end = journal.read_from(offset)
            if offset == 0:
                records = live(records)
            shared.writers.update(provenance_map(records))
            shared.journal_seen = (st.st_ino, end)

        await shared.workers.run_sync(refresh)
        return shared.writers
