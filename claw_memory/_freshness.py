"""Keeping an index fresh: noticing changed sources and starting the syncs they need.

A search must answer from sources no older than the search. On Linux, inotify on the
source directories (:mod:`claw_memory._changes`) says whether any memory file may have
moved; only then does a search sync (the sync's scan is the check). Without inotify,
or until every current watch has seen a full check, a stat check rides the ranking call
(:func:`files_changed`). Transcript sessions are compared by change token.

With a background nursery a search that notices a change starts the sync there and
answers at once from the current generation, with a warning; without one it syncs
inline. A sync a search starts never waits for another process's write: if another
process holds the writer lease it is syncing right now and publishes soon, and the next
search looks again. :meth:`Freshness.watch` is the polling alternative for callers that
want changes indexed without a search.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

import attrs
import trio

from claw.plugin_sdk import WorkerPool

from ._changes import DirectoryWatch, open_directory_watch
from ._listing import SourceListing
from ._settings import MemoryCoreSettings
from ._sources import scan_stats
from ._sync import Syncer, SyncProgress
from ._transcripts import TranscriptSession, session_provenance
from ._types import SyncReport
from ._view import IndexView
from ._writer import IndexWriter

logger = logging.getLogger("claw_memory")


def files_changed(
    workspace: Path,
    extra_paths: tuple[str, ...],
    known: Mapping[str, tuple[int | None, int | None]],
) -> bool:
    """Whether any memory file appeared, vanished or changed size or mtime since ``known``."""
    current = scan_stats(workspace, extra_paths)
    if len(current) != len(known):
        return True
    return any(known.get(vpath) != (size, mtime) for vpath, (_, size, mtime, _) in current.items())


@attrs.define(eq=False)
class Freshness:
    """Syncs an index when its sources change (see the module docstring)."""

    view: IndexView
    settings: MemoryCoreSettings
    workers: WorkerPool
    listing: SourceListing
    writer: IndexWriter
    syncer: Syncer
    #: Where a search that notices changed sources starts their sync, so that it can
    #: answer at once from the current generation (None: it syncs inline).
    background: trio.Nursery | None = None
    #: inotify on the source directories (Linux); None: stat the files every time.
    source_watch: DirectoryWatch | None = attrs.field(default=None, init=False)
    # True once a full check or sync ran after every current watch was in place.
    _primed: bool = attrs.field(default=False, init=False)
    # The background sync while one is pending or running, and whether a change was
    # noticed after it scanned (it then runs once more).
    _background_sync: trio.CancelScope | None = attrs.field(default=None, init=False)
    _resync: bool = attrs.field(default=False, init=False)
    # The last session listing found unchanged, as provenance key -> change token, the
    # view's sources epoch it was checked against, and the transcript source's listing
    # version read before that listing (None: it keeps none).
    _listed: tuple[dict[str, str], int, object | None] | None = attrs.field(
        default=None, init=False
    )

    async def start(self) -> None:
        """Watch the source directories (before the first sync, so no change can fall
        between the two)."""
        if "memory" in self.settings.sources:
            self.source_watch = await self.workers.run_sync(
                open_directory_watch, self.listing.watch_directories()
            )

    def stop(self) -> None:
        """Cancel the background sync, if one is pending or running."""
        if self._background_sync is not None:
            self._background_sync.cancel()

    def close(self) -> None:
        if self.source_watch is not None:
            self.source_watch.close()

    @property
    def in_background(self) -> bool:
        """Whether a search's sync runs in the background (it then answers at once)."""
        return self.background is not None

    def syncing(self) -> bool:
        """Whether a sync a search started is pending or running in the background."""
        return self._background_sync is not None

    # -- syncs -------------------------------------------------------------------------
    async def sync(
        self, *, force: bool = False, progress: SyncProgress | None = None
    ) -> SyncReport:
        """Sync now, waiting for another process's write (see :meth:`MemoryIndex.sync`)."""
        self.view.check_open()
        async with self.writer.write():
            self.view.check_open()
            try:
                report = await self.syncer.run(force, progress)
            finally:
                self.view.sources_changed()
                await self._refresh_watch()
            self._note_listing()
            return report

    async def sync_if_free(self) -> bool:
        """Sync unless another process is writing; ``False`` (no sync) if one is.

        The writer publishes soon, and the next search looks at the sources again
        (the watch is unprimed, so its stat check runs), so a change that writer
        missed is still synced; a search never waits for another process's write.
        """
        self.view.check_open()
        async with self.writer.write(wait=False) as held:
            self.view.check_open()
            if not held:
                self._primed = False
                return False
            try:
                await self.syncer.run(False)
            finally:
                self.view.sources_changed()
                await self._refresh_watch()
            self._note_listing()
        return True

    def _note_listing(self) -> None:
        """After a sync: the sessions it left the index holding become the listing the
        next search checks against, so that search need not list every session of
        every agent again (in an index of many agents' sessions that full check cost
        more than the search: 4 ms of CPU at 3,800 sessions, paid by the first search
        after every appended turn). The sync built that listing as it compared each
        session, so it is not checked against the sources a second time."""
        listed = self.syncer.take_listing()
        if listed is None or "sessions" not in self.settings.sources:
            return
        version, holds = listed
        self._listed = (holds, self.view.sources_epoch, version)

    def _current_listing(self, sessions: Sequence[TranscriptSession]) -> dict[str, str] | None:
        """``sessions`` as provenance key -> change token when they are exactly the
        sessions the index holds, at the tokens it holds them; else None."""
        sources = self.view.sources
        known = sum(1 for st in sources.values() if st.source == "sessions")
        if len(sessions) != known:
            return None
        current: dict[str, str] = {}
        for session in sessions:
            prov = session_provenance(session)
            prev = sources.get(prov)
            if prev is None or prev.token != session.change_token:
                return None
            current[prov] = session.change_token
        return current if len(current) == len(sessions) else None

    async def changed(self) -> bool:
        """A search noticed changed sources: sync them. Returns whether it answers from
        the current generation while the sync runs in the background.

        With a background nursery the sync starts there and the search does not wait:
        a sync's fixed costs (a tantivy commit with its fsync, the publication) exceed a
        search's at every index size, so waiting even briefly would make the noticing
        search pay most of it. One sync at a time: a change noticed while one runs makes
        it run once more when it ends (its scan may have been earlier).
        """
        if self.background is None:
            await self.sync_if_free()
            return False
        if self._background_sync is not None:
            self._resync = True
            return True
        scope = trio.CancelScope()
        try:
            self.background.start_soon(self._sync_in_background, scope)
        except RuntimeError:  # the nursery is closing: nothing runs in the background now
            await self.sync_if_free()
            return False
        self._background_sync = scope
        return True

    async def _sync_in_background(self, scope: trio.CancelScope) -> None:
        """Sync (again while changes keep being noticed); failures are logged, and the
        next search looks at the sources afresh."""
        try:
            with scope:
                while not self.view.closed:
                    self._resync = False
                    try:
                        await self.sync_if_free()
                    except Exception:
                        if not self.view.closed:
                            logger.warning(
                                "background sync of %s failed",
                                self.view.index_dir,
                                exc_info=True,
                            )
                        self._primed = False
                        return
                    if not self._resync:
                        return
        finally:
            self._background_sync = None

    async def _refresh_watch(self) -> None:
        """Watch directories that appeared; a new watch means the next check must stat."""
        watch = self.source_watch
        if watch is None:
            return
        before = watch.count
        try:
            await self.workers.run_sync(lambda: watch.watch(self.listing.watch_directories()))
        except OSError:
            watch.close()
            self.source_watch = None
            return
        self._primed = watch.count == before

    # -- what a search checks ----------------------------------------------------------
    async def sessions_changed(self) -> bool:
        """Whether a transcript session appeared, vanished or changed since the last sync."""
        if "sessions" not in self.settings.sources or self.listing.transcripts is None:
            return False
        epoch = self.view.sources_epoch
        listed = self._listed
        # Read before listing: a change after this read moves the version past the one
        # recorded below, so the next search lists again rather than missing it.
        version = self.listing.sessions_version()
        if (
            version is not None
            and listed is not None
            and listed[1] == epoch
            and listed[2] == version
        ):
            # Nothing listed changed since a listing found the index current: no need to
            # list (and compare) every session of every agent the index holds.
            return False
        sessions = await self.listing.list_sessions()
        if (
            listed is not None
            and listed[1] == epoch
            and len(sessions) == len(listed[0])
            and all(listed[0].get(session_provenance(s)) == s.change_token for s in sessions)
        ):
            # The listing found unchanged against these same sources (the one a sync
            # left, or the last full check's): no need to compare it with the sources.
            self._listed = (listed[0], epoch, version)
            return False
        current = self._current_listing(sessions)
        if current is None:
            return True
        self._listed = (current, epoch, version)
        return False

    async def must_stat(self) -> bool:
        """Whether a search must run the stat check of the memory files.

        The kernel says whether anything moved: a search syncs only when it did (its
        scan is the check; a stat check first would scan the same files twice). Until
        every current watch has seen a full check, the stat check still runs.
        """
        settings = self.settings
        check_files = settings.sync_on_search and "memory" in settings.sources
        if check_files and self.source_watch is not None:
            moved = self.source_watch.changed()
            if self._primed:
                check_files = False
                if moved:
                    await self.changed()
            else:
                self._primed = True
        return check_files

    def stat_check(self) -> Callable[[], bool]:
        """The stat check against the files as last synced (blocking: it rides the
        ranking call)."""
        return functools.partial(
            files_changed,
            self.listing.workspace,
            self.settings.extra_paths,
            self.view.known_files(),
        )

    # -- polling -----------------------------------------------------------------------
    async def _fingerprint(self) -> tuple[object, ...]:
        entries = await self.listing.scan_memory()
        sessions = await self.listing.list_sessions()
        return (
            tuple(sorted((e.vpath, e.size, e.mtime_ns) for e in entries.values())),
            tuple(sorted((session_provenance(s), s.change_token) for s in sessions)),
        )

    async def watch(
        self,
        *,
        interval: float = 2.0,
        debounce: float = 0.5,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        """Poll the sources every ``interval`` seconds and sync once they settle (see
        :meth:`MemoryIndex.watch`)."""
        self.view.check_open()
        last = await self._fingerprint()
        task_status.started()
        while True:
            await trio.sleep(interval)
            current = await self._fingerprint()
            if current == last:
                continue
            while True:
                await trio.sleep(debounce)
                settled = await self._fingerprint()
                if settled == current:
                    break
                current = settled
            await self.sync()
            last = current
