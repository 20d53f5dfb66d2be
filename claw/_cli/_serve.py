"""``claw serve``: the gateway over WebSocket, in this process or ``--workers N``."""

from __future__ import annotations

import argparse
import errno
import os
import secrets
from collections.abc import Callable
from typing import Any, TextIO

import attrs
import trio

from .._errors import ClawError
from .._host import open_host
from ..gateway import Gateway, GatewayAddress, run_gateway_until_signal
from ..gateway._auth import choose_token
from ..gateway._listen import reserve_port
from ..gateway._supervisor import supervise_gateway
from ._common import (
    EXIT_OK,
    AddCommand,
    CliError,
    emit_json,
    load_config,
    port,
    positive_int,
    token_flags,
)


def add_parsers(sub: Any, command: AddCommand) -> None:
    """``claw serve``."""
    serve = command(
        sub,
        "serve",
        "serve the gateway over WebSocket",
        "Serve the claw gateway (memory.search, memory.get, memory.status) over WebSocket "
        "until interrupted. Clients authenticate with a token.",
    )
    serve.add_argument("--host", default=None, help="address to bind (default: 127.0.0.1)")
    serve.add_argument(
        "--port", type=port, default=None, help="port, 1-65535 (default: 0, any free port)"
    )
    token_flags(serve, "the clients' token")
    serve.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        metavar="N",
        help="serving processes sharing the port (default: 1, this process)",
    )


async def run(args: argparse.Namespace, out: TextIO, err: TextIO, warnings: list[str]) -> int:
    """Serve until a signal; returns 0 after a signal stopped it."""
    config = load_config(args)
    gateway_config = config.gateway
    token = choose_token(args.token, args.token_file, os.environ) or gateway_config.token
    generated: str | None = None
    if token is None and not gateway_config.tokens:
        token = generated = secrets.token_urlsafe(24)
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
        if args.json:
            ready: dict[str, Any] = {"url": address.url}
            if generated is not None:
                ready["generatedToken"] = generated
            emit_json(out, {"listening": ready})
        else:
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
    if args.json:
        emit_json(out, {"stopped": {"signal": code}})
    return EXIT_OK


def _listen_error(exc: BaseException) -> OSError | None:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, OSError) else None


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
