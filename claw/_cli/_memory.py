"""``claw memory ...``: index, search, read, add, forget and restore memory as the local operator.

Reads go through the gateway's memory methods (the same validation, payloads and
messages as a remote client gets); writes and index-level maintenance (``index``,
``forget --path/--session/--source``) through ``host.memory``'s write route, the guard's.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, TextIO

import trio

from .._capabilities import MemoryCallerContext
from .._demo import matching_lines
from .._host import Host
from .._local import parse_reference
from ..gateway._errors import GatewayError
from ..gateway._memory import (
    MAX_RESULTS_LIMIT,
    memory_get,
    memory_search,
    memory_status,
    wire_add,
    wire_reference,
)
from ._common import (
    EXIT_OK,
    AddCommand,
    CliError,
    NotFoundError,
    agent_flag,
    emit_json,
    json_flag,
    load_config,
    max_results,
    positive_int,
    score,
    sources,
    with_operator,
)
from ._progress import Progress, warm
from ._undo import add_undo_parsers, forget_cited, forgotten, purge, restore, unforget

# What `claw memory add -` reads from stdin at most (a memory entry is far smaller: the
# provider refuses what it will not store, naming its own limit).
MAX_STDIN_CHARS = 1024 * 1024

# Wire field names the gateway's memory methods use in their messages, and the flag a
# CLI user typed for each.
_FLAGS = {"maxResults": "--max-results", "minScore": "--min-score", "agentId": "--agent"}


def add_parsers(sub: Any, command: AddCommand) -> None:
    """``claw memory`` and its subcommands."""
    memory = command(sub, "memory", "index, search and write memory")
    msub = memory.add_subparsers(dest="memory_command", required=True, metavar="COMMAND")
    index = command(msub, "index", "bring the index up to date")
    index.add_argument("--force", action="store_true", help="re-read and re-chunk everything")
    agent_flag(index)
    json_flag(index)
    search = command(
        msub, "search", "search memory", "Search memory; prints the matching lines of each hit."
    )
    search.add_argument("query", help="what to look for")
    search.add_argument(
        "--max-results",
        type=max_results,
        default=6,
        metavar="N",
        help=f"how many hits, 1-{MAX_RESULTS_LIMIT} (default: 6)",
    )
    search.add_argument(
        "--min-score", type=score, default=None, metavar="S", help="drop hits scoring below S"
    )
    search.add_argument(
        "--sources", type=sources, default=None, help="memory,sessions (default: both)"
    )
    agent_flag(search)
    search.add_argument("--cursor", default=None, help="the next page, as a search printed it")
    json_flag(search)
    get = command(msub, "get", "read lines of a memory source")
    get.add_argument("path", help="a path, as search prints it (path#L<a>-L<b> also works)")
    get.add_argument(
        "--from", dest="from_line", type=positive_int, default=None, metavar="LINE",
        help="first line to read (1-based)",
    )  # fmt: skip
    get.add_argument("--lines", type=positive_int, default=None, metavar="N", help="how many lines")
    agent_flag(get)
    json_flag(get)
    status = command(msub, "status", "provider health and index size")
    agent_flag(status)
    json_flag(status)
    add = command(
        msub,
        "add",
        "write a memory",
        "Write a memory: appended, with a timestamp, to today's memory/YYYY-MM-DD.md.",
    )
    add.add_argument("text", help="the memory to keep; - reads it from stdin")
    add.add_argument(
        "--file",
        dest="target",
        metavar="PATH",
        default=None,
        help="memory file to write (default: today's memory/YYYY-MM-DD.md)",
    )
    add.add_argument("--section", default=None, help="heading to file it under")
    agent_flag(add)
    json_flag(add)
    forget = command(
        msub,
        "forget",
        "forget a memory or derived chunks",
        "Forget by reference: path#L<a>-L<b> removes the one entry (a list item with what "
        "is nested under it, a heading, a paragraph) those lines lie in; when they cover "
        "several entries, as a search hit's lines often do, every line is shown and you "
        "are asked first (--yes, where there is no terminal to ask on). The removal can be "
        "undone: the command prints its id for claw memory restore. A reference may end in "
        "@REVISION (the lines' revision when cited): lines that changed since are not "
        "removed. A path alone drops its chunks from the index; so do --path, --session "
        "and --source.",
    )
    forget.add_argument(
        "reference",
        nargs="?",
        default=None,
        help="path or path#L<a>-L<b>[@REVISION], as search prints",
    )
    forget.add_argument(
        "--yes", action="store_true", help="remove every cited line, several entries included"
    )
    forget.add_argument("--path", default=None, help="drop the chunks of this source")
    forget.add_argument("--session", default=None, help="drop the chunks of this session id")
    forget.add_argument(
        "--source",
        choices=("memory", "sessions"),
        default=None,
        help="drop the chunks of a whole source",
    )
    agent_flag(forget)
    forget.add_argument("--dry-run", action="store_true", help="report, change nothing")
    json_flag(forget)
    add_undo_parsers(msub, command)


def _flag_names(message: str) -> str:
    for wire, flag in _FLAGS.items():
        message = message.replace(wire, flag)
    return message


def _require_maintenance(host: Host, operation: str) -> None:
    if not host.memory.offers(operation):
        raise CliError(
            f"memory plugin {host.slots.memory_plugin!r} offers no maintenance (index/forget)"
        )


async def _read(
    args: argparse.Namespace, host: Host, caller: MemoryCallerContext, out: TextIO, err: TextIO
) -> int:
    """``search``, ``get`` and ``status``: the gateway's payloads, printed."""
    command = args.memory_command
    await warm(host, caller, args.agent, err)
    try:
        if command == "search":
            params: dict[str, Any] = {
                "version": 2,
                "query": args.query,
                "maxResults": args.max_results,
            }
            if args.min_score is not None:
                params["minScore"] = args.min_score
            if args.sources:
                params["sources"] = args.sources
            if args.agent:
                params["agentId"] = args.agent
            first_rank, cursor = split_cursor(args.cursor)
            if cursor:
                params["cursor"] = cursor
            payload = await memory_search(host.memory, caller, params, lambda: None)
            if args.json:
                emit_json(out, payload)
            else:
                _print_hits(out, payload, args.query, first_rank)
            return EXIT_OK
        if command == "get":
            ref = parse_reference(host.slots.memory_plugin or "", args.path)
            params = {"reference": wire_reference(ref)}
            if args.from_line is not None:
                params["from"] = args.from_line
            if args.lines is not None:
                params["lines"] = args.lines
            if args.agent:
                params["agentId"] = args.agent
            payload = await memory_get(host.memory, caller, params, lambda: None)
            if payload["status"] != "ok":
                raise NotFoundError(f"{args.path} was not found in memory")
            if args.json:
                emit_json(out, payload)
            else:
                out.write(payload["text"] + "\n")
            return EXIT_OK
        params = {"agentId": args.agent} if args.agent else {}
        payload = await memory_status(host.memory, caller, params, lambda: None)
        if args.json:
            emit_json(out, payload)
        else:
            out.write(f"provider {payload['providerId']}: {payload['status']}\n")
            if "message" in payload:
                out.write(f"  {payload['message']}\n")
            for key, value in sorted(payload.get("details", {}).items()):
                out.write(f"  {key}: {value}\n")
    except GatewayError as exc:
        raise CliError(_flag_names(exc.message)) from exc
    return EXIT_OK


async def _stdin_text() -> str:
    """``claw memory add -``: the memory, read from stdin (bounded; a trailing newline off)."""
    data: str = await trio.to_thread.run_sync(sys.stdin.read, MAX_STDIN_CHARS + 1)
    if len(data) > MAX_STDIN_CHARS:
        raise CliError(f"memory add -: stdin holds more than {MAX_STDIN_CHARS} characters")
    if not data.strip():
        raise CliError("memory add -: stdin was empty; pipe the memory in, or give it as TEXT")
    return data.rstrip("\n")


async def _add(
    args: argparse.Namespace, host: Host, caller: MemoryCallerContext, out: TextIO
) -> int:
    text = await _stdin_text() if args.text == "-" else args.text
    added = await host.memory.add(
        caller, text, path=args.target, section=args.section, agent_id=args.agent
    )
    if args.json:
        emit_json(out, wire_add(added))
    else:
        c = added.citation
        out.write(f"added to {c.path}#L{c.start_line}-L{c.end_line}\n")
    return EXIT_OK


async def _index(
    args: argparse.Namespace, host: Host, caller: MemoryCallerContext, out: TextIO, err: TextIO
) -> int:
    _require_maintenance(host, "reindex")
    progress = Progress(err)
    try:
        report = await host.memory.reindex(
            caller, force=args.force, progress=progress, agent_id=args.agent
        )
    finally:
        progress.close()
    if args.json:
        emit_json(out, report)
    else:
        out.write(
            f"indexed {len(report['indexed'])} source(s), "
            f"+{report['chunksAdded']}/-{report['chunksRemoved']} chunks, "
            f"{report['embedded']} embedded, generation {report['generation']}\n"
        )
        for skipped in report["skipped"]:
            out.write(f"  skipped {skipped['path']}: {skipped['reason']}\n")
        if report.get("forgotten"):
            out.write(
                f"  {report['forgotten']} forget(s) keep hiding what they hid (a forced "
                "index keeps them): claw memory forgotten lists them, claw memory "
                "unforget ID ends one\n"
            )
    return EXIT_OK


async def _forget_derived(
    args: argparse.Namespace, host: Host, caller: MemoryCallerContext, out: TextIO
) -> int:
    if not (args.path or args.session or args.source):
        raise CliError("forget needs a REFERENCE, --path, --session or --source")
    _require_maintenance(host, "forget")
    result = await host.memory.forget_indexed(
        caller,
        agent_id=args.agent,
        path=args.path,
        session_id=args.session,
        source=args.source,
        dry_run=args.dry_run,
    )
    if args.json:
        emit_json(out, result)
    else:
        verb = "would forget" if result["dryRun"] else "forgot"
        undo = f" (undo: claw memory unforget {result['forgetId']})" if "forgetId" in result else ""
        out.write(
            f"{verb} {result['chunks']} chunk(s) from {len(result['paths'])} source(s){undo}\n"
        )
        for path in result["paths"]:
            out.write(f"  {path}\n")
    return EXIT_OK


async def run(args: argparse.Namespace, out: TextIO, err: TextIO, warnings: list[str]) -> int:
    """Run ``claw memory <command>`` as the workspace's local operator."""
    config = load_config(args)
    command = args.memory_command

    async def in_host(host: Host, caller: MemoryCallerContext) -> int:
        if command in ("search", "get", "status"):
            return await _read(args, host, caller, out, err)
        if command == "add":
            return await _add(args, host, caller, out)
        if command == "index":
            return await _index(args, host, caller, out, err)
        if command == "restore":
            return await restore(args, host, caller, out)
        if command == "forgotten":
            return await forgotten(args, host, caller, out)
        if command == "purge":
            return await purge(args, host, caller, out, err)
        if command == "unforget":
            return await unforget(args, host, caller, out)
        if args.reference is not None:
            return await forget_cited(args, host, caller, out, err)
        return await _forget_derived(args, host, caller, out)

    result: int = await with_operator(config, in_host)
    return result


_RANKED_CURSOR = re.compile(r"([1-9][0-9]{0,8})@(.+)", re.DOTALL)


def split_cursor(text: str | None) -> tuple[int, str | None]:
    """The rank of a page's first hit and the provider's cursor, from ``--cursor``.

    A page printed as text ends with ``more: --cursor <rank>@<cursor>``, so the next
    page numbers its hits on from the last one shown; a provider's own cursor (the
    ``nextCursor`` of ``--json``) is taken as it is, numbered from 1.
    """
    if not text:
        return 1, None
    ranked = _RANKED_CURSOR.fullmatch(text)
    if ranked is None:
        return 1, text
    return int(ranked.group(1)), ranked.group(2)


def _print_hits(out: TextIO, payload: dict[str, Any], query: str, first_rank: int = 1) -> None:
    hits = payload["hits"]
    if not hits:
        out.write("no results\n")
    for rank, hit in enumerate(hits, start=first_rank):
        citation = hit.get("citation") or {}
        path = citation.get("path", hit["reference"]["id"])
        start = citation.get("startLine")
        lines = f"L{start if start is not None else '?'}-L{citation.get('endLine', '?')}"
        hit_score = hit.get("score")
        shown = f"{hit_score:.3f}" if isinstance(hit_score, int | float) else "  -  "
        out.write(f"{rank:>2}  {shown}  {path}#{lines}\n")
        first = start if citation.get("source", "memory") == "memory" else None
        for offset, line in matching_lines(hit["excerpt"], query, limit=3):
            where = f"L{first + offset}: " if isinstance(first, int) else ""
            out.write(f"    {where}{' '.join(line.split())[:160]}\n")
    if "nextCursor" in payload:
        out.write(f"more: --cursor {first_rank + len(hits)}@{payload['nextCursor']}\n")
    if "warning" in payload:
        out.write(f"note: {payload['warning']}\n")
