"""Streamable HTTP: a real hypercorn server on 127.0.0.1 port 0 and the SDK's own client."""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

import claw
from claw.gateway._auth import TokenTable
from claw.mcp import MemoryMcpServer
from claw.mcp._http import ListenError

from ..._processes import reap
from .conftest import (
    NO_READ_TOKEN,
    READ_TOKEN,
    WRITE_TOKEN,
    claw_mcp_command,
    structured,
    subprocess_env,
    text_of,
)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@asynccontextmanager
async def serving(
    host: claw.Host,
    *,
    allow_writes: bool = False,
    bind: str = "127.0.0.1",
    config: claw.McpConfig | None = None,
) -> AsyncIterator[tuple[MemoryMcpServer, str]]:
    server = MemoryMcpServer(host, allow_writes=allow_writes)
    tokens = TokenTable.from_config(host.config.gateway)
    async with trio.open_nursery() as nursery:
        serve = functools.partial(server.serve_http, tokens=tokens, config=config)
        url = await nursery.start(serve, bind, 0)
        try:
            yield server, url
        finally:
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def http_client(url: str, token: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with httpx2.AsyncClient(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


async def test_the_sdk_client_searches_over_streamable_http(core_host: claw.Host) -> None:
    async with serving(core_host) as (_, url), http_client(url, READ_TOKEN) as client:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/mcp", url)
        listed = await client.list_tools()
        assert [t.name for t in listed.tools] == ["memory_search", "memory_get", "memory_status"]
        search = structured(
            await client.call_tool("memory_search", {"query": "staging database password"})
        )
        hit = search["hits"][0]
        got = structured(await client.call_tool("memory_get", {"reference": hit["reference"]}))
        assert "rotates monthly" in got["text"]
        bad = await client.call_tool("memory_get", {"reference": hit["reference"], "lines": -2})
        assert bad.is_error and "lines" in text_of(bad)


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer not-a-token",
        f"Bearer {READ_TOKEN}x",
        f"Bearer {READ_TOKEN[:-1]}",
        f"Basic {READ_TOKEN}",
        READ_TOKEN,
    ],
)
async def test_a_request_without_a_valid_bearer_token_is_401(
    core_host: claw.Host, authorization: str | None
) -> None:
    async with serving(core_host) as (_, url):
        headers = dict(MCP_HEADERS)
        if authorization is not None:
            headers["Authorization"] = authorization
        async with httpx2.AsyncClient() as http:
            response = await http.post(url, json=INITIALIZE, headers=headers)
        assert response.status_code == 401
        assert "Bearer" in response.headers["www-authenticate"]
        async with http_client(url, READ_TOKEN) as client:
            assert not (await client.call_tool("memory_status", {})).is_error


async def test_a_token_without_the_read_scope_cannot_read(core_host: claw.Host) -> None:
    async with serving(core_host) as (_, url), http_client(url, NO_READ_TOKEN) as client:
        result = await client.call_tool("memory_search", {"query": "lunch"})
    assert result.is_error
    assert text_of(result).startswith("FORBIDDEN: ")
    assert "operator.read" in text_of(result)


async def test_a_session_cannot_be_continued_with_another_token(core_host: claw.Host) -> None:
    async with serving(core_host) as (_, url), httpx2.AsyncClient() as http:
        opened = await http.post(
            url, json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {READ_TOKEN}"}
        )
        assert opened.status_code == 200
        session = opened.headers["mcp-session-id"]

        def headers(token: str) -> dict[str, str]:
            return {
                **MCP_HEADERS,
                "Authorization": f"Bearer {token}",
                "Mcp-Session-Id": session,
                "Mcp-Protocol-Version": "2025-06-18",
            }

        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        hijack = await http.post(url, json=listing, headers=headers(WRITE_TOKEN))
        owner = await http.post(url, json=listing, headers=headers(READ_TOKEN))
        assert owner.status_code == 200
        assert hijack.status_code == 404


async def test_an_oversize_request_body_is_refused_and_the_server_keeps_serving(
    core_host: claw.Host,
) -> None:
    limit = core_host.config.gateway.max_message_bytes
    async with serving(core_host) as (_, url):
        async with httpx2.AsyncClient() as http:
            response = await http.post(
                url,
                content=b'{"jsonrpc": "2.0", "id": 1, "method": "' + b"x" * (limit + 1) + b'"}',
                headers={
                    **MCP_HEADERS,
                    "Authorization": f"Bearer {READ_TOKEN}",
                    "Content-Type": "application/json",
                },
            )
        assert response.status_code == 413
        async with http_client(url, READ_TOKEN) as client:
            assert not (await client.call_tool("memory_status", {})).is_error


async def test_a_port_in_use_is_an_error_naming_the_address(core_host: claw.Host) -> None:
    taken = trio.socket.socket()
    await taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    server = MemoryMcpServer(core_host)
    tokens = TokenTable.from_config(core_host.config.gateway)
    try:
        with pytest.raises(ListenError, match=f"cannot listen on 127.0.0.1:{port}: "):
            await server.serve_http("127.0.0.1", port, tokens=tokens)
    finally:
        taken.close()


@pytest.mark.slow
def test_claw_mcp_http_serves_the_sdk_client_and_stops_on_sigterm(workspace: Path) -> None:
    token = "cli-http-token-0001"
    proc = subprocess.Popen(
        claw_mcp_command(workspace, "--http", "127.0.0.1:0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**subprocess_env(), "CLAW_GATEWAY_TOKEN": token},
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().rstrip("\n")
        match = re.fullmatch(r"claw mcp listening on (http://127\.0\.0\.1:\d+/mcp)", first)
        assert match, first
        url = match.group(1)

        async def query() -> dict[str, object]:
            async with http_client(url, token) as client:
                return structured(await client.call_tool("memory_search", {"query": "lunch"}))

        assert trio.run(query)["providerId"] == "memory-core"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        reap(proc)


@pytest.mark.parametrize("bind", ["8080", "127.0.0.1:70000", "127.0.0.1:http", ":"])
def test_a_bad_http_address_is_one_line_naming_the_flag(workspace: Path, bind: str) -> None:
    result = subprocess.run(
        claw_mcp_command(workspace, "--http", bind),
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert "--http" in result.stderr
    assert "Traceback" not in result.stderr
    assert os.linesep.join(result.stderr.splitlines()).count("\n") == 0


def _headers(token: str, session: str | None = None, **extra: str) -> dict[str, str]:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}", **extra}
    if session is not None:
        headers["Mcp-Session-Id"] = session
        headers["Mcp-Protocol-Version"] = "2025-06-18"
    return headers


LISTING = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


async def test_a_token_over_its_own_session_bound_is_answered_and_others_still_open_sessions(
    core_host: claw.Host,
) -> None:
    config = claw.McpConfig(max_sessions=5, max_sessions_per_token=3)
    async with serving(core_host, config=config) as (_, url), httpx2.AsyncClient() as http:
        held = []
        for _ in range(3):
            opened = await http.post(url, json=INITIALIZE, headers=_headers(READ_TOKEN))
            assert opened.status_code == 200
            held.append(opened.headers["mcp-session-id"])
        over = await http.post(url, json=INITIALIZE, headers=_headers(READ_TOKEN))
        assert over.status_code == 429
        message = over.json()["error"]["message"]
        assert "3 open MCP sessions" in message and "max_sessions_per_token" in message
        # The token's own sessions go on; another token is not affected.
        still = await http.post(url, json=LISTING, headers=_headers(READ_TOKEN, held[0]))
        assert still.status_code == 200
        async with http_client(url, WRITE_TOKEN) as client:
            assert not (await client.call_tool("memory_status", {})).is_error
        # Ending a session frees a place for its token.
        ended = await http.delete(url, headers=_headers(READ_TOKEN, held[0]))
        assert ended.status_code == 200
        again = await http.post(url, json=INITIALIZE, headers=_headers(READ_TOKEN))
        assert again.status_code == 200
        # All tokens together stay within max_sessions (3 + 2 = 5 open).
        other = [
            await http.post(url, json=INITIALIZE, headers=_headers(WRITE_TOKEN)) for _ in "ab"
        ]
        assert [r.status_code for r in other] == [200, 200]
        full = await http.post(url, json=INITIALIZE, headers=_headers(WRITE_TOKEN))
        assert full.status_code == 503


async def test_an_idle_session_expires_after_the_configured_timeout(core_host: claw.Host) -> None:
    assert claw.McpConfig().session_idle_timeout <= 300  # was 30 minutes
    config = claw.McpConfig(session_idle_timeout=0.3)
    async with serving(core_host, config=config) as (_, url), httpx2.AsyncClient() as http:
        opened = await http.post(url, json=INITIALIZE, headers=_headers(READ_TOKEN))
        session = opened.headers["mcp-session-id"]
        await trio.sleep(1.0)  # a real server's idle timer
        gone = await http.post(url, json=LISTING, headers=_headers(READ_TOKEN, session))
        assert gone.status_code == 404
        # The place it held is free again.
        assert (await http.post(url, json=INITIALIZE, headers=_headers(READ_TOKEN))).is_success


async def test_configured_hosts_and_origins_are_accepted_exactly(core_host: claw.Host) -> None:
    config = claw.McpConfig(
        allowed_hosts=("mcp.example.com",), allowed_origins=("https://app.example.com",)
    )
    async with serving(core_host, config=config) as (_, url), httpx2.AsyncClient() as http:
        ok = await http.post(
            url,
            json=INITIALIZE,
            headers=_headers(READ_TOKEN, Host="MCP.example.com", Origin="https://app.example.com"),
        )
        assert ok.status_code == 200
        for host, origin, status in [
            ("mcp.example.com.evil.example", None, 421),
            ("mcp.example.com:444", None, 421),
            ("mcp.example.com", "https://app.example.com.evil.example", 403),
            ("mcp.example.com", "http://app.example.com", 403),
            ("mcp.example.com", "http://mcp.example.com", 403),
        ]:
            headers = _headers(READ_TOKEN, Host=host)
            if origin is not None:
                headers["Origin"] = origin
            answer = await http.post(url, json=INITIALIZE, headers=headers)
            assert answer.status_code == status, (host, origin)
