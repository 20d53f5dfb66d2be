"""Memory Records' configuration, its inert default, and its public surface."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import trio

import claw
import claw_memory
import claw_records
from claw_records import RecordsConfig
from claw_testing import harness_config, open_harness_host
from tests.postgres._util import pool_connections

from .conftest import OpenRecordsHost, service_of


def test_the_config_needs_a_dsn_and_names_every_bad_key() -> None:
    with pytest.raises(claw.ConfigError, match=r"memory-records\.config\.dsn.*CLAW_POSTGRES_DSN"):
        RecordsConfig.from_mapping({"embedder": "claw-hash"}, environ={})
    assert RecordsConfig.from_mapping({}, environ={"CLAW_POSTGRES_DSN": "dbname=x"}).dsn == (
        "dbname=x"
    )
    for bad, key in (
        ({"dns": "x"}, "dns"),
        ({"catch_up_interval": 0}, "catch_up_interval"),
        ({"min_score": 2}, "min_score"),
        ({"vector_weight": -1}, "vector_weight"),
        ({"pool_size": 4}, "pool_size"),
        ({"pool_max": True}, "pool_max"),
        ({"pool_max": 0}, "pool_max"),
        ({"pool_max": 1001}, "pool_max"),
        ({"pool_min": -1}, "pool_min"),
        ({"pool_min": 5}, "pool_min"),  # above the default pool_max of 4
        ({"pool_min": 3, "pool_max": 2}, "pool_min"),
        ({"pool_timeout": 0}, "pool_timeout"),
        ({"pool_timeout": float("inf")}, "pool_timeout"),
        ({"pool_timeout": float("nan")}, "pool_timeout"),
        ({"pool_timeout": "5"}, "pool_timeout"),
        ({"deny_sandboxed": "yes"}, "deny_sandboxed"),
        ({"embedder": ""}, "embedder"),
    ):
        with pytest.raises(claw.ConfigError) as info:
            RecordsConfig.from_mapping({"dsn": "dbname=x", **bad}, environ={})
        assert info.value.key_path == f"plugins.entries.memory-records.config.{key}"


def test_the_pool_keys_default_and_parse() -> None:
    default = RecordsConfig.from_mapping({"dsn": "dbname=x"}, environ={})
    assert (default.pool_min, default.pool_max, default.pool_timeout) == (1, 4, 30.0)
    config = RecordsConfig.from_mapping(
        {"dsn": "dbname=x", "pool_min": 0, "pool_max": 2, "pool_timeout": 1}, environ={}
    )
    assert (config.pool_min, config.pool_max, config.pool_timeout) == (0, 2, 1.0)


async def test_the_service_pool_has_the_configured_size(
    open_records_host: OpenRecordsHost, postgres_dsn: str
) -> None:
    async with open_records_host("a", plugin_config={"pool_min": 2, "pool_max": 3}) as host:
        stats = service_of(host).database().statistics()
        assert (stats.pool_size, stats.min_size, stats.max_size) == (2, 2, 3)
        # The server sees them, named after the plugin.
        assert await trio.to_thread.run_sync(
            pool_connections, postgres_dsn, "memory-records"
        ) == 2


@pytest.mark.parametrize(
    ("config", "environ", "key"),
    [
        ({"dsn": "postgresql://u:hunter2@[h/db"}, {},
         "plugins.entries.memory-records.config.dsn"),
        ({"embedder": "claw-hash"}, {"CLAW_POSTGRES_DSN": "postgresql://u:hunter2@[h/db"},
         "CLAW_POSTGRES_DSN"),
    ],
)
async def test_a_malformed_dsn_names_where_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict[str, str],
    environ: dict[str, str], key: str,
) -> None:
    """Not ``state.dsn``: that key is the state backend's, which may be SQLite here."""
    monkeypatch.delenv("CLAW_POSTGRES_DSN", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "ws").mkdir()
    host_config = harness_config(
        tmp_path / "ws", tmp_path / "state", memory="memory-records",
        plugin_config={"memory-records": config},
    )
    with pytest.raises(claw.ConfigError) as info:
        async with open_harness_host(host_config, plugins=[claw_records.plugin]):
            pass
    assert info.value.key_path == key
    assert "hunter2" not in str(info.value)


def test_the_dsn_never_appears_in_the_configs_repr() -> None:
    config = RecordsConfig.from_mapping({"dsn": "password=hunter2 dbname=x"}, environ={})
    assert "hunter2" not in repr(config)


async def test_an_unconfigured_plugin_registers_nothing(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    config = harness_config(tmp_path / "ws", tmp_path / "state")
    async with open_harness_host(config, plugins=[claw_memory.plugin, claw_records.plugin]) as host:
        assert host.slots.memory_plugin == "memory-core"
        assert host.plugin_registry.tools_of("memory-records") == []
        assert "memory-records" not in host.plugin_registry.memory_capabilities


def test_public_names_are_exported_once_from_the_package() -> None:
    public = {
        name: obj
        for name, obj in vars(claw_records).items()
        if not name.startswith("_") and not isinstance(obj, types.ModuleType)
    }
    assert set(public) == {
        "InvalidRecordError",
        "RecordsConfig",
        "RecordsError",
        "RecordsService",
        "RecordsUnavailableError",
        "StaleRecordError",
        "plugin",
    }
    for name, obj in public.items():
        if isinstance(obj, type):
            assert obj.__module__ == "claw_records", name
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert issubclass(obj, claw.ClawError), name


def _imports(path: Path) -> set[str]:
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_plugins_import_only_the_sdk_and_the_kernel_imports_no_plugin() -> None:
    root = Path(__file__).parents[2]
    for package in ("claw_memory", "claw_records"):
        for path in (root / package).rglob("*.py"):
            kernel = {n for n in _imports(path) if n == "claw" or n.startswith("claw.")}
            assert all(n.startswith("claw.plugin_sdk") for n in kernel), (path, kernel)
    plugins = ("claw_memory", "claw_records", "claw_testing")
    for path in (root / "claw").rglob("*.py"):
        found = {n for n in _imports(path) if n.split(".")[0] in plugins}
        assert not found, (path, found)
