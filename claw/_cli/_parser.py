"""The argument parser of ``claw``: the common options, then each command group's own."""

from __future__ import annotations

import argparse
from typing import Any

from .. import __version__
from . import _demo, _doctor, _mcp, _memory, _serve, _sessions
from ._common import Parser, add_common_options


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``claw``."""
    common = Parser(add_help=False)
    add_common_options(common, sub=True)
    parser = Parser(prog="claw", description="claw: memory and context for AI agents")
    add_common_options(parser, sub=False)
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

    _serve.add_parsers(sub, command)
    _memory.add_parsers(sub, command)
    _sessions.add_parsers(sub, command)
    _doctor.add_parsers(sub, command)
    _demo.add_parsers(sub, command)
    _mcp.add_parsers(sub, command)
    return parser
