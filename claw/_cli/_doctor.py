"""``claw doctor``: check the config, the slots and the memory provider's health."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from .._capabilities import MemoryCallerContext
from .._errors import ClawError
from .._host import Host
from ._common import (
    EXIT_OK,
    EXIT_PROBLEM,
    AddCommand,
    emit_json,
    json_flag,
    load_config,
    with_operator,
)
from ._errors import one_line
from ._progress import warm


def add_parsers(sub: Any, command: AddCommand) -> None:
    """``claw doctor``."""
    doctor = command(sub, "doctor", "check config, slots and memory")
    json_flag(doctor)


async def run(args: argparse.Namespace, out: TextIO, err: TextIO, warnings: list[str]) -> int:
    """Run ``claw doctor``: exit 1 when it finds a problem (warnings count as problems)."""
    config = load_config(args)
    report: dict[str, Any] = {
        "workspace": str(config.workspace_dir),
        "stateDir": str(config.resolved_state_dir),
    }
    problems: list[str] = []

    async def in_host(host: Host, caller: MemoryCallerContext) -> None:
        report["slots"] = {
            "contextEngine": host.slots.context_engine,
            "memory": host.slots.memory_plugin,
            "memorySidecars": list(host.slots.memory_sidecars),
        }
        report["plugins"] = sorted(host.plugin_registry.plugins)
        if host.slots.memory_plugin is None:
            problems.append("no memory plugin is selected")
            return
        await warm(host, caller, None, err)
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
        await with_operator(config, in_host)
    except ClawError as exc:
        problems.append(one_line(exc))
    problems[:0] = warnings
    report["problems"] = problems
    if args.json:
        emit_json(out, report)
    else:
        _print_report(out, report, problems)
    return EXIT_OK if not problems else EXIT_PROBLEM


def _print_report(out: TextIO, report: dict[str, Any], problems: list[str]) -> None:
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
