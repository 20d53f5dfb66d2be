"""The host: where the parts are built, and the application's handle on them.

:func:`open_host` builds every part of a running host once, completely, and hands each
the narrow collaborators it uses (see docs/architecture.md, "The parts and who builds
them"): the capability registry and the currency checker, the scopes, the run opener,
the memory guard, the workspace's memory-file writer, the flush coordinator, the turn
runner. The :class:`Host` it yields is the embedding application's handle on them, and
the only holder of minting power: it opens host-owned scopes (:meth:`Host.open_scope`),
each with a child nursery, and mints capabilities inside them. Leaving a scope
(normally, by error or by cancellation) revokes everything minted in it, after its
tasks have finished. Plugins never see the host, only their :class:`~claw.PluginApi`
facet; no part receives the host either.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    AsyncExitStack,
    asynccontextmanager,
)
from typing import Any

import attrs
import trio

from ._agents import Agents
from ._capabilities import CapabilityRegistry, MemoryCallerContext
from ._config import HostConfig, provider_api_key
from ._currency import Currency
from ._errors import ClawError, ConfigError
from ._events import EventLog
from ._extras import install_hint
from ._plugins import Plugin, PluginRegistry, load_plugins
from ._runs import Run, RunOpener
from ._scopes import HostScope, Lifecycle, Scopes
from ._slots import SlotSelection, SlotView, select_slots
from ._transcript_reader import TranscriptReader, TranscriptReaders
from ._util import NoPublicConstructor, collapse_single_exception_group, final
from ._workers import InlineWorkerPool, ThreadWorkerPool, WorkerPool
from .context import CompactResult
from .context._engines import ContextEngineSlot
from .flush import FlushCoordinator
from .memory._refresh import PostCompactionRefresh
from .memory._runtime import MemoryRuntime
from .memory._writes import describe_writer
from .memory_files import MemoryFiles
from .models import ModelRegistry, UserMessage, openai_compatible_provider
from .state import SessionLocks, SessionStorage, StateBackend, TranscriptLedger
from .state.sqlite import SQLiteStateBackend
from .turns._runner import TurnMaintenance, TurnResult, TurnRunner
from .turns._tools import ToolDispatch, ToolPolicy

logger = logging.getLogger("claw.host")


@attrs.frozen
class _Parts:
    """Everything ``open_host`` built, handed to the :class:`Host` in one piece."""

    config: HostConfig
    workers: WorkerPool
    clock: Callable[[], float]
    events: EventLog
    models: ModelRegistry
    plugins: PluginRegistry
    slots: SlotView
    lifecycle: Lifecycle
    currency: Currency
    scopes: Scopes
    runs: RunOpener
    sessions: SessionStorage
    agents: Agents
    memory: MemoryRuntime
    memory_files: MemoryFiles
    turns: TurnRunner
    readers: TranscriptReaders


@final
class Host(metaclass=NoPublicConstructor):
    """A running claw host; obtained from :func:`open_host`, never constructed directly."""

    def __init__(self, parts: _Parts) -> None:
        self._parts = parts
        self.config: HostConfig = parts.config
        self.workers: WorkerPool = parts.workers
        #: Wall-clock time source (seconds since the epoch) for stored timestamps.
        self.clock: Callable[[], float] = parts.clock
        self.events: EventLog = parts.events
        self.models: ModelRegistry = parts.models
        #: The memory guard: every route into the selected memory provider.
        self.memory: MemoryRuntime = parts.memory
        #: The one writer of the workspace's memory files (lock, journal, provenance).
        self.memory_files: MemoryFiles = parts.memory_files

    @property
    def sessions(self) -> SessionStorage:
        """The durable session store (create, get, reset, reassign, spawn_child, delete)."""
        return self._parts.sessions

    @property
    def transcripts(self) -> TranscriptLedger:
        """The durable transcript store (entries, cursor API, accepted-turns ledger)."""
        return self._parts.turns.store

    @property
    def turns(self) -> TurnRunner:
        """The turn runner (host-internal; use :meth:`run_turn`)."""
        return self._parts.turns

    @property
    def slots(self) -> SlotSelection:
        """The plugins selected into the exclusive slots."""
        return self._parts.slots.selection

    @property
    def plugin_registry(self) -> PluginRegistry:
        """What the loaded plugins registered (read it; do not mutate it)."""
        return self._parts.plugins

    @property
    def closed(self) -> bool:
        """Whether the host has shut down."""
        return self._parts.lifecycle.closed

    def _check_open(self) -> None:
        self._parts.lifecycle.check_open()

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

    async def compact(self, session_key: str) -> CompactResult:
        """Compact a session now (engine-owned or runtime compaction)."""
        self._check_open()
        return await self.turns.compact(session_key)

    def _new_transcript_reader(self) -> TranscriptReader:
        """A read-only transcript facet, as a plugin's ``api.transcripts`` (tests use it)."""
        return self._parts.readers.new()

    async def knows_agent(self, agent_id: str) -> bool:
        """Whether ``agent_id`` is one of this host's agents: the configured default
        agent, or an agent that has sessions. Callers that name an agent (an operator,
        a gateway client) may address only these."""
        return await self._parts.agents.knows(agent_id)

    # -- scopes, runs and capabilities -------------------------------------------

    def open_scope(self, name: str) -> AbstractAsyncContextManager[HostScope]:
        """Open a host-owned scope with its own nursery; leaving it revokes what it minted."""
        return self._parts.scopes.open(name)

    def open_minting_scope(self, name: str) -> AbstractContextManager[HostScope]:
        """A scope without a nursery, for what one short piece of work mints.

        Leaving it revokes what it minted, as :meth:`open_scope` does; it has no
        :attr:`HostScope.nursery`, so it costs no task tree. The gateway mints each
        request's caller context in one.
        """
        return self._parts.scopes.open_minting(name)

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
        return self._parts.runs.open(
            session_key,
            sender_is_owner=sender_is_owner,
            sandboxed=sandboxed,
            conversation_recall=conversation_recall,
            recall_purpose=recall_purpose,
        )

    def verify(self, capability: object, *, session_key: str | None = None) -> None:
        """Return ``None`` while ``capability`` is current; raise otherwise.

        :class:`~claw.ForgedCapabilityError` for anything this host did not mint,
        :class:`~claw.StaleCapabilityError` once it was revoked or its incarnation
        changed, :class:`~claw.CapabilityDeniedError` when it is bound to another
        session than ``session_key``.
        """
        self._parts.currency.verify(capability, session_key=session_key)

    async def verify_committed(self, context: MemoryCallerContext) -> None:
        """The release check: :meth:`verify`, and then the database's word on the lineage
        of the context's audience and recall pass (see :class:`claw._currency.Currency`)."""
        await self._parts.currency.verify_committed(context)

    def memory_capability(self) -> Any | None:
        """The selected memory plugin's capability, or ``None`` when no memory is selected."""
        return self._parts.slots.memory_capability()


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
        missing = isinstance(exc, ModuleNotFoundError) and name == "postgresql"
        hint = f"; {install_hint('postgres')}" if missing else ""
        raise ConfigError(
            "state.backend",
            f"state backend {name!r} ({found[0].value}) failed to load: {exc}{hint}",
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
    backend = state if state is not None else state_backend(config)
    lifecycle = Lifecycle()
    memory_files = _memory_files(config, workers, clock)
    try:
        async with AsyncExitStack() as stack:
            readers = TranscriptReaders(lambda: backend.session_lister(workers))
            registry = load_plugins(
                plugins,
                config.plugins,
                workers=workers,
                workspace_dir=config.workspace_dir,
                state_dir=config.resolved_state_dir,
                transcripts=readers.new,
                memory_files=memory_files,
                clock=clock,
            )
            slots = SlotView.of(select_slots(config.plugins, registry), registry)
            models = _model_registry(config)
            stores = await stack.enter_async_context(backend.open(workers=workers, clock=clock))
            sessions, transcripts = stores.sessions, stores.transcripts
            readers.attach(transcripts)
            stack.push_async_callback(_shielded_close, readers.aclose)
            parts = _build(
                config,
                workers=workers,
                clock=clock,
                models=models,
                registry=registry,
                slots=slots,
                lifecycle=lifecycle,
                sessions=sessions,
                transcripts=transcripts,
                locks=stores.session_locks,
                readers=readers,
                memory_files=memory_files,
            )
            stack.push_async_callback(parts.turns.aclose)
            with collapse_single_exception_group():
                async with trio.open_nursery() as nursery:
                    lifecycle.open()
                    try:
                        # Other processes' session changes reach the mirror (and revoke
                        # what they make stale) from here on.
                        await nursery.start(sessions.watch)
                        await nursery.start(transcripts.watch)
                        for name, service in registry.services:
                            await nursery.start(service)
                            logger.debug("plugin service %s started", name)
                        await parts.turns.recover()
                        yield Host._create(parts)
                    finally:
                        lifecycle.closing()
                        nursery.cancel_scope.cancel()
    finally:
        lifecycle.close()


def _build(
    config: HostConfig,
    *,
    workers: WorkerPool,
    clock: Callable[[], float],
    models: ModelRegistry,
    registry: PluginRegistry,
    slots: SlotView,
    lifecycle: Lifecycle,
    sessions: SessionStorage,
    transcripts: TranscriptLedger,
    locks: SessionLocks,
    readers: TranscriptReaders,
    memory_files: MemoryFiles,
) -> _Parts:
    """Build every part once, each with the narrow collaborators it uses."""
    events = EventLog()
    capabilities = CapabilityRegistry()
    currency = Currency(capabilities, sessions)

    def on_session_change(key: str) -> None:
        # Eager revocation: everything bound to this session's incarnation dies now,
        # not only at its next check.
        readers.session_changed()
        currency.revoke_session(key, "a session in its lineage changed incarnation")

    sessions.add_listener(on_session_change)
    scopes = Scopes(capabilities, lifecycle)
    runs = RunOpener(
        scopes=scopes,
        sessions=sessions,
        currency=currency,
        default_agent_id=config.default_agent_id,
    )
    agents = Agents(config.default_agent_id, sessions)
    memory = MemoryRuntime(currency, slots, lifecycle, agents)
    defaults = config.agents.defaults
    tools = ToolDispatch(workspace_dir=config.workspace_dir, currency=currency, memory=memory)
    flush = FlushCoordinator(
        defaults=defaults,
        workspace_dir=config.workspace_dir,
        transcripts=transcripts,
        slots=slots,
        models=models,
        workers=workers,
        events=events,
        tools=tools,
        clock=clock,
        memory_files=memory_files,
    )
    engine = slots.context_engines.get(slots.selection.context_engine)
    entry = config.plugins.entry(engine.plugin_id) if engine is not None else None
    turns = TurnRunner(
        store=transcripts,
        slot=ContextEngineSlot(
            registered=engine,
            config=entry.config if entry is not None else None,
            workspace_dir=config.workspace_dir,
            state_dir=config.resolved_state_dir,
            events=events,
        ),
        models=models,
        locks=locks,
        sessions=sessions,
        runs=runs,
        slots=slots,
        memory=memory,
        tools=tools,
        events=events,
        defaults=defaults,
        maintenance=TurnMaintenance(
            flush=flush, refresh=PostCompactionRefresh(memory, scopes, events)
        ),
    )
    return _Parts(
        config=config,
        workers=workers,
        clock=clock,
        events=events,
        models=models,
        plugins=registry,
        slots=slots,
        lifecycle=lifecycle,
        currency=currency,
        scopes=scopes,
        runs=runs,
        sessions=sessions,
        agents=agents,
        memory=memory,
        memory_files=memory_files,
        turns=turns,
        readers=readers,
    )


def _memory_files(
    config: HostConfig, workers: WorkerPool, clock: Callable[[], float]
) -> MemoryFiles:
    """The workspace's memory-file writer. Plugins and the flush receive it, so it holds
    only what it uses (the workers, the clock, how a caller becomes provenance), never the
    host."""
    return MemoryFiles.create(
        config.workspace_dir,
        workers=workers,
        describe=functools.partial(describe_writer, clock=clock),
        now=clock,
    )


def _model_registry(config: HostConfig) -> ModelRegistry:
    """The model registry with the providers ``[models.providers]`` configures."""
    models = ModelRegistry()
    for name, provider in config.models.providers.items():
        if provider.kind != "openai-compatible":
            raise ConfigError(
                f"models.providers.{name}.kind",
                f"unsupported provider kind {provider.kind!r} (supported: openai-compatible)",
                value=provider.kind,
            )
        api_key = provider_api_key(name, provider)
        models.register_provider(
            name,
            openai_compatible_provider(
                provider.base_url,
                api_key=api_key,
                context_window=provider.context_window,
                timeout=provider.timeout,
                provider=name,
            ),
        )
    return models


async def _shielded_close(close: Callable[[], Awaitable[None]]) -> None:
    with trio.CancelScope(shield=True):
        await close()
