"""The legacy engine, and the slot that runs the selected engine with failure isolation.

The legacy engine is the host's own context path: ``ingest`` is a no-op
(``ingested=False``), ``assemble`` passes the messages through, and ``compact`` runs
the runtime compaction. The :class:`ContextEngineSlot` builds the selected engine
lazily from its factory, fills and filters host fields, and isolates failures: an
engine that raises is quarantined for the life of the host (the process's unit) and
the host falls back to the legacy engine. The quarantine is recorded
(:class:`QuarantineRecord`: engine, plugin, operation, reason), logged and emitted as
an ``engine.quarantined`` host event.

``commit_turn`` is the exception: a failed commit concerns one turn of one session,
so :meth:`ContextEngineSlot.call_unisolated` lets its error reach the turn runner,
which keeps the turn queued and routes only that session around the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio

from .._errors import ContractError
from .._events import EventLog
from .._plugins import ContextEngineFactoryContext, RegisteredEngine
from ._contract import (
    AssembleParams,
    AssembleResult,
    CompactParams,
    CompactResult,
    ContextEngine,
    ContextEngineInfo,
    IngestParams,
    IngestResult,
    RuntimeCompactor,
    delegate_compaction_to_runtime,
    estimate_tokens,
    filter_host_fields,
    participates_in_durable_turns,
)

logger = logging.getLogger("claw.context")

P = TypeVar("P")
R = TypeVar("R")

LEGACY_INFO = ContextEngineInfo(id="legacy", name="Legacy context", owns_compaction=True)


@attrs.define(eq=False)
class LegacyContextEngine:
    """The host's own context path (see the module docstring)."""

    @property
    def info(self) -> ContextEngineInfo:
        return LEGACY_INFO

    async def ingest(self, params: IngestParams) -> IngestResult:
        await trio.lowlevel.checkpoint()
        return IngestResult(ingested=False)

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        await trio.lowlevel.checkpoint()
        return AssembleResult(
            messages=params.messages, estimated_tokens=estimate_tokens(params.messages)
        )

    async def compact(self, params: CompactParams) -> CompactResult:
        return await delegate_compaction_to_runtime(params)


class EngineFailedError(ContractError):
    """The selected engine raised; it is quarantined and the legacy path took over."""


@attrs.frozen
class QuarantineRecord:
    """Why the selected engine was quarantined: which engine, whose, doing what, and why."""

    engine_id: str
    plugin_id: str | None
    operation: str
    reason: str


@attrs.define(eq=False)
class ContextEngineSlot:
    """Runs the selected context engine for a host; see the module docstring."""

    registered: RegisteredEngine | None
    config: Any = None
    workspace_dir: Path | None = None
    state_dir: Path | None = None
    legacy: LegacyContextEngine = attrs.field(factory=LegacyContextEngine)
    events: EventLog | None = None
    quarantined: dict[str, QuarantineRecord] = attrs.field(factory=dict)
    _engine: Any = None

    @property
    def selected_id(self) -> str:
        return self.registered.engine_id if self.registered is not None else "legacy"

    def engine(self) -> Any:
        """The selected engine (built on first use), or the legacy one when quarantined."""
        if self.registered is None or self.selected_id in self.quarantined:
            return self.legacy
        if self._engine is None:
            ctx = ContextEngineFactoryContext(
                config=self.config,
                agent_dir=self.state_dir / "agents" if self.state_dir is not None else None,
                workspace_dir=self.workspace_dir,
            )
            try:
                engine = self.registered.factory(ctx)
                _validate_engine(self.selected_id, engine)
            except Exception as exc:
                self._quarantine("build", exc)
                return self.legacy
            self._engine = engine
        return self._engine

    def built_engine(self) -> Any | None:
        """The selected engine if it was built (and not quarantined), else None."""
        return self._engine

    def durable_engine(self) -> Any | None:
        """The selected engine if it participates in durable admitted turns now, else None."""
        engine = self.engine()
        if engine is self.legacy:
            return None
        return engine if participates_in_durable_turns(engine) else None

    def _quarantine(self, operation: str, exc: BaseException) -> None:
        record = QuarantineRecord(
            engine_id=self.selected_id,
            plugin_id=self.registered.plugin_id if self.registered is not None else None,
            operation=operation,
            reason=f"{type(exc).__name__}: {exc}",
        )
        self.quarantined[self.selected_id] = record
        self._engine = None
        logger.error(
            'context engine "%s" (plugin %s) failed in %s and is quarantined; using the '
            "legacy engine (%s)",
            record.engine_id,
            record.plugin_id,
            operation,
            record.reason,
            exc_info=exc,
        )
        if self.events is not None:
            self.events.emit(
                "engine.quarantined",
                engine_id=record.engine_id,
                plugin_id=record.plugin_id,
                operation=operation,
                reason=record.reason,
            )

    def is_quarantined(self) -> bool:
        return self.selected_id in self.quarantined

    async def call(
        self,
        engine: Any,
        method: str,
        params: Any,
        fallback: Callable[[], Awaitable[R]] | None = None,
    ) -> R:
        """Call ``engine.method(params)`` with host fields filtered for that engine.

        If the engine is not the legacy one and it raises, it is quarantined and
        ``fallback`` (the legacy path's equivalent) runs instead; without a fallback
        the error propagates as :class:`EngineFailedError`.
        """
        info: ContextEngineInfo = engine.info
        fn = getattr(engine, method)
        params = _filtered(info, params)
        if engine is self.legacy:
            result: R = await fn(params)
            return result
        try:
            result = await fn(params)
        except Exception as exc:
            self._quarantine(method, exc)
            if fallback is None:
                raise EngineFailedError(
                    f'context engine "{info.id}" failed in {method}: {type(exc).__name__}'
                ) from exc
            return await fallback()
        return result

    async def call_unisolated(self, engine: Any, method: str, params: Any) -> Any:
        """Call ``engine.method(params)`` with host fields filtered; errors propagate as is."""
        return await getattr(engine, method)(_filtered(engine.info, params))


def _filtered(info: ContextEngineInfo, params: P) -> P:
    fields = attrs.asdict(params, recurse=False)  # type: ignore[arg-type]
    filtered = filter_host_fields(info, fields)
    if filtered is fields:
        return params
    return attrs.evolve(params, **{k: filtered[k] for k in filtered if k != "_runtime"})  # type: ignore[misc]


def _validate_engine(engine_id: str, engine: object) -> None:
    info = getattr(engine, "info", None)
    if not isinstance(info, ContextEngineInfo):
        raise ContractError(f'context engine "{engine_id}" has no ContextEngineInfo as info')
    if info.id != engine_id:
        # The registered id is the engine's name in config and records; info.id is
        # informational, so a mismatch is worth a warning, not a quarantine.
        logger.warning(
            'context engine registered as "%s" reports info.id "%s"; using "%s"',
            engine_id,
            info.id,
            engine_id,
        )
    for name in ("ingest", "assemble", "compact"):
        if not callable(getattr(engine, name, None)):
            raise ContractError(f'context engine "{engine_id}" does not implement {name}()')
    if not isinstance(engine, ContextEngine):  # pragma: no cover - the checks above cover it
        raise ContractError(f'context engine "{engine_id}" does not satisfy the contract')


def runtime_compaction_params(params: CompactParams, runtime: RuntimeCompactor) -> CompactParams:
    """Params whose delegation reaches ``runtime`` (host use)."""
    return attrs.evolve(params, runtime=runtime)
