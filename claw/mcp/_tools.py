"""The MCP tools: their names, JSON schemas, annotations and the calls they make.

Every read tool is a thin face on the gateway's memory methods
(:mod:`claw.gateway._memory`): the arguments are the gateway's ``params`` under the
same camelCase names (``maxResults``, ``minScore``, ``from``), validated and converted
by the same code, and the structured result is the gateway's v2 payload. One
vocabulary for every surface of claw means an error names the argument exactly as
the client spelled it, and a fix to the gateway's validation fixes this server too.

The write tools (``memory_add``, ``memory_forget``; listed only when the server allows
writes) call the host's write route, ``host.memory.add`` / ``host.memory.forget``, which
goes through the provider's own operation and refuses a caller without
``operator.write``; their arguments are validated by the same gateway helpers.

What a tool never takes from its arguments: the agent, the caller's identity, an
owner flag or an audience. The server fixes the agent in its configuration and
mints the authority itself (see :mod:`claw.mcp._server`); an ``agentId`` argument is
refused as unknown.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

from .._capabilities import MemoryCallerContext
from .._input import InvalidInputError, check_json
from ..gateway._auth import READ_SCOPE
from ..gateway._errors import GatewayError
from ..gateway._memory import (
    MAX_CURSOR_CHARS,
    MAX_LINE_NUMBER,
    MAX_QUERY_CHARS,
    MAX_REFERENCE_FIELD_CHARS,
    MAX_REFERENCE_ID_CHARS,
    MAX_RESULTS_DEFAULT,
    MAX_RESULTS_LIMIT,
    _reference,
    _string,
    memory_get,
    memory_search,
    wire_add,
    wire_forget,
)
from ..gateway._memory import memory_status as gateway_memory_status
from ..memory import MemoryRuntime

WRITE_SCOPE = "operator.write"
"""The scope the write tools need (the host's write route accepts it for operators)."""

ToolRun = Callable[
    [MemoryRuntime, MemoryCallerContext, dict[str, Any], str], Awaitable[dict[str, Any]]
]


@attrs.frozen
class ToolSpec:
    """One tool: what ``tools/list`` shows and what ``tools/call`` runs.

    ``run(memory, caller, arguments, agent_id)`` returns the structured result (the
    guard checks currency around every provider call);
    ``scope`` is the operator scope the caller's authority must hold.
    """

    name: str
    title: str
    description: str
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any]
    read_only: bool
    run: ToolRun
    scope: str = READ_SCOPE
    destructive: bool = False

    @property
    def arguments(self) -> frozenset[str]:
        """The argument names the input schema allows."""
        return frozenset(self.input_schema.get("properties", {}))


def check_arguments(spec: ToolSpec, arguments: Mapping[str, Any]) -> None:
    """Refuse arguments that are not text, finite numbers and bounded JSON (the checks of
    :mod:`claw._input`, as the gateway applies them to ``params``), or that the tool does
    not take, naming the field and the ones it does take."""
    try:
        check_json(arguments, "arguments")
    except InvalidInputError as exc:
        raise GatewayError("INVALID_REQUEST", str(exc)) from None
    unknown = sorted(set(arguments) - spec.arguments)
    if not unknown:
        return
    valid = ", ".join(sorted(spec.arguments)) or "none"
    name = unknown[0]
    if name == "agentId":
        raise GatewayError(
            "INVALID_REQUEST",
            f"{spec.name} does not take agentId: this server serves one agent, fixed by its "
            "configuration (claw mcp --agent)",
        )
    raise GatewayError(
        "INVALID_REQUEST",
        f"{spec.name}: unknown argument {name[:64]!r} (valid arguments: {valid})",
    )


_REFERENCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A memory reference exactly as a memory_search hit gives it.",
    "properties": {
        "providerId": {"type": "string", "maxLength": MAX_REFERENCE_FIELD_CHARS},
        "id": {"type": "string", "maxLength": MAX_REFERENCE_ID_CHARS},
        "revision": {"type": "string", "maxLength": MAX_REFERENCE_FIELD_CHARS},
        "fragment": {"type": "string", "maxLength": MAX_REFERENCE_FIELD_CHARS},
    },
    "required": ["providerId", "id"],
}

_CITATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "startLine": {"type": "integer"},
        "endLine": {"type": "integer"},
        "source": {"type": "string"},
    },
    "required": ["path", "startLine", "endLine", "source"],
}

_ENVELOPE: dict[str, Any] = {
    "version": {"type": "integer", "const": 2},
    "agentId": {"type": "string"},
    "providerId": {"type": "string"},
}

SEARCH_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_QUERY_CHARS,
            "description": "What to look for, in plain words.",
        },
        "maxResults": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_RESULTS_LIMIT,
            "description": f"At most this many hits (default {MAX_RESULTS_DEFAULT}).",
        },
        "minScore": {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "description": "Drop hits scoring below this (0 to 1).",
        },
        "sources": {
            "type": "array",
            "items": {"type": "string", "enum": ["memory", "sessions"]},
            "minItems": 1,
            "description": "Search only these sources: memory files and/or past sessions.",
        },
        "cursor": {
            "type": "string",
            "maxLength": MAX_CURSOR_CHARS,
            "description": "The nextCursor of an earlier answer, for its next page.",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}

SEARCH_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        **_ENVELOPE,
        "hits": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "reference": _REFERENCE_SCHEMA,
                    "excerpt": {"type": "string"},
                    "score": {"type": "number"},
                    "citation": _CITATION_SCHEMA,
                },
                "required": ["reference", "excerpt"],
            },
        },
        "nextCursor": {"type": "string"},
        "coverage": {
            "type": "object",
            "properties": {
                "sources": {"type": "array", "items": {"type": "string"}},
                "complete": {"type": "boolean"},
            },
        },
        "warning": {"type": "string"},
    },
    "required": ["version", "agentId", "providerId", "hits"],
}

GET_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reference": _REFERENCE_SCHEMA,
        "from": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_LINE_NUMBER,
            "description": "First line to read (1-based).",
        },
        "lines": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_LINE_NUMBER,
            "description": "How many lines to read.",
        },
    },
    "required": ["reference"],
    "additionalProperties": False,
}

GET_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        **_ENVELOPE,
        "status": {"type": "string", "enum": ["ok", "not_found"]},
        "reference": _REFERENCE_SCHEMA,
        "text": {"type": "string"},
        "from": {"type": "integer"},
        "lines": {"type": "integer"},
        "totalLines": {"type": "integer"},
        "truncated": {"type": "boolean"},
    },
    "required": ["version", "agentId", "providerId", "status", "reference"],
}

STATUS_INPUT: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}

STATUS_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        **_ENVELOPE,
        "status": {"type": "string"},
        "message": {"type": "string"},
        "details": {"type": "object"},
    },
    "required": ["version", "agentId", "providerId", "status"],
}


async def _search(
    memory: MemoryRuntime,
    caller: MemoryCallerContext,
    arguments: dict[str, Any],
    agent: str,
) -> dict[str, Any]:
    params = {**arguments, "version": 2, "agentId": agent}
    return await memory_search(memory, caller, params, fresh=True)


async def _get(
    memory: MemoryRuntime,
    caller: MemoryCallerContext,
    arguments: dict[str, Any],
    agent: str,
) -> dict[str, Any]:
    return await memory_get(memory, caller, {**arguments, "agentId": agent}, fresh=True)


async def _status(
    memory: MemoryRuntime,
    caller: MemoryCallerContext,
    arguments: dict[str, Any],
    agent: str,
) -> dict[str, Any]:
    return await gateway_memory_status(memory, caller, {**arguments, "agentId": agent}, fresh=True)


READ_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="memory_search",
        title="Search memory",
        description=(
            "Search the agent's memory (its memory files and, where allowed, past sessions). "
            "Each hit has a reference (pass it to memory_get to read more), an excerpt, a "
            "score and a citation (path and lines). Pass nextCursor back as cursor for more."
        ),
        input_schema=SEARCH_INPUT,
        output_schema=SEARCH_OUTPUT,
        read_only=True,
        run=_search,
    ),
    ToolSpec(
        name="memory_get",
        title="Read a memory",
        description=(
            "Read the text behind a reference from memory_search, optionally from a line "
            "and for a number of lines."
        ),
        input_schema=GET_INPUT,
        output_schema=GET_OUTPUT,
        read_only=True,
        run=_get,
    ),
    ToolSpec(
        name="memory_status",
        title="Memory status",
        description=(
            "The memory provider's health (ready, degraded or unavailable) and index details."
        ),
        input_schema=STATUS_INPUT,
        output_schema=STATUS_OUTPUT,
        read_only=True,
        run=_status,
    ),
)


# -- the write tools (offered only with allow_writes) ---------------------------------

MAX_ADD_TEXT_CHARS = 32 * 1024
MAX_SECTION_CHARS = 200

ADD_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_ADD_TEXT_CHARS,
            "description": "What to remember, in plain words (stamped with the time).",
        },
        "path": {
            "type": "string",
            "maxLength": MAX_REFERENCE_ID_CHARS,
            "description": "The memory file to add it to (default: today's note).",
        },
        "section": {
            "type": "string",
            "maxLength": MAX_SECTION_CHARS,
            "description": "A heading to file it under (created when missing).",
        },
    },
    "required": ["text"],
    "additionalProperties": False,
}

ADD_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        **_ENVELOPE,
        "reference": _REFERENCE_SCHEMA,
        "citation": _CITATION_SCHEMA,
        "timestamp": {"type": "string"},
    },
    "required": ["version", "agentId", "providerId", "reference", "citation", "timestamp"],
}

FORGET_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reference": _REFERENCE_SCHEMA,
        "dryRun": {"type": "boolean", "description": "Only report what would be forgotten."},
        "wholeRange": {
            "type": "boolean",
            "description": (
                "Remove every line of the reference's fragment even when it covers several "
                "entries (default: exactly one entry; a fragment covering several is refused)."
            ),
        },
    },
    "required": ["reference"],
    "additionalProperties": False,
}

FORGET_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        **_ENVELOPE,
        "reference": _REFERENCE_SCHEMA,
        "dryRun": {"type": "boolean"},
        "paths": {"type": "array", "items": {"type": "string"}},
        "chunks": {"type": "integer"},
        "removedText": {"type": "string"},
        "removalId": {"type": "string"},
        "startLine": {"type": "integer"},
        "endLine": {"type": "integer"},
        "entries": {"type": "integer"},
    },
    "required": ["version", "agentId", "providerId", "reference", "dryRun", "paths", "chunks"],
}


async def _add(
    memory: MemoryRuntime,
    caller: MemoryCallerContext,
    arguments: dict[str, Any],
    agent: str,
) -> dict[str, Any]:
    text = _string(arguments, "text", required=True, max_chars=MAX_ADD_TEXT_CHARS)
    path = _string(arguments, "path", max_chars=MAX_REFERENCE_ID_CHARS)
    section = _string(arguments, "section", max_chars=MAX_SECTION_CHARS)
    for name, value in (("path", path), ("section", section)):
        if value is not None and not value.strip():
            raise GatewayError("INVALID_REQUEST", f"{name} must not be empty")
    assert text is not None
    result = await memory.add(caller, text, path=path, section=section, agent_id=agent)
    return {
        "version": 2,
        "agentId": agent,
        "providerId": result.reference.provider_id,
        **wire_add(result),
    }


async def _forget(
    memory: MemoryRuntime,
    caller: MemoryCallerContext,
    arguments: dict[str, Any],
    agent: str,
) -> dict[str, Any]:
    reference = _reference(arguments.get("reference"))
    dry_run = arguments.get("dryRun", False)
    whole_range = arguments.get("wholeRange", False)
    for name, value in (("dryRun", dry_run), ("wholeRange", whole_range)):
        if not isinstance(value, bool):
            raise GatewayError("INVALID_REQUEST", f"{name} must be true or false")
    result = await memory.forget(
        caller, reference, dry_run=dry_run, agent_id=agent, whole_range=whole_range
    )
    return {
        "version": 2,
        "agentId": agent,
        "providerId": result.reference.provider_id,
        **wire_forget(result),
    }


WRITE_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="memory_add",
        title="Remember",
        description=(
            "Add a memory: the text is appended, stamped with the time, to a memory file "
            "(default: today's note) and the next memory_search finds it. Returns its "
            "reference (pass it to memory_forget to take it back) and citation."
        ),
        input_schema=ADD_INPUT,
        output_schema=ADD_OUTPUT,
        read_only=False,
        run=_add,
        scope=WRITE_SCOPE,
    ),
    ToolSpec(
        name="memory_forget",
        title="Forget",
        description=(
            "Forget what a reference names: exactly one memory entry (the one memory_add "
            "gave, or the entry a memory_search hit's lines lie in; a hit covering several "
            "entries is refused, naming them, unless wholeRange is true), or a whole "
            "source's index entries (a reference without a fragment). The result's "
            "removalId undoes it (claw memory restore). dryRun reports what would go "
            "without changing anything."
        ),
        input_schema=FORGET_INPUT,
        output_schema=FORGET_OUTPUT,
        read_only=False,
        run=_forget,
        scope=WRITE_SCOPE,
        destructive=True,
    ),
)
