"""``claw mcp``: the workspace's memory over the Model Context Protocol (the mcp extra)."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from .._extras import install_hint
from ._common import AddCommand, CliError, load_config, token_flags


def add_parsers(sub: Any, command: AddCommand) -> None:
    """``claw mcp``."""
    mcp = command(
        sub,
        "mcp",
        "serve memory to MCP clients (stdio, or --http)",
        "Serve the workspace's memory over the Model Context Protocol: on "
        "stdio for an editor or desktop agent that starts this command, or over "
        f"streamable HTTP with --http. Needs the mcp extra; to {install_hint('mcp')}.",
    )
    mcp.add_argument(
        "--http", metavar="HOST:PORT", default=None, help="serve streamable HTTP, not stdio"
    )
    mcp.add_argument(
        "--allow-writes", action="store_true", help="offer memory_add and memory_forget"
    )
    mcp.add_argument("--agent", default=None, help="the agent served (default: the config's)")
    token_flags(mcp, "the HTTP bearer token")


async def run(args: argparse.Namespace, out: TextIO, err: TextIO, warnings: list[str]) -> int:
    """Serve MCP until the client (stdio) or a signal (HTTP) ends it."""
    try:
        # Imported here: the MCP SDK is an optional extra.
        from ..mcp._command import run_mcp  # noqa: PLC0415
    except ImportError as exc:
        raise CliError(
            f"claw mcp needs the MCP SDK ({exc.name} is missing); {install_hint('mcp')}"
        ) from exc
    return await run_mcp(
        load_config(args),
        http=args.http,
        allow_writes=args.allow_writes,
        agent=args.agent,
        token=args.token,
        token_file=args.token_file,
        out=out,
        err=err,
        json=args.json,
    )
