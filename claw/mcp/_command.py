"""``claw mcp``: open the host and serve it over stdio or streamable HTTP.

Over stdio nothing but the protocol may reach stdout, so every note goes to stderr.
Over HTTP the server needs a bearer token: ``--token``, else ``--token-file``, else
``CLAW_GATEWAY_TOKEN``, else ``CLAW_GATEWAY_TOKEN_FILE``, else the ``[gateway]`` tokens of
the config; with none, one is generated for the run and printed to stderr, as
``claw serve`` does.
"""

from __future__ import annotations

import functools
import json as _json
import os
import secrets
import signal
from typing import TextIO

import attrs
import trio

from .._config import HostConfig
from .._errors import ClawError
from .._host import open_host
from ..gateway._auth import TokenTable, choose_token
from ._server import MemoryMcpServer

MAX_PORT = 65535


class BindAddressError(ClawError, ValueError):
    """``--http`` is not ``HOST:PORT`` with a port from 0 to 65535."""


class UnknownAgentFlagError(ClawError, LookupError):
    """``--agent`` names an agent the host does not know."""


def parse_bind(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6; port 0 picks a free one) as a pair."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host:
        raise BindAddressError(f"--http: expected HOST:PORT, got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port_text.isdigit() or int(port_text) > MAX_PORT:
        raise BindAddressError(
            f"--http: the port must be a number from 0 to {MAX_PORT}, got {port_text!r}"
        )
    return host, int(port_text)


def http_tokens(
    config: HostConfig, token: str | None, err: TextIO, *, token_file: str | None = None
) -> tuple[TokenTable, str | None]:
    """The token table for HTTP: the given token (or file), else the environment's, else
    the config's; else one generated for this run, returned second (else ``None``)."""
    gateway = config.gateway
    token = choose_token(token, token_file, os.environ) or gateway.token
    generated: str | None = None
    if token is None and not gateway.tokens:
        token = generated = secrets.token_urlsafe(24)
        err.write(f"claw: no token configured; generated one for this run: {token}\n")
        err.flush()
    if token is not None:
        gateway = attrs.evolve(gateway, token=token)
    return TokenTable.from_config(gateway), generated


async def run_mcp(
    config: HostConfig,
    *,
    http: str | None,
    allow_writes: bool,
    agent: str | None,
    token: str | None,
    out: TextIO,
    err: TextIO,
    token_file: str | None = None,
    json: bool = False,
) -> int:
    """Serve until stdin closes (stdio) or until SIGINT/SIGTERM (HTTP); the exit code.

    ``json``: over HTTP, as ``claw serve --json``: the ready line is
    ``{"listening": {"url": ...}}`` (with ``generatedToken`` when no token was configured)
    and the last ``{"stopped": {"signal": N}}``; stdio has no line of its own: stdout is
    the protocol."""
    bind = parse_bind(http) if http is not None else None
    tokens, generated = (
        http_tokens(config, token, err, token_file=token_file) if bind is not None else (None, None)
    )
    async with open_host(config) as host:
        server = MemoryMcpServer(host, agent_id=agent, allow_writes=allow_writes)
        if not await host.knows_agent(server.agent):
            raise UnknownAgentFlagError(
                f"--agent {server.agent[:64]!r} is not an agent of this host (its agents are "
                "default_agent_id and the agents that have sessions)"
            )
        if bind is None or tokens is None:
            await server.serve_stdio()
            return 0
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
            async with trio.open_nursery() as nursery:
                serve = functools.partial(server.serve_http, tokens=tokens)
                url = await nursery.start(serve, bind[0], bind[1])
                if json:
                    ready: dict[str, str] = {"url": url}
                    if generated is not None:
                        ready["generatedToken"] = generated
                    out.write(_json.dumps({"listening": ready}) + "\n")
                else:
                    out.write(f"claw mcp listening on {url}\n")
                out.flush()
                async for signum in received:
                    err.write(f"claw: stopped by signal {signum}\n")
                    if json:
                        out.write(_json.dumps({"stopped": {"signal": signum}}) + "\n")
                        out.flush()
                    nursery.cancel_scope.cancel()
                    break
    return 0
