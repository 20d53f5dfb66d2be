"""What every ``claw`` command shares: exit codes, errors, option types, the config and
the workspace's local operator."""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, Protocol, TextIO

from .._capabilities import MemoryCallerContext
from .._config import HostConfig
from .._errors import ClawError
from .._host import Host, open_host
from .._local import load_workspace_config
from ..gateway._memory import MAX_RESULTS_LIMIT

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_ERROR = 2
ENV_WORKSPACE = "CLAW_WORKSPACE"
ENV_CONFIG = "CLAW_CONFIG"
LOCAL_OPERATOR_SCOPES = frozenset({"operator.read", "operator.write", "operator.admin"})


class CliError(ClawError, RuntimeError):
    """A command failed for a reason to print as one line."""


class NotFoundError(CliError, LookupError):
    """What the command was asked for does not exist."""


class UsageError(CliError, ValueError):
    """The command line itself is wrong (an unknown flag, a bad value)."""

    def __init__(self, message: str, parser: argparse.ArgumentParser) -> None:
        super().__init__(message)
        self.parser = parser


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors raised (so ``--json`` can report them as JSON)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self)


class AddCommand(Protocol):
    """Adds one subcommand (with the common options) to a group; see ``build_parser``."""

    def __call__(
        self, group: Any, name: str, summary: str, description: str | None = None
    ) -> argparse.ArgumentParser: ...


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def max_results(text: str) -> int:
    """An argparse type: a hit count the gateway accepts."""
    value = positive_int(text)
    if value > MAX_RESULTS_LIMIT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_RESULTS_LIMIT}, got {value}")
    return value


def score(text: str) -> float:
    """An argparse type: a finite number from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}") from None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, got {text}")
    return value


def port(text: str) -> int:
    """An argparse type: a TCP port, or 0 for any free one."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            f"{value} is not a port: use 1-65535 (or 0 for any free port)"
        )
    return value


def sources(text: str) -> list[str]:
    """An argparse type: ``memory`` and/or ``sessions``, comma-separated."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [n for n in names if n not in ("memory", "sessions")]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"expected memory and/or sessions, comma-separated, got {text!r}"
        )
    return names


def add_common_options(parser: argparse.ArgumentParser, *, sub: bool) -> None:
    """``--workspace``, ``--config``, ``--debug`` and ``--json``, on ``claw`` and on every
    subcommand."""

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
    parser.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="print JSON instead of text (errors too)",
    )


def json_flag(parser: argparse.ArgumentParser) -> None:
    """``--json`` on a command whose output is structured: every command has it already,
    from the common options (before or after the subcommand); kept for the commands
    that name it."""
    if not any("--json" in action.option_strings for action in parser._actions):
        parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def agent_flag(parser: argparse.ArgumentParser) -> None:
    """``--agent ID`` on a command that addresses one agent's memory."""
    parser.add_argument(
        "--agent", default=None, metavar="ID", help="agent id (default: the configured default)"
    )


def token_flags(parser: argparse.ArgumentParser, what: str) -> None:
    """``--token`` or ``--token-file`` (one of them) on a command that serves clients."""
    given = parser.add_mutually_exclusive_group()
    given.add_argument(
        "--token",
        default=None,
        help=f"{what}; visible to every user in the process list, so prefer "
        "$CLAW_GATEWAY_TOKEN or --token-file",
    )
    given.add_argument(
        "--token-file",
        metavar="FILE",
        default=None,
        help=f"read {what} from FILE (default: $CLAW_GATEWAY_TOKEN, else "
        "$CLAW_GATEWAY_TOKEN_FILE)",
    )


def workspace_arg(args: argparse.Namespace) -> str | None:
    """The workspace the command line or the environment names, if any."""
    value: str | None = args.workspace or os.environ.get(ENV_WORKSPACE) or None
    return value


def load_config(args: argparse.Namespace) -> HostConfig:
    """The host config for ``args`` (workspace, config file, environment, ``.claw`` state)."""
    config = args.config or os.environ.get(ENV_CONFIG) or None
    workspace = workspace_arg(args)
    if workspace is not None and not Path(workspace).expanduser().is_dir():
        given = "--workspace" if args.workspace else f"${ENV_WORKSPACE}"
        raise CliError(f"{given} {workspace}: not a directory")
    return load_workspace_config(workspace, config)


async def with_operator(config: HostConfig, fn: Callable[[Host, MemoryCallerContext], Any]) -> Any:
    """Run ``fn(host, caller)`` in a host on ``config`` as the workspace's local operator."""
    async with open_host(config) as host, host.open_scope("cli") as scope:
        caller = scope.mint_caller_context(
            scope.mint_operator_authority(LOCAL_OPERATOR_SCOPES, connection_id="cli")
        )
        return await fn(host, caller)


def emit_json(out: TextIO, payload: Any) -> None:
    """Print ``payload`` as one line of JSON."""
    out.write(json.dumps(payload, ensure_ascii=False, sort_keys=True) + "\n")
