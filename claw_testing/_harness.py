"""The deterministic host: configuration and opening, shared by the fixtures and by notebooks.

:func:`harness_config` is a :class:`~claw.HostConfig` for a test: a given workspace and
state directory, no entry-point discovery (the plugins are named explicitly, so a
test never depends on what else is installed), the inline worker pool, and the agent's
model set to ``scripted/main``. :func:`open_harness_host` opens a host on it with the
inline pool and registers a scripted model provider. :func:`open_harness_gateway`
serves the host's gateway to one client, in memory or over a real socket.

What is deterministic: the inline pool runs blocking work (SQLite, tantivy, numpy) on the
calling task, so the order of events depends only on the test; the harness gives
Memory Core the hash embedder (:class:`claw_memory.HashEmbedder`, a pure function of the
text that needs no table) unless ``plugin_config`` names another. What is
virtual time: Trio's clock (``trio.sleep``, ``fail_after``, the gateway's timeouts) when
the test requests pytest-trio's ``autojump_clock`` fixture. What is not: wall-clock
timestamps the host stores (session and transcript times, the date a flush writes
under, temporal decay's "now" unless a search passes ``now=``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import attrs
import trio

import claw_memory
from claw import (
    AgentDefaultsConfig,
    AgentsConfig,
    Host,
    HostConfig,
    InlineWorkerPool,
    Plugin,
    PluginApi,
    PluginEntryConfig,
    PluginsConfig,
    SlotsConfig,
    WorkersConfig,
    open_host,
)
from claw.gateway import (
    READ_SCOPE,
    Gateway,
    GatewayClient,
    open_gateway_client,
    open_in_memory_gateway_client,
)
from claw.memory import MemoryPluginCapability
from claw.models import Model

HARNESS_GATEWAY_TOKEN = "claw-testing-token"
"""The token the harness gateway accepts (granted ``operator.read``)."""

SCRIPTED_PROVIDER = "scripted"
"""The model provider name the harness registers: ``scripted/<name>``."""


def harness_config(
    workspace_dir: str | Path,
    state_dir: str | Path,
    *,
    memory: str | None = None,
    context_engine: str = "legacy",
    plugin_config: Mapping[str, Mapping[str, Any]] | None = None,
    model: str | None = f"{SCRIPTED_PROVIDER}/main",
    **agent_defaults: Any,
) -> HostConfig:
    """A host config for deterministic tests (see the module docstring).

    ``memory`` and ``context_engine`` select the slots (``None``: Memory Core when it
    is loaded). ``plugin_config`` maps plugin ids to their
    ``[plugins.entries.<id>.config]`` tables. ``agent_defaults`` are further
    :class:`~claw.AgentDefaultsConfig` fields (``context_window``, ``compaction``, ...).
    """
    configs = {plugin_id: dict(config) for plugin_id, config in (plugin_config or {}).items()}
    configs.setdefault("memory-core", {}).setdefault("embedder", "claw-hash")
    entries = {plugin_id: PluginEntryConfig(config=config) for plugin_id, config in configs.items()}
    return HostConfig(
        workspace_dir=Path(workspace_dir),
        state_dir=Path(state_dir),
        plugins=PluginsConfig(
            discover=False,
            entries=entries,
            slots=SlotsConfig(context_engine=context_engine, memory=memory),
        ),
        workers=WorkersConfig(inline=True),
        agents=AgentsConfig(defaults=AgentDefaultsConfig(model=model, **agent_defaults)),
    )


@asynccontextmanager
async def open_harness_host(
    config: HostConfig,
    *,
    plugins: Sequence[Plugin] = (claw_memory.plugin,),
    model: Model | None = None,
) -> AsyncIterator[Host]:
    """Open a host on ``config`` with the inline worker pool.

    ``plugins`` defaults to Memory Core alone. When ``model`` is given, every
    ``scripted/<name>`` model reference resolves to it.
    """
    async with open_host(config, plugins=plugins, workers=InlineWorkerPool()) as host:
        if model is not None:
            scripted = model
            host.models.register_provider(SCRIPTED_PROVIDER, lambda name: scripted)
        yield host


def memory_provider_plugin(capability: MemoryPluginCapability | Any, *, plugin_id: str) -> Plugin:
    """A plugin that registers ``capability`` (or ``provider.capability()``) for the memory slot.

    Select it with ``harness_config(..., memory=plugin_id)``. The provider's
    ``provider_id`` must equal ``plugin_id``.
    """
    cap = capability if isinstance(capability, MemoryPluginCapability) else capability.capability()

    def register(api: PluginApi) -> None:
        api.register_memory_capability(cap)

    return Plugin(id=plugin_id, register=register)


@asynccontextmanager
async def open_harness_gateway(
    host: Host,
    *,
    transport: Literal["memory", "socket"] = "memory",
    scopes: Iterable[str] = (READ_SCOPE,),
    tokens: Mapping[str, tuple[str, ...]] | None = None,
    token: str = HARNESS_GATEWAY_TOKEN,
) -> AsyncIterator[GatewayClient]:
    """A gateway of ``host`` serving one authenticated client; yields the client.

    ``transport="memory"`` speaks the real protocol over an in-memory stream pair (no
    sockets; safe under ``autojump_clock``). ``transport="socket"`` binds
    ``127.0.0.1`` on an ephemeral port and connects over TCP (do not combine it with
    ``autojump_clock``: waiting on the network would count as idle time and jump the
    clock past the gateway's timeouts). ``tokens`` maps accepted tokens to their
    scopes (default: :data:`HARNESS_GATEWAY_TOKEN` with ``operator.read``).
    """
    table = dict(tokens) if tokens is not None else {HARNESS_GATEWAY_TOKEN: (READ_SCOPE,)}
    gateway_config = attrs.evolve(host.config.gateway, host="127.0.0.1", port=0, tokens=table)
    gateway = Gateway(host, config=gateway_config)
    if transport == "memory":
        async with open_in_memory_gateway_client(gateway, token, scopes=scopes) as client:
            yield client
        return
    if transport != "socket":
        raise ValueError(f"transport is 'memory' or 'socket', got {transport!r}")
    try:
        async with trio.open_nursery() as nursery:
            address = await nursery.start(gateway.serve)
            try:
                # The client closes first; then the server stops listening.
                async with open_gateway_client(address.url, token, scopes=scopes) as client:
                    yield client
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The server task only ends by cancellation: a lone error is the caller's own.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
