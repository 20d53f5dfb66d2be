"""``claw memory forget REFERENCE``, ``restore`` and ``forgotten``: removal you can undo.

``forget`` removes the one entry its reference's lines lie in. When they cover several
entries (a search hit's chunk, ``MEMORY.md#L1-L14``), it prints every line it would
remove and asks on a terminal; anywhere else it needs ``--yes``. Either way the
removal is kept in the workspace's journal: the command prints the id that ``claw
memory restore ID`` takes, and ``claw memory forgotten`` lists them.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

import attrs
import trio

from .._capabilities import MemoryCallerContext
from .._host import Host
from .._local import parse_reference
from ..gateway._memory import wire_forget, wire_restore
from ..memory import MemoryForgetResult, MemoryPurgeResult, MemoryRemoval
from ..memory_files import lines_revision
from ._common import EXIT_OK, AddCommand, CliError, agent_flag, emit_json, json_flag, positive_int


def add_undo_parsers(msub: Any, command: AddCommand) -> None:
    """``claw memory restore``, ``forgotten`` and ``purge``."""
    restore = command(
        msub,
        "restore",
        "put back what a forget removed",
        "Put back the lines a forget removed from a memory file: where they were when that "
        "is unambiguous, otherwise appended under a '## Restored by claw' heading. Nothing "
        "is ever overwritten. ID is a removal id (claw memory forgotten lists them; six of "
        "its digits are enough).",
    )
    restore.add_argument("removal", metavar="ID", help="the removal to undo")
    restore.add_argument("--dry-run", action="store_true", help="report, change nothing")
    agent_flag(restore)
    json_flag(restore)
    forgotten = command(
        msub,
        "forgotten",
        "list what was forgotten",
        "List what was forgotten, newest first: removals from memory files (their id is "
        "for claw memory restore; when, by whom, and whether restored or purged since), "
        "and what the index hides (paths, sessions, sources forgotten with --path, "
        "--session, --source or a path reference; their id is for claw memory unforget).",
    )
    forgotten.add_argument(
        "--limit", type=positive_int, default=20, metavar="N", help="how many (default: 20)"
    )
    agent_flag(forgotten)
    json_flag(forgotten)
    unforget = command(
        msub,
        "unforget",
        "index again what a forget hid",
        "Take back a forget of a path, a session or a source: what it hid is indexed "
        "again, as its sources stand now. ID is a forget id (claw memory forgotten lists "
        "them). claw memory index --force keeps every forget: only unforget ends one.",
    )
    unforget.add_argument("forget_id", metavar="ID", help="the forget to take back")
    agent_flag(unforget)
    json_flag(unforget)
    purge = command(
        msub,
        "purge",
        "delete a memory for good, every copy",
        "Delete for good, with no undo: every entry holding --text (in every memory file, "
        "every copy a forget kept, and every index of this state directory: database, "
        "tantivy, published files and cached vectors, all rewritten so that no byte is "
        "left), or the entry REFERENCE names with every copy of it, or the copy removal "
        "--removal ID kept. It shows what it would delete and asks on a terminal; "
        "elsewhere it needs --yes. Needs operator.admin (the local operator has it).",
    )
    purge.add_argument(
        "reference", nargs="?", default=None, help="path#L<a>-L<b>, as search prints"
    )
    purge.add_argument("--text", default=None, help="purge every entry holding this text")
    purge.add_argument(
        "--removal", default=None, metavar="ID", help="purge the copy this forget kept"
    )
    purge.add_argument("--yes", action="store_true", help="do not ask")
    purge.add_argument("--dry-run", action="store_true", help="report, change nothing")
    agent_flag(purge)
    json_flag(purge)


async def _confirm(question: str, err: TextIO) -> bool:
    err.write(f"{question} [y/N] ")
    err.flush()
    answer = await trio.to_thread.run_sync(sys.stdin.readline)
    return answer.strip().lower() in ("y", "yes")


def _show(out: TextIO, verb: str, result: MemoryForgetResult, cited: str) -> None:
    where = f"{result.paths[0]}#L{result.start_line}-L{result.end_line}" if result.paths else cited
    undo = f" (undo: claw memory restore {result.removal_id})" if result.removal_id else ""
    out.write(f"{verb} {where}{undo}:\n")
    out.writelines(f"  {line}\n" for line in (result.removed_text or "").splitlines())


async def forget_cited(
    args: argparse.Namespace, host: Host, caller: MemoryCallerContext, out: TextIO, err: TextIO
) -> int:
    """``claw memory forget REFERENCE``: one entry, or a confirmed range (module docstring)."""
    if args.path or args.session or args.source:
        raise CliError("give a REFERENCE or --path/--session/--source, not both")
    target = parse_reference(host.slots.memory_plugin or "", args.reference)
    whole = False
    if target.fragment is not None:
        seen = await host.memory.forget(
            caller, target, dry_run=True, agent_id=args.agent, whole_range=True
        )
        entries = seen.entries if seen.entries is not None else 1
        if entries > 1 and not args.dry_run:
            shown = f"{target.id}#{target.fragment}"
            lines = (seen.removed_text or "").splitlines()
            if not args.yes:
                if args.json or not sys.stdin.isatty():
                    if not args.json:
                        _show(err, "it would forget", seen, shown)
                    raise CliError(
                        f"{shown} covers {entries} entries ({len(lines)} lines); nothing was "
                        "removed. Cite one entry's own lines (path#L<a>-L<b>), or pass --yes "
                        "to remove every line (they stay restorable)"
                    )
                _show(err, "this would forget", seen, shown)
                if not await _confirm(f"Forget all {len(lines)} lines ({entries} entries)?", err):
                    raise CliError("nothing was forgotten")
            whole = True
            if target.revision is None and seen.removed_text is not None:
                # What was shown is what goes: a change meanwhile is refused as stale.
                target = attrs.evolve(
                    target, revision=lines_revision(seen.removed_text.splitlines())
                )
        elif entries > 1:
            whole = True  # a dry run shows the range, as the confirmation would
    forgot = await host.memory.forget(
        caller, target, dry_run=args.dry_run, agent_id=args.agent, whole_range=whole
    )
    if args.json:
        emit_json(out, wire_forget(forgot))
    elif forgot.removed_text is not None:
        _show(out, "would forget" if forgot.dry_run else "forgot", forgot, args.reference)
    else:
        verb = "would forget" if forgot.dry_run else "forgot"
        undo = f" (undo: claw memory unforget {forgot.forget_id})" if forgot.forget_id else ""
        out.write(f"{verb} {forgot.chunks} chunk(s) of {args.reference}{undo}\n")
    return EXIT_OK


async def restore(
    args: argparse.Namespace, host: Host, caller: MemoryCallerContext, out: TextIO
) -> int:
    """``claw memory restore ID``."""
    result = await host.memory.restore(
        caller, args.removal, dry_run=args.dry_run, agent_id=args.agent
    )
    if args.json:
        emit_json(out, wire_restore(result))
        return EXIT_OK
    ref = result.reference
    where = f"{ref.id}#{ref.fragment}" if ref.fragment else ref.id
    if result.already:
        out.write(f"{result.removal_id} was restored before, to {where}\n")
    elif result.mode == "present":
        out.write(f"{result.removal_id} is already back at {where}; nothing written\n")
    else:
        verb = "would restore" if result.dry_run else "restored"
        how = "in place" if result.mode == "in-place" else "under a '## Restored by claw' heading"
        out.write(f"{verb} {result.removal_id} to {where} ({how})\n")
    return EXIT_OK


def _who(removal: MemoryRemoval) -> str:
    by = removal.by
    if by is None:
        return "unknown"
    if by.kind == "operator":
        return f"operator ({by.connection_id or 'unnamed connection'})"
    if by.session_key is not None:
        return f"{by.kind} {by.session_key}"
    return by.kind


def _removal_wire(r: MemoryRemoval) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "id": r.id,
        "path": r.path,
        "startLine": r.start_line,
        "endLine": r.end_line,
        "at": r.at,
        "status": r.status,
        "provenance": [p.to_wire() for p in r.provenance],
    }
    if r.text is not None:
        wire["text"] = r.text
    if r.by is not None:
        wire["by"] = r.by.to_wire()
    return wire


async def unforget(
    args: argparse.Namespace, host: Host, caller: MemoryCallerContext, out: TextIO
) -> int:
    """``claw memory unforget ID``."""
    if not host.memory.offers("unforget"):
        raise CliError(f"memory plugin {host.slots.memory_plugin!r} keeps no index forgets")
    done = await host.memory.unforget(caller, args.forget_id, agent_id=args.agent)
    if args.json:
        emit_json(out, done)
    else:
        out.write(f"unforgot {done['id']}: indexed again {', '.join(done['paths'])}\n")
    return EXIT_OK


async def forgotten(
    args: argparse.Namespace, host: Host, caller: MemoryCallerContext, out: TextIO
) -> int:
    """``claw memory forgotten``."""
    removals = await host.memory.removals(caller, limit=args.limit, agent_id=args.agent)
    hidden = (
        [dict(h) for h in await host.memory.forgotten(caller, agent_id=args.agent)]
        if host.memory.offers("forgotten")
        else []
    )
    if args.json:
        emit_json(out, {"removals": [_removal_wire(r) for r in removals], "hidden": hidden})
        return EXIT_OK
    for h in hidden:
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(h["at"]))
        what = ", ".join(f"{k} {v}" for k, v in sorted(h["criteria"].items()))
        out.write(
            f"{h['id']}  {stamp}  hidden     {what} ({h['chunks']} chunk(s); "
            f"claw memory unforget {h['id']})\n"
        )
    if not removals and not hidden:
        out.write("nothing was forgotten\n")
    for r in removals:
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.at))
        out.write(
            f"{r.id}  {stamp}  {r.status:<9}  {r.path}#L{r.start_line}-L{r.end_line}  "
            f"by {_who(r)}\n"
        )
        if r.text is not None:
            first = next((line for line in r.text.splitlines() if line.strip()), "")
            out.write(f"    {' '.join(first.split())[:150]}\n")
    return EXIT_OK


def _purge_wire(result: MemoryPurgeResult) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "dryRun": result.dry_run,
        "paths": list(result.paths),
        "entries": result.entries,
        "removals": list(result.removals),
    }
    if result.warning is not None:
        wire["warning"] = result.warning
    return wire


async def purge(
    args: argparse.Namespace, host: Host, caller: MemoryCallerContext, out: TextIO, err: TextIO
) -> int:
    """``claw memory purge``: shows what goes, asks (or ``--yes``), deletes for good."""
    given = [a for a in (args.reference, args.text, args.removal) if a is not None]
    if len(given) != 1:
        raise CliError("purge needs exactly one of REFERENCE, --text or --removal")
    reference = (
        None
        if args.reference is None
        else parse_reference(host.slots.memory_plugin or "", args.reference)
    )
    whole = bool(args.yes and reference is not None and reference.fragment is not None)

    async def run(dry_run: bool) -> MemoryPurgeResult:
        return await host.memory.purge(
            caller,
            text=args.text,
            reference=reference,
            removal_id=args.removal,
            whole_range=whole,
            dry_run=dry_run,
            agent_id=args.agent,
        )

    seen = await run(True)
    if args.dry_run:
        if args.json:
            emit_json(out, _purge_wire(seen))
        else:
            _show_purge(out, "would purge", seen)
        return EXIT_OK
    if not seen.entries and not seen.removals:
        raise CliError("nothing to purge: no memory holds it")
    if not args.yes:
        if args.json or not sys.stdin.isatty():
            if not args.json:
                _show_purge(err, "it would purge", seen)
            raise CliError("a purge cannot be undone; pass --yes to delete these for good")
        _show_purge(err, "this would purge", seen)
        if not await _confirm("Delete these for good? This cannot be undone.", err):
            raise CliError("nothing was purged")
    done = await run(False)
    if args.json:
        emit_json(out, _purge_wire(done))
    else:
        _show_purge(out, "purged", done)
    return EXIT_OK


def _show_purge(out: TextIO, verb: str, result: MemoryPurgeResult) -> None:
    out.write(
        f"{verb} {result.entries} entr{'y' if result.entries == 1 else 'ies'} from "
        f"{len(result.paths)} source(s) and {len(result.removals)} kept cop"
        f"{'y' if len(result.removals) == 1 else 'ies'}\n"
    )
    out.writelines(f"  {path}\n" for path in result.paths)
    if result.warning:
        out.write(f"note: {result.warning}\n")
