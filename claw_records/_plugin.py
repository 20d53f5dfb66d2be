"""The Memory Records plugin object (id ``memory-records``): configuration and registration.

Memory Records keeps an agent's memories as records in PostgreSQL and owns the memory
slot when selected (``[plugins.slots] memory = "memory-records"``) without
impersonating workspace files. It registers, when its config table exists:

* its memory capability: the provider-neutral ``provider_runtime`` with
  ``authorize_search_hits``, the operator ``maintenance`` (``host.memory.add/forget``,
  ``claw memory add/forget/index``), ``recall_tool_names`` and a tools-arm
  ``provider_flush_plan_resolver``;
* the agent tools ``record_search``, ``record_get``, ``record_add``, ``record_update``
  and ``record_forget``;
* the service that holds the database pool and the local indexes.

Configuration lives under ``[plugins.entries.memory-records.config]``: ``dsn`` (else the
``CLAW_POSTGRES_DSN`` environment variable), ``embedder`` (the id of a registered
embedding provider, ``"claw-hash"`` by default, or ``"none"``), ``deny_sandboxed``,
``catch_up_interval`` (seconds between the catch-ups that repair lost notifications),
``min_score``, ``vector_weight``, and the connection pool's ``pool_min``, ``pool_max``
and ``pool_timeout`` (as in ``[state]``). Without a config table the plugin registers
nothing, so installing it changes no host that does not use it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import attrs

from claw.plugin_sdk import ConfigError, Plugin, PluginApi, PluginContracts

from ._runtime import build_capability
from ._service import PLUGIN_ID, RecordsService
from ._tools import TOOLS, record_tools

DSN_ENV = "CLAW_POSTGRES_DSN"
#: The most connections one pool may open (the same bound as ``[state] pool_max``).
POOL_MAX_LIMIT = 1000
#: A finite upper bound for seconds: refuses ``inf`` (and, by comparison, ``nan``).
_FOREVER = 1e9
_PREFIX = f"plugins.entries.{PLUGIN_ID}.config"


def _number(
    data: Mapping[str, Any], key: str, default: float, *, low: float, high: float | None, what: str
) -> float:
    value = data.get(key, default)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not value >= low
        or (high is not None and not value <= high)
    ):
        raise ConfigError(f"{_PREFIX}.{key}", f"expected {what}", value=value)
    return float(value)


def _count(data: Mapping[str, Any], key: str, default: int, *, low: int, high: int,
           why: str = "") -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{_PREFIX}.{key}", f"expected {low} to {high} connections{why}",
                          value=value)
    return value


@attrs.frozen
class RecordsConfig:
    """Parsed ``[plugins.entries.memory-records.config]``."""

    dsn: str = attrs.field(repr=False)
    #: Where ``dsn`` came from, for the errors that name it: the config key or the variable.
    dsn_key: str = f"{_PREFIX}.dsn"
    embedder: str = "claw-hash"
    deny_sandboxed: bool = False
    catch_up_interval: float = 5.0
    min_score: float = 0.2
    vector_weight: float | None = None
    pool_min: int = 1
    pool_max: int = 4
    pool_timeout: float = 30.0

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> RecordsConfig:
        """Parse and validate; errors name the key path under the plugin's config."""
        known = {f.name for f in attrs.fields(cls)}
        for key, value in data.items():
            if key not in known:
                raise ConfigError(
                    f"{_PREFIX}.{key}",
                    f"unknown key (known keys: {', '.join(sorted(known))})",
                    value=value,
                )
        env = os.environ if environ is None else environ
        dsn = data.get("dsn", env.get(DSN_ENV))
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigError(
                f"{_PREFIX}.dsn",
                f"Memory Records needs a PostgreSQL DSN: set dsn or {DSN_ENV}",
            )
        embedder = data.get("embedder", "claw-hash")
        if not isinstance(embedder, str) or not embedder:
            raise ConfigError(
                f"{_PREFIX}.embedder",
                "expected the id of a registered embedding provider, or none",
                value=embedder,
            )
        deny = data.get("deny_sandboxed", False)
        if not isinstance(deny, bool):
            raise ConfigError(f"{_PREFIX}.deny_sandboxed", "expected true or false", value=deny)
        weight = data.get("vector_weight")
        if weight is not None:
            weight = _number(
                data, "vector_weight", 0.5, low=0.0, high=1.0, what="a number between 0 and 1"
            )
        pool_max = _count(data, "pool_max", 4, low=1, high=POOL_MAX_LIMIT)
        pool_min = _count(data, "pool_min", 1, low=0, high=pool_max, why=" (at most pool_max)")
        return cls(
            dsn=dsn,
            dsn_key=f"{_PREFIX}.dsn" if "dsn" in data else DSN_ENV,
            embedder=embedder,
            deny_sandboxed=deny,
            catch_up_interval=_number(
                data,
                "catch_up_interval",
                5.0,
                low=0.01,
                high=None,
                what="a positive number of seconds",
            ),
            min_score=_number(
                data, "min_score", 0.2, low=0.0, high=1.0, what="a number between 0 and 1"
            ),
            vector_weight=weight,
            pool_min=pool_min,
            pool_max=pool_max,
            pool_timeout=_number(
                data, "pool_timeout", 30.0, low=0.001, high=_FOREVER,
                what="a positive number of seconds",
            ),
        )


def _register(api: PluginApi) -> None:
    if not api.config:
        return  # not configured: an installed but unused plugin changes nothing
    config = RecordsConfig.from_mapping(api.config)
    service = RecordsService(api=api, config=config)
    api.register_service("records", service.serve)
    api.register_memory_capability(build_capability(service))
    for tool in record_tools(service):
        api.register_tool(tool)


plugin = Plugin(
    id=PLUGIN_ID,
    name="Memory Records",
    version="0.1.0",
    register=_register,
    contracts=PluginContracts(tools=TOOLS),
)
