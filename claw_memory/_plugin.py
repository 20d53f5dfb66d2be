"""The Memory Core plugin object: configuration, embedders, the index service.

``claw_memory.plugin`` (id ``memory-core``) is discovered through the ``claw.plugins``
entry point and selected into the memory slot by default. It registers:

* its embedding providers (``claw-static``, the built-in semantic default: static
  token vectors distilled from MiniLM, numpy only; ``claw-hash``, deterministic feature
  hashing for tests and tiny installs; ``openai-compatible`` and
  ``sentence-transformers`` when configured), declared in its manifest;
* its memory capability: the provider-neutral ``provider_runtime``, the legacy
  file-shaped ``runtime``, ``authorize_search_hits`` on both, ``public_artifacts``,
  ``recall_tool_names`` and the async memory prompt preparation;
* the agent tools ``memory_search``, ``memory_get`` and ``memory_add`` (the write
  path, through the same operation as ``host.memory.add``);
* a service that owns one index per agent (opened on first use under
  ``<state_dir>/memory/<agent_id>``) and closes them when the host closes.

Configuration lives under ``[plugins.entries.memory-core.config]``: every
:class:`MemoryCoreSettings` field, plus ``embedder`` (the id of any registered
embedding provider, from any plugin: ``"claw-static"`` by default, ``"claw-hash"``,
``"openai-compatible"`` or ``"sentence-transformers"`` built from ``embedding``, or
``"none"``), ``embedding``
(the options of the chosen remote or local model), ``deny_sandboxed`` (refuse sandboxed
sessions) and ``watch``/``watch_interval`` (a polling watcher for long-running hosts).
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import attrs
import trio

from claw.plugin_sdk import (
    ConfigError,
    EmbeddingProvider,
    Plugin,
    PluginApi,
    PluginContracts,
    TranscriptReader,
    WorkerPool,
)
from claw.plugin_sdk.search import (
    HashEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    StaticEmbedder,
)

from ._index import MemoryIndex, open_memory_index
from ._runtime import build_capability
from ._settings import MemoryCoreSettings
from ._sync import SyncProgress
from ._tools import memory_tools
from ._transcripts import TranscriptSession, TranscriptTurn

PLUGIN_ID = "memory-core"
EMBEDDERS = ("claw-static", "claw-hash", "openai-compatible", "sentence-transformers")
#: The embedding provider Memory Core uses when its config names none.
DEFAULT_EMBEDDER = "claw-static"
TOOLS = ("memory_search", "memory_get", "memory_add")
_EXTRA_KEYS = frozenset(
    {"embedder", "embedding", "deny_sandboxed", "watch", "watch_interval", "max_open_indexes"}
)
_DIR_SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_MAX_DIR_NAME = 120
_HASH_CHARS = 40


def agent_of_dir_name(name: str) -> str | None:
    """The agent id :func:`agent_dir_name` made ``name`` from, or ``None`` when it cannot
    be told (a long id's name ends in a hash) or ``name`` is no such name."""
    if name == "%":
        return ""
    if "~" in name:
        return None
    raw = bytearray()
    i = 0
    while i < len(name):
        c = name[i]
        if c == "%":
            try:
                raw.append(int(name[i + 1 : i + 3], 16))
            except ValueError:
                return None
            i += 3
        elif c in _DIR_SAFE:
            raw.extend(c.encode())
            i += 1
        else:
            return None
    try:
        agent = raw.decode("utf-8", errors="surrogatepass")
    except UnicodeDecodeError:
        return None
    return agent if agent_dir_name(agent) == name else None


def agent_dir_name(agent_id: str) -> str:
    """The directory name of an agent's index: injective, and safe on any file system.

    Lowercase ASCII letters, digits, ``_`` and ``-`` stand for themselves; every other
    character is its UTF-8 bytes as ``%XX`` (upper-case hex), so ``..``, ``a/b``,
    ``a_b`` and ``a b`` are four different names, none of them a path, and no two
    names differ only by case. A name longer than 120 characters keeps a prefix and
    ends in ``~`` and a SHA-256 prefix of the id (``~`` appears in no other name).
    The empty id is ``%``, which no other id produces.
    """
    if not agent_id:
        return "%"
    name = "".join(
        c
        if c in _DIR_SAFE
        else "".join(f"%{b:02X}" for b in c.encode("utf-8", errors="surrogatepass"))
        for c in agent_id
    )
    if len(name) <= _MAX_DIR_NAME:
        return name
    digest = hashlib.sha256(agent_id.encode("utf-8", errors="surrogatepass")).hexdigest()
    return f"{name[: _MAX_DIR_NAME - _HASH_CHARS - 1]}~{digest[:_HASH_CHARS]}"


@attrs.frozen
class MemoryCoreConfig:
    """Parsed ``[plugins.entries.memory-core.config]``."""

    settings: MemoryCoreSettings
    embedder: str = DEFAULT_EMBEDDER
    embedding: Mapping[str, Any] = attrs.field(factory=dict)
    deny_sandboxed: bool = False
    watch: bool = False
    watch_interval: float = 2.0
    max_open_indexes: int = 8

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> MemoryCoreConfig:
        """Parse and validate; errors name the key path under the plugin's config."""
        prefix = f"plugins.entries.{PLUGIN_ID}.config"
        known = {f.name for f in attrs.fields(MemoryCoreSettings)}
        settings_kwargs: dict[str, Any] = {"sources": ("memory", "sessions")}
        for key, value in data.items():
            if key in _EXTRA_KEYS:
                continue
            if key not in known:
                raise ConfigError(
                    f"{prefix}.{key}",
                    f"unknown key (known keys: {', '.join(sorted(known | _EXTRA_KEYS))})",
                    value=value,
                )
            settings_kwargs[key] = tuple(value) if isinstance(value, list) else value
        try:
            settings = MemoryCoreSettings(**settings_kwargs)
        except ConfigError as exc:
            # The settings name their own fields ``memory_core.<name>``; under the plugin's
            # table the key path is ``<prefix>.<name>``, as the user wrote it.
            key = exc.key_path.removeprefix("memory_core.")
            raise ConfigError(f"{prefix}.{key}", str(exc).split(": ", 1)[-1]) from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(prefix, str(exc)) from None
        embedder = data.get("embedder", DEFAULT_EMBEDDER)
        if not isinstance(embedder, str) or not embedder:
            raise ConfigError(
                f"{prefix}.embedder",
                "expected the id of a registered embedding provider, or none",
                value=embedder,
            )
        embedding = data.get("embedding", {})
        if not isinstance(embedding, Mapping):
            raise ConfigError(f"{prefix}.embedding", "expected a table", value=embedding)
        flags = {}
        for key in ("deny_sandboxed", "watch"):
            value = data.get(key, False)
            if not isinstance(value, bool):
                raise ConfigError(f"{prefix}.{key}", "expected true or false", value=value)
            flags[key] = value
        interval = data.get("watch_interval", 2.0)
        if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
            raise ConfigError(
                f"{prefix}.watch_interval", "expected a positive number of seconds", value=interval
            )
        max_open = data.get("max_open_indexes", 8)
        if isinstance(max_open, bool) or not isinstance(max_open, int) or max_open < 1:
            raise ConfigError(
                f"{prefix}.max_open_indexes",
                "expected a positive number of agent indexes",
                value=max_open,
            )
        return cls(
            settings=settings,
            embedder=embedder,
            embedding=embedding,
            deny_sandboxed=flags["deny_sandboxed"],
            watch=flags["watch"],
            watch_interval=float(interval),
            max_open_indexes=max_open,
        )


def _build_remote_embedder(config: MemoryCoreConfig, api: PluginApi) -> EmbeddingProvider | None:
    prefix = f"plugins.entries.{PLUGIN_ID}.config.embedding"
    options = dict(config.embedding)
    if config.embedder == "openai-compatible":
        for key in ("base_url", "model", "dims"):
            if key not in options:
                raise ConfigError(f"{prefix}.{key}", "required for the openai-compatible embedder")
        key_env = options.pop("api_key_env", None)
        return OpenAIEmbedder(
            base_url=str(options.pop("base_url")),
            model=str(options.pop("model")),
            dims=int(options.pop("dims")),
            api_key=os.environ.get(str(key_env)) if key_env else None,
            **options,
        )
    if config.embedder == "sentence-transformers":
        if "model_path" not in options:
            raise ConfigError(f"{prefix}.model_path", "required for sentence-transformers")
        return SentenceTransformerEmbedder(
            str(options.pop("model_path")), workers=api.workers, **options
        )
    return None


@attrs.define(eq=False)
class _AgentTranscripts:
    """Memory Core's view of one agent's host transcripts (the SDK reader, adapted)."""

    reader: TranscriptReader
    agent_id: str

    def sessions_version(self) -> object:
        """The host reader's listing version (a :class:`VersionedTranscriptSource`):
        while it stands, a search lists no session of this agent."""
        return self.reader.sessions_version()

    async def list_sessions(self) -> Sequence[TranscriptSession]:
        return [
            TranscriptSession(
                agent_id=s.agent_id,
                session_key=s.session_key,
                session_id=s.session_id,
                change_token=s.change_token,
            )
            for s in await self.reader.list_sessions(agent_id=self.agent_id)
        ]

    async def read_turns(self, session: TranscriptSession) -> Sequence[TranscriptTurn]:
        return [
            TranscriptTurn(
                entry_id=t.entry_id,
                role=t.role,
                speaker=t.speaker,
                text=t.text,
                timestamp=t.timestamp,
            )
            for t in await self.reader.read_turns(session.session_id)
        ]


@attrs.define(eq=False)
class _OpenIndex:
    """One agent's open index, how many callers hold it, and how to close it."""

    index: MemoryIndex
    stack: AsyncExitStack
    watch_scope: trio.CancelScope | None = None
    users: int = 0
    #: The workspace purge mark the index scrubbed at (read from it on first use).
    purge_mark: int | None = None
    purge_lock: trio.Lock = attrs.field(factory=trio.Lock)

    async def aclose(self) -> None:
        if self.watch_scope is not None:
            self.watch_scope.cancel()
        with trio.CancelScope(shield=True):
            await self.stack.aclose()


class _IndexUse:
    """``async with service.use(agent_id) as index``: holds the index while inside.

    A class rather than ``@asynccontextmanager``: every search enters one, and a
    generator-based context manager cost several times as much to enter and leave.
    """

    __slots__ = ("_agent_id", "_check_purges", "_entry", "_progress", "_service", "_sync")

    def __init__(
        self,
        service: MemoryCoreService,
        agent_id: str,
        sync_on_open: bool,
        progress: SyncProgress | None,
        check_purges: bool,
    ) -> None:
        self._service = service
        self._agent_id = agent_id
        self._sync = sync_on_open
        self._progress = progress
        self._check_purges = check_purges
        self._entry: _OpenIndex | None = None

    async def __aenter__(self) -> MemoryIndex:
        if self._entry is not None:
            raise RuntimeError("this index use is already entered")
        self._entry = await self._service._hold(
            self._agent_id, self._sync, self._progress, self._check_purges
        )
        return self._entry.index

    async def __aexit__(self, *exc_info: object) -> None:
        entry = self._entry
        if entry is not None:
            self._entry = None
            self._service._let_go(entry)


@attrs.define(eq=False)
class MemoryCoreService:
    """Owns Memory Core's per-agent indexes for the life of the host.

    At most ``max_open_indexes`` are open at once: callers hold an index through
    :meth:`use`, and opening another agent's index first closes the least recently
    used one that nobody holds (waiting for one to be released when all are held).
    """

    api: PluginApi
    config: MemoryCoreConfig
    _indexes: OrderedDict[str, _OpenIndex] = attrs.field(factory=OrderedDict, init=False)
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)
    _running: bool = attrs.field(default=False, init=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _released: trio.Event = attrs.field(factory=trio.Event, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    @property
    def workspace_dir(self) -> Path:
        return self.api.workspace_dir

    def embedder(self) -> EmbeddingProvider | None:
        """The configured embedding provider, looked up in the host's one registry."""
        if self.config.embedder == "none":
            return None
        provider = self.api.get_embedding_provider(self.config.embedder)
        if provider is None:
            raise ConfigError(
                f"plugins.entries.{PLUGIN_ID}.config.embedder",
                f"embedding provider {self.config.embedder!r} is not registered",
                value=self.config.embedder,
            )
        return provider

    def index_dir(self, agent_id: str) -> Path:
        return self.api.state_dir / "memory" / agent_dir_name(agent_id)

    async def index_agents(self) -> tuple[str, ...]:
        """Every agent with an index in this state directory (open or not), plus the open
        ones: what a purge must reach. An agent whose directory name cannot be read back
        (an id longer than 120 characters) is left out, with a warning."""

        def listed() -> list[str]:
            root = self.api.state_dir / "memory"
            return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []

        agents = dict.fromkeys(self.open_agents())
        for name in await self.api.workers.run_sync(listed):
            agent = agent_of_dir_name(name)
            if agent is None:
                self.api.logger.warning(
                    "memory index %s: its agent cannot be told from its name; a purge "
                    "does not reach it (delete the directory to rebuild it)",
                    name,
                )
                continue
            agents.setdefault(agent)
        return tuple(agents)

    def open_agents(self) -> tuple[str, ...]:
        """The agents whose index is open, least recently used first."""
        return tuple(self._indexes)

    def use(
        self,
        agent_id: str,
        *,
        sync_on_open: bool = True,
        progress: SyncProgress | None = None,
        check_purges: bool = True,
    ) -> _IndexUse:
        """Hold the open index of ``agent_id`` (opened, and synced, on first use), as
        ``async with service.use(agent_id) as index``.

        ``sync_on_open=False`` is for a caller about to sync itself (an explicit
        reindex), so that its own sync does the work and reports it. ``progress``
        follows the sync of a first use (see :meth:`MemoryIndex.sync`). The index stays
        open while it is held; once released it may be closed to make room for another.

        Before handing it out this checks the workspace's purge mark (one ``stat``): a
        purge made through another state directory is then scrubbed from this index too
        (:mod:`claw_memory._purge`); ``check_purges=False`` is for the purge itself.
        """
        return _IndexUse(self, agent_id, sync_on_open, progress, check_purges)

    async def _hold(
        self,
        agent_id: str,
        sync_on_open: bool,
        progress: SyncProgress | None,
        check_purges: bool,
    ) -> _OpenIndex:
        """Open (on first use) and hold ``agent_id``'s index: :meth:`use`'s entry."""
        entry = self._indexes.get(agent_id)
        if entry is None:
            entry = await self._open(agent_id, sync_on_open, progress)
        else:
            self._indexes.move_to_end(agent_id)
        entry.users += 1
        try:
            if check_purges:
                await self._catch_up_purges(entry)
        except BaseException:
            self._let_go(entry)
            raise
        return entry

    def _let_go(self, entry: _OpenIndex) -> None:
        """Release one hold on ``entry``: :meth:`use`'s exit."""
        entry.users -= 1
        if entry.users == 0:
            self._released.set()

    async def _catch_up_purges(self, entry: _OpenIndex) -> None:
        # One stat of a small file, inline: every use of an index pays it, and a worker
        # hop would cost more than the stat.
        mark = self.api.memory_files.purge_mark_nowait()
        if entry.purge_mark is None:
            entry.purge_mark = await entry.index.purge_mark(mark)
        if mark > entry.purge_mark:
            async with entry.purge_lock:
                if mark > entry.purge_mark:
                    await entry.index.caught_up_with_purge(mark)
                    entry.purge_mark = mark

    def purge_checked(self, agent_id: str, mark: int) -> None:
        """Record that ``agent_id``'s open index scrubbed up to purge mark ``mark``."""
        entry = self._indexes.get(agent_id)
        if entry is not None:
            entry.purge_mark = mark

    async def _open(
        self, agent_id: str, sync_on_open: bool, progress: SyncProgress | None
    ) -> _OpenIndex:
        async with self._lock:
            existing = self._indexes.get(agent_id)
            if existing is not None:
                return existing
            while len(self._indexes) >= self.config.max_open_indexes:
                idle = next((k for k, e in self._indexes.items() if e.users == 0), None)
                if idle is None:
                    self._released = trio.Event()
                    await self._released.wait()
                    continue
                await self._indexes.pop(idle).aclose()
            if not self._running or self._closed:
                raise ConfigError(PLUGIN_ID, "Memory Core is not running (the host is closed)")
            stack = AsyncExitStack()
            try:
                index = await stack.enter_async_context(
                    open_memory_index(
                        workspace_dir=self.workspace_dir,
                        index_dir=self.index_dir(agent_id),
                        workers=self.api.workers,
                        # Synced below, where the first sync can report progress.
                        settings=attrs.evolve(self.config.settings, sync_on_open=False),
                        embedder=self.embedder(),
                        transcripts=_AgentTranscripts(self.api.transcripts, agent_id)
                        if "sessions" in self.config.settings.sources
                        else None,
                        # A search that notices changed sources syncs them here and
                        # answers from the current generation meanwhile.
                        background=self._nursery,
                    )
                )
                if sync_on_open and self.config.settings.sync_on_open:
                    await index.sync(progress=progress)
                entry = _OpenIndex(index=index, stack=stack)
                if self.config.watch and self._nursery is not None:
                    entry.watch_scope = trio.CancelScope()
                    await self._nursery.start(self._watch, index, entry.watch_scope)
            except BaseException:
                with trio.CancelScope(shield=True):
                    await stack.aclose()
                raise
            self._indexes[agent_id] = entry
            return entry

    async def _watch(
        self,
        index: MemoryIndex,
        scope: trio.CancelScope,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        with scope:
            await index.watch(interval=self.config.watch_interval, task_status=task_status)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run while the host is open; closes every index when cancelled.

        With ``watch = true`` each opened index gets a polling watcher (debounced) that
        keeps it in sync with its files for long-running hosts.
        """
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._running = True
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._closed = True
            self._nursery = None
            entries = list(self._indexes.values())
            self._indexes.clear()
            with trio.CancelScope(shield=True):
                for entry in reversed(entries):
                    await entry.aclose()


def builtin_embedders(workers: WorkerPool) -> tuple[EmbeddingProvider, ...]:
    """The embedding providers Memory Core always registers: the semantic default
    (``claw-static``; its table is read on first use) and ``claw-hash``."""
    return (StaticEmbedder(workers=workers), HashEmbedder(workers=workers))


def _register(api: PluginApi) -> None:
    config = MemoryCoreConfig.from_mapping(api.config)
    for provider in builtin_embedders(api.workers):
        api.register_embedding_provider(provider)
    remote = _build_remote_embedder(config, api)
    if remote is not None:
        api.register_embedding_provider(remote)
    service = MemoryCoreService(api=api, config=config)
    api.register_service("indexes", service.serve)
    api.register_memory_capability(build_capability(service))
    for tool in memory_tools():
        api.register_tool(tool)


plugin = Plugin(
    id=PLUGIN_ID,
    name="Memory Core",
    version="0.1.0",
    register=_register,
    contracts=PluginContracts(embedding_providers=EMBEDDERS, tools=TOOLS),
)
