"""Exhaustion attacks with real sockets: one client must not take what the others need.

Each case runs a real server on 127.0.0.1 (the gateway, the MCP HTTP endpoint) and a real
attacker beside an honest client, and counts what the honest client got. The counts are
the figures issue 25 asked for; each case is bounded in time.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

import claw
import claw_memory
from claw.gateway import Gateway, GatewayAddress, open_gateway_client
from claw.gateway._auth import TokenTable
from claw.mcp import MemoryMcpServer

from ..gateway.conftest import READ_TOKEN, Recorder, install_test_methods, make_gateway_config
from ..mcp import conftest as mcp_fixtures
from ..mcp.test_http import INITIALIZE, MCP_HEADERS

FLOOD_SOCKETS = 300
HONEST_CONNECTS = 40
_FLOOD_CHILD = Path(__file__).with_name("flood_child.py")


@attrs.define
class FloodReport:
    """What the flooding process did: sockets opened, dropped by the server, refused."""

    opened: int = 0
    dropped: int = 0
    refused: int = 0


@asynccontextmanager
async def silent_socket_flood(port: int, sockets: int) -> AsyncIterator[FloodReport]:
    """A child process holding ``sockets`` silent TCP sockets to ``port``, each reopened as
    soon as the server drops it; the report is filled in when the block ends."""
    report = FloodReport()
    process = await trio.lowlevel.open_process(
        [sys.executable, str(_FLOOD_CHILD), "127.0.0.1", str(port), str(sockets)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        seen = b""
        with trio.fail_after(30):
            while b"READY\n" not in seen:
                chunk = await process.stdout.receive_some()
                assert chunk, "the flooding process exited before it was ready"
                seen += chunk
        yield report
        await process.stdin.aclose()
        with trio.fail_after(30):
            while b"OPENED" not in seen or not seen.endswith(b"\n"):
                chunk = await process.stdout.receive_some()
                if not chunk:
                    break
                seen += chunk
        # "OPENED <n> DROPPED <n> REFUSED <n>"
        counts = seen[seen.index(b"OPENED") :].split()[1:6:2]
        report.opened, report.dropped, report.refused = (int(n) for n in counts)
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()


@pytest.mark.slow
async def test_a_flood_of_silent_sockets_cannot_refuse_a_client_that_authenticates(
    host: claw.Host, nursery: trio.Nursery
) -> None:
    """300 silent sockets (more than ``max_connections``) from another process, reopened as
    soon as the gateway drops them, against the default limits: every one of 40
    authenticating clients gets in, and the unauthenticated ones stay within their bound."""
    gateway = Gateway(host, config=make_gateway_config(max_message_bytes=1024 * 1024))
    install_test_methods(gateway, Recorder())
    assert gateway.config.max_connections < FLOOD_SOCKETS
    address: GatewayAddress = await nursery.start(gateway.serve)
    honest_ok = 0
    pending_seen = 0
    with trio.fail_after(120):
        async with silent_socket_flood(address.port, FLOOD_SOCKETS) as flood:
            for i in range(HONEST_CONNECTS):
                pending_seen = max(pending_seen, gateway.statistics().pending_connections)
                try:
                    async with open_gateway_client(
                        address.url, READ_TOKEN, connect_timeout=10
                    ) as client:
                        answer = await client.request("test.echo", {"n": i})
                        assert answer["params"] == {"n": i}
                        honest_ok += 1
                except (claw.gateway.GatewayConnectionError, claw.gateway.GatewayRequestError):
                    pass
    print(
        f"\nflood: {FLOOD_SOCKETS} silent sockets, {flood.opened} opened, {flood.dropped} "
        f"dropped by the gateway, {flood.refused} refused; honest clients {honest_ok} of "
        f"{HONEST_CONNECTS}; pending connections at most {pending_seen} "
        f"(bound {gateway.config.max_pending_connections})"
    )
    assert honest_ok == HONEST_CONNECTS
    assert pending_seen <= gateway.config.max_pending_connections
    assert flood.dropped > 0  # the flood really went past the unauthenticated bound


SESSION_ATTEMPTS = 300


@pytest.mark.slow
async def test_one_token_cannot_hold_every_mcp_http_session(tmp_path: Path) -> None:
    """One read-only token asks for 300 sessions, more than the global bound (256): it
    gets its own bound and no more, and a client with another token still gets in."""
    config = mcp_fixtures.host_config(tmp_path)
    assert config.mcp.max_sessions < SESSION_ATTEMPTS
    statuses: Counter[int] = Counter()
    async with (
        claw.open_host(config, plugins=[claw_memory.plugin]) as host,
        trio.open_nursery() as nursery,
    ):
        server = MemoryMcpServer(host)
        serve = functools.partial(
            server.serve_http, tokens=TokenTable.from_config(host.config.gateway)
        )
        url = await nursery.start(serve, "127.0.0.1", 0)
        greedy = {**MCP_HEADERS, "Authorization": f"Bearer {mcp_fixtures.READ_TOKEN}"}
        with trio.fail_after(120):
            async with httpx2.AsyncClient() as http:
                for _ in range(SESSION_ATTEMPTS):
                    answer = await http.post(url, json=INITIALIZE, headers=greedy)
                    statuses[answer.status_code] += 1
                # Another token opens a session the way the greedy one did (a client of
                # the 2025 protocol, which keeps a session) and lists the tools in it.
                other = {**MCP_HEADERS, "Authorization": f"Bearer {mcp_fixtures.WRITE_TOKEN}"}
                opened = await http.post(url, json=INITIALIZE, headers=other)
                other_ok = opened.status_code == 200
                if other_ok:
                    session = {
                        "Mcp-Session-Id": opened.headers["mcp-session-id"],
                        "Mcp-Protocol-Version": "2025-06-18",
                    }
                    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
                    listed = await http.post(url, json=listing, headers={**other, **session})
                    other_ok = listed.status_code == 200
            # And the SDK's own client (a newer protocol, served without a session).
            sdk = {"Authorization": f"Bearer {mcp_fixtures.WRITE_TOKEN}"}
            async with (
                httpx2.AsyncClient(headers=sdk) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                found = await client.call_tool("memory_search", {"query": "staging password"})
                assert not found.is_error
        nursery.cancel_scope.cancel()
    print(
        f"\nmcp sessions: one token asked {SESSION_ATTEMPTS} times: {dict(statuses)}; "
        f"another token's client served: {other_ok} (bounds: {config.mcp.max_sessions} "
        f"in all, {config.mcp.max_sessions_per_token} per token)"
    )
    assert statuses == {
        200: config.mcp.max_sessions_per_token,
        429: SESSION_ATTEMPTS - config.mcp.max_sessions_per_token,
    }
    assert other_ok


MCP_HONEST_CLIENTS = 20


@pytest.mark.slow
async def test_a_flood_of_silent_sockets_cannot_keep_mcp_http_clients_out(
    tmp_path: Path,
) -> None:
    """The same flood against ``claw mcp --http``: it counts no connections, and a socket
    that sends no request is closed after hypercorn's keep-alive timeout (5 s), so the
    flood must keep reopening; every SDK client gets its session and its answer."""
    config = mcp_fixtures.host_config(tmp_path)
    served = 0
    async with (
        claw.open_host(config, plugins=[claw_memory.plugin]) as host,
        trio.open_nursery() as nursery,
    ):
        server = MemoryMcpServer(host)
        serve = functools.partial(
            server.serve_http, tokens=TokenTable.from_config(host.config.gateway)
        )
        url = await nursery.start(serve, "127.0.0.1", 0)
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        sdk = {"Authorization": f"Bearer {mcp_fixtures.READ_TOKEN}"}
        with trio.fail_after(120):
            async with silent_socket_flood(port, FLOOD_SOCKETS) as flood:
                for _ in range(MCP_HONEST_CLIENTS):
                    async with (
                        httpx2.AsyncClient(headers=sdk) as http,
                        Client(streamable_http_client(url, http_client=http)) as client,
                    ):
                        served += not (await client.call_tool("memory_status", {})).is_error
        nursery.cancel_scope.cancel()
    print(
        f"\nmcp flood: {FLOOD_SOCKETS} silent sockets, {flood.opened} opened, {flood.dropped} "
        f"dropped by the server, {flood.refused} refused; SDK clients served {served} of "
        f"{MCP_HONEST_CLIENTS}"
    )
    assert served == MCP_HONEST_CLIENTS
    assert flood.refused == 0
