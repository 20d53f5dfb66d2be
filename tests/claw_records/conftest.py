"""Fixtures: hosts whose memory slot is Memory Records on the real test PostgreSQL.

``open_records_host(name)`` opens a host (its own workspace and state directory, the
inline worker pool) on the test's fresh database, with sessions ``dm:alice`` (direct),
``grp:1`` and ``grp:2`` (groups) of agent ``main``. Several hosts of one test share the
database, as hosts of one deployment do. The periodic catch-up is an hour unless a
test sets it, so only notifications and explicit catch-ups move an index.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import claw
import claw_records
from claw.plugin_sdk import MemoryCallerContext
from claw_records._service import RecordsService
from claw_testing import harness_config, open_harness_host

PLUGIN = "memory-records"
SESSIONS = (("dm:alice", "direct"), ("grp:1", "group"), ("grp:2", "group"))

OpenRecordsHost = Callable[..., AbstractAsyncContextManager[claw.Host]]


def records_config(
    root: Path, dsn: str, *, plugin_config: Mapping[str, Any] | None = None, **defaults: Any
) -> claw.HostConfig:
    workspace = root / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {"dsn": dsn, "catch_up_interval": 3600.0}
    config.update(plugin_config or {})
    return harness_config(
        workspace, root / "state", memory=PLUGIN, plugin_config={PLUGIN: config}, **defaults
    )


@pytest.fixture
def open_records_host(tmp_path: Path, postgres_dsn: str) -> OpenRecordsHost:
    @asynccontextmanager
    async def open_records_host(
        name: str = "a",
        *,
        plugin_config: Mapping[str, Any] | None = None,
        model: Any = None,
        **defaults: Any,
    ) -> AsyncIterator[claw.Host]:
        config = records_config(
            tmp_path / name, postgres_dsn, plugin_config=plugin_config, **defaults
        )
        async with open_harness_host(config, plugins=[claw_records.plugin], model=model) as host:
            for key, chat_type in SESSIONS:
                await host.sessions.create(key, agent_id="main", chat_type=chat_type)
            yield host

    return open_records_host


def service_of(host: claw.Host) -> RecordsService:
    """The host's Memory Records service (what its maintenance capability holds)."""
    cap = host.memory_capability()
    assert cap is not None
    service = cap.maintenance.service
    assert isinstance(service, RecordsService)
    return service


@asynccontextmanager
async def operator(
    host: claw.Host, scopes: tuple[str, ...] = ("operator.read", "operator.write")
) -> AsyncIterator[MemoryCallerContext]:
    async with host.open_scope("records-test") as scope:
        yield scope.mint_caller_context(scope.mint_operator_authority(scopes))


async def call_tool(
    host: claw.Host, run: Any, session_key: str, name: str, **arguments: Any
) -> str:
    """Call Memory Records' tool ``name`` as the model would, in ``run``'s context (the
    context the host's tool dispatch makes, with the tool's memory through the guard)."""
    (registered,) = host.plugin_registry.tools_of(PLUGIN, name)
    assert run.session_key == session_key
    context = host.turns.tools.context_for(registered, run)
    result: str = await registered.tool.handler(context, arguments)
    return result
