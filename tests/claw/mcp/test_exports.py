"""Pins the public surface of claw.mcp."""

from __future__ import annotations

import types

import pytest

import claw.mcp


def _public() -> dict[str, object]:
    return {
        name: obj
        for name, obj in vars(claw.mcp).items()
        if not name.startswith("_") and not isinstance(obj, types.ModuleType)
    }


def test_the_public_names_are_the_server_and_its_constants() -> None:
    assert set(_public()) == {"MemoryMcpServer", "MCP_PATH", "SERVER_NAME"}


def test_the_server_reports_the_public_module_and_is_final() -> None:
    assert claw.mcp.MemoryMcpServer.__module__ == "claw.mcp"
    with pytest.raises(TypeError):
        type("Sub", (claw.mcp.MemoryMcpServer,), {})
