"""Plugin loading, manifests (contracts) and the exclusive slots."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import pytest

import claw


@attrs.frozen
class _Embedder:
    id: str
    model: str = "m"
    dims: int = 4
    max_input_bytes: int = 1024

    async def embed(self, texts: Any) -> npt.NDArray[np.float32]:
        return np.ones((len(texts), self.dims), dtype=np.float32)


async def _echo(context: object, arguments: Mapping[str, Any]) -> str:
    return str(dict(arguments))


def _config(host_config: claw.HostConfig, **slots: str) -> claw.HostConfig:
    return attrs.evolve(
        host_config,
        plugins=attrs.evolve(host_config.plugins, slots=claw.SlotsConfig(**slots)),
    )


def _engine_plugin(plugin_id: str, engine_id: str) -> claw.Plugin:
    def register(api: claw.PluginApi) -> None:
        api.register_context_engine(engine_id, lambda ctx: object())

    return claw.Plugin(id=plugin_id, register=register)


def _memory_plugin(plugin_id: str, capability: object = None) -> claw.Plugin:
    def register(api: claw.PluginApi) -> None:
        api.register_memory_capability(capability if capability is not None else object())

    return claw.Plugin(id=plugin_id, register=register)


async def test_default_slots_are_the_legacy_engine_and_no_memory(
    host_config: claw.HostConfig,
) -> None:
    async with claw.open_host(host_config) as host:
        assert host.slots.context_engine == "legacy"
        assert host.slots.context_engine_plugin is None
        assert host.slots.memory_plugin is None
        assert host.memory_capability() is None


async def test_configured_engine_and_memory_are_selected(host_config: claw.HostConfig) -> None:
    cap = object()
    config = _config(host_config, context_engine="lossless", memory="mem")
    plugins = [_engine_plugin("lossless-claw", "lossless"), _memory_plugin("mem", cap)]
    async with claw.open_host(config, plugins=plugins) as host:
        assert host.slots.context_engine == "lossless"
        assert host.slots.context_engine_plugin == "lossless-claw"
        assert host.slots.memory_plugin == "mem"
        assert host.memory_capability() is cap


async def test_unselected_memory_capabilities_stay_loaded_as_sidecars(
    host_config: claw.HostConfig,
) -> None:
    config = _config(host_config, memory="mem-b")
    plugins = [_memory_plugin("mem-a"), _memory_plugin("mem-b")]
    async with claw.open_host(config, plugins=plugins) as host:
        assert host.slots.memory_plugin == "mem-b"
        assert host.slots.memory_sidecars == ("mem-a",)


async def test_registering_an_occupied_engine_id_names_both_plugins(
    host_config: claw.HostConfig,
) -> None:
    plugins = [_engine_plugin("first", "shared"), _engine_plugin("second", "shared")]
    with pytest.raises(claw.SlotConflictError, match='"first".*"second"'):
        async with claw.open_host(host_config, plugins=plugins):
            pass  # pragma: no cover


async def test_a_second_memory_capability_from_one_plugin_conflicts(
    host_config: claw.HostConfig,
) -> None:
    def register(api: claw.PluginApi) -> None:
        api.register_memory_capability(object())
        api.register_memory_capability(object())

    with pytest.raises(claw.SlotConflictError, match='"twice"'):
        async with claw.open_host(
            host_config, plugins=[claw.Plugin(id="twice", register=register)]
        ):
            pass  # pragma: no cover


async def test_the_legacy_engine_id_cannot_be_taken(host_config: claw.HostConfig) -> None:
    with pytest.raises(claw.SlotConflictError, match="legacy"):
        async with claw.open_host(host_config, plugins=[_engine_plugin("p", "legacy")]):
            pass  # pragma: no cover


async def test_selecting_an_unregistered_engine_is_a_config_error_at_start(
    host_config: claw.HostConfig,
) -> None:
    with pytest.raises(claw.ConfigError, match=r"plugins\.slots\.context_engine.*'nope'"):
        async with claw.open_host(_config(host_config, context_engine="nope")):
            pass  # pragma: no cover


async def test_selecting_an_unregistered_memory_plugin_is_a_config_error_at_start(
    host_config: claw.HostConfig,
) -> None:
    with pytest.raises(claw.ConfigError, match=r"plugins\.slots\.memory") as info:
        async with claw.open_host(_config(host_config, memory="ghost")):
            pass  # pragma: no cover
    assert info.value.key_path == "plugins.slots.memory"
    assert info.value.value == "ghost"


async def test_a_disabled_plugin_is_not_loaded(host_config: claw.HostConfig) -> None:
    calls: list[str] = []

    def register(api: claw.PluginApi) -> None:
        calls.append(api.plugin_id)

    config = claw.HostConfig.from_mapping(
        {"plugins": {"entries": {"off": {"enabled": False}}, "discover": False}},
        workspace_dir=host_config.workspace_dir,
        state_dir=host_config.resolved_state_dir,
    )
    async with claw.open_host(config, plugins=[claw.Plugin(id="off", register=register)]) as host:
        assert calls == []
        assert "off" not in host.plugin_registry.plugins


async def test_undeclared_embedding_provider_is_a_contract_error(
    host_config: claw.HostConfig,
) -> None:
    def register(api: claw.PluginApi) -> None:
        api.register_embedding_provider(_Embedder(id="sneaky"))

    plugin = claw.Plugin(
        id="emb", register=register, contracts=claw.PluginContracts(embedding_providers=("ok",))
    )
    with pytest.raises(claw.ContractError, match='"sneaky".*contracts.embedding_providers'):
        async with claw.open_host(host_config, plugins=[plugin]):
            pass  # pragma: no cover


async def test_undeclared_tool_is_a_contract_error(host_config: claw.HostConfig) -> None:
    def register(api: claw.PluginApi) -> None:
        api.register_tool(claw.Tool(name="memory_write", description="d", handler=_echo))

    plugin = claw.Plugin(id="tools", register=register)
    with pytest.raises(claw.ContractError, match='"memory_write".*contracts.tools'):
        async with claw.open_host(host_config, plugins=[plugin]):
            pass  # pragma: no cover


async def test_declared_tools_and_providers_are_registered_with_their_owner(
    host_config: claw.HostConfig,
) -> None:
    def register(api: claw.PluginApi) -> None:
        api.register_tool(claw.Tool(name="memory_write", description="d", handler=_echo))
        api.register_embedding_provider(_Embedder(id="hash"))

    plugin = claw.Plugin(
        id="owner",
        register=register,
        contracts=claw.PluginContracts(embedding_providers=("hash",), tools=("memory_write",)),
    )
    async with claw.open_host(host_config, plugins=[plugin]) as host:
        (tool,) = host.plugin_registry.tools_named("memory_write")
        assert tool.plugin_id == "owner"
        assert host.plugin_registry.embedding_providers["hash"].plugin_id == "owner"


async def test_registration_after_loading_is_refused(host_config: claw.HostConfig) -> None:
    apis: list[claw.PluginApi] = []
    plugin = claw.Plugin(id="late", register=apis.append)
    async with claw.open_host(host_config, plugins=[plugin]):
        with pytest.raises(claw.ContractError, match="after loading finished"):
            apis[0].register_memory_capability(object())


async def test_plugins_get_a_facet_not_the_host(host_config: claw.HostConfig) -> None:
    apis: list[claw.PluginApi] = []
    async with claw.open_host(host_config, plugins=[claw.Plugin(id="p", register=apis.append)]):
        (api,) = apis
        assert not any(isinstance(v, claw.Host) for v in vars(api).values())
        assert not hasattr(api, "open_scope")
        with pytest.raises(TypeError):
            claw.PluginApi()


async def test_engine_factories_receive_config_and_dirs_context(
    host_config: claw.HostConfig,
) -> None:
    def register(api: claw.PluginApi) -> None:
        api.register_context_engine("e", lambda ctx: ctx)

    async with claw.open_host(host_config, plugins=[claw.Plugin(id="p", register=register)]) as h:
        factory = h.plugin_registry.context_engines["e"].factory
        ctx = factory(claw.ContextEngineFactoryContext(workspace_dir=host_config.workspace_dir))
        assert ctx.workspace_dir == host_config.workspace_dir
        assert ctx.config is None


def test_invalid_plugin_id_is_a_contract_error() -> None:
    with pytest.raises(claw.ContractError, match="plugin id"):
        claw.Plugin(id="Bad Id!", register=lambda api: None)


async def test_duplicate_plugin_ids_are_refused(host_config: claw.HostConfig) -> None:
    plugins = [claw.Plugin(id="x", register=lambda api: None)] * 2
    with pytest.raises(claw.ContractError, match='share the id "x"'):
        async with claw.open_host(host_config, plugins=plugins):
            pass  # pragma: no cover
