"""Tool policy, the context a tool handler receives, and running one tool call.

Tools are registered by plugins and carry their owning plugin id. A run sees the tools
its turn's :class:`ToolPolicy` allows. A handler receives a :class:`ToolContext` with
the run's caller context (its authority, audience and currency check) and, for a tool
of a plugin that registered a memory capability, its memory through the host's guard
(``context.memory``); tools never get the host, and a tool-arm flush context
additionally carries the flush identity.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from .._capabilities import FlushIdentity, MemoryAudience, MemoryCallerContext
from .._currency import Currency
from .._errors import (
    ClawError,
    DatabaseError,
    DatabaseUnavailableError,
    ProviderError,
    SchemaVersionError,
    StorageError,
)
from .._input import text_problem
from .._plugins import RegisteredTool
from ..memory._runtime import MemoryRuntime, ToolMemory
from ..models import ToolCall, ToolResult, ToolSpec

if TYPE_CHECKING:
    from .._runs import Run

logger = logging.getLogger("claw.tools")


def _names(value: Iterable[str] | None) -> frozenset[str] | None:
    return None if value is None else frozenset(value)


def _deny(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


@attrs.frozen
class ToolPolicy:
    """Which tools a turn may use: ``allow`` (``None``: every registered tool) minus ``deny``."""

    allow: frozenset[str] | None = attrs.field(default=None, converter=_names)
    deny: frozenset[str] = attrs.field(factory=frozenset, converter=_deny)

    def allows(self, name: str) -> bool:
        """Whether ``name`` passes this policy."""
        return name not in self.deny and (self.allow is None or name in self.allow)


@attrs.frozen
class FlushToolContext:
    """What a tool-arm flush adds to the tool context: its deterministic flush identity.

    ``flush_id`` lets a provider deduplicate a retried mutation; it grants no authority.
    """

    identity: FlushIdentity

    @property
    def flush_id(self) -> str:
        return self.identity.flush_id


@attrs.frozen
class ToolContext:
    """What a tool handler receives.

    ``caller`` is the run's :class:`~claw.MemoryCallerContext`: call
    ``caller.assert_current()`` before each effect. ``audience`` is the run's (or, in a
    flush, the delegated) memory audience. ``memory_flush`` is set only in tool-arm
    flush runs. ``owner_plugin_id`` is the plugin that registered the tool. ``memory``
    is that plugin's memory through the host's guard (:class:`~claw.memory.ToolMemory`:
    search, get, and writes, all with the guard's capability, currency and release
    checks), or ``None`` when the plugin registered no memory capability.
    """

    owner_plugin_id: str
    tool_name: str
    session_key: str
    agent_id: str
    caller: MemoryCallerContext
    sandboxed: bool
    workspace_dir: Path
    memory_flush: FlushToolContext | None = None
    memory: ToolMemory | None = None

    @property
    def audience(self) -> MemoryAudience | None:
        return self.caller.audience


def tool_specs(tools: Sequence[RegisteredTool]) -> tuple[ToolSpec, ...]:
    """The specs the model sees for ``tools``."""
    return tuple(
        ToolSpec(
            name=t.tool.name, description=t.tool.description, parameters=dict(t.tool.parameters)
        )
        for t in tools
    )


def select_tools(
    registered: Sequence[RegisteredTool], policy: ToolPolicy, *, prefer_plugin: str | None
) -> tuple[RegisteredTool, ...]:
    """The tools a turn sees: allowed by policy, one per name.

    When two plugins registered the same name, the memory slot owner's wins, else the
    first registered; the other is left out with a warning.
    """
    chosen: dict[str, RegisteredTool] = {}
    for tool in registered:
        if not policy.allows(tool.name):
            continue
        existing = chosen.get(tool.name)
        if existing is None:
            chosen[tool.name] = tool
            continue
        keep = tool if tool.plugin_id == prefer_plugin else existing
        drop = existing if keep is tool else tool
        chosen[tool.name] = keep
        logger.warning(
            'tool "%s" is registered by plugins "%s" and "%s"; using the one of "%s"',
            tool.name,
            existing.plugin_id,
            tool.plugin_id,
            keep.plugin_id,
        )
        del drop
    return tuple(chosen.values())


async def run_tool_call(
    call: ToolCall,
    tools: Mapping[str, RegisteredTool],
    context_for: Callable[[RegisteredTool], ToolContext],
    *,
    memory_owner: str | None = None,
    verify: Callable[[MemoryCallerContext], None] | None = None,
) -> ToolResult:
    """Run one tool call; unknown tools and tool errors become error results for the model.

    A tool of the memory slot owner (``memory_owner``) is dispatched only while the
    run's caller context passes ``verify`` (the host's check, not the context's own):
    once the caller is stale (its audience revoked, the request aborted) the tool is
    not run and the model gets the reason. Cancellation propagates. A handler's claw
    error (a stale capability, say) is reported to the model by type and message; any
    other exception by type only.
    """
    tool = tools.get(call.name)
    if tool is None:
        return ToolResult(
            call_id=call.id, name=call.name, content=f"unknown tool {call.name!r}", is_error=True
        )
    if call.invalid_arguments is not None:
        # The model's arguments broke claw's input rules (claw._input): the tool never
        # sees them; the model is told which field, and may call again.
        return ToolResult(
            call_id=call.id,
            name=call.name,
            content=f"invalid arguments: {call.invalid_arguments} (the tool was not run; "
            "call it again with valid JSON arguments)",
            is_error=True,
        )
    context: ToolContext = context_for(tool)
    if verify is not None and memory_owner is not None and tool.plugin_id == memory_owner:
        try:
            verify(context.caller)
        except ClawError as exc:
            logger.info(
                'memory tool "%s" of plugin "%s" was not dispatched: %s',
                call.name,
                tool.plugin_id,
                exc,
            )
            return ToolResult(
                call_id=call.id,
                name=call.name,
                content=f"{type(exc).__name__}: {exc} (the tool was not run)",
                is_error=True,
            )
    try:
        arguments = call.arguments.thaw()
        content: object = await tool.tool.handler(context, arguments)
    except _INFRASTRUCTURE as exc:
        if type(exc) is ProviderError:
            # The guard's own (and a plugin's plain) ProviderError names the provider
            # and what to do, not host paths: the model may read it, as a gateway
            # client does.
            return ToolResult(
                call_id=call.id,
                name=call.name,
                content=_storable(f"{type(exc).__name__}: {exc}"),
                is_error=True,
            )
        # Storage and provider failures name host paths and database addresses, which
        # are the operator's to read (in the log), not the model's.
        logger.warning('tool "%s" of plugin "%s" failed', call.name, tool.plugin_id, exc_info=exc)
        return ToolResult(
            call_id=call.id,
            name=call.name,
            content=f"{type(exc).__name__}: the tool's storage or provider failed (the host's "
            "log has the details); it may work if tried again later",
            is_error=True,
        )
    except ClawError as exc:
        return ToolResult(
            call_id=call.id,
            name=call.name,
            content=_storable(f"{type(exc).__name__}: {exc}"),
            is_error=True,
        )
    except Exception as exc:
        logger.warning('tool "%s" of plugin "%s" failed', call.name, tool.plugin_id, exc_info=exc)
        return ToolResult(
            call_id=call.id,
            name=call.name,
            content=f"tool failed: {type(exc).__name__}",
            is_error=True,
        )
    if not isinstance(content, str):
        content = json.dumps(content, default=str)
    return ToolResult(call_id=call.id, name=call.name, content=_storable(content))


@attrs.frozen
class ToolDispatch:
    """How a run calls tools; built by ``open_host`` and shared by turns and the flush.

    It makes each tool's :class:`ToolContext` from the run (with the tool's plugin's
    memory through the guard), and dispatches a tool of the memory slot owner only
    while the run's caller passes the host's currency check (:func:`run_tool_call`).
    """

    workspace_dir: Path
    currency: Currency
    memory: MemoryRuntime

    @property
    def memory_owner(self) -> str | None:
        """The memory slot owner's plugin id."""
        return self.memory.slots.memory_plugin

    def context_for(
        self, tool: RegisteredTool, run: Run, *, memory_flush: FlushToolContext | None = None
    ) -> ToolContext:
        """The context ``tool``'s handler receives in ``run``."""
        return ToolContext(
            owner_plugin_id=tool.plugin_id,
            tool_name=tool.name,
            session_key=run.session_key,
            agent_id=run.agent_id,
            caller=run.caller,
            sandboxed=run.authority.sandboxed,
            workspace_dir=self.workspace_dir,
            memory_flush=memory_flush,
            memory=self.memory.for_tool(run.caller, run.agent_id, tool.plugin_id, tool.name),
        )

    async def call(
        self,
        call: ToolCall,
        tools: Mapping[str, RegisteredTool],
        run: Run,
        *,
        memory_flush: FlushToolContext | None = None,
    ) -> ToolResult:
        """Run one tool call of ``run`` (see :func:`run_tool_call`)."""

        def context_for(tool: RegisteredTool) -> ToolContext:
            return self.context_for(tool, run, memory_flush=memory_flush)

        return await run_tool_call(
            call,
            tools,
            context_for,
            memory_owner=self.memory_owner,
            verify=self.currency.verify,
        )


#: Failures of what a tool stands on, not of the call (reported to the model by type,
#: except a plain ProviderError); any other exception that is not a claw error is too,
#: by the handler's last branch.
_INFRASTRUCTURE = (
    ProviderError,
    StorageError,
    DatabaseError,
    DatabaseUnavailableError,
    SchemaVersionError,
)


def _storable(text: str) -> str:
    """``text`` with anything that is not storable text (a lone surrogate, NUL) escaped, so
    that a tool's output can always join the transcript."""
    if text_problem(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
