"""The legacy engine, and the slot that runs the selected engine with failure isolation.

The legacy engine is the host's own context path: ``ingest`` is a no-op
(``ingested=False``), ``assemble`` passes the messages through, and ``compact`` runs
the runtime compaction. The :class:`ContextEngineSlot` builds the selected engine
lazily from its factory, fills and filters host fields, and isolates failures: an
engine that raises is quarantined for the life of the host (the process's unit) and
the host falls back to the legacy engine, logging the engine id and the error.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio

from .._errors import ContractError
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


@attrs.define(eq=False)
class ContextEngineSlot:
    """Runs the selected context engine for a host; see the module docstring."""

    registered: RegisteredEngine | None
    config: Any = None
    workspace_dir: Path | None = None
    state_dir: Path | None = None
    legacy: LegacyContextEngine = attrs.field(factory=LegacyContextEngine)
    quarantined: dict[str, str] = attrs.field(factory=dict)
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
                self._quarantine(exc)
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

    def _quarantine(self, exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}"
        self.quarantined[self.selected_id] = reason
        self._engine = None
        logger.error(
            'context engine "%s" failed and is quarantined; using the legacy engine (%s)',
            self.selected_id,
            reason,
            exc_info=exc,
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
        fields = attrs.asdict(params, recurse=False)
        filtered = filter_host_fields(info, fields)
        if filtered is not fields:
            params = attrs.evolve(params, **{k: filtered[k] for k in filtered if k != "_runtime"})
        fn = getattr(engine, method)
        if engine is self.legacy:
            result: R = await fn(params)
            return result
        try:
            result = await fn(params)
        except Exception as exc:
            self._quarantine(exc)
            if fallback is None:
                raise EngineFailedError(
                    f'context engine "{info.id}" failed in {method}: {type(exc).__name__}'
                ) from exc
            return await fallback()
        return result


def _validate_engine(engine_id: str, engine: object) -> None:
    info = getattr(engine, "info", None)
    if not isinstance(info, ContextEngineInfo):
        raise ContractError(f'context engine "{engine_id}" has no ContextEngineInfo as info')
    if info.id != engine_id:
        raise ContractError(
            f'context engine registered as "{engine_id}" reports info.id "{info.id}"'
        )
    for name in ("ingest", "assemble", "compact"):
        if not callable(getattr(engine, name, None)):
            raise ContractError(f'context engine "{engine_id}" does not implement {name}()')
    if not isinstance(engine, ContextEngine):  # pragma: no cover - the checks above cover it
        raise ContractError(f'context engine "{engine_id}" does not satisfy the contract')


def runtime_compaction_params(params: CompactParams, runtime: RuntimeCompactor) -> CompactParams:
    """Params whose delegation reaches ``runtime`` (host use)."""
    return attrs.evolve(params, runtime=runtime)
