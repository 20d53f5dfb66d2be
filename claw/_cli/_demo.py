"""``claw demo`` and ``claw init``: the sample workspace, end to end or copied out."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from .._demo import copy_sample_workspace, run_demo, sample_files
from ._common import EXIT_OK, AddCommand, CliError, emit_json, workspace_arg


def add_parsers(sub: Any, command: AddCommand) -> None:
    """``claw demo`` and ``claw init``."""
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


def _demo_workspace(chosen: str, write: Callable[[str], None]) -> tuple[Path, bool]:
    """The demo's ``--workspace``, with the sample copied in when it is empty or missing;
    and whether it was."""
    workspace = Path(chosen).expanduser().resolve()
    if workspace.exists() and not workspace.is_dir():
        raise CliError(f"--workspace {chosen}: not a directory")
    if _is_empty(workspace):
        copy_sample_workspace(workspace)
        write(f"copied the sample workspace into {workspace}")
        return workspace, True
    return workspace, False


async def run_demo_command(
    args: argparse.Namespace, out: TextIO, err: TextIO, warnings: list[str]
) -> int:
    """Run ``claw demo``: in ``--workspace`` (filled with the sample when empty) or a temp dir."""

    def write(line: str) -> None:
        if not args.json:  # --json prints the report alone, at the end
            out.write(line + "\n")

    report: dict[str, Any] = {}
    chosen = workspace_arg(args)
    if chosen is None:
        code = await run_demo(write, None, report)
        report["next"] = ["claw init claw-sample", *_next_commands("claw-sample")[1:]]
        if args.json:
            emit_json(out, report)
            return code
        write("")
        write("the demo ran in a temporary folder; to keep a workspace to try:")
        write("  claw init claw-sample")
        for line in _next_commands("claw-sample")[1:]:
            write(line)
        return code
    workspace, report["copiedSample"] = _demo_workspace(chosen, write)
    code = await run_demo(write, workspace, report)
    report["next"] = [line.strip() for line in _next_commands(str(workspace))[1:]]
    if args.json:
        emit_json(out, report)
        return code
    write("")
    for line in _next_commands(str(workspace)):
        write(line)
    return code


def run_init(args: argparse.Namespace, out: TextIO) -> int:
    """Run ``claw init DIR``: copy the sample workspace into a folder without its files."""
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
    if args.json:
        next_commands = [line.strip() for line in _next_commands(str(target))[1:]]
        emit_json(out, {"workspace": str(target), "files": sample_files(), "next": next_commands})
        return EXIT_OK
    out.write(f"copied the sample workspace into {target}\n\n")
    out.writelines(line + "\n" for line in _next_commands(str(target)))
    return EXIT_OK
