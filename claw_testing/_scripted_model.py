"""ScriptedModel: a deterministic :class:`~claw.models.Model` for tests and demos.

A script is a sequence of steps consumed one per call to ``complete``: a reply
(text, tool calls, token usage) or a failure to raise. Every call is recorded
(messages, system prompt, tools) so a test can assert on what the host sent.
When the script runs out the model raises :class:`ScriptExhaustedError`, an
``AssertionError`` rather than a model error, so that a fallback chain cannot
swallow a test's mistake.

Usage is taken from the step when the step gives it; otherwise it is the
documented estimate of four characters per token (rounded up) over the
request and the reply text, so that threshold logic sees stable numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import attrs
import trio

from claw._errors import ClawError
from claw.models import (
    AssistantMessage,
    CompactionSummary,
    Message,
    SystemMessage,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
)


class ScriptExhaustedError(ClawError, AssertionError):
    """A :class:`ScriptedModel` was called more often than its script has steps."""


ToolCallStep = ToolCall | tuple[str, Mapping[str, object]]


def _tool_calls(value: Iterable[ToolCallStep]) -> tuple[ToolCallStep, ...]:
    return tuple(value)


@attrs.frozen
class ScriptedReply:
    """A step answering with ``text`` and ``tool_calls``; ``usage=None`` means estimated.

    Tool calls may be :class:`~claw.models.ToolCall` values or ``(name,
    arguments)`` pairs; pairs get deterministic ids ``call_<call number>_<index>``.
    """

    text: str = ""
    tool_calls: tuple[ToolCallStep, ...] = attrs.field(default=(), converter=_tool_calls)
    usage: Usage | None = None


@attrs.frozen
class ScriptedFailure:
    """A step raising ``error`` (for example a ``ContextOverflowError``)."""

    error: BaseException


@attrs.frozen
class ScriptedCall:
    """What one call to :meth:`ScriptedModel.complete` received."""

    messages: tuple[Message, ...]
    system_prompt: str
    tools: tuple[ToolSpec, ...]

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The names of the offered tools, in order."""
        return tuple(tool.name for tool in self.tools)

    @property
    def last_user_text(self) -> str | None:
        """The text of the last user message sent, if any."""
        for message in reversed(self.messages):
            if isinstance(message, UserMessage):
                return message.text
        return None


ScriptStep = ScriptedReply | ScriptedFailure | AssistantMessage | str | BaseException
"""A step as written in a script: strings are replies, exceptions are failures."""


def _step(value: ScriptStep) -> ScriptedReply | ScriptedFailure | AssistantMessage:
    if isinstance(value, str):
        return ScriptedReply(text=value)
    if isinstance(value, BaseException):
        return ScriptedFailure(value)
    if isinstance(value, ScriptedReply | ScriptedFailure | AssistantMessage):
        return value
    raise TypeError(f"not a script step: {value!r}")


def _steps(
    values: Iterable[ScriptStep],
) -> list[ScriptedReply | ScriptedFailure | AssistantMessage]:
    return [_step(v) for v in values]


def _positive(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be positive, got {value}")


def estimate_tokens(text: str) -> int:
    """The harness's token estimate: four characters per token, rounded up."""
    return math.ceil(len(text) / 4)


def _message_text(message: Message) -> str:
    if isinstance(message, UserMessage | SystemMessage | CompactionSummary):
        return message.text
    if isinstance(message, ToolResult):
        return message.content
    calls = "".join(call.name + call.arguments.to_json_text() for call in message.tool_calls)
    return message.text + calls


@attrs.define
class ScriptedModel:
    """A model that answers from a script and records every call it receives.

    ``ScriptedModel(["hello", ScriptedReply(tool_calls=[("search", {"q": "x"})]),
    ContextOverflowError("too long")])`` answers "hello", then a tool call, then
    raises. Steps can be added later with :meth:`extend`.
    """

    _script: list[ScriptedReply | ScriptedFailure | AssistantMessage] = attrs.field(
        converter=_steps, alias="script"
    )
    context_window: int = attrs.field(default=32_768, validator=_positive)
    _calls: list[ScriptedCall] = attrs.field(factory=list, init=False)

    @property
    def calls(self) -> tuple[ScriptedCall, ...]:
        """Every call received so far, in order."""
        return tuple(self._calls)

    @property
    def remaining(self) -> int:
        """How many steps are left."""
        return len(self._script)

    def extend(self, steps: Iterable[ScriptStep]) -> None:
        """Append steps to the script."""
        self._script.extend(_steps(steps))

    def assert_script_consumed(self) -> None:
        """Fail (``AssertionError``) if steps are left, naming them."""
        if self._script:
            raise AssertionError(
                f"ScriptedModel has {len(self._script)} unused step(s) after "
                f"{len(self._calls)} call(s): {self._script!r}"
            )

    async def complete(
        self,
        *,
        messages: Sequence[Message],
        system_prompt: str,
        tools: Sequence[ToolSpec],
    ) -> AssistantMessage:
        """Record the call, then play the next step (reply or raise)."""
        await trio.lowlevel.checkpoint()
        call = ScriptedCall(
            messages=tuple(messages), system_prompt=system_prompt, tools=tuple(tools)
        )
        self._calls.append(call)
        number = len(self._calls)
        if not self._script:
            raise ScriptExhaustedError(
                f"ScriptedModel script ran out at call {number}; the call had "
                f"{len(call.messages)} message(s), last user text {call.last_user_text!r}, "
                f"tools {list(call.tool_names)}. Add a step for it."
            )
        step = self._script.pop(0)
        if isinstance(step, ScriptedFailure):
            raise step.error
        if isinstance(step, AssistantMessage):
            return step
        calls = tuple(
            item
            if isinstance(item, ToolCall)
            # As a model client builds it: arguments claw does not accept become an
            # invalid call the runner answers, not an error here.
            else ToolCall.from_model(id=f"call_{number}_{index}", name=item[0], arguments=item[1])
            for index, item in enumerate(step.tool_calls)
        )
        usage = step.usage
        if usage is None:
            request = system_prompt + "".join(_message_text(m) for m in messages)
            reply = step.text + "".join(c.name + c.arguments.to_json_text() for c in calls)
            usage = Usage(
                input_tokens=estimate_tokens(request), output_tokens=estimate_tokens(reply)
            )
        return AssistantMessage(text=step.text, tool_calls=calls, usage=usage)
