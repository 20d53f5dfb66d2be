"""The :class:`Model` protocol: the one call the turn runner makes to a language model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ._messages import AssistantMessage, Message, ToolSpec


@runtime_checkable
class Model(Protocol):
    """A language model the host can ask for the next assistant message.

    Implementations raise :class:`~claw.models.ModelError` subclasses for model
    failures (so that a fallback chain can react) and let cancellation through.
    """

    @property
    def context_window(self) -> int:
        """How many tokens of input plus output the model accepts."""
        ...

    async def complete(
        self,
        *,
        messages: Sequence[Message],
        system_prompt: str,
        tools: Sequence[ToolSpec],
    ) -> AssistantMessage:
        """Answer the conversation ``messages`` under ``system_prompt``.

        The answer may request calls of the offered ``tools``; the caller runs
        them and asks again with their :class:`~claw.models.ToolResult`\\ s.
        """
        ...
