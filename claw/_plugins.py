"""Plugins, their manifests, the registration facet they receive, and the exclusive slots.

A plugin is a :class:`Plugin` value: an id, a manifest (:class:`PluginContracts`: the
embedding providers and tools it declares) and a ``register`` function. The host calls
``register(api)`` once, at start, with a :class:`PluginApi` facet bound to that plugin;
the facet is the plugin's only door into the host. Plugins never receive the host
itself, so they cannot mint capabilities.

Exclusive slots: one context engine and one memory capability are *selected* by
configuration (``[plugins.slots]``). Context engine ids are unique across plugins, and a
plugin registers at most one memory capability; a second registration for an occupied
place raises :class:`~claw.SlotConflictError` naming both plugins. Memory capabilities
of plugins that are not selected stay loaded as *sidecars* (Memory Core's dreaming, for
example) unless explicitly disabled.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import logging
import re
import time
import types
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ._errors import ContractError, SlotConflictError
from ._util import NoPublicConstructor, final
from ._workers import WorkerPool

if TYPE_CHECKING:
    from ._capabilities import MemoryCallerContext
    from ._config import PluginsConfig
    from ._embeddings import EmbeddingProvider
    from ._transcript_reader import TranscriptReader
    from .memory._types import MemoryProvenance
    from .memory_files import MemoryFiles

logger = logging.getLogger("claw.host")

ENTRY_POINT_GROUP = "claw.plugins"

_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


def _valid_id(kind: str) -> Callable[[object, attrs.Attribute[Any], str], None]:
    def check(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
        if not isinstance(value, str) or not _ID_RE.match(value):
            raise ContractError(
                f"{kind} id {value!r} is invalid: use 1-64 lowercase letters, digits, '.', '_' "
                "or '-', starting with a letter or digit"
            )

    return check


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise ContractError(f"expected a sequence of names, not the string {value!r}")
    return tuple(value)


@attrs.frozen
class PluginContracts:
    """A plugin's manifest: what it declares it will register.

    Registering an embedding provider or a tool that is not declared here raises
    :class:`~claw.ContractError`, so a manifest is an honest list of what the plugin
    brings.
    """

    embedding_providers: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    tools: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)


@attrs.frozen
class Plugin:
    """A plugin: an id, a manifest, and the function that registers what it provides."""

    id: str = attrs.field(validator=_valid_id("plugin"))
    register: Callable[[PluginApi], None]
    contracts: PluginContracts = attrs.field(factory=PluginContracts)
    name: str | None = None
    version: str = "0"


@attrs.frozen
class ContextEngineFactoryContext:
    """What a context engine factory receives: optional construction-time settings."""

    config: Mapping[str, Any] | None = None
    agent_dir: Path | None = None
    workspace_dir: Path | None = None


ContextEngineFactory = Callable[[ContextEngineFactoryContext], Any]


@attrs.frozen
class Tool:
    """An agent tool: a name the model calls, a JSON schema for its arguments, a handler.

    ``handler(context, arguments)`` is awaited with the run's tool context and the
    parsed arguments and returns the tool's text result. ``read_only`` tools cannot
    persist anything (the flush's lookup tools must be read-only).
    """

    name: str = attrs.field(validator=_valid_id("tool"))
    description: str
    handler: Callable[[Any, Mapping[str, Any]], Awaitable[str]]
    parameters: Mapping[str, Any] = attrs.field(factory=lambda: {"type": "object"})
    read_only: bool = False


@attrs.frozen
class RegisteredTool:
    """A tool together with the plugin that registered it (its owner)."""

    plugin_id: str
    tool: Tool

    @property
    def name(self) -> str:
        return self.tool.name


@attrs.frozen
class RegisteredEngine:
    """A context engine factory together with the plugin that registered it."""

    plugin_id: str
    engine_id: str
    factory: ContextEngineFactory


@attrs.frozen
class RegisteredEmbeddingProvider:
    """An embedding provider together with the plugin that registered it."""

    plugin_id: str
    provider: EmbeddingProvider


@attrs.define
class PluginRegistry:
    """The host's record of what every loaded plugin registered (host-internal)."""

    plugins: dict[str, Plugin] = attrs.field(factory=dict)
    context_engines: dict[str, RegisteredEngine] = attrs.field(factory=dict)
    memory_capabilities: dict[str, Any] = attrs.field(factory=dict)
    embedding_providers: dict[str, RegisteredEmbeddingProvider] = attrs.field(factory=dict)
    tools: list[RegisteredTool] = attrs.field(factory=list)
    services: list[tuple[str, Callable[..., Awaitable[None]]]] = attrs.field(factory=list)

    def tools_named(self, name: str) -> list[RegisteredTool]:
        """Every registered tool called ``name``, whoever owns it."""
        return [t for t in self.tools if t.tool.name == name]

    def tools_of(self, plugin_id: str, name: str | None = None) -> list[RegisteredTool]:
        """Every tool ``plugin_id`` registered (called ``name``, when given)."""
        return [
            t
            for t in self.tools
            if t.plugin_id == plugin_id and (name is None or t.tool.name == name)
        ]


@final
class PluginApi(metaclass=NoPublicConstructor):
    """The facet a plugin's ``register`` function receives: its only door into the host.

    Registration is open only while ``register`` runs; afterwards the register methods
    raise :class:`~claw.ContractError`. The facet also gives the plugin its own config
    entry, the host's shared worker pool and a logger named after the plugin.
    """

    def __init__(
        self,
        plugin: Plugin,
        registry: PluginRegistry,
        *,
        config: Mapping[str, Any],
        workers: WorkerPool,
        workspace_dir: Path,
        state_dir: Path,
        transcripts: TranscriptReader,
        memory_files: MemoryFiles | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._plugin = plugin
        self._registry: PluginRegistry | None = registry
        self._embedding_providers: Mapping[str, RegisteredEmbeddingProvider] = (
            types.MappingProxyType(registry.embedding_providers)
        )
        self._open = True
        self.config: Mapping[str, Any] = config
        self.workers: WorkerPool = workers
        self.workspace_dir: Path = workspace_dir
        self.state_dir: Path = state_dir
        self.logger: logging.Logger = logging.getLogger(f"claw.plugins.{plugin.id}")
        #: Read-only session transcripts (usable once the host is open).
        self.transcripts: TranscriptReader = transcripts
        #: The host's wall clock (seconds since the epoch): what stamps transcript
        #: entries and names daily notes, so "ten days ago" in a search means ten days
        #: before this clock's now (a harness's fixed clock included).
        self.clock: Callable[[], float] = clock
        # The plugin's own view of the writer, made once (every search reads it).
        self._memory_files = (
            memory_files.for_plugin(plugin.id) if memory_files is not None else None
        )

    @property
    def memory_files(self) -> MemoryFiles:
        """The host's writer of workspace memory files: the only way a plugin changes one.

        Appends, inserts, forgets (with undo) and restores, under the workspace's writer
        lock, recorded with the caller's provenance (see :mod:`claw.memory_files`).
        """
        if self._memory_files is None:
            raise ContractError(f'plugin "{self.plugin_id}" was loaded without memory files')
        return self._memory_files

    def describe_writer(
        self, caller: MemoryCallerContext, *, flush_id: str | None = None, tool: str | None = None
    ) -> MemoryProvenance:
        """Who ``caller`` is, as the host records a memory write's provenance.

        For a provider that keeps its own records (and stores who wrote each): the host
        reads it from the caller's authority; ``tool`` names this plugin's tool the write
        came through, ``flush_id`` the flush it belongs to.
        """
        return self.memory_files.describe(caller, flush_id=flush_id, tool=tool)

    @property
    def plugin_id(self) -> str:
        """The id of the plugin this facet belongs to."""
        return self._plugin.id

    def _close(self) -> None:
        # After loading, the facet keeps only a read-only view of the embedding
        # providers: a plugin that holds on to its facet cannot rewrite what other
        # plugins registered.
        self._open = False
        self._registry = None

    def _check_open(self, what: str) -> PluginRegistry:
        if not self._open or self._registry is None:
            raise ContractError(
                f'plugin "{self.plugin_id}" tried to register {what} after loading finished; '
                "register everything from the plugin's register function"
            )
        return self._registry

    def register_context_engine(self, engine_id: str, factory: ContextEngineFactory) -> None:
        """Register a context engine under ``engine_id`` (unique across plugins)."""
        registry = self._check_open(f'context engine "{engine_id}"')
        _valid_id("context engine")(None, None, engine_id)  # type: ignore[arg-type]
        if engine_id == "legacy":
            raise SlotConflictError(
                f'plugin "{self.plugin_id}" cannot register context engine "legacy": '
                "that id belongs to the built-in legacy engine"
            )
        existing = registry.context_engines.get(engine_id)
        if existing is not None:
            raise SlotConflictError(
                f'context engine "{engine_id}" is already registered by plugin '
                f'"{existing.plugin_id}"; plugin "{self.plugin_id}" cannot register it too'
            )
        if not callable(factory):
            raise ContractError(
                f'plugin "{self.plugin_id}": the factory of context engine "{engine_id}" '
                "is not callable"
            )
        registry.context_engines[engine_id] = RegisteredEngine(
            plugin_id=self.plugin_id, engine_id=engine_id, factory=factory
        )

    def register_memory_capability(self, capability: Any) -> None:
        """Register this plugin's memory capability (at most one per plugin)."""
        registry = self._check_open("a memory capability")
        if self.plugin_id in registry.memory_capabilities:
            raise SlotConflictError(
                f'plugin "{self.plugin_id}" already registered a memory capability; '
                "a plugin registers at most one"
            )
        registry.memory_capabilities[self.plugin_id] = capability

    def register_embedding_provider(self, provider: EmbeddingProvider) -> None:
        """Register an embedding provider the manifest declares."""
        provider_id = getattr(provider, "id", None)
        registry = self._check_open(f'embedding provider "{provider_id}"')
        if provider_id not in self._plugin.contracts.embedding_providers:
            raise ContractError(
                f'plugin "{self.plugin_id}" registered embedding provider "{provider_id}", '
                "which its manifest does not declare (contracts.embedding_providers)"
            )
        existing = registry.embedding_providers.get(provider_id)
        if existing is not None:
            raise SlotConflictError(
                f'embedding provider "{provider_id}" is already registered by plugin '
                f'"{existing.plugin_id}"; plugin "{self.plugin_id}" cannot register it too'
            )
        registry.embedding_providers[provider_id] = RegisteredEmbeddingProvider(
            plugin_id=self.plugin_id, provider=provider
        )

    def register_tool(self, tool: Tool) -> None:
        """Register an agent tool the manifest declares; the tool is owned by this plugin."""
        registry = self._check_open(f'tool "{getattr(tool, "name", tool)}"')
        if not isinstance(tool, Tool):
            raise ContractError(
                f'plugin "{self.plugin_id}" registered {type(tool).__name__}, not a claw.Tool'
            )
        if tool.name not in self._plugin.contracts.tools:
            raise ContractError(
                f'plugin "{self.plugin_id}" registered tool "{tool.name}", which its manifest '
                "does not declare (contracts.tools)"
            )
        if any(t.tool.name == tool.name for t in registry.tools_of(self.plugin_id)):
            raise ContractError(f'plugin "{self.plugin_id}" registered tool "{tool.name}" twice')
        registry.tools.append(RegisteredTool(plugin_id=self.plugin_id, tool=tool))

    def register_service(self, name: str, service: Callable[..., Awaitable[None]]) -> None:
        """Run ``await service(task_status=...)`` in the host's nursery while the host is open.

        The service calls ``task_status.started()`` once ready; it is cancelled when the
        host closes, so it owns its resources with ``try``/``finally``.
        """
        registry = self._check_open(f'service "{name}"')
        registry.services.append((f"{self.plugin_id}:{name}", service))

    def get_embedding_provider(self, provider_id: str) -> EmbeddingProvider | None:
        """Look up a registered embedding provider by id (any plugin's)."""
        found = self._embedding_providers.get(provider_id)
        return found.provider if found is not None else None


def load_plugins(
    explicit: Sequence[Plugin],
    config: PluginsConfig,
    *,
    workers: WorkerPool,
    workspace_dir: Path,
    state_dir: Path,
    transcripts: Callable[[], TranscriptReader],
    memory_files: MemoryFiles | None = None,
    clock: Callable[[], float] = time.time,
) -> PluginRegistry:
    """Run the ``register`` of ``explicit`` and the discovered plugins; what they registered.

    An explicit plugin wins over a discovered one with the same id; a plugin that
    ``plugins.entries`` disables is not loaded. Each plugin's facet gets its config
    entry, the shared worker pool, a transcript reader of its own (``transcripts``
    makes one), the workspace's memory-file writer and the host's wall clock, and is
    closed when ``register`` returns.
    """
    registry = PluginRegistry()
    candidates: list[Plugin] = list(explicit)
    if config.discover:
        candidates.extend(discover_plugins({p.id for p in explicit}))
    for plugin in candidates:
        if not isinstance(plugin, Plugin):
            raise ContractError(f"{plugin!r} is not a claw.Plugin")
        if plugin.id in registry.plugins:
            raise ContractError(f'two plugins share the id "{plugin.id}"')
        entry = config.entry(plugin.id)
        if not entry.enabled:
            logger.info("plugin %s is disabled by plugins.entries.%s", plugin.id, plugin.id)
            continue
        registry.plugins[plugin.id] = plugin
        api = PluginApi._create(
            plugin,
            registry,
            config=entry.config,
            workers=workers,
            workspace_dir=workspace_dir,
            state_dir=state_dir,
            transcripts=transcripts(),
            memory_files=memory_files,
            clock=clock,
        )
        try:
            plugin.register(api)
        finally:
            api._close()
    for plugin_id in config.entries:
        if plugin_id not in registry.plugins and config.entries[plugin_id].enabled:
            near = difflib.get_close_matches(plugin_id, list(registry.plugins), n=1)
            logger.warning(
                "plugins.entries.%s configures a plugin that is not loaded%s",
                plugin_id,
                f" (did you mean {near[0]!r}?)" if near else "",
            )
    return registry


def discover_plugins(skip: set[str]) -> list[Plugin]:
    """The plugins the ``claw.plugins`` entry-point group names (ids in ``skip`` left out)."""
    found: list[Plugin] = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in skip:
            continue
        try:
            plugin = ep.load()
        except Exception as exc:
            raise ContractError(
                f'plugin entry point "{ep.name}" ({ep.value}) failed to load: {exc}'
            ) from exc
        if not isinstance(plugin, Plugin):
            raise ContractError(
                f'plugin entry point "{ep.name}" ({ep.value}) is a {type(plugin).__name__}, '
                "not a claw.Plugin"
            )
        if plugin.id in skip:
            continue
        found.append(plugin)
    return found
