"""The ``claw`` command (also ``python -m claw``).

Every command accepts ``--workspace DIR`` (default: ``$CLAW_WORKSPACE``, else the
current directory) and ``--config FILE`` (default: ``$CLAW_CONFIG``, else ``claw.toml``
in the workspace when present), before or after the subcommand; state lives in
``<workspace>/.claw`` unless the config says otherwise, so the embedded defaults need
no setup.

Conventions: exit code 0 on success, 1 when ``doctor`` finds problems, 2 on an error
(the same with and without ``--json``). An error is one line on stderr, never a
traceback unless ``--debug`` is given; with ``--json`` it is also a JSON object on
stdout, ``{"error": {"code": ..., "message": ...}}``. Warnings start with
``claw: warning:``. A closed pipe (``claw demo | head``) ends the command quietly.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import math
import os
import secrets
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TextIO

import attrs
import trio
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from . import __version__
from ._capabilities import MemoryCallerContext
from ._config import HostConfig
from ._demo import copy_sample_workspace, matching_lines, run_demo, sample_files
from ._errors import CapabilityDeniedError, ClawError, ConfigError, UnsupportedRequestError
from ._host import Host, open_host
from ._local import load_workspace_config, parse_reference
from .gateway import Gateway, GatewayAddress, run_gateway_until_signal
from .gateway._errors import GatewayError
from .gateway._listen import reserve_port
from .gateway._memory import (
    MAX_RESULTS_LIMIT,
    memory_get,
    memory_search,
    memory_status,
    wire_add,
    wire_forget,
    wire_reference,
)
from .gateway._supervisor import supervise_gateway

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_ERROR = 2
ENV_WORKSPACE = "CLAW_WORKSPACE"
ENV_CONFIG = "CLAW_CONFIG"
LOCAL_OPERATOR_SCOPES = frozenset({"operator.read", "operator.write", "operator.admin"})
# Wire field names the gateway's memory methods use in their messages, and the flag a
# CLI user typed for each.
_FLAGS = {"maxResults": "--max-results", "minScore": "--min-score", "agentId": "--agent"}


class CliError(ClawError, RuntimeError):
    """A command failed for a reason to print as one line."""


class NotFoundError(CliError, LookupError):
    """What the command was asked for does not exist."""


class UsageError(CliError, ValueError):
    """The command line itself is wrong (an unknown flag, a bad value)."""

    def __init__(self, message: str, parser: argparse.ArgumentParser) -> None:
        super().__init__(message)
        self.parser = parser


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors raised (so ``--json`` can report them as JSON)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _max_results(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_RESULTS_LIMIT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_RESULTS_LIMIT}, got {value}")
    return value


def _score(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}") from None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, got {text}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            f"{value} is not a port: use 1-65535 (or 0 for any free port)"
        )
    return value


def _sources(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [n for n in names if n not in ("memory", "sessions")]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"expected memory and/or sessions, comma-separated, got {text!r}"
        )
    return names


def _common(parser: argparse.ArgumentParser, *, sub: bool) -> None:
    # On a subcommand the defaults are suppressed, so that an option given before the
    # subcommand (``claw --workspace DIR doctor``) is not overwritten by the
    # subcommand's own default.
    def default(value: Any) -> Any:
        return argparse.SUPPRESS if sub else value

    parser.add_argument(
        "--workspace",
        metavar="DIR",
        default=default(None),
        help=f"workspace directory (default: ${ENV_WORKSPACE}, else the current directory)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=default(None),
        help=f"config file (default: ${ENV_CONFIG}, else claw.toml in the workspace)",
    )
    parser.add_argument(
        "--debug", action="store_true", default=default(False), help="show tracebacks"
    )


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _agent_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agent", default=None, metavar="ID", help="agent id (default: the configured default)"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``claw``."""
    common = _Parser(add_help=False)
    _common(common, sub=True)
    parser = _Parser(prog="claw", description="claw: memory and context for AI agents")
    _common(parser, sub=False)
    parser.add_argument(
        "--version", action="version", version=f"claw {__version__}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        group: Any, name: str, summary: str, description: str | None = None
    ) -> argparse.ArgumentParser:
        created: argparse.ArgumentParser = group.add_parser(
            name, parents=[common], help=summary, description=description or summary
        )
        return created

    serve = command(
        sub,
        "serve",
        "serve the gateway over WebSocket",
        "Serve the claw gateway (memory.search, memory.get, memory.status) over WebSocket "
        "until interrupted. Clients authenticate with a token.",
    )
    serve.add_argument("--host", default=None, help="address to bind (default: 127.0.0.1)")
    serve.add_argument(
        "--port", type=_port, default=None, help="port, 1-65535 (default: 0, any free port)"
    )
    serve.add_argument(
        "--token", default=None, help="the clients' token (default: $CLAW_GATEWAY_TOKEN)"
    )
    serve.add_argument(
        "--workers",
        type=_positive_int,
        default=1,
        metavar="N",
        help="serving processes sharing the port (default: 1, this process)",
    )

    memory = command(sub, "memory", "index, search and write memory")
    msub = memory.add_subparsers(dest="memory_command", required=True, metavar="COMMAND")
    index = command(msub, "index", "bring the index up to date")
    index.add_argument("--force", action="store_true", help="re-read and re-chunk everything")
    _agent_flag(index)
    _json_flag(index)
    search = command(
        msub, "search", "search memory", "Search memory; prints the matching lines of each hit."
    )
    search.add_argument("query", help="what to look for")
    search.add_argument(
        "--max-results",
        type=_max_results,
        default=6,
        metavar="N",
        help=f"how many hits, 1-{MAX_RESULTS_LIMIT} (default: 6)",
    )
    search.add_argument(
        "--min-score", type=_score, default=None, metavar="S", help="drop hits scoring below S"
    )
    search.add_argument(
        "--sources", type=_sources, default=None, help="memory,sessions (default: both)"
    )
    _agent_flag(search)
    search.add_argument("--cursor", default=None, help="the next page, as a search printed it")
    _json_flag(search)
    get = command(msub, "get", "read lines of a memory source")
    get.add_argument("path", help="a path, as search prints it (path#L<a>-L<b> also works)")
    get.add_argument(
        "--from", dest="from_line", type=_positive_int, default=None, metavar="LINE",
        help="first line to read (1-based)",
    )  # fmt: skip
    get.add_argument(
        "--lines", type=_positive_int, default=None, metavar="N", help="how many lines"
    )
    _agent_flag(get)
    _json_flag(get)
    status = command(msub, "status", "provider health and index size")
    _agent_flag(status)
    _json_flag(status)
    add = command(
        msub,
        "add",
        "write a memory",
        "Write a memory: appended, with a timestamp, to today's memory/YYYY-MM-DD.md.",
    )
    add.add_argument("text", help="the memory to keep")
    add.add_argument(
        "--file",
        dest="target",
        metavar="PATH",
        default=None,
        help="memory file to write (default: today's memory/YYYY-MM-DD.md)",
    )
    add.add_argument("--section", default=None, help="heading to file it under")
    _agent_flag(add)
    _json_flag(add)
    forget = command(
        msub,
        "forget",
        "forget a memory or derived chunks",
        "Forget by reference (path#L<a>-L<b> removes those lines from the file; a path "
        "drops its chunks from the index), or by --path, --session or --source.",
    )
    forget.add_argument(
        "reference", nargs="?", default=None, help="path or path#L<a>-L<b>, as search prints"
    )
    forget.add_argument("--path", default=None, help="drop the chunks of this source")
    forget.add_argument("--session", default=None, help="drop the chunks of this session id")
    forget.add_argument(
        "--source",
        choices=("memory", "sessions"),
        default=None,
        help="drop the chunks of a whole source",
    )
    _agent_flag(forget)
    forget.add_argument("--dry-run", action="store_true", help="report, change nothing")
    _json_flag(forget)

    doctor = command(sub, "doctor", "check config, slots and memory")
    _json_flag(doctor)
    command(
        sub,
        "demo",
        "run the end-to-end demo",
        "Index a workspace, search it and run two turns. An empty or missing --workspace "
        "gets the sample workspace copied in; without one the sample runs in a temporary "
        "folder.",
    )
    init = command(sub, "init", "copy the sample workspace into a folder")
    init.add_argument("directory", metavar="DIR", help="folder to create or fill")
    _mcp_parser(sub, common)
    return parser


def _mcp_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    mcp = sub.add_parser(
        "mcp",
        parents=[common],
        help="serve memory to MCP clients (stdio, or --http)",
        description="Serve the workspace's memory over the Model Context Protocol: on "
        "stdio for an editor or desktop agent that starts this command, or over "
        "streamable HTTP with --http. Needs the mcp extra: pip install 'trio-claw[mcp]'.",
    )
    mcp.add_argument(
        "--http", metavar="HOST:PORT", default=None, help="serve streamable HTTP, not stdio"
    )
    mcp.add_argument(
        "--allow-writes", action="store_true", help="offer memory_add and memory_forget"
    )
    mcp.add_argument("--agent", default=None, help="the agent served (default: the config's)")
    mcp.add_argument("--token", default=None, help="HTTP bearer token (or CLAW_GATEWAY_TOKEN)")


async def _mcp(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        # Imported here: the MCP SDK is an optional extra.
        from .mcp._command import run_mcp  # noqa: PLC0415
    except ImportError as exc:
        raise CliError(
            f"claw mcp needs the MCP SDK ({exc.name} is missing): pip install 'trio-claw[mcp]'"
        ) from exc
    return await run_mcp(
        load_config(args),
        http=args.http,
        allow_writes=args.allow_writes,
        agent=args.agent,
        token=args.token,
        out=out,
        err=err,
    )


def _workspace_arg(args: argparse.Namespace) -> str | None:
    value: str | None = args.workspace or os.environ.get(ENV_WORKSPACE) or None
    return value


def load_config(args: argparse.Namespace) -> HostConfig:
    """The host config for ``args`` (workspace, config file, environment, ``.claw`` state)."""
    config = args.config or os.environ.get(ENV_CONFIG) or None
    workspace = _workspace_arg(args)
    if workspace is not None and not Path(workspace).expanduser().is_dir():
        given = "--workspace" if args.workspace else f"${ENV_WORKSPACE}"
        raise CliError(f"{given} {workspace}: not a directory")
    return load_workspace_config(workspace, config)


async def _with_operator(config: HostConfig, fn: Callable[[Host, MemoryCallerContext], Any]) -> Any:
    async with open_host(config) as host, host.open_scope("cli") as scope:
        caller = scope.mint_caller_context(
            scope.mint_operator_authority(LOCAL_OPERATOR_SCOPES, connection_id="cli")
        )
        return await fn(host, caller)


def _emit_json(out: TextIO, payload: Any) -> None:
    out.write(json.dumps(payload, ensure_ascii=False, sort_keys=True) + "\n")


def _maintenance(host: Host) -> Any:
    _, capability = host.memory.selection()
    maintenance = capability.maintenance if capability is not None else None
    if maintenance is None:
        raise CliError(
            f"memory plugin {host.slots.memory_plugin!r} offers no maintenance (index/forget)"
        )
    return maintenance


_STAGES = {
    "scan": ("scanning", "sources"),
    "chunk": ("chunking", "sources"),
    "embed": ("embedding", "chunks"),
    "publish": ("publishing", "steps"),
}


class Progress:
    """Progress of a long sync on a terminal (tqdm bars, one per stage); silent otherwise.

    Called as ``progress(stage, done, total)``. Nothing is drawn for a sync that only
    scanned (nothing changed), so an up-to-date search stays quiet.
    """

    def __init__(self, stream: TextIO, *, enabled: bool | None = None) -> None:
        self._stream = stream
        self._enabled = stream.isatty() if enabled is None else enabled
        self._stage: str | None = None
        self._bar: Any = None
        self._scanned: tuple[int, int] | None = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self._enabled:
            return
        if stage == "scan" and self._bar is None:
            self._scanned = (done, total)
            return
        if self._scanned is not None:
            scanned, self._scanned = self._scanned, None
            self._show("scan", *scanned)
        self._show(stage, done, total)

    def _show(self, stage: str, done: int, total: int) -> None:
        if stage != self._stage or self._bar is None:
            self.close()
            label, unit = _STAGES.get(stage, (stage, "items"))
            self._stage = stage
            # A terminal that reports no size (some ptys) would get an empty or hidden bar.
            size = shutil.get_terminal_size((80, 24))
            self._bar = tqdm(
                total=total,
                desc=f"{label:<10}",
                unit=f" {unit}",
                file=self._stream,
                leave=True,
                ncols=min(100, size.columns),
                nrows=max(2, size.lines),
            )
        bar = self._bar
        if bar.total != total:
            bar.total = total
        bar.update(max(0, done - bar.n))

    def close(self) -> None:
        """End the current bar (call when the work is done)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            self._stage = None


async def _warm(host: Host, caller: MemoryCallerContext, agent: str | None, err: TextIO) -> None:
    """Do a first search's implicit indexing now, where it can show progress."""
    _, capability = host.memory.selection()
    warm = getattr(capability.maintenance if capability else None, "warm", None)
    if not callable(warm):
        return
    progress = Progress(err)
    try:
        await warm(
            agent_id=agent or host.config.default_agent_id, context=caller, progress=progress
        )
    finally:
        progress.close()


def _flag_names(message: str) -> str:
    for wire, flag in _FLAGS.items():
        message = message.replace(wire, flag)
    return message


async def _memory_read(
    args: argparse.Namespace, host: Host, caller: MemoryCallerContext, out: TextIO, err: TextIO
) -> int:
    """``search``, ``get`` and ``status``: the gateway's payloads, printed."""
    command = args.memory_command
    await _warm(host, caller, args.agent, err)
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
            if args.cursor:
                params["cursor"] = args.cursor
            payload = await memory_search(host, caller, params, lambda: None)
            if args.json:
                _emit_json(out, payload)
            else:
                _print_hits(out, payload, args.query)
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
            payload = await memory_get(host, caller, params, lambda: None)
            if payload["status"] != "ok":
                raise NotFoundError(f"{args.path} was not found in memory")
            if args.json:
                _emit_json(out, payload)
            else:
                out.write(payload["text"] + "\n")
            return EXIT_OK
        params = {"agentId": args.agent} if args.agent else {}
        payload = await memory_status(host, caller, params, lambda: None)
        if args.json:
            _emit_json(out, payload)
        else:
            out.write(f"provider {payload['providerId']}: {payload['status']}\n")
            if "message" in payload:
                out.write(f"  {payload['message']}\n")
            for key, value in sorted(payload.get("details", {}).items()):
                out.write(f"  {key}: {value}\n")
    except GatewayError as exc:
        raise CliError(_flag_names(exc.message)) from exc
    return EXIT_OK


async def _memory_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config = load_config(args)
    command = args.memory_command

    async def run(host: Host, caller: MemoryCallerContext) -> int:
        if command in ("search", "get", "status"):
            return await _memory_read(args, host, caller, out, err)
        if command == "add":
            added = await host.memory.add(
                caller, args.text, path=args.target, section=args.section, agent_id=args.agent
            )
            if args.json:
                _emit_json(out, wire_add(added))
            else:
                c = added.citation
                out.write(f"added to {c.path}#L{c.start_line}-L{c.end_line}\n")
            return EXIT_OK
        if command == "forget" and args.reference is not None:
            if args.path or args.session or args.source:
                raise CliError("give a REFERENCE or --path/--session/--source, not both")
            target = parse_reference(host.slots.memory_plugin or "", args.reference)
            forgot = await host.memory.forget(
                caller, target, dry_run=args.dry_run, agent_id=args.agent
            )
            if args.json:
                _emit_json(out, wire_forget(forgot))
            else:
                verb = "would forget" if forgot.dry_run else "forgot"
                if forgot.removed_text is not None:
                    out.write(f"{verb} {args.reference}:\n")
                    out.writelines(f"  {line}\n" for line in forgot.removed_text.splitlines())
                else:
                    out.write(f"{verb} {forgot.chunks} chunk(s) of {args.reference}\n")
            return EXIT_OK
        agent = args.agent or host.config.default_agent_id
        maintenance = _maintenance(host)
        if command == "index":
            progress = Progress(err)
            try:
                report = await maintenance.reindex(
                    agent_id=agent, context=caller, force=args.force, progress=progress
                )
            finally:
                progress.close()
            if args.json:
                _emit_json(out, report)
            else:
                out.write(
                    f"indexed {len(report['indexed'])} source(s), "
                    f"+{report['chunksAdded']}/-{report['chunksRemoved']} chunks, "
                    f"{report['embedded']} embedded, generation {report['generation']}\n"
                )
                for skipped in report["skipped"]:
                    out.write(f"  skipped {skipped['path']}: {skipped['reason']}\n")
            return EXIT_OK
        if not (args.path or args.session or args.source):
            raise CliError("forget needs a REFERENCE, --path, --session or --source")
        result = await maintenance.forget(
            agent_id=agent,
            context=caller,
            path=args.path,
            session_id=args.session,
            source=args.source,
            dry_run=args.dry_run,
        )
        if args.json:
            _emit_json(out, result)
        else:
            verb = "would forget" if result["dryRun"] else "forgot"
            out.write(f"{verb} {result['chunks']} chunk(s) from {len(result['paths'])} source(s)\n")
            for path in result["paths"]:
                out.write(f"  {path}\n")
        return EXIT_OK

    result: int = await _with_operator(config, run)
    return result


def _print_hits(out: TextIO, payload: dict[str, Any], query: str) -> None:
    hits = payload["hits"]
    if not hits:
        out.write("no results\n")
    for rank, hit in enumerate(hits, start=1):
        citation = hit.get("citation") or {}
        path = citation.get("path", hit["reference"]["id"])
        start = citation.get("startLine")
        lines = f"L{start if start is not None else '?'}-L{citation.get('endLine', '?')}"
        score = hit.get("score")
        shown = f"{score:.3f}" if isinstance(score, int | float) else "  -  "
        out.write(f"{rank:>2}  {shown}  {path}#{lines}\n")
        first = start if citation.get("source", "memory") == "memory" else None
        for offset, line in matching_lines(hit["excerpt"], query, limit=3):
            where = f"L{first + offset}: " if isinstance(first, int) else ""
            out.write(f"    {where}{' '.join(line.split())[:160]}\n")
    if "nextCursor" in payload:
        out.write(f"more: --cursor {payload['nextCursor']}\n")
    if "warning" in payload:
        out.write(f"note: {payload['warning']}\n")


async def _doctor(args: argparse.Namespace, out: TextIO, err: TextIO, warnings: list[str]) -> int:
    config = load_config(args)
    report: dict[str, Any] = {
        "workspace": str(config.workspace_dir),
        "stateDir": str(config.resolved_state_dir),
    }
    problems: list[str] = []

    async def run(host: Host, caller: MemoryCallerContext) -> None:
        report["slots"] = {
            "contextEngine": host.slots.context_engine,
            "memory": host.slots.memory_plugin,
            "memorySidecars": list(host.slots.memory_sidecars),
        }
        report["plugins"] = sorted(host.plugin_registry.plugins)
        if host.slots.memory_plugin is None:
            problems.append("no memory plugin is selected")
            return
        await _warm(host, caller, None, err)
        async with host.open_scope("doctor") as scope:
            status_caller = scope.mint_caller_context(scope.mint_host_authority("status"))
            async with host.memory.open(status_caller) as handle:
                health = await handle.health()
        report["health"] = {
            "status": health.status,
            "message": health.message,
            "details": dict(health.details),
        }
        if health.status != "ready":
            problems.append(f"memory provider is {health.status}: {health.message or ''}".strip())
        _, capability = host.memory.selection()
        if capability is not None and capability.maintenance is not None:
            described = await capability.maintenance.describe(
                agent_id=host.config.default_agent_id, context=caller
            )
            report["index"] = described
            for skipped in described.get("skipped", []):
                problems.append(f"skipped {skipped['path']}: {skipped['reason']}")

    try:
        await _with_operator(config, run)
    except ClawError as exc:
        problems.append(_one_line(exc))
    problems[:0] = warnings
    report["problems"] = problems
    if args.json:
        _emit_json(out, report)
    else:
        out.write(f"workspace: {report['workspace']}\nstate: {report['stateDir']}\n")
        slots = report.get("slots", {})
        out.write(f"context engine: {slots.get('contextEngine')}\nmemory: {slots.get('memory')}\n")
        if "health" in report:
            out.write(f"health: {report['health']['status']}\n")
        index = report.get("index")
        if index:
            identity = index["identity"]
            out.write(
                f"index: {index['chunks']} chunks from {index['sources']} sources, "
                f"embedder {identity['embedder']} ({identity['model']}, {identity['dims']} dims), "
                f"generation {index['generation']}\n"
            )
        for problem in problems:
            out.write(f"problem: {problem}\n")
        out.write("ok\n" if not problems else f"{len(problems)} problem(s)\n")
    return EXIT_OK if not problems else EXIT_PROBLEM


def _listen_error(exc: BaseException) -> OSError | None:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, OSError) else None


async def _serve(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config = load_config(args)
    gateway_config = config.gateway
    token = args.token or os.environ.get("CLAW_GATEWAY_TOKEN") or gateway_config.token
    if token is None and not gateway_config.tokens:
        token = secrets.token_urlsafe(24)
        err.write(f"claw: no token configured; generated one for this run: {token}\n")
        err.flush()
    changes: dict[str, Any] = {}
    if token is not None:
        changes["token"] = token
    if args.host is not None:
        changes["host"] = args.host
    if args.port is not None:
        changes["port"] = args.port
    gateway_config = attrs.evolve(gateway_config, **changes)
    where = f"{gateway_config.host}:{gateway_config.port}"

    def listening(address: GatewayAddress) -> None:
        out.write(f"claw gateway listening on {address.url}\n")
        out.flush()

    def report(line: str) -> None:
        err.write(f"claw: {line}\n")
        err.flush()

    if args.workers > 1:
        try:
            reserved = await reserve_port(gateway_config.host, gateway_config.port)
        except OSError as exc:
            raise _cannot_listen(where, exc) from exc
        try:
            code = await supervise_gateway(
                attrs.evolve(config, gateway=gateway_config),
                args.workers,
                reserved=reserved,
                report=report,
                ready=listening,
            )
        finally:
            for sock in reserved:
                sock.close()
    else:
        async with open_host(config) as host:
            gateway = Gateway(host, config=gateway_config)
            code = await _serve_one(gateway, listening, where)
    err.write(f"claw: stopped by signal {code}\n")
    return EXIT_OK


def _cannot_listen(where: str, exc: BaseException) -> BaseException:
    """``exc`` as the CLI's "cannot listen" error when it is a socket error, else itself."""
    failed = _listen_error(exc)
    if failed is None or isinstance(failed, ClawError):
        return exc
    reason = (
        "the address is already in use"
        if failed.errno == errno.EADDRINUSE
        else (failed.strerror or str(failed))
    )
    return CliError(f"cannot listen on {where}: {reason}")


async def _serve_one(
    gateway: Gateway, listening: Callable[[GatewayAddress], None], where: str
) -> int:
    """Serve ``gateway`` in this process until a signal; return the signal's number."""
    code: list[int] = []
    async with trio.open_nursery() as nursery:

        async def runner(task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
            code.append(await run_gateway_until_signal(gateway, task_status=task_status))

        try:
            address = await nursery.start(runner)
        except (OSError, BaseExceptionGroup) as exc:
            failure = _cannot_listen(where, exc)
            if failure is exc:
                raise
            raise failure from exc
        listening(address)
    return code[0]


def _next_commands(workspace: str) -> list[str]:
    ws = f" --workspace {workspace}"
    return [
        "next, try:",
        f'  claw memory search "deploy window"{ws}',
        f'  claw memory add "The deploy window moved to Thursday"{ws}',
        f"  claw memory status{ws}",
        f"  claw doctor{ws}",
    ]


def _is_empty(directory: Path) -> bool:
    return not directory.exists() or all(p.name == ".claw" for p in directory.iterdir())


def _demo_workspace(chosen: str, write: Callable[[str], None]) -> Path:
    """The demo's ``--workspace``, with the sample copied in when it is empty or missing."""
    workspace = Path(chosen).expanduser().resolve()
    if workspace.exists() and not workspace.is_dir():
        raise CliError(f"--workspace {chosen}: not a directory")
    if _is_empty(workspace):
        copy_sample_workspace(workspace)
        write(f"copied the sample workspace into {workspace}")
    return workspace


async def _demo(args: argparse.Namespace, out: TextIO) -> int:
    def write(line: str) -> None:
        out.write(line + "\n")

    chosen = _workspace_arg(args)
    if chosen is None:
        code = await run_demo(write, None)
        write("")
        write("the demo ran in a temporary folder; to keep a workspace to try:")
        write("  claw init claw-sample")
        for line in _next_commands("claw-sample")[1:]:
            write(line)
        return code
    workspace = _demo_workspace(chosen, write)
    code = await run_demo(write, workspace)
    write("")
    for line in _next_commands(str(workspace)):
        write(line)
    return code


def _init(args: argparse.Namespace, out: TextIO) -> int:
    target = Path(args.directory).expanduser().resolve()
    if target.exists() and not target.is_dir():
        raise CliError(f"{args.directory}: not a directory")
    if target.exists():
        clash = [name for name in sample_files() if (target / name).exists()]
        if clash:
            raise CliError(
                f"{args.directory} already has {clash[0]}; init only fills a folder without "
                "the sample's files"
            )
    copy_sample_workspace(target)
    out.write(f"copied the sample workspace into {target}\n\n")
    out.writelines(line + "\n" for line in _next_commands(str(target)))
    return EXIT_OK


async def _dispatch(args: argparse.Namespace, out: TextIO, err: TextIO, warnings: list[str]) -> int:
    if args.command == "memory":
        return await _memory_command(args, out, err)
    if args.command == "doctor":
        return await _doctor(args, out, err, warnings)
    if args.command == "serve":
        return await _serve(args, out, err)
    if args.command == "mcp":
        return await _mcp(args, out, err)
    if args.command == "demo":
        return await _demo(args, out)
    if args.command == "init":
        return _init(args, out)
    raise CliError(f"unknown command {args.command!r}")  # pragma: no cover


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _one_line(exc: BaseException) -> str:
    exc = _innermost(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text


def _error_code(exc: BaseException) -> str:
    exc = _innermost(exc)
    if isinstance(exc, UsageError):
        return "USAGE"
    if isinstance(exc, NotFoundError | FileNotFoundError):
        return "NOT_FOUND"
    if isinstance(exc, ConfigError):
        return "CONFIG"
    if isinstance(exc, CapabilityDeniedError):
        return "FORBIDDEN"
    if isinstance(exc, UnsupportedRequestError | ValueError):
        return "INVALID_REQUEST"
    if isinstance(exc, ClawError | OSError):
        return "ERROR"
    return "INTERNAL"


def _broken_pipe(exc: BaseException) -> bool:
    if isinstance(exc, BrokenPipeError):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_broken_pipe(e) for e in exc.exceptions)
    return False


class _WarningLines(logging.Handler):
    """Prints claw's warnings as ``claw: warning: ...`` and keeps them for ``doctor``."""

    def __init__(self, err: TextIO) -> None:
        super().__init__(logging.WARNING)
        self.err = err
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage().strip().splitlines()[0]
        self.messages.append(message)
        self.err.write(f"claw: warning: {message}\n")


@contextmanager
def _warnings_to(err: TextIO) -> Iterator[_WarningLines]:
    handler = _WarningLines(err)
    loggers = [logging.getLogger("claw"), logging.getLogger("claw_memory")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def _silence_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the exit flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run ``claw`` with ``argv``; returns the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    arguments = list(sys.argv[1:] if argv is None else argv)
    wants_json = "--json" in arguments
    debug = "--debug" in arguments
    try:
        with _warnings_to(err) as warnings:
            args = build_parser().parse_args(arguments)
            debug = args.debug
            # One BLAS thread: claw runs its own concurrency (searches share products,
            # large products are split across the worker pool), and BLAS threads that
            # spin between calls only take CPU from the event loop (claw serve answered
            # 17% more requests per second with them off). This is our own process; as
            # a library, claw leaves the host application's BLAS settings alone.
            with threadpool_limits(limits=1, user_api="blas"):
                code = trio.run(_dispatch, args, out, err, warnings.messages)
            out.flush()
            return code
    except KeyboardInterrupt:
        err.write("claw: interrupted\n")
        return 130
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        if _broken_pipe(exc):
            if out is sys.stdout:
                _silence_stdout()
            return EXIT_OK
        internal = not isinstance(_innermost(exc), ClawError | OSError | ValueError | LookupError)
        if debug and not isinstance(exc, UsageError):
            raise
        message = _one_line(exc)
        if isinstance(exc, UsageError):
            exc.parser.print_usage(err)
            err.write(f"{exc.parser.prog}: error: {message}\n")
        elif internal:
            err.write(
                f"claw: internal error ({type(_innermost(exc)).__name__}): {message}; "
                "rerun with --debug\n"
            )
        else:
            err.write(f"claw: error: {message}\n")
        if wants_json:
            try:
                _emit_json(out, {"error": {"code": _error_code(exc), "message": message}})
                out.flush()
            except BrokenPipeError:
                _silence_stdout()
        return EXIT_ERROR
