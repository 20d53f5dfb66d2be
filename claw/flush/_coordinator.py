"""The flush coordinator: decide whether a flush is due, resolve its plan, run it, record it.

The turn runner calls :meth:`FlushCoordinator.maybe_flush` before assembling each turn
(the visible messages already hold the incoming user message, so a large incoming
message counts), on the overflow-recovery path before compacting, and before threshold
compaction. Each call:

1. does nothing when ``memory_flush.enabled`` is false (no resolver is invoked), or when
   this compaction cycle already flushed (completed or skipped): at most one flush per
   cycle, whose identity is the flush id;
2. selects the effective resolver (:mod:`._selection`) and asks it for a plan;
3. completes the plan: provider overrides on top of the host's timing, the model;
4. decides whether the flush is due with that timing (:mod:`._timing`);
5. runs the silent turn in a detached internal session (:func:`flush_session_key`) whose
   transcript is kept under the flush id, never in the source session, so it never
   enters later user turns; the model sees the source's visible history (trimmed to
   leave the reserve free) followed by the plan's prompt;
6. records ``flush.completed``, ``flush.skipped`` or ``flush.failed`` and returns a
   :class:`FlushResult`.

A failed flush may run again in a later turn of the same cycle (a retry shares the flush
id), never twice in one turn; a skipped or failed flush never stops the compaction that
follows. Which cycles are settled (completed or skipped) is recorded in the state
backend (:meth:`~claw.state.TranscriptStorage.record_flush`) and read back before each
flush, inside the session's lock that the calling turn holds: a cycle flushes once
across restarts, processes and hosts. A crash between a completed flush and its record
may still flush that cycle again, which the shared flush id lets providers deduplicate.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs
import trio

from .._config import AgentDefaultsConfig
from .._errors import ClawError, ConfigError
from .._events import EventLog
from .._plugins import RegisteredTool
from .._slots import SlotView
from .._workers import WorkerPool
from ..context import estimate_tokens
from ..models import AssistantMessage, CompactionSummary, Message, ModelRegistry, UserMessage
from ..state import TranscriptLedger
from ..turns._tools import FlushToolContext, ToolDispatch, ToolPolicy, tool_specs
from ._errors import FlushPlanError
from ._evidence import NO_EVIDENCE_REASON, Evidence, EvidenceTracker
from ._file_arm import append_only_write_tool, read_tool, resolve_target, workspace_path
from ._file_arm import write_refusal as workspace_write_refusal
from ._identity import derive_flush_id, flush_session_key
from ._plans import (
    AnyFlushPlan,
    MemoryFlushFilePlanDraft,
    MemoryFlushPlan,
    MemoryFlushPlanRequest,
    MemoryFlushToolsPlan,
)
from ._result import FlushArm, FlushResult, FlushStatus
from ._selection import EffectiveFlushResolver, select_flush_resolver
from ._timing import (
    FlushTrigger,
    MemoryFlushTiming,
    apply_overrides,
    flush_trigger,
    resolve_timing,
)
from ._tools_arm import project_tools

if TYPE_CHECKING:
    from .._runs import Run
    from ..memory_files import MemoryFiles
    from ..sessions import SessionRow

logger = logging.getLogger("claw.flush")

ModelRefs: TypeAlias = tuple[str, tuple[str, ...], bool]
"""``(primary, fallbacks, pinned)``: the model chain a turn runs with."""


@attrs.define(eq=False)
class _Attempt:
    """The bookkeeping of one due flush: identity, who planned it, warnings so far."""

    coordinator: FlushCoordinator
    source_key: str
    flush_id: str
    trigger: FlushTrigger
    plugin_id: str | None = None
    arm: FlushArm | None = None
    warnings: list[str] = attrs.field(factory=list)

    def warn(self, message: str) -> None:
        logger.warning("memory flush of %s: %s", self.source_key, message)
        self.warnings.append(message)

    def finish(
        self,
        status: FlushStatus,
        *,
        reason: str | None = None,
        model_ref: str | None = None,
        evidence: Evidence | None = None,
        flush_key: str | None = None,
        tool_names: Sequence[str] = (),
    ) -> FlushResult:
        result = FlushResult(
            status=status,
            flush_id=self.flush_id,
            trigger=self.trigger,
            reason=reason,
            plugin_id=self.plugin_id,
            arm=self.arm,
            model_ref=model_ref,
            evidence=evidence,
            flush_session_key=flush_key,
            tool_names=tuple(tool_names),
            warnings=tuple(self.warnings),
        )
        self.coordinator._record(self.source_key, result)
        return result


@attrs.define(eq=False)
class FlushCoordinator:
    """Runs the pre-compaction memory flush for one host (see the module docstring).

    Built by ``open_host`` with what a flush uses: the agents' defaults (timing, models,
    tool rounds), the workspace, the transcript store (the flush's own transcript and
    its settled-cycle record), the read-only view of the slots (resolvers and tools),
    the models, the worker pool, the event sink, the tool dispatch (which checks the
    memory owner's tools against the host's currency), the clock and the workspace's
    memory-file writer (the file arm's only way to write its target).
    """

    defaults: AgentDefaultsConfig
    workspace_dir: Path
    transcripts: TranscriptLedger
    slots: SlotView
    models: ModelRegistry
    workers: WorkerPool
    events: EventLog
    tools: ToolDispatch
    clock: Callable[[], float]
    memory_files: MemoryFiles
    _done: set[str] = attrs.field(factory=set, init=False)
    _tried: weakref.WeakKeyDictionary[Run, set[str]] = attrs.field(
        factory=weakref.WeakKeyDictionary, init=False
    )

    async def maybe_flush(
        self,
        *,
        run: Run,
        row: SessionRow,
        visible: Sequence[Message],
        context_window: int,
        overflow: bool,
        compaction_count: int | None,
        tool_policy: ToolPolicy | None = None,
        model_refs: ModelRefs | None = None,
    ) -> FlushResult | None:
        """Flush ``row``'s session now if a flush is due; ``None`` when none was due.

        ``visible`` is the session's visible history including the incoming turn;
        ``overflow`` says the turn overflowed the window (a flush is then due regardless
        of the estimate); ``compaction_count`` is the source's pre-compaction count;
        ``tool_policy`` and ``model_refs`` are the turn's, which the flush keeps unless
        its plan says otherwise.
        """
        config = self.defaults.compaction.memory_flush
        if not config.enabled:
            return None
        flush_id = derive_flush_id(row.session_id, row.lifecycle_revision, compaction_count)
        tried = self._tried.setdefault(run, set())
        if flush_id in self._done or flush_id in tried:
            return None
        # Settled before a restart, or by another process or host: the record is read
        # while the calling turn holds the session's lock, so no one settles it meanwhile.
        if await self.transcripts.flush_recorded(flush_id):
            self._done.add(flush_id)
            return None
        result = await self._flush_if_due(
            flush_id,
            run=run,
            row=row,
            visible=visible,
            context_window=context_window,
            overflow=overflow,
            tool_policy=tool_policy,
            model_refs=model_refs,
        )
        if result is not None:
            tried.add(flush_id)
            if result.status != "failed":
                # Durable, so that neither a restart before this cycle's compaction nor
                # another process's next turn flushes the same cycle again.
                with trio.CancelScope(shield=True):
                    await self.transcripts.record_flush(flush_id, row.session_key)
        return result

    async def _flush_if_due(
        self,
        flush_id: str,
        *,
        run: Run,
        row: SessionRow,
        visible: Sequence[Message],
        context_window: int,
        overflow: bool,
        tool_policy: ToolPolicy | None,
        model_refs: ModelRefs | None,
    ) -> FlushResult | None:
        config = self.defaults.compaction.memory_flush
        timing = resolve_timing(config, context_window)
        stats = await self.transcripts.stats(row.session_id)
        tokens = estimate_tokens(visible)

        def trigger_for(t: MemoryFlushTiming) -> FlushTrigger | None:
            return flush_trigger(
                t, tokens=tokens, transcript_bytes=stats.byte_size, overflow=overflow
            )

        host_trigger = trigger_for(timing)
        slots = self.slots
        effective = select_flush_resolver(
            slots.memory_plugin, slots.memory_sidecars, slots.memory_capabilities
        )
        if effective is None:
            if host_trigger is None:
                return None
            attempt = _Attempt(self, row.session_key, flush_id, host_trigger)
            return attempt.finish("skipped", reason="no memory plugin supplies a flush plan")
        request = MemoryFlushPlanRequest(
            agent_id=run.agent_id, session_key=row.session_key, timing=timing, now=self.clock()
        )
        try:
            plan = await _call_resolver(effective, request)
        except FlushPlanError as exc:
            return self._unusable(row, flush_id, host_trigger, effective, str(exc))
        except Exception as exc:
            logger.warning(
                'the flush plan resolver of plugin "%s" raised', effective.plugin_id, exc_info=exc
            )
            if host_trigger is None:
                return None
            attempt = _Attempt(self, row.session_key, flush_id, host_trigger, effective.plugin_id)
            return attempt.finish(
                "failed",
                reason=f'the flush plan resolver of plugin "{effective.plugin_id}" raised '
                f"{type(exc).__name__}: {exc}",
            )
        if plan is None:
            if host_trigger is None:
                return None
            attempt = _Attempt(self, row.session_key, flush_id, host_trigger, effective.plugin_id)
            return attempt.finish(
                "skipped",
                reason=f'the flush plan resolver of plugin "{effective.plugin_id}" '
                "returned no plan",
            )
        if not isinstance(
            plan, MemoryFlushPlan | MemoryFlushFilePlanDraft | MemoryFlushToolsPlan
        ) or (effective.kind == "plain" and not isinstance(plan, MemoryFlushPlan)):
            names = (
                "MemoryFlushPlan"
                if effective.kind == "plain"
                else "MemoryFlushPlan, MemoryFlushFilePlanDraft or MemoryFlushToolsPlan"
            )
            return self._unusable(
                row,
                flush_id,
                host_trigger,
                effective,
                f"its {effective.kind} flush plan resolver returned a {type(plan).__name__}, "
                f"not a {names}",
            )
        effective_timing = apply_overrides(
            timing,
            soft_threshold_tokens=plan.soft_threshold_tokens,
            reserve_tokens_floor=plan.reserve_tokens_floor,
            force_flush_transcript_bytes=plan.force_flush_transcript_bytes,
        )
        trigger = trigger_for(effective_timing)
        if trigger is None:
            return None
        is_tools = isinstance(plan, MemoryFlushToolsPlan)
        attempt = _Attempt(
            self,
            row.session_key,
            flush_id,
            trigger,
            effective.plugin_id,
            "tools" if is_tools else "file",
        )
        refs = self._model_refs(plan, is_tools=is_tools, config_model=timing.model, turn=model_refs)
        policy = tool_policy or ToolPolicy()
        if isinstance(plan, MemoryFlushToolsPlan):
            return await self._tools_arm(
                attempt,
                plan,
                effective=effective,
                run=run,
                visible=visible,
                timing=effective_timing,
                refs=refs,
                policy=policy,
            )
        return await self._file_arm(
            attempt,
            plan,
            run=run,
            visible=visible,
            timing=effective_timing,
            refs=refs,
            policy=policy,
        )

    # -- arms ------------------------------------------------------------------

    async def _tools_arm(
        self,
        attempt: _Attempt,
        plan: MemoryFlushToolsPlan,
        *,
        effective: EffectiveFlushResolver,
        run: Run,
        visible: Sequence[Message],
        timing: MemoryFlushTiming,
        refs: ModelRefs | None,
        policy: ToolPolicy,
    ) -> FlushResult:
        plugin = effective.plugin_id
        if not effective.is_owner:
            owner = self.slots.memory_plugin
            attempt.warn(
                f'plugin "{plugin}" supplied a tools-arm flush plan but does not own the '
                f'memory slot (owner: "{owner}"); only the slot owner may; plan skipped'
            )
            return attempt.finish("skipped", reason=f'tools-arm plan from non-owner "{plugin}"')
        overlap = plan.overlapping_tool_names
        if overlap:
            attempt.warn(
                f'plugin "{plugin}" declared {", ".join(overlap)} as both persistence and '
                "lookup tools; plan skipped"
            )
            return attempt.finish(
                "skipped", reason=f'plugin "{plugin}" declared overlapping flush tools'
            )
        projection = project_tools(
            plan, plugin_id=plugin, registered=self.slots.tools, policy=policy
        )
        if projection.writable_lookup:
            attempt.warn(
                f'plugin "{plugin}" declared lookup tools that are not read-only, left out: '
                + ", ".join(projection.writable_lookup)
            )
        if not projection.persistence:
            missing = ", ".join(projection.missing_persistence)
            attempt.warn(
                f'none of the persistence tools of plugin "{plugin}" is available ({missing}); '
                "flush inference skipped"
            )
            return attempt.finish(
                "skipped", reason=f"no declared persistence tool is available: {missing}"
            )
        if projection.missing_persistence:
            attempt.warn(
                f'persistence tools of plugin "{plugin}" not available: '
                + ", ".join(projection.missing_persistence)
            )
        if projection.unavailable_lookup:
            attempt.warn(
                f'lookup tools of plugin "{plugin}" not available: '
                + ", ".join(projection.unavailable_lookup)
            )
        tools: list[RegisteredTool] = []
        if policy.allows("read"):
            tools.append(read_tool(self.workspace_dir, self.workers))
        tools.extend(projection.persistence)
        tools.extend(projection.lookup)
        tracker = EvidenceTracker(frozenset(t.name for t in projection.persistence))
        flush_key = flush_session_key(run.session_key)
        names = [t.name for t in tools]
        try:
            async with run.open_maintenance_run(flush_key) as flush_run:
                if flush_run.audience is None:
                    why = flush_run.no_audience_reason or "no audience"
                    logger.debug(
                        'memory flush of %s by plugin "%s" skipped: the source has no valid '
                        "memory audience (%s)",
                        run.session_key,
                        plugin,
                        why,
                    )
                    return attempt.finish(
                        "skipped",
                        reason=f"the source turn has no valid memory audience ({why})",
                        flush_key=flush_key,
                    )
                identity = flush_run.mint_flush_identity(attempt.flush_id, run.session_key)
                model_ref = await self._run_turn(
                    flush_run,
                    flush_id=attempt.flush_id,
                    plan=plan,
                    tools=tools,
                    visible=visible,
                    timing=timing,
                    refs=refs,
                    tracker=tracker,
                    memory_flush=FlushToolContext(identity),
                )
        except ClawError as exc:
            return self._run_failed(attempt, exc, flush_key, names)
        evidence = tracker.verdict()
        if evidence is None:
            return attempt.finish(
                "failed",
                reason=NO_EVIDENCE_REASON,
                model_ref=model_ref,
                flush_key=flush_key,
                tool_names=names,
            )
        return attempt.finish(
            "completed",
            model_ref=model_ref,
            evidence=evidence,
            flush_key=flush_key,
            tool_names=names,
        )

    async def _file_arm(
        self,
        attempt: _Attempt,
        plan: MemoryFlushPlan | MemoryFlushFilePlanDraft,
        *,
        run: Run,
        visible: Sequence[Message],
        timing: MemoryFlushTiming,
        refs: ModelRefs | None,
        policy: ToolPolicy,
    ) -> FlushResult:
        workspace = self.workspace_dir
        plugin = attempt.plugin_id
        try:
            target = resolve_target(workspace, plan.relative_path)
        except FlushPlanError as exc:
            attempt.warn(f'the file-arm plan of plugin "{plugin}" is unusable: {exc}')
            return attempt.finish("skipped", reason=str(exc))
        if not policy.allows("write"):
            attempt.warn(
                f"the turn's tool policy removes the file arm's write tool; file flush to "
                f"{plan.relative_path} ({target}) skipped"
            )
            return attempt.finish("skipped", reason="tool policy removes write")
        refusal = await self.workers.run_sync(
            partial(workspace_write_refusal, workspace, target, sandboxed=run.authority.sandboxed)
        )
        if refusal is None:
            try:
                await self.memory_files.ensure(workspace_path(workspace, target))
            except (OSError, ClawError) as exc:
                refusal = f"the host could not create {plan.relative_path}: {exc}"
        if refusal is not None:
            attempt.warn(
                f"no writable workspace access ({refusal}); file flush to "
                f"{plan.relative_path} ({target}) skipped"
            )
            return attempt.finish("skipped", reason=f"no writable workspace access: {refusal}")
        tools: list[RegisteredTool] = []
        if policy.allows("read"):
            tools.append(read_tool(workspace, self.workers))
        tools.append(
            append_only_write_tool(
                workspace, target, plan.relative_path, self.memory_files, attempt.flush_id
            )
        )
        flush_key = flush_session_key(run.session_key)
        names = [t.name for t in tools]
        try:
            async with run.open_maintenance_run(flush_key) as flush_run:
                model_ref = await self._run_turn(
                    flush_run,
                    flush_id=attempt.flush_id,
                    plan=plan,
                    tools=tools,
                    visible=visible,
                    timing=timing,
                    refs=refs,
                    tracker=EvidenceTracker(frozenset()),
                    memory_flush=None,
                )
        except ClawError as exc:
            return self._run_failed(attempt, exc, flush_key, names)
        return attempt.finish(
            "completed",
            model_ref=model_ref,
            evidence="run-completed",
            flush_key=flush_key,
            tool_names=names,
        )

    # -- the silent turn ---------------------------------------------------------

    async def _run_turn(
        self,
        flush_run: Run,
        *,
        flush_id: str,
        plan: AnyFlushPlan,
        tools: Sequence[RegisteredTool],
        visible: Sequence[Message],
        timing: MemoryFlushTiming,
        refs: ModelRefs | None,
        tracker: EvidenceTracker,
        memory_flush: FlushToolContext | None,
    ) -> str:
        """Run the flush turn in the detached session; returns the answering model's ref."""
        store = self.transcripts
        primary, fallbacks, pinned = refs if refs is not None else self._session_refs()
        prompt = UserMessage(plan.prompt)
        budget = (
            timing.context_window
            - timing.reserve_tokens_floor
            - estimate_tokens([prompt, UserMessage(plan.system_prompt)])
        )
        messages: tuple[Message, ...] = (*fit_history(visible, budget), prompt)
        tool_map = {t.name: t for t in tools}
        specs = tool_specs(tools)
        key = flush_run.session_key
        await store.append(key, flush_id, [prompt])
        max_rounds = self.defaults.max_tool_rounds
        rounds = 0
        while True:
            completion = await self.models.complete_with_fallback(
                primary,
                fallbacks,
                messages=messages,
                system_prompt=plan.system_prompt,
                tools=specs,
                pinned=pinned,
            )
            reply: AssistantMessage = completion.message
            if reply.tool_calls and rounds < max_rounds:
                rounds += 1
                results = [
                    await self.tools.call(call, tool_map, flush_run, memory_flush=memory_flush)
                    for call in reply.tool_calls
                ]
                tracker.record_results(results)
                await store.append(key, flush_id, [reply, *results])
                messages = (*messages, reply, *results)
                continue
            tracker.record_final(reply)
            await store.append(key, flush_id, [reply])
            return str(completion.ref)

    # -- helpers -----------------------------------------------------------------

    def _model_refs(
        self,
        plan: AnyFlushPlan,
        *,
        is_tools: bool,
        config_model: str | None,
        turn: ModelRefs | None,
    ) -> ModelRefs | None:
        """A plan's ``model`` pins it; a tools plan falls back to ``memory_flush.model``."""
        if plan.model is not None:
            return plan.model, (), True
        if is_tools and config_model is not None:
            return config_model, (), True
        return turn

    def _session_refs(self) -> ModelRefs:
        defaults = self.defaults
        if defaults.model is None:
            raise ConfigError(
                "agents.defaults.model", "no model is configured for the memory flush turn"
            )
        return defaults.model, tuple(defaults.fallbacks), False

    def _unusable(
        self,
        row: SessionRow,
        flush_id: str,
        host_trigger: FlushTrigger | None,
        effective: EffectiveFlushResolver,
        problem: str,
    ) -> FlushResult | None:
        message = f'plugin "{effective.plugin_id}" supplied an unusable flush plan: {problem}'
        if host_trigger is None:
            logger.warning("memory flush of %s: %s", row.session_key, message)
            return None
        attempt = _Attempt(self, row.session_key, flush_id, host_trigger, effective.plugin_id)
        attempt.warn(message)
        return attempt.finish("skipped", reason=problem)

    def _run_failed(
        self, attempt: _Attempt, exc: ClawError, flush_key: str, names: Sequence[str]
    ) -> FlushResult:
        logger.warning(
            "memory flush of %s failed: %s: %s", attempt.source_key, type(exc).__name__, exc
        )
        return attempt.finish(
            "failed",
            reason=f"the flush run failed: {type(exc).__name__}: {exc}",
            flush_key=flush_key,
            tool_names=names,
        )

    def _record(self, source_key: str, result: FlushResult) -> None:
        if result.status != "failed":
            self._done.add(result.flush_id)
        data: dict[str, Any] = {
            "flush_id": result.flush_id,
            "trigger": result.trigger,
            "plugin_id": result.plugin_id,
            "arm": result.arm,
        }
        if result.reason is not None:
            data["reason"] = result.reason
        if result.status == "completed":
            data["evidence"] = result.evidence
            data["model_ref"] = result.model_ref
        self.events.emit(f"flush.{result.status}", source_key, **data)


async def _call_resolver(
    effective: EffectiveFlushResolver, request: MemoryFlushPlanRequest
) -> object:
    value: object = effective.resolver(request)
    if inspect.isawaitable(value):
        value = await value
    return value


def fit_history(messages: Sequence[Message], budget: int) -> tuple[Message, ...]:
    """The most recent part of ``messages`` that fits ``budget`` estimated tokens.

    The flush turn must fit the window with room to spare (that is what the reserve is
    for), also on the overflow path where the whole history does not. The cut is moved
    forward to a user message or summary so that no tool result loses its call.
    """
    start = len(messages)
    used = 0
    while start > 0:
        cost = estimate_tokens([messages[start - 1]])
        if used + cost > budget:
            break
        used += cost
        start -= 1
    if start == 0:
        return tuple(messages)
    while start < len(messages) and not isinstance(
        messages[start], UserMessage | CompactionSummary
    ):
        start += 1
    return tuple(messages[start:])
