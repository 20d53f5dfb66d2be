"""The post-compaction refresh: after a compaction, the memory provider's optional ``refresh()``.

The seed's host consumer table: "Post-compaction refresh | Optional ``refresh()`` | No
capability flag; omission or denial is logged". The turn runner receives it as part of
its maintenance and calls it after every compaction that compacted.
"""

from __future__ import annotations

import logging

import attrs

from .._errors import ClawError
from .._events import EventLog
from .._scopes import Scopes
from ..sessions import SessionRow
from ._runtime import MemoryRuntime

logger = logging.getLogger("claw.memory")


@attrs.define(eq=False)
class PostCompactionRefresh:
    """Asks the selected memory provider to refresh, under a host authority of its own."""

    _memory: MemoryRuntime
    _scopes: Scopes
    _events: EventLog

    async def __call__(self, row: SessionRow) -> None:
        """Refresh after ``row``'s session compacted; omission or denial is logged."""
        plugin_id = self._memory.slots.memory_plugin
        if plugin_id is None:
            return
        try:
            async with self._scopes.open("post-compaction-refresh") as scope:
                ctx = scope.mint_caller_context(
                    scope.mint_host_authority("refresh"), purpose="refresh"
                )
                async with self._memory.open(ctx, agent_id=row.agent_id) as handle:
                    refreshed = await handle.refresh()
        except ClawError as exc:
            logger.info("post-compaction refresh of %s was refused: %s", row.session_key, exc)
            self._events.emit("memory.refresh_denied", row.session_key, error=str(exc))
            return
        if refreshed:
            self._events.emit("memory.refreshed", row.session_key)
        else:
            logger.info("memory provider %s offers no refresh()", plugin_id)
            self._events.emit("memory.refresh_omitted", row.session_key)
