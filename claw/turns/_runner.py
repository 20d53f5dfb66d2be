"""The turn runner: admit, run, commit, maintain.

``await host.run_turn(session_key, claw.UserMessage(text), sender_is_owner=...)``:

1. admits the user entry and records the turn in the durable ledger (one transaction),
   with a deterministic ``turn_id`` and ``advancement_key`` derived from the session
   id and the entry's position;
2. opens a run (:meth:`claw.Host.open_run`), which mints the run's capabilities;
3. completes the memory plugin's async prompt preparation, then assembles context
   through the active engine (or the legacy one) while the prompt snapshot is active;
4. calls the model, with the run's tools, in a loop bounded by ``max_tool_rounds``,
   appending entries up to the terminal entry; a context overflow flushes and
   compacts once, then retries;
5. commits the inclusive accepted turn to a durable engine (``commit_turn``,
   idempotent by ``advancement_key``) and records that in the ledger;
6. runs maintenance: the pre-compaction memory flush and compaction when thresholds
   say so, then the provider's optional refresh.

Turns of one session are serialised, across every process and host sharing the state:
a turn (with the flush and compaction it triggers) runs while the runner holds the
session's lock (:class:`~claw.state.SessionLocks`). The path a turn takes is decided once, at
admission, and recorded: the durable path (``commit_turn`` of the accepted turn) when
the configured engine declares the full durable admitted-turn contract, the legacy path
(the engine ingests each message; nothing is committed) otherwise. A retry of the turn
keeps its path, and the next logical turn decides again; the configured engine serves
both paths unless it is quarantined. A turn whose terminal entry was written but whose commit
was not (a crash in between) is committed with the same key before the session's next
turn, and at host start.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from .._config import AgentDefaultsConfig
from .._errors import ClawError, ConfigError, ContractError
from .._events import EventLog
from .._plugins import RegisteredTool
from .._runs import Run, RunOpener
from .._slots import SlotView
from ..context import (
    AfterTurnParams,
    AssembleParams,
    AssembleResult,
    BootstrapParams,
    CommitTurnParams,
    CommitTurnResult,
    CompactParams,
    CompactResult,
    ContextProjection,
    IngestBatchParams,
    IngestParams,
    MaintainParams,
    MemoryPromptSnapshot,
    active_prompt_snapshot,
    build_memory_system_prompt_addition,
    estimate_tokens,
    participates_in_durable_turns,
)
from ..context._engines import ContextEngineSlot, EngineFailedError, runtime_compaction_params
from ..flush import FlushCoordinator, FlushResult
from ..flush._timing import scaled_reserve_floor
from ..memory._runtime import MemoryRuntime
from ..models import (
    AssistantMessage,
    ContextOverflowError,
    Message,
    ModelRegistry,
    ToolCall,
    ToolResult,
    UserMessage,
)
from ..sessions import SessionRow
from ..sessions._errors import unknown_session
from ..state import SessionLocks, SessionStorage, TranscriptLedger
from ..state.sqlite._transcripts import parse_entry_id
from ._compaction import runtime_compaction
from ._ledger import AdmittedTurn, TurnIdTakenError, TurnLedgerError, TurnStatus
from ._tools import ToolDispatch, ToolPolicy, select_tools, tool_specs

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from ..models import ToolSpec

logger = logging.getLogger("claw.turns")

#: How many times an admission is tried when other processes take the next turn id.
_ADMISSION_ATTEMPTS = 8

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant with a durable memory."

Projection = Literal["per-turn", "bootstrapped", "reused"]


def advancement_key_for(session_id: str, first_seq: int) -> str:
    """The deterministic advancement key of the turn admitted at ``first_seq``."""
    digest = hashlib.sha256(f"claw-advance-v1\x1f{session_id}\x1f{first_seq}".encode())
    return "adv-" + digest.hexdigest()[:40]


@attrs.frozen
class TurnResult:
    """What one turn did."""

    turn_id: str
    advancement_key: str
    session_key: str
    session_id: str
    reply: AssistantMessage
    entry_ids: tuple[str, ...]
    engine_id: str
    model_ref: str | None
    commit: Literal["committed", "duplicate", "legacy", "failed", "stale"]
    path: Literal["durable", "legacy"] = "legacy"
    projection: Projection = "per-turn"
    compaction: CompactResult | None = None
    flush: FlushResult | None = None
    tool_rounds: int = 0


@attrs.frozen
class _FlushTurn:
    """What a flush inherits from the turn that triggered it: tool policy and model chain."""

    tool_policy: ToolPolicy | None
    model_refs: tuple[str, tuple[str, ...], bool]


@attrs.frozen
class _ThreadState:
    epoch: str
    projected: tuple[Message, ...]
    count: int
    tools: frozenset[str]


@attrs.define(eq=False)
class _TurnState:
    """What one turn carries from stage to stage (see :meth:`TurnRunner._execute`)."""

    turn: AdmittedTurn
    row: SessionRow
    run: Run
    engine: Any
    durable: bool
    primary: str
    fallbacks: tuple[str, ...]
    pinned: bool
    context_window: int
    tools: tuple[RegisteredTool, ...]
    specs: tuple[ToolSpec, ...]
    flush_turn: _FlushTurn
    entry_ids: list[str]
    messages: tuple[Message, ...] = ()
    system_prompt: str = ""
    projection: Projection = "per-turn"
    rounds: int = 0
    overflowed: bool = False
    model_ref: str | None = None
    flush: FlushResult | None = None
    compaction: CompactResult | None = None

    @property
    def tool_names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.tools)


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_shape(v) for v in value[:1]]
    return type(value).__name__


def redact_for_projection(messages: Sequence[Message]) -> tuple[Message, ...]:
    """A thread-bootstrap copy: tool metadata and input shape kept, raw payloads redacted."""
    out: list[Message] = []
    for message in messages:
        if isinstance(message, ToolResult):
            out.append(
                attrs.evolve(
                    message,
                    content=f"[redacted tool result: {len(message.content)} characters]",
                )
            )
        elif isinstance(message, AssistantMessage) and message.tool_calls:
            calls = tuple(
                ToolCall(id=c.id, name=c.name, arguments=_shape(c.arguments.thaw()))
                for c in message.tool_calls
            )
            out.append(attrs.evolve(message, tool_calls=calls))
        else:
            out.append(message)
    return tuple(out)


def _model_refs(
    defaults: AgentDefaultsConfig, model: str | None
) -> tuple[str, tuple[str, ...], bool]:
    """The primary model ref, its fallbacks and whether it is pinned (an explicit ``model``)."""
    if model is not None:
        return model, (), True
    if defaults.model is None:
        raise ConfigError(
            "agents.defaults.model",
            'no model is configured; set it (for example "ollama/qwen3:8b") or pass model=',
        )
    return defaults.model, tuple(defaults.fallbacks), False


@attrs.frozen
class TurnMaintenance:
    """What a turn runs around compaction, handed to the runner: the pre-compaction
    memory flush, and the memory provider's refresh after a compaction."""

    flush: FlushCoordinator
    refresh: Callable[[SessionRow], Awaitable[None]]


@attrs.define(eq=False)
class TurnRunner:
    """Runs turns for one host; see the module docstring.

    Built by ``open_host`` with what a turn uses: the transcript store and ledger, the
    context engine slot, the models, the session locks and store, the run opener, the
    read-only view of the slots (tools), the memory guard (the prompt preparation of the
    selected provider), the tool dispatch, the event sink, the agents' defaults and the
    maintenance (flush and refresh).
    """

    store: TranscriptLedger
    slot: ContextEngineSlot
    models: ModelRegistry
    locks: SessionLocks
    sessions: SessionStorage
    runs: RunOpener
    slots: SlotView
    memory: MemoryRuntime
    tools: ToolDispatch
    events: EventLog
    defaults: AgentDefaultsConfig
    maintenance: TurnMaintenance
    _threads: dict[str, _ThreadState] = attrs.field(factory=dict, init=False)
    _bootstrapped: set[tuple[str, str]] = attrs.field(factory=set, init=False)
    _maintenance_scopes: set[trio.CancelScope] = attrs.field(factory=set, init=False)
    _engine_compactions: dict[str, int] = attrs.field(factory=dict, init=False)

    # -- public ----------------------------------------------------------------

    def lock_for(self, session_key: str) -> AbstractAsyncContextManager[None]:
        """Hold the lock that serialises turns (and their flush and compaction) of one
        session, in this process and every other one on the state."""
        return self.locks.hold(session_key)

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
        if not isinstance(message, UserMessage):
            raise TypeError(f"run_turn takes a claw.UserMessage, got {type(message).__name__}")
        async with self.lock_for(session_key):
            row = await self._current_row(session_key)
            blocked = await self._drain_commits(session_key)
            stats = await self.store.stats(row.session_id)
            if stats.open_turn_seqs:
                # A turn in flight of this session: if its process died, close it now
                # (a live process's turn is left alone) so the session goes on.
                await self.close_orphaned_turns()
            durable = self.slot.durable_engine() if blocked is None else None
            engine_id = self.slot.selected_id if durable is not None else None
            turn = await self._admit(row, message, engine_id)
            turn_id = turn.turn_id
            if engine_id is None and self.slot.selected_id != "legacy":
                if blocked is not None:
                    reason = f"turn {blocked.turn_id} of this session is queued for a commit retry"
                elif self.slot.is_quarantined():
                    reason = "engine is quarantined"
                else:
                    reason = "engine does not declare the durable admitted-turn contract"
                self.events.emit(
                    "turn.legacy_path",
                    session_key,
                    turn_id=turn_id,
                    engine_id=self.slot.selected_id,
                    reason=reason,
                )
            self.events.emit("turn.admitted", session_key, turn_id=turn_id)
            return await self._execute_or_close(
                turn,
                row,
                sender_is_owner=sender_is_owner,
                sandboxed=sandboxed,
                tool_policy=tool_policy,
                model=model,
            )

    async def _admit(
        self, row: SessionRow, message: UserMessage, engine_id: str | None
    ) -> AdmittedTurn:
        """Admit ``message`` as the next turn of ``row``'s transcript.

        The turn's id and advancement key come from the seq its user entry will take.
        Another process may admit a turn of the same session between reading that seq
        and the admission's transaction; the ledger then refuses the taken id, and the
        admission is tried again at the next seq.
        """
        for _attempt in range(_ADMISSION_ATTEMPTS):
            first_seq = (await self.store.stats(row.session_id)).last_seq + 1
            try:
                _, turn = await self.store.record_admitted(
                    row.session_key,
                    row.session_id,
                    message,
                    turn_id=f"{row.session_id}:turn:{first_seq}",
                    advancement_key=advancement_key_for(row.session_id, first_seq),
                    engine_id=engine_id,
                    lifecycle_revision=row.lifecycle_revision,
                )
            except TurnIdTakenError:
                continue
            return turn
        raise TurnLedgerError(
            f"could not admit a turn of {row.session_key!r}: other processes kept taking the "
            f"next turn id ({_ADMISSION_ATTEMPTS} attempts)"
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
        """Run again an admitted turn that did not reach its terminal entry, on its path."""
        turn = await self.store.get_turn(turn_id)
        async with self.lock_for(turn.session_key):
            row = await self._current_row(turn.session_key)
            if _stale_reason(turn, row) is not None:
                raise ContractError(
                    f"turn {turn_id} belongs to an earlier incarnation of {turn.session_key!r}"
                )
            turn = await self.store.get_turn(turn_id)
            if turn.terminal_seq is not None:
                raise ContractError(f"turn {turn_id} already reached its terminal entry")
            if turn.status in (TurnStatus.FAILED, TurnStatus.ABORTED):
                turn = await self.store.reopen_turn(turn_id)
            elif not turn.open:
                raise ContractError(f"turn {turn_id} was closed as {turn.status.value}")
            return await self._execute_or_close(
                turn,
                row,
                sender_is_owner=sender_is_owner,
                sandboxed=sandboxed,
                tool_policy=tool_policy,
                model=model,
            )

    async def recover(self) -> None:
        """At host start: close the turns a dead process left open, retry pending commits."""
        await self.close_orphaned_turns()
        await self.recover_pending_commits()

    async def close_orphaned_turns(self) -> int:
        """Close as ``aborted`` the turns in flight whose process died; returns how many.

        Turns in flight in a live process, this one or another, are never closed.
        """
        closed = await self.store.close_orphaned_turns(
            "the process ended before the turn reached its terminal entry"
        )
        for turn in closed:
            self._report_closed(turn)
        return len(closed)

    def _report_closed(self, turn: AdmittedTurn) -> None:
        logger.warning(
            "turn %s of %s closed as %s: %s",
            turn.turn_id,
            turn.session_key,
            turn.status.value,
            turn.close_reason,
        )
        self.events.emit(
            f"turn.{turn.status.value}",
            turn.session_key,
            turn_id=turn.turn_id,
            reason=turn.close_reason,
        )

    async def _execute_or_close(self, turn: AdmittedTurn, row: SessionRow, **kw: Any) -> TurnResult:
        """Run an admitted turn; if it ends before its terminal entry, close it on the spot.

        A turn left admitted would stay in flight forever: readers would hide it, and
        nothing would ever finish it. A run that raises closes it as ``failed``; a
        cancelled run (or one ended by a non-``Exception``) as ``aborted``.
        """
        try:
            return await self._execute(turn, row, **kw)
        except BaseException as exc:
            with trio.CancelScope(shield=True):
                await self._close_unfinished(turn.turn_id, exc)
            raise

    async def _close_unfinished(self, turn_id: str, exc: BaseException) -> None:
        status = TurnStatus.FAILED if isinstance(exc, Exception) else TurnStatus.ABORTED
        reason = f"{type(exc).__name__}: {exc}"[:500]
        try:
            if not (await self.store.get_turn(turn_id)).open:
                return
            closed = await self.store.close_turn(turn_id, status, reason)
        except Exception:  # the next open closes it (as aborted) instead
            logger.exception("could not close unfinished turn %s", turn_id)
            return
        self._report_closed(closed)

    async def recover_pending_commits(self, session_id: str | None = None) -> int:
        """Commit every ended-but-uncommitted turn with its own key; returns how many.

        Turns of one session are committed in order; after a failed commit, that
        session's later turns wait (the failed one stays queued, with a warning).
        """
        count = 0
        blocked: set[str] = set()
        for turn in await self.store.pending_commits(session_id):
            if turn.session_key in blocked:
                continue
            status = await self._commit(turn)
            if status in ("committed", "duplicate"):
                count += 1
            elif status == "failed":
                blocked.add(turn.session_key)
        return count

    async def _drain_commits(self, session_key: str) -> AdmittedTurn | None:
        """Retry the session's queued commits in order; the first still queued, if any."""
        for turn in await self.store.pending_commits(session_key=session_key):
            if await self._commit(turn) == "failed":
                return turn
        return None

    async def compact(self, session_key: str, *, reason: str = "manual") -> CompactResult:
        """Compact a session now, through its engine (or the runtime)."""
        async with self.lock_for(session_key):
            row = await self._current_row(session_key)
            return await self._compact(row, reason=reason)  # type: ignore[arg-type]

    async def compaction_count(self, session_id: str) -> int:
        """How many compactions completed for this session id (for flush ids).

        Runtime compactions are counted durably, as the transcript's compaction entries;
        compactions an engine owns write no entry and are counted in memory on top.
        """
        stats = await self.store.stats(session_id)
        return stats.compaction_count + self._engine_compactions.get(session_id, 0)

    # -- internals -------------------------------------------------------------

    async def _current_row(self, session_key: str) -> SessionRow:
        """The session's committed row, after bringing other processes' commits in."""
        await self.sessions.refresh()
        return self._row(session_key)

    def _row(self, session_key: str) -> SessionRow:
        row = self.sessions.get_nowait(session_key)
        if row is None:
            raise unknown_session(session_key, agent_id=self.runs.default_agent_id)
        return row

    def _engine_id(self, engine: Any) -> str:
        """The id an engine is known by: its registered id (``info.id`` may differ)."""
        return "legacy" if engine is self.slot.legacy else self.slot.selected_id

    def _model_refs(self, model: str | None) -> tuple[str, tuple[str, ...], bool]:
        return _model_refs(self.defaults, model)

    def _context_window(self, primary: str) -> int:
        try:
            return int(self.models.resolve(primary).context_window)
        except ClawError:
            return self.defaults.context_window

    def _tools(self, policy: ToolPolicy | None) -> tuple[RegisteredTool, ...]:
        return select_tools(
            self.slots.tools,
            policy or ToolPolicy(),
            prefer_plugin=self.slots.memory_plugin,
        )

    async def _snapshot(
        self, run: Run, tools: Sequence[RegisteredTool], citations_mode: str
    ) -> MemoryPromptSnapshot:
        guidance: tuple[str, ...] = ()
        _, capability = self.memory.selection()
        prep = capability.prompt_preparation if capability is not None else None
        if prep is not None:
            try:
                lines = await prep(
                    agent_id=run.agent_id, session_key=run.session_key, caller=run.caller
                )
                guidance = tuple(str(line) for line in lines)
            except Exception as exc:
                logger.warning("memory prompt preparation failed: %s", exc)
                self.events.emit(
                    "memory.prompt_preparation_failed", run.session_key, error=type(exc).__name__
                )
        return MemoryPromptSnapshot(
            session_key=run.session_key,
            available_tools=frozenset(t.name for t in tools),
            citations_mode=citations_mode,
            guidance=guidance,
        )

    async def _assemble(
        self,
        engine: Any,
        run: Run,
        messages: tuple[Message, ...],
        tools: Sequence[RegisteredTool],
        *,
        context_window: int,
        model_ref: str,
    ) -> tuple[AssembleResult, str]:
        citations_mode = "auto"
        snapshot = await self._snapshot(run, tools, citations_mode)
        params = AssembleParams(
            messages=messages,
            session_key=run.session_key,
            session_id=run.authority.session_id,
            agent_id=run.agent_id,
            run_id=f"{run.session_key}#{id(run):x}",
            available_tools=snapshot.available_tools,
            citations_mode=citations_mode,  # type: ignore[arg-type]
            token_budget=context_window,
            context_window=context_window,
            model=model_ref,
        )
        legacy = self.slot.legacy
        if engine is not legacy and self.slot.is_quarantined():
            # Quarantined this turn (a failed bootstrap, say): it does not assemble.
            engine = legacy

        async def legacy_assemble() -> AssembleResult:
            return await legacy.assemble(params)

        with active_prompt_snapshot(snapshot):
            result: AssembleResult = await self.slot.call(
                engine, "assemble", params, fallback=legacy_assemble
            )
            if not isinstance(result, AssembleResult):
                raise ContractError(
                    f'context engine "{self._engine_id(engine)}" returned a '
                    f"{type(result).__name__} from "
                    "assemble(), not an AssembleResult"
                )
            if engine is legacy or self.slot.is_quarantined():
                addition = build_memory_system_prompt_addition(
                    available_tools=snapshot.available_tools,
                    citations_mode=citations_mode,
                    agent_session_key=run.session_key,
                )
            else:
                addition = result.system_prompt_addition or ""
        base = self.defaults.system_prompt or DEFAULT_SYSTEM_PROMPT
        system_prompt = base + ("\n\n" + addition if addition else "")
        return result, system_prompt

    def _project(
        self, session_key: str, session_id: str, result: AssembleResult, tools: frozenset[str]
    ) -> tuple[tuple[Message, ...], Projection]:
        projection: ContextProjection | None = result.context_projection
        raw: object = projection.epoch if projection is not None else ""
        epoch = raw.strip() if isinstance(raw, str) else ""
        if projection is not None and not epoch:
            logger.warning(
                "context engine %s returned a thread_bootstrap projection with an empty "
                "(or non-text) epoch for %s; projecting per turn",
                self.slot.selected_id,
                session_key,
            )
            self.events.emit(
                "turn.projection_invalid",
                session_key,
                engine_id=self.slot.selected_id,
                reason=f"thread_bootstrap epoch {raw!r} is empty",
            )
        if not epoch:
            self._threads.pop(session_id, None)
            return result.messages, "per-turn"
        state = self._threads.get(session_id)
        # A new epoch, or a changed tool set (the thread was bootstrapped with other
        # tools), means the backend thread must be injected again.
        if state is not None and state.epoch == epoch and state.tools == tools:
            new = result.messages[state.count :]
            messages = state.projected + tuple(new)
            self._threads[session_id] = _ThreadState(
                epoch, state.projected + redact_for_projection(new), len(result.messages), tools
            )
            return messages, "reused"
        self._threads[session_id] = _ThreadState(
            epoch, redact_for_projection(result.messages), len(result.messages), tools
        )
        return result.messages, "bootstrapped"

    def thread_projection(self, session_id: str) -> tuple[Message, ...] | None:
        """The redacted thread-bootstrap projection kept for a session, if any."""
        state = self._threads.get(session_id)
        return state.projected if state is not None else None

    async def _execute(
        self,
        turn: AdmittedTurn,
        row: SessionRow,
        *,
        sender_is_owner: bool,
        sandboxed: bool,
        tool_policy: ToolPolicy | None,
        model: str | None,
    ) -> TurnResult:
        """Run an admitted turn through its stages, inside one run: prepare (engine
        bootstrap, the pre-turn flush, assembly), the model and tool loop (with its one
        overflow recovery), the commit, the engine's after-turn, and maintenance."""
        # The path was fixed at admission: durable (commit_turn) when the engine declared
        # the full contract then, legacy (per-message ingest, no commit) otherwise. The
        # configured engine serves the turn either way, unless it is quarantined.
        engine = self.slot.engine()
        primary, fallbacks, pinned = self._model_refs(model)
        tools = self._tools(tool_policy)
        async with self.runs.open(
            row.session_key, sender_is_owner=sender_is_owner, sandboxed=sandboxed
        ) as run:
            state = _TurnState(
                turn=turn,
                row=row,
                run=run,
                engine=engine,
                durable=turn.engine_id is not None and engine is not self.slot.legacy,
                primary=primary,
                fallbacks=fallbacks,
                pinned=pinned,
                context_window=self._context_window(primary),
                tools=tools,
                specs=tool_specs(tools),
                flush_turn=_FlushTurn(
                    tool_policy=tool_policy, model_refs=(primary, fallbacks, pinned)
                ),
                entry_ids=[turn.first_entry_id],
            )
            await self._prepare(state)
            reply = await self._model_loop(state)
            self.events.emit(
                "turn.terminal", row.session_key, turn_id=turn.turn_id, tool_rounds=state.rounds
            )
            ended = await self.store.get_turn(turn.turn_id)
            commit = await self._commit_stage(state, ended)
            await self._after_turn(state, ended)
            await self._maintenance_stage(state)
        return TurnResult(
            turn_id=turn.turn_id,
            advancement_key=turn.advancement_key,
            session_key=row.session_key,
            session_id=row.session_id,
            reply=reply,
            entry_ids=tuple(state.entry_ids),
            engine_id=self._engine_id(state.engine),
            path="durable" if turn.engine_id is not None else "legacy",
            model_ref=state.model_ref,
            commit=commit,  # type: ignore[arg-type]
            projection=state.projection,
            compaction=state.compaction,
            flush=state.flush,
            tool_rounds=state.rounds,
        )

    def _engine_serves(self, state: _TurnState) -> bool:
        """Whether the turn's own engine (not the legacy one) still serves it."""
        return state.engine is not self.slot.legacy and not self.slot.is_quarantined()

    async def _prepare(self, state: _TurnState) -> None:
        """Before the model: bootstrap the engine, ingest the user message (legacy path),
        flush if due (counting the incoming message) and assemble the context."""
        row, turn, run = state.row, state.turn, state.run
        if state.engine is not self.slot.legacy:
            await self._bootstrap(state.engine, row, turn, run.agent_id)
            if self.slot.is_quarantined():  # a failed bootstrap: legacy serves the turn
                state.engine = self.slot.legacy
            elif not state.durable:
                await self._ingest(state.engine, row, turn, run.agent_id, first_only=True)
        # The visible history already holds the admitted user message: the flush
        # timing counts the incoming turn.
        visible = await self.store.visible_messages(row.session_id)
        state.flush = await self._maybe_flush(
            run,
            row,
            visible,
            context_window=state.context_window,
            overflow=False,
            turn=state.flush_turn,
        )
        await self._reassemble(state, visible)

    async def _reassemble(self, state: _TurnState, visible: tuple[Message, ...]) -> None:
        assembled, state.system_prompt = await self._assemble(
            state.engine,
            state.run,
            visible,
            state.tools,
            context_window=state.context_window,
            model_ref=state.primary,
        )
        state.messages, state.projection = self._project(
            state.row.session_key, state.row.session_id, assembled, state.tool_names
        )

    async def _model_loop(self, state: _TurnState) -> AssistantMessage:
        """Call the model until it answers without tool calls (or the rounds run out);
        append every entry up to the terminal one. A context overflow is recovered once."""
        max_rounds = self.defaults.max_tool_rounds
        row, turn = state.row, state.turn
        tool_map = {t.name: t for t in state.tools}
        while True:
            try:
                completion = await self.models.complete_with_fallback(
                    state.primary,
                    state.fallbacks,
                    messages=state.messages,
                    system_prompt=state.system_prompt,
                    tools=state.specs,
                    pinned=state.pinned,
                )
            except ContextOverflowError:
                if state.overflowed:
                    raise
                await self._recover_overflow(state)
                continue
            reply = completion.message
            state.model_ref = str(completion.ref)
            if reply.tool_calls and state.rounds < max_rounds:
                state.rounds += 1
                entries = await self.store.append(
                    row.session_key, row.session_id, [reply], turn_id=turn.turn_id
                )
                state.entry_ids.extend(e.entry_id for e in entries)
                results = [
                    await self.tools.call(call, tool_map, state.run) for call in reply.tool_calls
                ]
                entries = await self.store.append(
                    row.session_key, row.session_id, results, turn_id=turn.turn_id
                )
                state.entry_ids.extend(e.entry_id for e in entries)
                state.messages = (*state.messages, reply, *results)
                continue
            if reply.tool_calls:
                reply = AssistantMessage(
                    text=reply.text or f"(stopped after {max_rounds} tool rounds)",
                    usage=reply.usage,
                )
            entries = await self.store.append(
                row.session_key, row.session_id, [reply], turn_id=turn.turn_id, terminal=True
            )
            state.entry_ids.extend(e.entry_id for e in entries)
            return reply

    async def _recover_overflow(self, state: _TurnState) -> None:
        """The model's context overflowed: flush if due, compact, assemble again (once)."""
        row = state.row
        state.overflowed = True
        self.events.emit("turn.overflow", row.session_key, turn_id=state.turn.turn_id)
        current = await self.store.visible_messages(row.session_id)
        state.flush = (
            await self._maybe_flush(
                state.run,
                row,
                current,
                context_window=state.context_window,
                overflow=True,
                turn=state.flush_turn,
            )
            or state.flush
        )
        state.compaction = await self._compact(row, reason="overflow")
        await self._reassemble(state, await self.store.visible_messages(row.session_id))

    async def _commit_stage(self, state: _TurnState, ended: AdmittedTurn) -> str:
        """Commit the ended turn (durable path), or ingest the rest of it (legacy path)."""
        commit = await self._commit(ended) if ended.engine_id is not None else "legacy"
        if not state.durable and state.engine is not self.slot.legacy:
            await self._ingest(state.engine, state.row, ended, state.run.agent_id, first_only=False)
        return commit

    async def _after_turn(self, state: _TurnState, ended: AdmittedTurn) -> None:
        """The engine's optional ``after_turn`` with the turn's messages."""
        engine = state.engine
        if not self._engine_serves(state) or not callable(getattr(engine, "after_turn", None)):
            return
        await self.slot.call(
            engine,
            "after_turn",
            AfterTurnParams(
                messages=await self._turn_messages(ended),
                session_key=state.row.session_key,
                session_id=state.row.session_id,
                agent_id=state.run.agent_id,
            ),
            fallback=_noop,
        )

    async def _maintenance_stage(self, state: _TurnState) -> None:
        """Threshold compaction (with its flush) unless the turn already compacted, then
        the engine's optional ``maintain``."""
        if state.compaction is None:
            state.compaction, flushed = await self._maybe_compact(
                state.row, context_window=state.context_window, run=state.run, turn=state.flush_turn
            )
            state.flush = flushed or state.flush
        if self._engine_serves(state):
            await self._maintain(state.engine, state.row, state.run.agent_id)

    async def _bootstrap(
        self, engine: Any, row: SessionRow, turn: AdmittedTurn, agent: str
    ) -> None:
        """Hand the engine the history before this turn, once per session incarnation.

        The host supplies only accepted turns (``commit_turn``) or this turn's messages
        (``ingest``); an engine that meets a session for the first time in this process
        rebuilds earlier history from the cursor API, here through its optional
        ``bootstrap``.
        """
        key = (self._engine_id(engine), row.session_id)
        if key in self._bootstrapped or not callable(getattr(engine, "bootstrap", None)):
            return
        self._bootstrapped.add(key)
        delta = await self.store.read_session_transcript_visible_message_delta(row.session_id)
        before = tuple(
            m
            for m, entry in zip(delta.messages, delta.entry_ids, strict=True)
            if parse_entry_id(entry)[1] < turn.first_seq
        )
        await self.slot.call(
            engine,
            "bootstrap",
            BootstrapParams(
                messages=before,
                session_key=row.session_key,
                session_id=row.session_id,
                agent_id=agent,
            ),
            fallback=_noop,
        )

    async def _ingest(
        self, engine: Any, row: SessionRow, turn: AdmittedTurn, agent: str, *, first_only: bool
    ) -> None:
        """The legacy path's ingest: the admitted user message before assembly, the rest
        of the turn after its terminal entry (``ingest_batch`` when the engine has it)."""
        if self.slot.is_quarantined():
            return
        through = turn.first_seq if first_only else turn.terminal_seq
        after = turn.first_seq - 1 if first_only else turn.first_seq
        entries = [
            e
            for e in await self.store.read_entries(
                turn.session_id, after_seq=after, through_seq=through
            )
            if e.message is not None
        ]
        if not entries:
            return
        if len(entries) > 1 and callable(getattr(engine, "ingest_batch", None)):
            await self.slot.call(
                engine,
                "ingest_batch",
                IngestBatchParams(
                    messages=tuple(e.message for e in entries if e.message is not None),
                    entry_ids=tuple(e.entry_id for e in entries),
                    session_key=row.session_key,
                    session_id=row.session_id,
                    agent_id=agent,
                ),
                fallback=_noop,
            )
            return
        for entry in entries:
            assert entry.message is not None
            if self.slot.is_quarantined():
                return
            await self.slot.call(
                engine,
                "ingest",
                IngestParams(
                    message=entry.message,
                    entry_id=entry.entry_id,
                    session_key=row.session_key,
                    session_id=row.session_id,
                    agent_id=agent,
                ),
                fallback=_noop,
            )

    async def _maintain(self, engine: Any, row: SessionRow, agent: str) -> None:
        """Run the engine's optional ``maintain`` after a turn, cancellable by the host."""
        if not callable(getattr(engine, "maintain", None)):
            return
        with trio.CancelScope() as scope:
            self._maintenance_scopes.add(scope)
            try:
                await self.slot.call(
                    engine,
                    "maintain",
                    MaintainParams(
                        session_key=row.session_key,
                        session_id=row.session_id,
                        agent_id=agent,
                        cancel_scope=scope,
                    ),
                    fallback=_noop,
                )
            finally:
                self._maintenance_scopes.discard(scope)

    async def aclose(self) -> None:
        """Cancel running maintenance and dispose of the engine (host shutdown)."""
        for scope in list(self._maintenance_scopes):
            scope.cancel()
        engine = self.slot.built_engine()
        dispose = getattr(engine, "dispose", None)
        if engine is not None and callable(dispose):
            try:
                with trio.CancelScope(shield=True):
                    await dispose()
            except Exception:
                logger.exception('context engine "%s" failed to dispose', self.slot.selected_id)

    async def _turn_messages(self, turn: AdmittedTurn) -> tuple[Message, ...]:
        through = turn.terminal_seq
        entries = await self.store.read_entries(
            turn.session_id, after_seq=turn.first_seq - 1, through_seq=through
        )
        return tuple(e.message for e in entries if e.message is not None)

    async def _commit(self, turn: AdmittedTurn) -> str:
        """Commit an ended turn to its engine with its own key; record the outcome.

        Returns ``committed`` or ``duplicate`` (recorded), ``failed`` (the turn stays
        queued for a retry, or was closed as abandoned), or ``stale`` (closed: the
        session was reset since the turn was admitted).
        """
        stale = _stale_reason(turn, self.sessions.get_nowait(turn.session_key))
        if stale is not None:
            self._report_closed(await self.store.close_turn(turn.turn_id, TurnStatus.STALE, stale))
            return "stale"
        if self.slot.selected_id != turn.engine_id:
            reason = (
                f'engine "{turn.engine_id}" is no longer the configured context engine '
                f'("{self.slot.selected_id}")'
            )
            self._report_closed(
                await self.store.close_turn(turn.turn_id, TurnStatus.ABANDONED, reason)
            )
            return "failed"
        engine = self.slot.engine()
        if engine is self.slot.legacy:
            record = self.slot.quarantined.get(self.slot.selected_id)
            why = record.reason if record is not None else "unavailable"
            return self._commit_failed(turn, f"the engine is quarantined ({why})")
        if not participates_in_durable_turns(engine):
            reason = f'engine "{turn.engine_id}" no longer declares the durable turn contract'
            self._report_closed(
                await self.store.close_turn(turn.turn_id, TurnStatus.ABANDONED, reason)
            )
            return "failed"
        assert turn.terminal_seq is not None
        entries = await self.store.read_entries(
            turn.session_id, after_seq=turn.first_seq - 1, through_seq=turn.terminal_seq
        )
        messages = tuple(e.message for e in entries if e.message is not None)
        params = CommitTurnParams(
            advancement_key=turn.advancement_key,
            turn_id=turn.turn_id,
            entry_ids=tuple(e.entry_id for e in entries),
            messages=messages,
            session_key=turn.session_key,
            session_id=turn.session_id,
        )
        # Not through the slot's isolation: a failed commit concerns this turn of this
        # session, not the engine for everyone.
        try:
            result: object = await self.slot.call_unisolated(engine, "commit_turn", params)
        except Exception as exc:
            return self._commit_failed(turn, f"commit_turn raised {type(exc).__name__}: {exc}")
        status = getattr(result, "status", None)
        if not isinstance(result, CommitTurnResult) or status not in ("committed", "duplicate"):
            return self._commit_failed(
                turn,
                f"commit_turn returned {result!r}, not a CommitTurnResult with status "
                '"committed" or "duplicate"',
            )
        assert isinstance(status, str)
        await self.store.mark_committed(turn.turn_id, outcome=status)
        self.events.emit(
            "turn.committed",
            turn.session_key,
            turn_id=turn.turn_id,
            advancement_key=turn.advancement_key,
            status=status,
        )
        return status

    def _commit_failed(self, turn: AdmittedTurn, reason: str) -> str:
        reason = reason[:500]
        logger.warning(
            'commit of turn %s of %s to context engine "%s" failed; it stays queued and the '
            "session's next turns take the legacy path until it commits: %s",
            turn.turn_id,
            turn.session_key,
            turn.engine_id,
            reason,
        )
        self.events.emit(
            "turn.commit_failed",
            turn.session_key,
            turn_id=turn.turn_id,
            engine_id=turn.engine_id,
            plugin_id=self.slot.registered.plugin_id if self.slot.registered else None,
            reason=reason,
        )
        return "failed"

    async def _compact(
        self, row: SessionRow, *, reason: Literal["threshold", "overflow", "manual"]
    ) -> CompactResult:
        engine = self.slot.engine()
        defaults = self.defaults
        primary = defaults.model

        # The delegation travels to the engine inside its params: it holds the transcript
        # store and the models, never the runner (whose host holds minting power).
        store, models = self.store, self.models

        async def summarise(messages: Sequence[Message], system_prompt: str) -> AssistantMessage:
            primary, fallbacks, pinned = _model_refs(defaults, None)
            completion = await models.complete_with_fallback(
                primary,
                fallbacks,
                messages=messages,
                system_prompt=system_prompt,
                tools=(),
                pinned=pinned,
            )
            return completion.message

        async def runtime(params: CompactParams) -> CompactResult:
            return await runtime_compaction(
                params,
                store=store,
                session_key=row.session_key,
                session_id=row.session_id,
                summarise=summarise,
                keep_recent_tokens=defaults.compaction.keep_recent_tokens,
            )

        params = runtime_compaction_params(
            CompactParams(
                reason=reason,
                messages=await self.store.visible_messages(row.session_id),
                session_key=row.session_key,
                session_id=row.session_id,
                agent_id=row.agent_id,
                context_window=defaults.context_window,
                model=primary,
            ),
            runtime,
        )
        legacy = self.slot.legacy

        async def fallback() -> CompactResult:
            return await legacy.compact(params)

        entries_before = (await self.store.stats(row.session_id)).compaction_count
        engine_id = self._engine_id(engine)
        if engine is not legacy and engine.info.owns_compaction:
            # The engine owns compaction: its failure is reported, not papered over with
            # the runtime's compaction of a context the engine manages.
            try:
                result: CompactResult = await self.slot.call(engine, "compact", params)
            except EngineFailedError as exc:
                cause = exc.__cause__
                error = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
                logger.warning(
                    'context engine "%s" failed to compact %s: %s',
                    engine_id,
                    row.session_key,
                    error,
                )
                self.events.emit(
                    "compaction.failed",
                    row.session_key,
                    reason=reason,
                    engine_id=engine_id,
                    error=error,
                )
                return CompactResult(ok=False, compacted=False, reason=f"engine failed: {error}")
        else:
            result = await self.slot.call(engine, "compact", params, fallback=fallback)
        if result.compacted:
            if (await self.store.stats(row.session_id)).compaction_count == entries_before:
                count = self._engine_compactions.get(row.session_id, 0)
                self._engine_compactions[row.session_id] = count + 1
            self.events.emit(
                "compaction.completed",
                row.session_key,
                reason=reason,
                engine_id=engine_id,
                tokens_before=result.tokens_before,
                tokens_after=result.tokens_after,
            )
            await self.maintenance.refresh(row)
        else:
            self.events.emit(
                "compaction.skipped", row.session_key, reason=result.reason or "not compacted"
            )
        return result

    async def _maybe_compact(
        self, row: SessionRow, *, context_window: int, run: Run, turn: _FlushTurn
    ) -> tuple[CompactResult | None, FlushResult | None]:
        compaction = self.defaults.compaction
        visible = await self.store.visible_messages(row.session_id)
        tokens = estimate_tokens(visible)
        floor = scaled_reserve_floor(compaction.memory_flush.reserve_tokens_floor, context_window)
        if tokens <= context_window - floor:
            return None, None
        # At most one flush per compaction cycle: a no-op if this cycle already flushed.
        flushed = await self._maybe_flush(
            run, row, visible, context_window=context_window, overflow=False, turn=turn
        )
        return await self._compact(row, reason="threshold"), flushed

    async def _maybe_flush(
        self,
        run: Run,
        row: SessionRow,
        visible: Sequence[Message],
        *,
        context_window: int,
        overflow: bool,
        turn: _FlushTurn,
    ) -> FlushResult | None:
        return await self.maintenance.flush.maybe_flush(
            run=run,
            row=row,
            visible=visible,
            context_window=context_window,
            overflow=overflow,
            compaction_count=await self.compaction_count(row.session_id),
            tool_policy=turn.tool_policy,
            model_refs=turn.model_refs,
        )


def _stale_reason(turn: AdmittedTurn, row: SessionRow | None) -> str | None:
    """Why ``turn`` belongs to an earlier incarnation of its session, or ``None``."""
    if row is None:
        return f"session {turn.session_key!r} was deleted after the turn was admitted"
    if row.session_id != turn.session_id or (
        turn.lifecycle_revision is not None and row.lifecycle_revision != turn.lifecycle_revision
    ):
        return (
            f"session {turn.session_key!r} was reset after the turn was admitted "
            f"(revision {turn.lifecycle_revision} -> {row.lifecycle_revision}); "
            "an earlier incarnation's turn is not committed into the new one"
        )
    return None


async def _noop() -> None:
    await trio.lowlevel.checkpoint()
