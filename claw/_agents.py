"""Which agents a host serves: the configured default agent and every agent with sessions."""

from __future__ import annotations

import attrs

from .state import SessionStorage


@attrs.frozen
class Agents:
    """The host's agents; callers that name an agent (an operator, a gateway client, the
    memory guard) may address only these, so that no provider creates state for a
    made-up name."""

    default_agent_id: str
    _sessions: SessionStorage

    async def knows(self, agent_id: str) -> bool:
        """Whether ``agent_id`` is the default agent or has sessions."""
        if agent_id == self.default_agent_id:
            return True
        return await self._sessions.has_agent(agent_id)
