"""Selecting the exclusive slots, and the read-only view of the slots and the plugins.

Once the plugins are loaded (:func:`claw._plugins.load_plugins`), :func:`select_slots`
picks the slot owners configuration names. The result, a :class:`SlotView`, is what
the host's parts receive when they need to know who owns a slot or what the plugins
registered: a read-only view, never the registry to write into.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import attrs

from ._config import PluginsConfig
from ._errors import ConfigError
from ._plugins import PluginRegistry, RegisteredEngine, RegisteredTool

LEGACY_ENGINE_ID = "legacy"
MEMORY_CORE_ID = "memory-core"


@attrs.frozen
class SlotSelection:
    """Which plugins own the exclusive slots of a running host."""

    context_engine: str
    context_engine_plugin: str | None
    memory_plugin: str | None
    memory_sidecars: tuple[str, ...]


@attrs.frozen
class SlotView:
    """Who owns the slots and what the loaded plugins registered, read-only.

    Built once, after loading (the registry is not written to again).
    """

    selection: SlotSelection
    memory_capabilities: Mapping[str, Any]
    context_engines: Mapping[str, RegisteredEngine]
    tools: tuple[RegisteredTool, ...]

    @classmethod
    def of(cls, selection: SlotSelection, registry: PluginRegistry) -> SlotView:
        return cls(
            selection=selection,
            memory_capabilities=types.MappingProxyType(registry.memory_capabilities),
            context_engines=types.MappingProxyType(registry.context_engines),
            tools=tuple(registry.tools),
        )

    @property
    def memory_plugin(self) -> str | None:
        """The memory slot owner's plugin id (``None``: no memory is selected)."""
        return self.selection.memory_plugin

    @property
    def memory_sidecars(self) -> tuple[str, ...]:
        """The plugins whose memory capabilities are loaded but not selected."""
        return self.selection.memory_sidecars

    def memory_capability(self) -> Any | None:
        """What the memory slot owner registered (unchecked), or ``None``."""
        selected = self.selection.memory_plugin
        return self.memory_capabilities.get(selected) if selected else None

    def tools_of(self, plugin_id: str, name: str | None = None) -> list[RegisteredTool]:
        """Every tool ``plugin_id`` registered (called ``name``, when given)."""
        return [
            t
            for t in self.tools
            if t.plugin_id == plugin_id and (name is None or t.tool.name == name)
        ]


def select_slots(config: PluginsConfig, registry: PluginRegistry) -> SlotSelection:
    """The slot owners ``config.slots`` names, checked against what was registered."""
    slots = config.slots
    engine_id = slots.context_engine
    engine_plugin: str | None = None
    if engine_id != LEGACY_ENGINE_ID:
        registered = registry.context_engines.get(engine_id)
        if registered is None:
            known = sorted([LEGACY_ENGINE_ID, *registry.context_engines])
            raise ConfigError(
                "plugins.slots.context_engine",
                f"no registered context engine {engine_id!r} (registered: {', '.join(known)})",
                value=engine_id,
            )
        engine_plugin = registered.plugin_id
    memory_id = slots.memory
    capabilities = registry.memory_capabilities
    if memory_id is None:
        memory_plugin = MEMORY_CORE_ID if MEMORY_CORE_ID in capabilities else None
    elif memory_id == "none":
        memory_plugin = None
    elif memory_id not in capabilities:
        known = sorted(capabilities) or ["none"]
        raise ConfigError(
            "plugins.slots.memory",
            f"no loaded plugin {memory_id!r} registered a memory capability "
            f"(registered: {', '.join(known)})",
            value=memory_id,
        )
    else:
        memory_plugin = memory_id
    sidecars = tuple(sorted(p for p in capabilities if p != memory_plugin))
    return SlotSelection(
        context_engine=engine_id,
        context_engine_plugin=engine_plugin,
        memory_plugin=memory_plugin,
        memory_sidecars=sidecars,
    )
