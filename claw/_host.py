"""The host: owner of the root nursery, the capability registry, the plugins and the slots.

The embedding application opens a host with :func:`open_host` and is the only holder
of minting power: it opens host-owned scopes (:meth:`Host.open_scope`), each with a
child nursery, and mints capabilities inside them. Leaving a scope (normally, by error
or by cancellation) revokes everything minted in it, after its tasks have finished.
Plugins never see the host, only their :class:`~claw.PluginApi` facet.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import logging
import os
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AsyncExitStack,
    asynccontextmanager,
    contextmanager,
)
from typing import Any, TypeVar

import attrs
import trio

from ._capabilities import (
    CallerAuthority,
    Capability,
    CapabilityRegistry,
    ConversationRecallPass,
    HostAuthority,
    MemoryAudience,
    MemoryCallerContext,
    OperatorAuthority,
    SessionAuthority,
)
from ._config import HostConfig
from ._errors import ClawError, ConfigError, ContractError, HostClosedError
from ._events import EventLog
from ._plugins import Plugin, PluginApi, PluginRegistry
from ._runs import RECALL_STALE_REASON, AudienceLineage, Run, open_run, recall_current
from ._transcript_reader import TranscriptReader
from ._util import NoPublicConstructor, collapse_single_exception_group, final
from ._weak import WeakIdentityMap
from ._workers import InlineWorkerPool, ThreadWorkerPool, WorkerPool
from .context._engines import ContextEngineSlot
from .flush import FlushCoordinator
from .memory._runtime import MemoryRuntime
from .models import ModelRegistry, UserMessage, openai_compatible_provider
from .sessions import LineageLink, SessionRow
from .state import SessionStorage, StateBackend, TranscriptLedger
from .state.sqlite import SQLiteStateBackend
from .turns._runner import TurnResult, TurnRunner
from .turns._tools import ToolPolicy

logger = logging.getLogger("claw.host")

C = TypeVar("C", bound=Capability)

ENTRY_POINT_GROUP = "claw.plugins"
LEGACY_ENGINE_ID = "legacy"
MEMORY_CORE_ID = "memory-core"


@final
class HostScope(metaclass=NoPublicConstructor):
    """A host-owned scope: a child nursery and the capabilities minted for it.

    Everything minted through the scope is revoked when the scope closes. Tasks started
    in :attr:`nursery` live no longer than the scope.
    """

    def __init__(self, host: Host, name: str) -> None:
        self._host = host
        self.name: str = name
        self._nursery: trio.Nursery | None = None
        self._minted: list[weakref.ref[Capability]] = []
        self._closed = False

    @property
    def nursery(self) -> trio.Nursery:
        """The scope's nursery; tasks here end before the scope's capabilities are revoked."""
        if self._nursery is None:
            raise HostClosedError(
                f"scope {self.name!r} has no nursery (a minting scope); use Host.open_scope"
            )
        return self._nursery

    @property
    def closed(self) -> bool:
        """Whether the scope has closed (and revoked what it minted)."""
        return self._closed

    def _mint(self, cls: type[C], **kwargs: Any) -> C:
        if self._closed:
            raise HostClosedError(f"scope {self.name!r} is closed; open a new scope to mint")
        self._host._check_open()
        cap = self._host._capabilities.mint(cls, scope_name=self.name, **kwargs)
        self._minted.append(weakref.ref(cap))
        return cap

    def mint_host_authority(self, operation: str) -> HostAuthority:
        """Mint the authority of a named host operation (``"status"``, ``"refresh"``, ...)."""
        if not isinstance(operation, str) or not operation:
            raise ValueError("a host authority needs a non-empty operation name")
        return self._mint(HostAuthority, operation=operation)

    def mint_operator_authority(
        self, scopes: Iterable[str], *, connection_id: str | None = None
    ) -> OperatorAuthority:
        """Mint an authenticated operator's authority with the given scopes."""
        scope_set = frozenset(scopes)
        if isinstance(scopes, str) or not all(isinstance(s, str) and s for s in scope_set):
            raise ValueError("operator scopes must be an iterable of non-empty strings")
        return self._mint(OperatorAuthority, scopes=scope_set, connection_id=connection_id)

    def mint_caller_context(
        self,
        authority: CallerAuthority,
        *,
        cancel_scope: trio.CancelScope | None = None,
        purpose: str = "read",
    ) -> MemoryCallerContext:
        """Mint the context a provider receives for ``authority``.

        ``cancel_scope`` stands for the request's abort signal (a fresh one if omitted);
        the context is stale once this scope closes or the authority goes stale.
        """
        self._host.verify(authority)
        return self._mint(
            MemoryCallerContext,
            authority=authority,
            cancel_scope=cancel_scope if cancel_scope is not None else trio.CancelScope(),
            purpose=purpose,
        )

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        registry = self._host._capabilities
        for ref in self._minted:
            cap = ref()
            if cap is not None:
                registry.revoke(cap, f"scope {self.name!r} closed")
        self._minted.clear()


@attrs.frozen
class SlotSelection:
    """Which plugins own the exclusive slots of a running host."""

    context_engine: str
    context_engine_plugin: str | None
    memory_plugin: str | None
    memory_sidecars: tuple[str, ...]


@final
class Host(metaclass=NoPublicConstructor):
    """A running claw host; obtained from :func:`open_host`, never constructed directly."""

    def __init__(self, config: HostConfig, workers: WorkerPool, state: StateBackend) -> None:
        self.config: HostConfig = config
        self.workers: WorkerPool = workers
        self._state = state
        self._capabilities = CapabilityRegistry()
        self._plugins = PluginRegistry()
        self._open = False
        self._closed = False
        self._nursery: trio.Nursery | None = None
        self._slots: SlotSelection | None = None
        self.memory: MemoryRuntime = MemoryRuntime(self)
        #: Wall-clock time source (seconds since the epoch) for stored timestamps.
        self.clock: Callable[[], float] = time.time
        self.events: EventLog = EventLog()
        self.models: ModelRegistry = ModelRegistry()
        self._sessions: SessionStorage | None = None
        self._transcript_readers: list[TranscriptReader] = []
        self._turns: TurnRunner | None = None
        self._flush: Any = None
        #: The lineage each minted audience was resolved at (see ``verify_committed``).
        #: Weak tables whose references lead nowhere (``claw._weak``): a
        #: ``WeakKeyDictionary`` would hand every audience to whoever holds one.
        self._lineages: WeakIdentityMap[MemoryAudience, AudienceLineage] = WeakIdentityMap()
        #: The conversations (and incarnations) each minted recall pass names.
        self._recalls: WeakIdentityMap[ConversationRecallPass, tuple[LineageLink, ...]] = (
            WeakIdentityMap()
        )

    @property
    def transcripts(self) -> TranscriptLedger:
        """The durable transcript store (entries, cursor API, accepted-turns ledger)."""
        if self._turns is None:
            raise HostClosedError("the host is not open")
        return self._turns.store

    @property
    def turns(self) -> TurnRunner:
        """The turn runner (host-internal; use :meth:`run_turn`)."""
        if self._turns is None:
            raise HostClosedError("the host is not open")
        return self._turns

    async def run_turn(
        self,
        session_key: str,
        message: UserMessage,
        *,
        sender_is_owner: bool,
        sandboxed: bool = False,
        tool_policy: ToolPolicy | None = None,
        model: str | None = None,
    ) -> TurnResult:
        """Admit ``message`` into ``session_key``, run the turn, commit it, maintain.

        ``sender_is_owner`` is the channel layer's trusted assertion about the sender.
        ``model`` pins an exact ``provider/model`` for this turn (no fallback chain).
        """
        self._check_open()
        return await self.turns.run_turn(
            session_key,
            message,
            sender_is_owner=sender_is_owner,
            sandboxed=sandboxed,
            tool_policy=tool_policy,
            model=model,
        )

    async def retry_turn(
        self,
        turn_id: str,
        *,
        sender_is_owner: bool,
        sandboxed: bool = False,
        tool_policy: ToolPolicy | None = None,
        model: str | None = None,
    ) -> TurnResult:
        """Run again a turn that failed before its terminal entry, on its recorded path."""
        self._check_open()
        return await self.turns.retry_turn(
            turn_id,
            sender_is_owner=sender_is_owner,
            sandboxed=sandboxed,
            tool_policy=tool_policy,
            model=model,
        )

    async def compact(self, session_key: str) -> Any:
        """Compact a session now (engine-owned or runtime compaction)."""
        self._check_open()
        return await self.turns.compact(session_key)

    def _new_transcript_reader(self) -> TranscriptReader:
        """A read-only transcript facet for one plugin (``api.transcripts``).

        It is given the stores' read paths, never the host: see the threat model.
        """
        reader = TranscriptReader(self._state.session_lister(self.workers))
        if self._turns is not None and not self._closed:
            reader._attach(self._turns.store)
        self._transcript_readers.append(reader)
        return reader

    async def _close_transcript_readers(self) -> None:
        for reader in self._transcript_readers:
            await reader._aclose()

    def _engine_slot(self) -> ContextEngineSlot:
        selected = self.slots.context_engine
        registered = self._plugins.context_engines.get(selected)
        entry = self.config.plugins.entry(registered.plugin_id) if registered else None
        return ContextEngineSlot(
            registered=registered,
            config=entry.config if entry is not None else None,
            workspace_dir=self.config.workspace_dir,
            state_dir=self.config.resolved_state_dir,
            events=self.events,
        )

    def _register_model_providers(self) -> None:
        for name, provider in self.config.models.providers.items():
            if provider.kind != "openai-compatible":
                raise ConfigError(
                    f"models.providers.{name}.kind",
                    f"unsupported provider kind {provider.kind!r} (supported: openai-compatible)",
                    value=provider.kind,
                )
            api_key = os.environ.get(provider.api_key_env) if provider.api_key_env else None
            self.models.register_provider(
                name,
                openai_compatible_provider(
                    provider.base_url,
                    api_key=api_key,
                    context_window=provider.context_window,
                    timeout=provider.timeout,
                ),
            )

    async def _post_compaction_refresh(self, row: SessionRow) -> None:
        """Ask the memory provider to refresh after a compaction; omission or denial is logged."""
        if self.slots.memory_plugin is None:
            return
        try:
            async with self.open_scope("post-compaction-refresh") as scope:
                ctx = scope.mint_caller_context(
                    scope.mint_host_authority("refresh"), purpose="refresh"
                )
                async with self.memory.open(ctx, agent_id=row.agent_id) as handle:
                    refreshed = await handle.refresh()
        except ClawError as exc:
            logger.info("post-compaction refresh of %s was refused: %s", row.session_key, exc)
            self.events.emit("memory.refresh_denied", row.session_key, error=str(exc))
            return
        if refreshed:
            self.events.emit("memory.refreshed", row.session_key)
        else:
            logger.info("memory provider %s offers no refresh()", self.slots.memory_plugin)
            self.events.emit("memory.refresh_omitted", row.session_key)

    @property
    def sessions(self) -> SessionStorage:
        """The durable session store (create, get, reset, reassign, spawn_child, delete)."""
        if self._sessions is None:
            raise HostClosedError("the host is not open")
        return self._sessions

    async def knows_agent(self, agent_id: str) -> bool:
        """Whether ``agent_id`` is one of this host's agents: the configured default
        agent, or an agent that has sessions. Callers that name an agent (an operator,
        a gateway client) may address only these."""
        if agent_id == self.config.default_agent_id:
            return True
        return await self.sessions.has_agent(agent_id)

    # -- lifecycle ---------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise HostClosedError("the host is closed")
        if not self._open:
            raise HostClosedError("the host is not open yet")

    @property
    def closed(self) -> bool:
        """Whether the host has shut down."""
        return self._closed

    @asynccontextmanager
    async def open_scope(self, name: str) -> AsyncIterator[HostScope]:
        """Open a host-owned scope with its own nursery; leaving it revokes what it minted."""
        self._check_open()
        scope = HostScope._create(self, name)
        try:
            with collapse_single_exception_group():
                async with trio.open_nursery() as nursery:
                    scope._nursery = nursery
                    yield scope
        finally:
            scope._close()

    @contextmanager
    def open_minting_scope(self, name: str) -> Iterator[HostScope]:
        """A scope without a nursery, for what one short piece of work mints.

        Leaving it revokes what it minted, as :meth:`open_scope` does; it has no
        :attr:`HostScope.nursery`, so it costs no task tree. The gateway mints each
        request's caller context in one.
        """
        self._check_open()
        scope = HostScope._create(self, name)
        try:
            yield scope
        finally:
            scope._close()

    def open_run(
        self,
        session_key: str,
        *,
        sender_is_owner: bool,
        sandboxed: bool = False,
        conversation_recall: Iterable[str] | None = None,
        recall_purpose: str = "active-memory-recall",
    ) -> AbstractAsyncContextManager[Run]:
        """Open one admitted run of ``session_key`` and mint its capabilities.

        ``sender_is_owner`` is the channel layer's trusted assertion about the sender.
        ``conversation_recall`` grants the run's tool context a recall pass for the
        named root conversations (for an Active Memory recall run, say). Everything
        minted is revoked when the block exits.
        """
        self._check_open()
        return open_run(
            self,
            session_key,
            sender_is_owner=sender_is_owner,
            sandboxed=sandboxed,
            conversation_recall=conversation_recall,
            recall_purpose=recall_purpose,
        )

    # -- capabilities ------------------------------------------------------------

    def _on_session_change(self, key: str) -> None:
        # Eager revocation: everything bound to this session's incarnation dies now,
        # not only at its next check.
        for reader in self._transcript_readers:
            reader._session_changed()
        self._capabilities.revoke_session(key, "a session in its lineage changed incarnation")

    def verify(self, capability: object, *, session_key: str | None = None) -> None:
        """Return ``None`` while ``capability`` is current; raise otherwise.

        :class:`~claw.ForgedCapabilityError` for anything this host did not mint,
        :class:`~claw.StaleCapabilityError` once it was revoked or its incarnation
        changed, :class:`~claw.CapabilityDeniedError` when it is bound to another
        session than ``session_key``.
        """
        self._capabilities.verify(capability, session_key=session_key)

    async def verify_committed(self, context: MemoryCallerContext) -> None:
        """The release check: :meth:`verify`, and then the database's word on the lineage.

        For a context whose authority carries a memory audience, re-read from the
        session store (not the mirror) the committed incarnation of every session in
        the audience's lineage, and of the lineages it was delegated from; if any
        changed (a reset, reassignment or delete committed by any process), revoke the
        audience and raise :class:`~claw.StaleCapabilityError`. A conversation recall
        pass is checked in the same read: if a conversation it names changed
        incarnation, the pass is revoked and the check raises. Fail closed: a store
        that cannot answer raises too. Authorities with neither carry no lineage and
        cost no read. May raise :class:`~claw.CurrencyPendingError` (retryable)
        while a write of this process to the lineage is in flight.
        """
        self.verify(context)
        authority = context.authority
        if not isinstance(authority, SessionAuthority):
            return
        audience, recall = authority.audience, authority.conversation_recall
        if audience is None and recall is None:
            return
        chain: list[AudienceLineage] = []
        link: MemoryAudience | None = audience
        while link is not None:
            entry = self._lineages.get(link)
            if entry is None:  # pragma: no cover - every minted audience is recorded
                self._capabilities.revoke(link, "its lineage is unknown")
                break
            chain.append(entry)
            link = entry.parent
        named = self._recalls.get(recall, ()) if recall is not None else ()
        keys = dict.fromkeys(
            [*(key for entry in chain for key in entry.keys), *(n.key for n in named)]
        )
        committed = await self.sessions.read_committed(keys)
        if audience is not None and not all(entry.current_in(committed) for entry in chain):
            self._capabilities.revoke(
                audience,
                "a session in its lineage changed incarnation (committed in the session store)",
            )
        if recall is not None and not recall_current(committed, named):
            self._capabilities.revoke(
                recall, f"{RECALL_STALE_REASON} (committed in the session store)"
            )
        # Raises for the revocation above, and for anything revoked while we read.
        self.verify(context)

    # -- plugins and slots -------------------------------------------------------

    @property
    def slots(self) -> SlotSelection:
        """The plugins selected into the exclusive slots."""
        if self._slots is None:
            raise HostClosedError("the host is not open yet")
        return self._slots

    @property
    def plugin_registry(self) -> PluginRegistry:
        """What the loaded plugins registered (read it; do not mutate it)."""
        return self._plugins

    def memory_capability(self) -> Any | None:
        """The selected memory plugin's capability, or ``None`` when no memory is selected."""
        selected = self.slots.memory_plugin
        return self._plugins.memory_capabilities.get(selected) if selected else None

    def _load_plugins(self, explicit: Sequence[Plugin]) -> None:
        plugins_cfg = self.config.plugins
        candidates: list[Plugin] = list(explicit)
        if plugins_cfg.discover:
            candidates.extend(_discover_plugins({p.id for p in explicit}))
        for plugin in candidates:
            if not isinstance(plugin, Plugin):
                raise ContractError(f"{plugin!r} is not a claw.Plugin")
            if plugin.id in self._plugins.plugins:
                raise ContractError(f'two plugins share the id "{plugin.id}"')
            entry = plugins_cfg.entry(plugin.id)
            if not entry.enabled:
                logger.info("plugin %s is disabled by plugins.entries.%s", plugin.id, plugin.id)
                continue
            self._plugins.plugins[plugin.id] = plugin
            api = PluginApi._create(
                plugin,
                self._plugins,
                config=entry.config,
                workers=self.workers,
                workspace_dir=self.config.workspace_dir,
                state_dir=self.config.resolved_state_dir,
                transcripts=self._new_transcript_reader(),
            )
            try:
                plugin.register(api)
            finally:
                api._close()
        for plugin_id in plugins_cfg.entries:
            if plugin_id not in self._plugins.plugins and plugins_cfg.entries[plugin_id].enabled:
                near = difflib.get_close_matches(plugin_id, list(self._plugins.plugins), n=1)
                logger.warning(
                    "plugins.entries.%s configures a plugin that is not loaded%s",
                    plugin_id,
                    f" (did you mean {near[0]!r}?)" if near else "",
                )
        self._slots = self._select_slots()

    def _select_slots(self) -> SlotSelection:
        slots = self.config.plugins.slots
        engine_id = slots.context_engine
        engine_plugin: str | None = None
        if engine_id != LEGACY_ENGINE_ID:
            registered = self._plugins.context_engines.get(engine_id)
            if registered is None:
                known = sorted([LEGACY_ENGINE_ID, *self._plugins.context_engines])
                raise ConfigError(
                    "plugins.slots.context_engine",
                    f"no registered context engine {engine_id!r} (registered: {', '.join(known)})",
                    value=engine_id,
                )
            engine_plugin = registered.plugin_id
        memory_id = slots.memory
        capabilities = self._plugins.memory_capabilities
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


def _discover_plugins(skip: set[str]) -> list[Plugin]:
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


STATE_BACKENDS_GROUP = "claw.state_backends"


def state_backend(config: HostConfig) -> StateBackend:
    """The backend ``config.state.backend`` names (see :class:`~claw.StateConfig`)."""
    name = config.state.backend
    if name == "sqlite":
        return SQLiteStateBackend(config.resolved_state_dir)
    found = [
        ep for ep in importlib.metadata.entry_points(group=STATE_BACKENDS_GROUP) if ep.name == name
    ]
    if not found:
        known = sorted(
            {
                "sqlite",
                *(ep.name for ep in importlib.metadata.entry_points(group=STATE_BACKENDS_GROUP)),
            }
        )
        raise ConfigError(
            "state.backend",
            f"no state backend {name!r} (known: {', '.join(known)}); install the package "
            f"that registers it in the {STATE_BACKENDS_GROUP!r} entry-point group",
            value=name,
        )
    try:
        factory = found[0].load()
        backend = factory(config)
    except ClawError:
        raise
    except Exception as exc:
        raise ConfigError(
            "state.backend",
            f"state backend {name!r} ({found[0].value}) failed to load: {exc}",
            value=name,
        ) from exc
    return backend  # type: ignore[no-any-return]


@asynccontextmanager
async def open_host(
    config: HostConfig | None = None,
    *,
    plugins: Sequence[Plugin] = (),
    workers: WorkerPool | None = None,
    clock: Callable[[], float] = time.time,
    state: StateBackend | None = None,
) -> AsyncIterator[Host]:
    """Open a host: load plugins, open the durable state, select slots, own a nursery.

    Any number of processes may open hosts on one state directory at once; each sees
    the others' session changes (see docs/architecture.md, "The process model").

    ``plugins`` are loaded in addition to those discovered through the ``claw.plugins``
    entry-point group (unless ``plugins.discover = false``); an explicit plugin wins
    over a discovered one with the same id. ``workers`` replaces the shared worker pool
    (the harness passes an inline pool). ``clock`` (seconds since the epoch) stamps
    sessions, transcript entries and flush plans; tests pass a fixed or stepping clock to
    make those timestamps deterministic. ``state`` replaces the durable-state backend
    that ``[state] backend`` selects (see :mod:`claw.state`). Before the host is handed
    out, turns a crashed process left in flight are closed as ``aborted``, and turns
    whose commit was interrupted are committed with their own keys.
    """
    config = config if config is not None else HostConfig()
    if workers is None:
        workers = (
            InlineWorkerPool()
            if config.workers.inline
            else ThreadWorkerPool(max_workers=config.workers.max_workers)
        )
    host = Host._create(config, workers, state if state is not None else state_backend(config))
    host.clock = clock
    try:
        async with AsyncExitStack() as stack:
            host._load_plugins(plugins)
            host._register_model_providers()
            stores = await stack.enter_async_context(host._state.open(workers=workers, clock=clock))
            host._sessions = stores.sessions
            host._sessions.add_listener(host._on_session_change)
            transcripts = stores.transcripts
            for reader in host._transcript_readers:
                reader._attach(transcripts)
            stack.push_async_callback(_shielded_close, host._close_transcript_readers)
            host._turns = TurnRunner(
                host=host,
                store=transcripts,
                slot=host._engine_slot(),
                models=host.models,
                locks=stores.session_locks,
            )
            stack.push_async_callback(host._turns.aclose)
            host._flush = FlushCoordinator(host)
            with collapse_single_exception_group():
                async with trio.open_nursery() as nursery:
                    host._nursery = nursery
                    host._open = True
                    try:
                        # Other processes' session changes reach the mirror (and revoke
                        # what they make stale) from here on.
                        await nursery.start(host._sessions.watch)
                        await nursery.start(transcripts.watch)
                        for name, service in host._plugins.services:
                            await nursery.start(service)
                            logger.debug("plugin service %s started", name)
                        await host._turns.recover()
                        yield host
                    finally:
                        host._open = False
                        nursery.cancel_scope.cancel()
    finally:
        host._closed = True
        host._open = False


async def _shielded_close(close: Callable[[], Awaitable[None]]) -> None:
    with trio.CancelScope(shield=True):
        await close()
