"""``claw doctor``: check the config, the slots, the memory provider's health and the
worker slots of any ``claw serve --workers N`` running over this state."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from .._capabilities import MemoryCallerContext
from .._errors import ClawError
from .._host import Host
from ..gateway._slots import running_gateways
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
        if host.memory.offers("describe"):
            described = await host.memory.describe(caller)
            report["index"] = dict(described)
            for skipped in described.get("skipped", []):
                problems.append(f"skipped {skipped['path']}: {skipped['reason']}")

    try:
        await with_operator(config, in_host)
    except ClawError as exc:
        problems.append(one_line(exc))
    report["gateways"] = [
        {"port": gateway_port, **record}
        for gateway_port, record in running_gateways(config.resolved_state_dir)
    ]
    problems += _slot_problems(report["gateways"])
    problems[:0] = warnings
    report["problems"] = problems
    if args.json:
        emit_json(out, report)
    else:
        _print_report(out, report, problems)
    return EXIT_OK if not problems else EXIT_PROBLEM


def _slot_problems(gateways: list[dict[str, Any]]) -> list[str]:
    """One problem per worker slot of a running gateway that is not serving."""
    found = []
    for gateway in gateways:
        for worker in gateway.get("workers", []):
            if not isinstance(worker, dict) or worker.get("state") in ("serving", "starting"):
                continue
            detail = f"last exit: {worker.get('lastExit', 'unknown')}"
            if worker.get("retryIn") is not None:
                detail += f"; next start in {worker['retryIn']:g} s"
            found.append(
                f"gateway on port {gateway['port']}: worker {worker.get('index')} is "
                f"{worker.get('state')} ({worker.get('recentDeaths', 0)} recent deaths, {detail})"
            )
    return found


def _index_line(index: dict[str, Any]) -> str:
    """One line about the provider's index, whatever its provider describes."""
    identity = index.get("identity")
    if isinstance(identity, dict) and {"chunks", "sources", "generation"} <= index.keys():
        # Memory Core: chunks, sources, embedder identity, generation.
        return (
            f"index: {index['chunks']} chunks from {index['sources']} sources, "
            f"embedder {identity.get('embedder')} ({identity.get('model')}, "
            f"{identity.get('dims')} dims), generation {index['generation']}"
        )
    # Any other provider (Memory Records: records, forgotten, sequence, indexedSequence,
    # embedder): its plain values, in its own words.
    shown = [
        f"{key} {value}"
        for key, value in index.items()
        if isinstance(value, str | int | float) and not isinstance(value, bool)
    ]
    return "index: " + (", ".join(shown) if shown else "described")


def _print_report(out: TextIO, report: dict[str, Any], problems: list[str]) -> None:
    out.write(f"workspace: {report['workspace']}\nstate: {report['stateDir']}\n")
    slots = report.get("slots", {})
    out.write(f"context engine: {slots.get('contextEngine')}\nmemory: {slots.get('memory')}\n")
    if "health" in report:
        out.write(f"health: {report['health']['status']}\n")
    index = report.get("index")
    if index:
        out.write(_index_line(index) + "\n")
    for gateway in report.get("gateways", []):
        states = ", ".join(
            f"{w.get('index')} {w.get('state')}" for w in gateway.get("workers", [])
        )
        out.write(f"gateway on port {gateway['port']}: workers {states}\n")
    for problem in problems:
        out.write(f"problem: {problem}\n")
    out.write("ok\n" if not problems else f"{len(problems)} problem(s)\n")
