"""Memory Core's purge: delete a memory for good, and every copy of it.

A forget keeps an undo (the workspace journal) and leaves the index's old bytes where
SQLite, tantivy and the published files keep deleted data until they compact. A purge
leaves nothing:

1. the workspace's memory files lose the entries (every entry containing the text,
   or the cited entry and every exact copy of it), and the journal loses every copy a
   forget kept, through the host's memory-file writer
   (:meth:`claw.plugin_sdk.MemoryFiles.purge`);
2. every agent index of this state directory syncs, drops the vectors cached for the
   chunks that went, rewrites its database (``VACUUM``, the WAL emptied), rebuilds its
   tantivy directory and publishes a new epoch (:meth:`MemoryIndex.purged`);
3. the purge moves the workspace's purge mark, so an index of another state directory
   on the same workspace scrubs itself the same way when it is next used (it cannot
   know which vectors went: it drops every cached vector no chunk has).

The text may also stand in session transcripts or in files Memory Core indexes but
does not write (``extra_paths``): a purge by text says so in its warning, since it
edits neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from claw.plugin_sdk import (
    CapabilityDeniedError,
    Cited,
    ClawError,
    MemoryCallerContext,
    MemoryPurgeRequest,
    MemoryPurgeResult,
    OperatorAuthority,
    parse_line_fragment,
)

from ._errors import InvalidSearchError
from ._sources import scan_stats
from ._writes import memory_file_path, piece_matcher

if TYPE_CHECKING:
    from ._plugin import MemoryCoreService


def _writable_memory_files(service: MemoryCoreService) -> list[str]:
    """The memory files Memory Core writes, as they stand now (extra paths excluded)."""
    workspace = service.workspace_dir
    found = []
    for vpath in sorted(scan_stats(workspace, ())):
        try:
            memory_file_path(workspace, vpath)
        except ClawError:
            continue
        found.append(vpath)
    return found


async def purge_memory(
    service: MemoryCoreService,
    context: MemoryCallerContext,
    request: MemoryPurgeRequest,
    *,
    dry_run: bool,
) -> MemoryPurgeResult:
    """Memory Core's ``purge`` (see the module docstring)."""
    context.assert_current()
    authority = context.authority
    if not (isinstance(authority, OperatorAuthority) and authority.has_scope("operator.admin")):
        raise CapabilityDeniedError("purging memory needs an operator with operator.admin")
    cited: Cited | None = None
    if request.reference is not None:
        ref = request.reference
        if ref.fragment is None:
            raise InvalidSearchError(
                f"{ref.id!r}: a purge by reference names lines (path#L<a>-L<b>); to purge "
                "a text wherever it stands, purge by text"
            )
        try:
            start, end = parse_line_fragment(ref.fragment)
        except ClawError as exc:
            raise InvalidSearchError(str(exc)) from None
        memory_file_path(service.workspace_dir, ref.id)
        cited = Cited(
            ref.id,
            start,
            end,
            ref.revision,
            None if ref.revision is None else piece_matcher(service, ref.revision),
            request.whole_range,
        )
    files = service.api.memory_files
    vpaths = await service.api.workers.run_sync(_writable_memory_files, service)
    text, removal_id = request.text, request.removal_id
    plan = await files.purge(
        context, vpaths, text=text, cited=cited, removal_id=removal_id, dry_run=True
    )
    if dry_run:
        return MemoryPurgeResult(
            dry_run=True, paths=plan.paths, entries=plan.entries, removals=plan.removals
        )
    agents = await service.index_agents()
    before = {}
    for agent in agents:
        async with service.use(agent) as index:
            before[agent] = await index.memory_hashes(plan.paths)
    done = await files.purge(context, vpaths, text=text, cited=cited, removal_id=removal_id)
    mark = await files.purge_mark()
    still = 0
    for agent in agents:
        async with service.use(agent, check_purges=False) as index:
            await index.caught_up_with_purge(mark, done.paths, before[agent])
            service.purge_checked(agent, mark)
            if request.text is not None:
                still += await index.count_containing(request.text)
    context.assert_current()
    warning = None
    if still:
        warning = (
            f"the text still stands in {still} indexed chunk(s) of session transcripts or "
            "of files Memory Core does not write (extra_paths); a purge edits neither"
        )
    return MemoryPurgeResult(
        dry_run=False,
        paths=done.paths,
        entries=done.entries,
        removals=done.removals,
        warning=warning,
    )
