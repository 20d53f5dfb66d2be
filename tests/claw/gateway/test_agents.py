"""agentId is not free text: the host knows its agents, and Memory Core maps each to
its own directory and keeps a bounded number of indexes open."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import claw
import claw_memory
from claw.gateway import Gateway, GatewayRequestError, open_in_memory_gateway_client
from claw_memory._plugin import agent_dir_name
from claw_testing import RecordingMemoryProvider

from .test_memory_methods import TOKEN, _config, native_host, provider  # noqa: F401


async def test_an_unknown_agent_is_an_invalid_request_before_any_provider_opens(
    native_host: claw.Host,  # noqa: F811
    provider: RecordingMemoryProvider,  # noqa: F811
) -> None:
    async with open_in_memory_gateway_client(Gateway(native_host), TOKEN) as client:
        for method, params in [
            ("memory.search", {"version": 2, "query": "report", "agentId": "nobody"}),
            ("memory.status", {"agentId": ".."}),
            (
                "memory.get",
                {"reference": {"providerId": "recording-memory", "id": "x"}, "agentId": "a/b"},
            ),
        ]:
            with pytest.raises(GatewayRequestError) as info:
                await client.request(method, params)
            assert info.value.code == "INVALID_REQUEST"
            assert "agentId" in info.value.message
        assert provider.calls == []
        # The default agent and an agent that has sessions are known.
        await native_host.sessions.create("dm:zed", agent_id="other", chat_type="direct")
        for agent in ("main", "other"):
            payload = await client.request(
                "memory.search", {"version": 2, "query": "report", "agentId": agent}
            )
            assert payload["agentId"] == agent


@given(st.lists(st.text(min_size=1, max_size=600), min_size=2, max_size=6, unique=True))
def test_agent_directory_names_are_injective_and_safe(agents: list[str]) -> None:
    names = [agent_dir_name(a) for a in agents]
    assert len(set(names)) == len(names)
    for name in names:
        assert name not in ("", ".", "..")
        assert "/" not in name and "\\" not in name and "\x00" not in name
        assert len(name.encode("utf-8")) <= 200
        # No two names differ only by case (case-insensitive file systems).
    assert len({n.lower() for n in names}) == len(names)


def test_the_default_agent_keeps_its_directory_name() -> None:
    assert agent_dir_name("main") == "main"
    assert len({agent_dir_name(a) for a in ("a/b", "a_b", "a b", "A_b", "a%2Fb")}) == 5


@pytest.fixture
async def many_agent_host(tmp_path: Path) -> AsyncIterator[claw.Host]:
    config = _config(tmp_path, "memory-core")
    plugins = claw.PluginsConfig(
        discover=False,
        slots=claw.SlotsConfig(memory="memory-core"),
        entries={"memory-core": claw.PluginEntryConfig(config={"max_open_indexes": 2})},
    )
    config = claw.HostConfig(
        workspace_dir=config.workspace_dir,
        state_dir=config.state_dir,
        plugins=plugins,
        workers=config.workers,
        gateway=config.gateway,
    )
    async with claw.open_host(config, plugins=[claw_memory.plugin]) as h:
        yield h


def _open_index_dirs(root: Path) -> list[str]:
    """The index directories some open index of this process holds (its database is
    open: indexes share their directories between processes, so no lock says it)."""
    held = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue
        if target.name == "index.sqlite3" and target.parent.parent == root.resolve():
            held.add(target.parent.name)
    return sorted(held)


async def test_open_indexes_are_bounded_and_idle_ones_close_least_recently_used_first(
    many_agent_host: claw.Host,
) -> None:
    host = many_agent_host
    agents = ["a/b", "a_b", "a b", "..", "agent-5"]
    for i, agent in enumerate(agents):
        await host.sessions.create(f"dm:{i}", agent_id=agent, chat_type="direct")
    root = host.config.resolved_state_dir / "memory"
    async with open_in_memory_gateway_client(Gateway(host), TOKEN) as client:
        for agent in [*agents, "main", "a/b"]:
            payload = await client.request(
                "memory.search",
                {"version": 2, "query": "lunch", "agentId": agent, "minScore": 0},
            )
            assert payload["agentId"] == agent
            assert len(_open_index_dirs(root)) <= 2
        # The two most recently used stay open: "main", then "a/b" (reopened).
        assert sorted(_open_index_dirs(root)) == sorted(
            [agent_dir_name("main"), agent_dir_name("a/b")]
        )
        # Five agents plus main: six directories, all inside the memory root.
    assert len([p for p in root.iterdir() if p.is_dir()]) == 6
    assert not (host.config.resolved_state_dir / "index.sqlite3").exists()
