"""Which plugin's flush resolver is effective, and whether that plugin owns the memory slot.

The selected memory slot owner's resolver of either kind wins over any sidecar's. Only
when the owner registered neither are sidecar capability fields merged, field by field
in sidecar order (the first sidecar with a provider resolver supplies that field, the
first with a plain resolver supplies the other). A plugin (or the merged fields) with
both kinds gets the provider resolver. The plugin that supplied the chosen resolver is
tracked, so a tools-arm plan from a non-owner can be refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

import attrs

ResolverKind: TypeAlias = Literal["provider", "plain"]


@attrs.frozen
class EffectiveFlushResolver:
    """The resolver the host will call and the plugin that supplied it."""

    plugin_id: str
    kind: ResolverKind
    resolver: Any
    is_owner: bool


def _field(capability: object, kind: ResolverKind) -> Any:
    name = "provider_flush_plan_resolver" if kind == "provider" else "flush_plan_resolver"
    value = getattr(capability, name, None)
    return value if callable(value) else None


def select_flush_resolver(
    owner: str | None, sidecars: Sequence[str], capabilities: Mapping[str, object]
) -> EffectiveFlushResolver | None:
    """The effective resolver (see the module docstring), or ``None`` when nobody has one."""
    kinds: tuple[ResolverKind, ...] = ("provider", "plain")
    if owner is not None and owner in capabilities:
        capability = capabilities[owner]
        for kind in kinds:
            resolver = _field(capability, kind)
            if resolver is not None:
                return EffectiveFlushResolver(owner, kind, resolver, is_owner=True)
    for kind in kinds:
        for plugin_id in sidecars:
            if plugin_id == owner or plugin_id not in capabilities:
                continue
            resolver = _field(capabilities[plugin_id], kind)
            if resolver is not None:
                return EffectiveFlushResolver(plugin_id, kind, resolver, is_owner=False)
    return None
