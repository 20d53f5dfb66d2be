"""Memory Core's agent tools: ``memory_search``, ``memory_get`` and ``memory_add``.

All three go through the host's memory guard (``context.memory``, a
:class:`~claw.plugin_sdk.ToolMemory`) as the calling run's caller, like every other
route into memory: the same capability checks, the same visibility policy (a group
chat's agent sees what that group may see, no more), ``authorize_search_hits`` and the
release check before anything is returned. The tools never open Memory Core's runtime
themselves. Results are plain text with ``Source: <path>#L<a>-L<b>`` citations.
``memory_add`` writes through the host's write route into Memory Core's own write
operation (:mod:`claw_memory._writes`): only a run with the owner's audience may write,
a conversation audience is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from claw.plugin_sdk import (
    SEARCH_TOOL_PARAMETERS,
    ClawError,
    ContractError,
    MemoryAddRequest,
    MemoryGetRequest,
    MemoryReference,
    Tool,
    ToolContext,
    ToolMemory,
    UnsupportedRequestError,
    search_tool_request,
)

from ._writes import PROVIDER_ID

GET_PARAMETERS = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "A path from a memory_search result."},
        "from": {"type": "integer", "minimum": 1},
        "lines": {"type": "integer", "minimum": 1, "maximum": 400},
    },
    "required": ["path"],
}

ADD_PARAMETERS = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "The memory to keep, self-contained."},
        "section": {"type": "string", "description": "A heading to file it under (optional)."},
        "path": {
            "type": "string",
            "description": "A memory file (default: today's memory/YYYY-MM-DD.md).",
        },
    },
    "required": ["text"],
}


def _int_arg(arguments: Mapping[str, Any], name: str, default: int | None) -> int | None:
    value = arguments.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _memory(context: ToolContext) -> ToolMemory:
    """The tool's memory through the host's guard (Memory Core registered a capability,
    so the host always gives its tools one)."""
    if context.memory is None:
        raise ContractError("Memory Core's tools need the host's memory facet (context.memory)")
    return context.memory


def memory_tools() -> list[Tool]:
    """The tools Memory Core registers."""

    async def memory_search(context: ToolContext, arguments: Mapping[str, Any]) -> str:
        try:
            request = search_tool_request("memory_search", arguments)
        except UnsupportedRequestError as exc:
            return str(exc)
        query = request.query
        result = await _memory(context).search(request)
        hits = result.hits
        if not hits:
            note = f" ({result.warning})" if result.warning else ""
            return f"No memory matched {query!r}{note}."
        lines = []
        for number, hit in enumerate(hits, start=1):
            c = hit.citation
            assert c is not None
            lines.append(
                f"{number}. [{hit.score:.2f}] {hit.excerpt.strip()}\n"
                f"   Source: {c.path}#L{c.start_line}-L{c.end_line}"
            )
        return "\n".join(lines)

    async def memory_get(context: ToolContext, arguments: Mapping[str, Any]) -> str:
        path = arguments.get("path")
        if not isinstance(path, str) or not path:
            return "memory_get needs a 'path' from a memory_search result."
        start = _int_arg(arguments, "from", None)
        count = _int_arg(arguments, "lines", None)
        try:
            result = await _memory(context).get(
                MemoryGetRequest(
                    reference=MemoryReference(provider_id=PROVIDER_ID, id=path.split("#")[0]),
                    from_line=start,
                    lines=count,
                )
            )
        except ClawError as exc:
            return f"memory_get refused: {exc}"
        if result.status != "ok" or result.text is None:
            return f"{path} was not found in memory."
        first = result.from_line or 1
        last = first + (result.lines or 1) - 1
        more = " (truncated)" if result.truncated else ""
        return f"{path} lines {first}-{last}{more}:\n{result.text}"

    async def memory_add(context: ToolContext, arguments: Mapping[str, Any]) -> str:
        text = arguments.get("text")
        if not isinstance(text, str) or not text.strip():
            return "memory_add needs a non-empty 'text' string."
        options: dict[str, str | None] = {}
        for name in ("section", "path"):
            value = arguments.get(name)
            if value is not None and not isinstance(value, str):
                return f"memory_add: '{name}' must be a string."
            options[name] = value or None
        try:
            request = MemoryAddRequest(text=text, path=options["path"], section=options["section"])
            result = await _memory(context).add(request)
        except ClawError as exc:
            return f"memory_add refused: {exc}"
        c = result.citation
        return f"Remembered. Source: {c.path}#L{c.start_line}-L{c.end_line}"

    return [
        Tool(
            name="memory_search",
            description=(
                "Search long-term memory (memory files and past conversations you may see). "
                "Returns excerpts with Source citations."
            ),
            handler=memory_search,
            parameters=SEARCH_TOOL_PARAMETERS,
            read_only=True,
        ),
        Tool(
            name="memory_get",
            description="Read lines of a memory file or transcript found by memory_search.",
            handler=memory_get,
            parameters=GET_PARAMETERS,
            read_only=True,
        ),
        Tool(
            name="memory_add",
            description=(
                "Write a durable memory (a fact, decision or preference worth keeping) to "
                "long-term memory. Only the owner's conversations may write."
            ),
            handler=memory_add,
            parameters=ADD_PARAMETERS,
        ),
    ]
