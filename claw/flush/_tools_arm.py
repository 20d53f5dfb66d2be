"""The tools arm: project a plan's declared tool names onto the owner's registered tools.

Ownership comes from registered tool metadata: a declared name counts only as the tool
*the plan's plugin* registered under it; a same-named tool of another plugin is excluded.
Lookup tools must be registered ``read_only`` (they cannot persist memory). The turn's
normal tool policy applies after this projection. What survives, and what did not, is
returned for the coordinator to warn about and decide on.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from .._plugins import RegisteredTool
from ..turns._tools import ToolPolicy
from ._plans import MemoryFlushToolsPlan


@attrs.frozen
class ToolsProjection:
    """The persistence and lookup tools a tools-arm flush may use.

    ``missing_persistence`` are declared persistence tools that the plugin did not
    register or that policy removed; ``unavailable_lookup`` likewise for lookup tools;
    ``writable_lookup`` are declared lookup tools the plugin did not mark read-only.
    """

    persistence: tuple[RegisteredTool, ...]
    lookup: tuple[RegisteredTool, ...]
    missing_persistence: tuple[str, ...]
    unavailable_lookup: tuple[str, ...]
    writable_lookup: tuple[str, ...]


def _owned(
    registered: Sequence[RegisteredTool], plugin_id: str, name: str
) -> RegisteredTool | None:
    for tool in registered:
        if tool.plugin_id == plugin_id and tool.name == name:
            return tool
    return None


def project_tools(
    plan: MemoryFlushToolsPlan,
    *,
    plugin_id: str,
    registered: Sequence[RegisteredTool],
    policy: ToolPolicy,
) -> ToolsProjection:
    """Project ``plan`` onto ``plugin_id``'s registered tools under ``policy``."""
    persistence: list[RegisteredTool] = []
    missing: list[str] = []
    for name in dict.fromkeys(plan.persistence_tool_names):
        tool = _owned(registered, plugin_id, name)
        if tool is None or not policy.allows(name):
            missing.append(name)
        else:
            persistence.append(tool)
    lookup: list[RegisteredTool] = []
    unavailable: list[str] = []
    writable: list[str] = []
    for name in dict.fromkeys(plan.lookup_tool_names):
        tool = _owned(registered, plugin_id, name)
        if tool is not None and not tool.tool.read_only:
            writable.append(name)
        elif tool is None or not policy.allows(name):
            unavailable.append(name)
        else:
            lookup.append(tool)
    return ToolsProjection(
        persistence=tuple(persistence),
        lookup=tuple(lookup),
        missing_persistence=tuple(missing),
        unavailable_lookup=tuple(unavailable),
        writable_lookup=tuple(writable),
    )
