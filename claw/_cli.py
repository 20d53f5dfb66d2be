"""The ``claw`` command (also ``python -m claw``).

Every command accepts ``--workspace DIR`` (default: the current directory) and
``--config FILE`` (default: ``claw.toml`` in the workspace when present); state lives in
``<workspace>/.claw`` unless the config says otherwise, so the embedded defaults need
no setup. Errors are one line on stderr and a non-zero exit, never a traceback, unless
``--debug`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs
import trio
from threadpoolctl import threadpool_limits

from ._capabilities import MemoryCallerContext
from ._config import HostConfig
from ._demo import run_demo
from ._errors import ClawError
from ._host import Host, open_host
from ._local import parse_reference
from .gateway import Gateway, run_gateway_until_signal
from .gateway._errors import GatewayError
from .gateway._memory import memory_get, memory_search, memory_status, wire_add, wire_forget

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_ERROR = 2


class CliError(ClawError, RuntimeError):
    """A command failed for a reason to print as one line."""


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", metavar="DIR", help="workspace directory (default: .)")
    parser.add_argument("--config", metavar="FILE", help="config file (default: claw.toml)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``claw``."""
    common = argparse.ArgumentParser(add_help=False)
    _common(common)
    parser = argparse.ArgumentParser(
        prog="claw", description="claw: memory and context for AI agents", parents=[common]
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", parents=[common], help="serve the gateway over WebSocket")
    serve.add_argument("--host", default=None, help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default 0: any free)")
    serve.add_argument("--token", default=None, help="token (or CLAW_GATEWAY_TOKEN)")

    memory = sub.add_parser("memory", parents=[common], help="index and search memory")
    msub = memory.add_subparsers(dest="memory_command", required=True)
    index = msub.add_parser("index", parents=[common], help="bring the index up to date")
    index.add_argument("--force", action="store_true", help="re-read and re-chunk everything")
    index.add_argument("--agent", default=None)
    index.add_argument("--json", action="store_true")
    search = msub.add_parser("search", parents=[common], help="search memory (v2 payload)")
    search.add_argument("query")
    search.add_argument("--max-results", type=int, default=6)
    search.add_argument("--min-score", type=float, default=None)
    search.add_argument("--sources", default=None, help="memory,sessions")
    search.add_argument("--agent", default=None)
    search.add_argument("--cursor", default=None)
    search.add_argument("--json", action="store_true")
    get = msub.add_parser("get", parents=[common], help="read lines of a memory source")
    get.add_argument("path")
    get.add_argument("--from", dest="from_line", type=int, default=None)
    get.add_argument("--lines", type=int, default=None)
    get.add_argument("--agent", default=None)
    get.add_argument("--json", action="store_true")
    status = msub.add_parser("status", parents=[common], help="provider health")
    status.add_argument("--agent", default=None)
    status.add_argument("--json", action="store_true")
    add = msub.add_parser("add", parents=[common], help="write a memory")
    add.add_argument("text", help="the memory to keep")
    add.add_argument(
        "--file",
        dest="target",
        metavar="PATH",
        default=None,
        help="memory file to write (default: today's memory/YYYY-MM-DD.md)",
    )
    add.add_argument("--section", default=None, help="heading to file it under")
    add.add_argument("--agent", default=None)
    add.add_argument("--json", action="store_true")
    forget = msub.add_parser("forget", parents=[common], help="forget a memory or derived chunks")
    forget.add_argument(
        "reference", nargs="?", default=None, help="path or path#L<a>-L<b>, as search prints"
    )
    forget.add_argument("--path", default=None)
    forget.add_argument("--session", default=None, help="a session id")
    forget.add_argument("--source", choices=("memory", "sessions"), default=None)
    forget.add_argument("--agent", default=None)
    forget.add_argument("--dry-run", action="store_true")
    forget.add_argument("--json", action="store_true")

    doctor = sub.add_parser("doctor", parents=[common], help="check config, slots and memory")
    doctor.add_argument("--json", action="store_true")
    sub.add_parser("demo", parents=[common], help="run the end-to-end demo")
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


def load_config(args: argparse.Namespace) -> HostConfig:
    """The host config for ``args`` (workspace, config file, ``.claw`` state)."""
    workspace = Path(args.workspace).expanduser().resolve() if args.workspace else Path.cwd()
    if not workspace.is_dir():
        raise CliError(f"workspace {workspace} is not a directory")
    config_path = Path(args.config).expanduser() if args.config else workspace / "claw.toml"
    if not config_path.is_file():
        if args.config:
            raise CliError(f"config file {config_path} not found")
        return HostConfig(workspace_dir=workspace)
    overrides: dict[str, Any] = {}
    keys = set(tomllib.loads(config_path.read_text(encoding="utf-8")))
    if args.workspace or "workspace_dir" not in keys:
        overrides["workspace_dir"] = workspace
    return HostConfig.load(config_path, **overrides)


async def _with_operator(config: HostConfig, fn: Callable[[Host, MemoryCallerContext], Any]) -> Any:
    async with open_host(config) as host, host.open_scope("cli") as scope:
        caller = scope.mint_caller_context(
            scope.mint_operator_authority(
                {"operator.read", "operator.write", "operator.admin"}, connection_id="cli"
            )
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


class _Progress:
    """A one-line progress bar on a terminal; silent otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self._tty or total <= 0:
            return
        width = 30
        filled = int(width * done / total)
        self._stream.write(f"\rembedding [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        self._stream.flush()
        self._drawn = True

    def finish(self) -> None:
        if self._drawn:
            self._stream.write("\n")


async def _memory_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config = load_config(args)
    command = args.memory_command

    async def run(host: Host, caller: MemoryCallerContext) -> int:
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
                    params["sources"] = [s.strip() for s in args.sources.split(",") if s.strip()]
                if args.agent:
                    params["agentId"] = args.agent
                if args.cursor:
                    params["cursor"] = args.cursor
                payload = await memory_search(host, caller, params, lambda: None)
                if args.json:
                    _emit_json(out, payload)
                else:
                    _print_hits(out, payload)
                return EXIT_OK
            if command == "get":
                ref = {"providerId": host.slots.memory_plugin or "", "id": args.path}
                params = {"reference": ref}
                if args.from_line is not None:
                    params["from"] = args.from_line
                if args.lines is not None:
                    params["lines"] = args.lines
                if args.agent:
                    params["agentId"] = args.agent
                payload = await memory_get(host, caller, params, lambda: None)
                if args.json:
                    _emit_json(out, payload)
                elif payload["status"] == "ok":
                    out.write(payload["text"] + "\n")
                else:
                    raise CliError(f"{args.path} was not found in memory")
                return EXIT_OK
            if command == "status":
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
                return EXIT_OK
        except GatewayError as exc:
            raise CliError(exc.message) from exc
        agent = args.agent or host.config.default_agent_id
        maintenance = _maintenance(host)
        if command == "index":
            progress = _Progress(err)
            report = await maintenance.reindex(
                agent_id=agent, context=caller, force=args.force, progress=progress
            )
            progress.finish()
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
        if command == "forget":
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
                out.write(
                    f"{verb} {result['chunks']} chunk(s) from {len(result['paths'])} source(s)\n"
                )
                for path in result["paths"]:
                    out.write(f"  {path}\n")
            return EXIT_OK
        raise CliError(f"unknown memory command {command!r}")  # pragma: no cover

    result: int = await _with_operator(config, run)
    return result


def _print_hits(out: TextIO, payload: dict[str, Any]) -> None:
    hits = payload["hits"]
    if not hits:
        out.write("no results\n")
    for rank, hit in enumerate(hits, start=1):
        citation = hit.get("citation") or {}
        path = citation.get("path", hit["reference"]["id"])
        lines = f"L{citation.get('startLine', '?')}-L{citation.get('endLine', '?')}"
        where = f"{path}#{lines}"
        excerpt = " ".join(hit["excerpt"].split())
        score = hit.get("score")
        shown = f"{score:.3f}" if isinstance(score, int | float) else "  -  "
        out.write(f"{rank:>2}  {shown}  {where}\n    {excerpt[:160]}\n")
    if "nextCursor" in payload:
        out.write(f"more: --cursor {payload['nextCursor']}\n")
    if "warning" in payload:
        out.write(f"note: {payload['warning']}\n")


async def _doctor(args: argparse.Namespace, out: TextIO) -> int:
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
        problems.append(str(exc))
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
    async with open_host(config) as host, trio.open_nursery() as nursery:
        gateway = Gateway(host, config=gateway_config)
        done = trio.Event()
        code: list[int] = []

        async def runner(task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
            code.append(await run_gateway_until_signal(gateway, task_status=task_status))
            done.set()

        address = await nursery.start(runner)
        out.write(f"claw gateway listening on {address.url}\n")
        out.flush()
        await done.wait()
    err.write(f"claw: stopped by signal {code[0] if code else '?'}\n")
    return EXIT_OK


async def _dispatch(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.command == "memory":
        return await _memory_command(args, out, err)
    if args.command == "doctor":
        return await _doctor(args, out)
    if args.command == "serve":
        return await _serve(args, out, err)
    if args.command == "mcp":
        return await _mcp(args, out, err)
    if args.command == "demo":
        workspace = Path(args.workspace) if args.workspace else None

        def write(line: str) -> None:
            out.write(line + "\n")

        return await run_demo(write, workspace)
    raise CliError(f"unknown command {args.command!r}")  # pragma: no cover


def _one_line(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run ``claw`` with ``argv``; returns the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.workspace:
        args.workspace = str(Path(args.workspace).expanduser().resolve())
    try:
        # One BLAS thread: claw runs its own concurrency (searches share products, large
        # products are split across the worker pool), and BLAS threads that spin
        # between calls only take CPU from the event loop (claw serve answered 17% more
        # requests per second with them off). This is our own process; as a library,
        # claw leaves the host application's BLAS settings alone.
        with threadpool_limits(limits=1, user_api="blas"):
            return trio.run(_dispatch, args, out, err)
    except KeyboardInterrupt:
        err.write("claw: interrupted\n")
        return 130
    except (ClawError, OSError, ValueError, BaseExceptionGroup) as exc:
        if args.debug:
            raise
        err.write(f"claw: error: {_one_line(exc)}\n")
        return EXIT_ERROR
    except Exception as exc:
        if args.debug:
            raise
        err.write(
            f"claw: internal error ({type(exc).__name__}): {_one_line(exc)}; rerun with --debug\n"
        )
        return EXIT_ERROR
