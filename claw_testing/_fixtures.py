"""The pytest fixtures of claw_testing (registered by :mod:`claw_testing._pytest_plugin`).

The fixtures build on each other, and each can be overridden in a ``conftest.py`` or a
test module by defining a fixture with the same name, which is how a test adds its own
plugin or changes the configuration::

    @pytest.fixture
    def claw_plugins(claw_plugins):
        return [*claw_plugins, my_plugin]

======================== =====================================================
fixture                  what it is
======================== =====================================================
``memory_workspace``     :class:`MemoryWorkspace` on a fresh temporary folder
``claw_plugins``         the plugins the host loads (default: Memory Core)
``claw_config``          :func:`harness_config` on the workspace and a temporary
                         state directory (model ``scripted/main``)
``scripted_model``       an empty :class:`ScriptedModel`; every ``scripted/<name>``
                         resolves to it
``claw_host``            an open host (inline worker pool) with the above
``claw_sessions``        a :class:`SessionBuilder` on ``claw_host``
``claw_events``          an :class:`EventRecorder` attached to ``claw_host``
``hash_embedder``        Memory Core's deterministic :class:`~claw_memory.HashEmbedder`
``recording_memory``     a :class:`RecordingMemoryProvider` (id ``recording-memory``)
``recording_memory_host`` a host whose memory slot holds ``recording_memory``
``gateway_client``       a gateway client of ``claw_host``, in memory (no sockets)
``socket_gateway_client`` the same over a real socket on ``127.0.0.1``
======================== =====================================================

Async fixtures need pytest-trio (``trio_mode = true``, or ``@pytest.mark.trio`` on the
test). For virtual time, request pytest-trio's ``autojump_clock`` in the test itself
(it chooses the clock of the test's run); everything above except
``socket_gateway_client`` is safe under it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import attrs
import pytest

from claw import Host, HostConfig, Plugin
from claw.gateway import GatewayClient
from claw_memory import HashEmbedder
from claw_memory import plugin as memory_core

from ._events import EventRecorder
from ._harness import (
    harness_config,
    memory_provider_plugin,
    open_harness_gateway,
    open_harness_host,
)
from ._memory_provider import RecordingMemoryProvider
from ._scripted_model import ScriptedModel
from ._sessions import SessionBuilder
from ._workspace import MemoryWorkspace


@pytest.fixture
def memory_workspace(tmp_path: Path) -> MemoryWorkspace:
    """An empty workspace folder with helpers to write memory files."""
    root = tmp_path / "workspace"
    root.mkdir()
    return MemoryWorkspace(root)


@pytest.fixture
def claw_plugins() -> list[Plugin]:
    """The plugins ``claw_host`` loads: Memory Core. Override to add your own."""
    return [memory_core]


@pytest.fixture
def claw_config(memory_workspace: MemoryWorkspace, tmp_path: Path) -> HostConfig:
    """The host configuration: the workspace, a temporary state dir, inline workers."""
    return harness_config(memory_workspace.root, tmp_path / "claw-state")


@pytest.fixture
def scripted_model() -> ScriptedModel:
    """An empty scripted model; ``scripted_model.extend([...])`` adds its replies."""
    return ScriptedModel([])


@pytest.fixture
async def claw_host(
    claw_config: HostConfig, claw_plugins: list[Plugin], scripted_model: ScriptedModel
) -> AsyncIterator[Host]:
    """An open host on ``claw_config`` with ``claw_plugins`` and ``scripted_model``."""
    async with open_harness_host(claw_config, plugins=claw_plugins, model=scripted_model) as host:
        yield host


@pytest.fixture
def claw_sessions(claw_host: Host) -> SessionBuilder:
    """Creates sessions and lineages in ``claw_host``."""
    return SessionBuilder(claw_host)


@pytest.fixture
def claw_events(claw_host: Host) -> Iterator[EventRecorder]:
    """Records ``claw_host``'s events and claw's logged warnings during the test."""
    recorder = EventRecorder.attach(claw_host)
    try:
        yield recorder
    finally:
        recorder.close()


@pytest.fixture
def hash_embedder() -> HashEmbedder:
    """The deterministic feature-hashing embedder (the same text gives the same vector)."""
    return HashEmbedder()


@pytest.fixture
def recording_memory() -> RecordingMemoryProvider:
    """A record-only native memory provider; fill ``records`` and read ``calls``."""
    return RecordingMemoryProvider(provider_id="recording-memory")


@pytest.fixture
async def recording_memory_host(
    claw_config: HostConfig,
    claw_plugins: list[Plugin],
    scripted_model: ScriptedModel,
    recording_memory: RecordingMemoryProvider,
) -> AsyncIterator[Host]:
    """A host whose memory slot holds ``recording_memory`` (Memory Core, if loaded, is a sidecar).

    Use it instead of ``claw_host`` (not together: they share the state directory).
    """
    plugin_id = recording_memory.provider_id
    slots = attrs.evolve(claw_config.plugins.slots, memory=plugin_id)
    config = attrs.evolve(claw_config, plugins=attrs.evolve(claw_config.plugins, slots=slots))
    plugins = [*claw_plugins, memory_provider_plugin(recording_memory, plugin_id=plugin_id)]
    async with open_harness_host(config, plugins=plugins, model=scripted_model) as host:
        yield host


@pytest.fixture
async def gateway_client(claw_host: Host) -> AsyncIterator[GatewayClient]:
    """An ``operator.read`` client of ``claw_host``'s gateway over an in-memory stream."""
    async with open_harness_gateway(claw_host, transport="memory") as client:
        yield client


@pytest.fixture
async def socket_gateway_client(claw_host: Host) -> AsyncIterator[GatewayClient]:
    """An ``operator.read`` client of ``claw_host``'s gateway over TCP on ``127.0.0.1``."""
    async with open_harness_gateway(claw_host, transport="socket") as client:
        yield client
