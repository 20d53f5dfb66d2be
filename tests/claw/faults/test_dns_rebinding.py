"""DNS rebinding and cross-site requests against ``claw mcp --http``, on every bind address.

A page on another site can make a browser send requests to the MCP endpoint; the
browser then sends the page's name as ``Host`` (after rebinding its DNS name to the
server's address) or its own origin as ``Origin``. Each bind address below gets twelve
such values (six ``Host``, six ``Origin``, prefix tricks included) against a real
server, and every one must be refused, while the names the server really has are served.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
import trio

import claw
import claw_memory
from claw.gateway._auth import TokenTable
from claw.mcp import MemoryMcpServer

from ..mcp import conftest as mcp_fixtures
from ..mcp.test_http import INITIALIZE, MCP_HEADERS

BINDS = ("127.0.0.1", "127.0.0.2", "0.0.0.0", "localhost", "::1")


def _can_bind(address: str) -> bool:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family) as sock:
            sock.bind((address, 0))
    except OSError:
        return False
    return True


def hostile_host_and_origin(reached: str, port: int) -> tuple[list[str], list[str]]:
    """``Host`` and ``Origin`` values a page on another site could make a browser send."""
    hosts = [
        "evil.example",
        f"evil.example:{port}",
        f"{reached}:{port}.evil.example",
        f"{reached}:{port + 1}",
        reached,
        f"localhost.evil.example:{port}",
    ]
    origins = [
        "http://evil.example",
        f"http://{reached}:{port}.evil.example",
        f"http://{reached}:{port}@evil.example",
        f"https://{reached}:{port}",
        f"http://{reached}:{port + 1}",
        "null",
    ]
    return hosts, origins


@asynccontextmanager
async def mcp_over_http(tmp_path: Path, bind: str) -> AsyncIterator[str]:
    config = mcp_fixtures.host_config(tmp_path)
    async with (
        claw.open_host(config, plugins=[claw_memory.plugin]) as host,
        trio.open_nursery() as nursery,
    ):
        server = MemoryMcpServer(host)
        serve = functools.partial(
            server.serve_http, tokens=TokenTable.from_config(host.config.gateway)
        )
        yield await nursery.start(serve, bind, 0)
        nursery.cancel_scope.cancel()


def _headers(**extra: str) -> dict[str, str]:
    return {**MCP_HEADERS, "Authorization": f"Bearer {mcp_fixtures.READ_TOKEN}", **extra}


@pytest.mark.parametrize("bind", BINDS)
async def test_hostile_host_and_origin_are_refused_on_every_bind_address(
    tmp_path: Path, bind: str
) -> None:
    if not _can_bind(bind if bind != "localhost" else "127.0.0.1"):
        pytest.skip(f"cannot bind {bind} on this machine")  # pragma: no cover
    accepted: list[str] = []
    with trio.fail_after(60):
        async with mcp_over_http(tmp_path, bind) as url, httpx2.AsyncClient() as http:
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            reached = {"::1": "[::1]", "0.0.0.0": "127.0.0.1", "localhost": "127.0.0.1"}.get(
                bind, bind
            )
            target = f"http://{reached}:{port}/mcp"
            hosts, origins = hostile_host_and_origin(reached, port)
            for hostile in hosts:
                answer = await http.post(target, json=INITIALIZE, headers=_headers(Host=hostile))
                if answer.status_code != 421:
                    accepted.append(f"Host: {hostile} -> {answer.status_code}")
                else:
                    assert "allowed_hosts" in answer.text
            for hostile in origins:
                answer = await http.post(target, json=INITIALIZE, headers=_headers(Origin=hostile))
                if answer.status_code != 403:
                    accepted.append(f"Origin: {hostile} -> {answer.status_code}")
                else:
                    assert "allowed_origins" in answer.text
            good = f"{reached}:{port}"
            served = [{"Host": good}, {"Host": good, "Origin": f"http://{good}"}]
            if reached in ("127.0.0.1", "[::1]"):
                served.append({"Host": f"localhost:{port}", "Origin": f"http://LOCALHOST:{port}"})
            for fine in served:
                answer = await http.post(target, json=INITIALIZE, headers=_headers(**fine))
                assert answer.status_code == 200, fine
    print(f"\nbind {bind}: {len(accepted)} of {len(hosts) + len(origins)} hostile values accepted")
    assert accepted == []
