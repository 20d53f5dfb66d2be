"""Session and lineage builders: the shapes of conversation an audience is resolved from.

A memory audience comes from two facts: what the channel layer asserts about the sender
(``sender_is_owner``, passed when a run or turn is admitted) and the durable session
lineage. :class:`SessionBuilder` writes the lineage: an owner's direct chat, a group,
a channel, a thread, and chains of spawned children (each child records its parent's
current incarnation, which is what keeps its audience current).
"""

from __future__ import annotations

import attrs

from claw import Host
from claw.sessions import ChatType, SessionRow


@attrs.define(eq=False)
class SessionBuilder:
    """Creates sessions in ``host``'s durable store for agent ``agent_id``."""

    host: Host
    agent_id: str = "main"

    async def direct(
        self, key: str = "dm:owner", *, peer_is_owner: bool = False, agent_id: str | None = None
    ) -> SessionRow:
        """A direct (one-to-one) chat; admit its runs with ``sender_is_owner`` as appropriate."""
        return await self.host.sessions.create(
            key,
            agent_id=agent_id or self.agent_id,
            chat_type="direct",
            peer_is_owner=peer_is_owner,
        )

    async def owner_direct(
        self, key: str = "dm:owner", *, agent_id: str | None = None
    ) -> SessionRow:
        """The owner's direct chat: admitted with ``sender_is_owner=True`` it is owner-private."""
        return await self.direct(key, peer_is_owner=True, agent_id=agent_id)

    async def group(self, key: str = "grp:team", *, agent_id: str | None = None) -> SessionRow:
        """A group chat: its runs have a conversation audience, never owner-private."""
        return await self._root(key, "group", agent_id)

    async def channel(self, key: str = "chan:news", *, agent_id: str | None = None) -> SessionRow:
        """A channel: a conversation audience, like a group."""
        return await self._root(key, "channel", agent_id)

    async def thread(self, key: str = "thr:1", *, agent_id: str | None = None) -> SessionRow:
        """A thread root: a conversation audience, like a group."""
        return await self._root(key, "thread", agent_id)

    async def child(
        self,
        parent_key: str,
        child_key: str,
        *,
        sender_is_owner: bool = True,
        chat_type: ChatType | None = None,
    ) -> SessionRow:
        """Spawn ``child_key`` under ``parent_key``'s current incarnation.

        ``sender_is_owner`` is the spawn receipt: whether the spawning turn's sender was
        the owner (a child of an owner's direct chat is owner-private only if so).
        """
        return await self.host.sessions.spawn_child(
            parent_key, child_key, sender_is_owner=sender_is_owner, chat_type=chat_type
        )

    async def child_chain(
        self,
        root_key: str,
        depth: int,
        *,
        prefix: str | None = None,
        sender_is_owner: bool = True,
    ) -> list[SessionRow]:
        """Spawn ``depth`` children hop by hop under the existing ``root_key``.

        Children are named ``<prefix>1``, ``<prefix>2``, ... (``prefix`` defaults to
        ``"<root_key>/child"``); returns them from the first child to the deepest. Every
        spawn records ``sender_is_owner`` as its receipt.
        """
        if depth < 1:
            raise ValueError(f"a child chain has at least one child, got depth {depth}")
        name = prefix if prefix is not None else f"{root_key}/child"
        chain: list[SessionRow] = []
        parent = root_key
        for hop in range(1, depth + 1):
            row = await self.child(parent, f"{name}{hop}", sender_is_owner=sender_is_owner)
            chain.append(row)
            parent = row.session_key
        return chain

    async def _root(self, key: str, chat_type: ChatType, agent_id: str | None) -> SessionRow:
        return await self.host.sessions.create(
            key, agent_id=agent_id or self.agent_id, chat_type=chat_type
        )
