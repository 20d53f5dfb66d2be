"""A hostile operator.read client: every mistake is INVALID_REQUEST (or NOT_FOUND /
FORBIDDEN) naming the field, nothing reaches an unbounded allocation, and the server
keeps answering."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import claw
import claw_memory
from claw.gateway import Gateway, GatewayRequestError, open_in_memory_gateway_client

from .test_memory_methods import TOKEN, _config


@pytest.fixture
async def core_host(tmp_path: Path) -> AsyncIterator[claw.Host]:
    async with claw.open_host(_config(tmp_path, "memory-core"), plugins=[claw_memory.plugin]) as h:
        yield h


async def _refused(host: claw.Host, method: str, params: dict[str, Any]) -> GatewayRequestError:
    async with open_in_memory_gateway_client(Gateway(host), TOKEN) as client:
        with pytest.raises(GatewayRequestError) as info:
            await client.request(method, params)
        # The mistake cost nothing: the same connection is still served.
        assert (await client.request("memory.status", {}))["status"] == "ready"
    return info.value


@pytest.mark.parametrize("cursor", ["²", "٣", "1_0", " 1", "-1", "x" * 300, ""])
async def test_a_cursor_that_is_not_a_plain_number_is_an_invalid_request(
    core_host: claw.Host, cursor: str
) -> None:
    error = await _refused(
        core_host, "memory.search", {"version": 2, "query": "lunch", "cursor": cursor}
    )
    assert error.code == "INVALID_REQUEST"
    assert "cursor" in error.message


@pytest.mark.parametrize("cursor", ["999999999", "1000", "3"])
async def test_a_cursor_past_the_results_is_an_empty_last_page(
    core_host: claw.Host, cursor: str
) -> None:
    async with open_in_memory_gateway_client(Gateway(core_host), TOKEN) as client:
        page = await client.request(
            "memory.search", {"version": 2, "query": "lunch", "cursor": cursor, "minScore": 0}
        )
        assert page["hits"] == []
        assert "nextCursor" not in page
        assert (await client.request("memory.status", {}))["status"] == "ready"


@pytest.mark.parametrize("score", [-5, 5, 1.0001, -0.0001])
@pytest.mark.parametrize("version", [1, 2])
async def test_a_min_score_outside_zero_to_one_is_an_invalid_request(
    core_host: claw.Host, score: float, version: int
) -> None:
    error = await _refused(
        core_host, "memory.search", {"version": version, "query": "lunch", "minScore": score}
    )
    assert error.code == "INVALID_REQUEST"
    assert "minScore" in error.message


@pytest.mark.parametrize("fragment", ["L5-L2", "L0-", "L0-L3", "garbage", "", "L1-L99999999999"])
async def test_a_bad_line_fragment_is_an_invalid_request(
    core_host: claw.Host, fragment: str
) -> None:
    error = await _refused(
        core_host,
        "memory.get",
        {"reference": {"providerId": "memory-core", "id": "MEMORY.md", "fragment": fragment}},
    )
    assert error.code == "INVALID_REQUEST"
    assert "fragment" in error.message


@pytest.mark.parametrize(
    "path", ["MEMORY.md\x00", "\x00", "memory/\x00/a.md", "sessions/main/\x00"]
)
async def test_a_nul_in_a_path_is_an_invalid_request(core_host: claw.Host, path: str) -> None:
    error = await _refused(
        core_host, "memory.get", {"reference": {"providerId": "memory-core", "id": path}}
    )
    assert error.code == "INVALID_REQUEST"
    assert "reference.id" in error.message


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"reference": {"providerId": "memory-core", "id": "MEMORY.md"}, "from": 0}, "from"),
        ({"reference": {"providerId": "memory-core", "id": "MEMORY.md"}, "lines": -1}, "lines"),
        ({"reference": {"providerId": "memory-core", "id": "MEMORY.md"}, "from": 2**63}, "from"),
        ({"reference": {"providerId": "memory-core", "id": "x" * 5000}}, "reference.id"),
        ({"reference": {"providerId": "memory-core", "id": "MEMORY.md", "x": 1}}, "x"),
    ],
)
async def test_bad_get_params_are_invalid_requests_naming_the_field(
    core_host: claw.Host, params: dict[str, Any], needle: str
) -> None:
    error = await _refused(core_host, "memory.get", params)
    assert error.code == "INVALID_REQUEST"
    assert needle in error.message


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"version": 2, "query": "x", "maxResults": 2**70}, "maxResults"),
        ({"version": 2, "query": "x" * 100_000}, "query"),
        ({"version": 2, "query": "x", "agentId": "x" * 5000}, "agentId"),
        ({"version": 2, "query": "x", "agentId": "a\x00b"}, "agentId"),
    ],
)
async def test_oversized_search_params_are_invalid_requests(
    core_host: claw.Host, params: dict[str, Any], needle: str
) -> None:
    big = Gateway(core_host, config=claw.GatewayConfig(tokens={TOKEN: ("operator.read",)}))
    async with open_in_memory_gateway_client(big, TOKEN) as client:
        with pytest.raises(GatewayRequestError) as info:
            await client.request("memory.search", params)
    assert info.value.code == "INVALID_REQUEST"
    assert needle in info.value.message


async def test_a_provider_failure_is_unavailable_without_host_paths_never_internal(
    core_host: claw.Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory Core failing (here: another process holds an agent's writer lease past
    the wait limit) is the provider's failure, answered UNAVAILABLE; its message
    (which names the index directory) stays in the log."""
    import fcntl
    import os

    import claw_memory._lease
    from claw_memory._plugin import agent_dir_name

    monkeypatch.setattr(claw_memory._lease, "LEASE_WAIT_LIMIT", 0.2)

    await core_host.sessions.create("dm:o", agent_id="other", chat_type="direct")
    index_dir = core_host.config.resolved_state_dir / "memory" / agent_dir_name("other")
    index_dir.mkdir(parents=True)
    fd = os.open(index_dir / "LOCK", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    params = {"version": 2, "query": "lunch", "agentId": "other", "minScore": 0}
    async with open_in_memory_gateway_client(Gateway(core_host), TOKEN) as client:
        try:
            with pytest.raises(GatewayRequestError) as info:
                await client.request("memory.search", params)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        assert info.value.code == "UNAVAILABLE"
        assert "IndexBusyError" in info.value.message
        assert str(core_host.config.resolved_state_dir) not in info.value.message
        assert (await client.request("memory.search", params))["agentId"] == "other"
