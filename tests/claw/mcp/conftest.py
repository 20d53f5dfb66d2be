"""Fixtures for the MCP server tests: a Memory Core host, a workspace, SDK clients."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

import claw
import claw_memory
from claw.mcp import MemoryMcpServer

READ_TOKEN = "mcp-read-token-0001"
WRITE_TOKEN = "mcp-write-token-002"
NO_READ_TOKEN = "mcp-noread-token-03"
MEMORY_TEXT = (
    "# Memory\n- The staging database password rotates monthly.\n- Lunch is at noon.\n"
)


def write_workspace(workspace: Path) -> Path:
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "MEMORY.md").write_text(MEMORY_TEXT, encoding="utf-8")
    return workspace


def host_config(tmp_path: Path) -> claw.HostConfig:
    return claw.HostConfig(
        workspace_dir=write_workspace(tmp_path / "ws"),
        state_dir=tmp_path / "state",
        plugins=claw.PluginsConfig(discover=False, slots=claw.SlotsConfig(memory="memory-core")),
        workers=claw.WorkersConfig(inline=True),
        gateway=claw.GatewayConfig(
            tokens={
                READ_TOKEN: ("operator.read",),
                WRITE_TOKEN: ("operator.read", "operator.write"),
                NO_READ_TOKEN: ("operator.admin",),
            }
        ),
    )


@pytest.fixture
async def core_host(tmp_path: Path) -> AsyncIterator[claw.Host]:
    async with claw.open_host(host_config(tmp_path), plugins=[claw_memory.plugin]) as host:
        yield host


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace for a ``claw mcp`` subprocess (its own state under ``.claw``)."""
    return write_workspace(tmp_path / "cli-ws")


@asynccontextmanager
async def in_process_client(
    host: claw.Host,
    *,
    scopes: Iterable[str] | None = None,
    agent_id: str | None = None,
    allow_writes: bool = False,
) -> AsyncIterator[Client]:
    """The SDK's client connected in-process to a server holding ``scopes``."""
    server = MemoryMcpServer(host, agent_id=agent_id, allow_writes=allow_writes)
    granted = server.scopes if scopes is None else frozenset(scopes)
    async with Client(server.sdk_server(lambda ctx: granted, transport="test")) as client:
        yield client


def claw_mcp_command(workspace: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "claw", "mcp", "--workspace", str(workspace), *extra]


def subprocess_env() -> dict[str, str]:
    """The environment for a ``claw mcp`` child: ours, minus a token that would leak in."""
    env = dict(os.environ)
    env.pop("CLAW_GATEWAY_TOKEN", None)
    return env


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def structured(result: types.CallToolResult) -> dict[str, Any]:
    """The structured result, checked to be what the text block says too."""
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    assert json.loads(text_of(result)) == result.structured_content
    return result.structured_content
