"""Memory Records' agent tools: search, get, add, update, forget.

Every tool goes through the host's memory guard (``context.memory``, a
:class:`~claw.plugin_sdk.ToolMemory`) as the calling run's caller: reads with the
guard's capability checks, ``authorize_search_hits`` and release check; writes with the
release check right before the effect and the currency check after it. The tools never
open the provider runtime themselves. The partition a tool reads or writes is the one
the host-minted audience grants: a group chat's agent keeps and finds that group's
records, never the owner's. In a tools-arm flush (``context.memory_flush`` set) the
delegated audience decides the same way, and ``record_add`` deduplicates by the flush
id: a retried flush, on any host, writes each memory once. Results are plain text
naming each record's reference and revision (``rec_...@2``), which ``record_get``,
``record_update`` and ``record_forget`` take back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from claw.plugin_sdk import (
    SEARCH_TOOL_PARAMETERS,
    CapabilityDeniedError,
    ContractError,
    MemoryCallerContext,
    MemoryGetRequest,
    MemoryReference,
    StaleCapabilityError,
    Tool,
    ToolContext,
    ToolMemory,
    UnsupportedRequestError,
    search_tool_request,
)

from ._runtime import parse_revision
from ._service import PLUGIN_ID, RecordsService
from ._store import StoredRecord
from ._writes import add_record, forget_record, update_record

TOOLS = ("record_search", "record_get", "record_add", "record_update", "record_forget")

#: What a tool answers as a refusal, in words the model can act on: the call's own
#: mistakes and its authority. A database or provider failure is not caught here: the
#: host reports it to the model by type only, since its text names the database's
#: socket, port and name.
_REFUSALS = (UnsupportedRequestError, CapabilityDeniedError, StaleCapabilityError, ValueError)

_REF = {"type": "string", "description": "A record reference, e.g. rec_...@2 from a search."}
GET_PARAMETERS = {"type": "object", "properties": {"ref": _REF}, "required": ["ref"]}
ADD_PARAMETERS = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "The memory to keep, self-contained."},
        "metadata": {"type": "object", "description": "Optional JSON facts about it."},
    },
    "required": ["text"],
}
UPDATE_PARAMETERS = {
    "type": "object",
    "properties": {
        "ref": _REF,
        "text": {"type": "string", "description": "The corrected memory, in full."},
    },
    "required": ["ref", "text"],
}
FORGET_PARAMETERS = {"type": "object", "properties": {"ref": _REF}, "required": ["ref"]}


def _ref_arg(arguments: Mapping[str, Any]) -> tuple[str, int | None]:
    """``rec_...`` or ``rec_...@<revision>`` from the tool's ``ref`` argument."""
    value = arguments.get("ref")
    if not isinstance(value, str) or not value.strip():
        raise ValueError("'ref' must be a record reference from record_search")
    ref, _, revision = value.strip().partition("@")
    return ref, parse_revision(revision or None)


def _label(ref: str, revision: int | str) -> str:
    return f"{ref}@{revision}"


def _memory(context: ToolContext) -> ToolMemory:
    """The tool's memory through the host's guard (Memory Records registered a
    capability, so the host always gives its tools one)."""
    if context.memory is None:
        raise ContractError("Memory Records' tools need the host's memory facet (context.memory)")
    return context.memory


def record_tools(service: RecordsService) -> list[Tool]:
    """The tools Memory Records registers."""

    async def record_search(context: ToolContext, arguments: Mapping[str, Any]) -> str:
        try:
            request = search_tool_request("record_search", arguments)
        except UnsupportedRequestError as exc:
            return str(exc)
        query = request.query
        result = await _memory(context).search(request)
        hits = result.hits
        if not hits:
            note = f" ({result.warning})" if result.warning else ""
            return f"No memory record matched {query!r}{note}."
        return "\n".join(
            f"{n}. [{hit.score or 0.0:.2f}] {hit.excerpt.strip()}\n"
            f"   Ref: {_label(hit.reference.id, hit.reference.revision or '')}"
            for n, hit in enumerate(hits, start=1)
        )

    async def record_get(context: ToolContext, arguments: Mapping[str, Any]) -> str:
        try:
            ref, revision = _ref_arg(arguments)
            result = await _memory(context).get(
                MemoryGetRequest(
                    reference=MemoryReference(
                        provider_id=PLUGIN_ID,
                        id=ref,
                        revision=None if revision is None else str(revision),
                    )
                )
            )
        except _REFUSALS as exc:
            return f"record_get refused: {exc}"
        if result.status != "ok" or result.text is None:
            return f"{ref} was not found in memory."
        return f"{_label(ref, result.reference.revision or '')}:\n{result.text}"

    async def record_add(context: ToolContext, arguments: Mapping[str, Any]) -> str:
        flush = context.memory_flush

        async def add(caller: MemoryCallerContext) -> tuple[StoredRecord, bool]:
            return await add_record(
                service,
                caller,
                context.agent_id,
                arguments.get("text"),
                metadata=arguments.get("metadata"),
                flush_id=flush.flush_id if flush is not None else None,
                tool="record_add",
            )

        try:
            stored, created = await _memory(context).write("record_add", add)
        except _REFUSALS as exc:
            return f"record_add refused: {exc}"
        said = "Remembered" if created else "Already remembered by this flush"
        return f"{said}. Ref: {_label(stored.ref, stored.revision)}"

    async def record_update(context: ToolContext, arguments: Mapping[str, Any]) -> str:
        try:
            ref, revision = _ref_arg(arguments)

            async def update(caller: MemoryCallerContext) -> StoredRecord | None:
                return await update_record(
                    service,
                    caller,
                    context.agent_id,
                    ref,
                    arguments.get("text"),
                    expected_revision=revision,
                    tool="record_update",
                )

            stored = await _memory(context).write("record_update", update)
        except _REFUSALS as exc:
            return f"record_update refused: {exc}"
        if stored is None:
            return f"{ref} is not a memory record this conversation may change."
        return f"Updated. Ref: {_label(stored.ref, stored.revision)}"

    async def record_forget(context: ToolContext, arguments: Mapping[str, Any]) -> str:
        try:
            ref, _ = _ref_arg(arguments)

            async def forget(
                caller: MemoryCallerContext,
            ) -> tuple[StoredRecord, str | None] | None:
                return await forget_record(
                    service, caller, context.agent_id, ref, tool="record_forget"
                )

            found = await _memory(context).write("record_forget", forget)
        except _REFUSALS as exc:
            return f"record_forget refused: {exc}"
        if found is None:
            return f"{ref} is not a memory record this conversation may change."
        return f"Forgot {ref} (removal {found[1]}: the owner can restore it)."

    return [
        Tool(
            name="record_search",
            description="Search long-term memory records you may see; returns refs.",
            handler=record_search,
            parameters=SEARCH_TOOL_PARAMETERS,
            read_only=True,
        ),
        Tool(
            name="record_get",
            description="Read one memory record (optionally an older revision, ref@N).",
            handler=record_get,
            parameters=GET_PARAMETERS,
            read_only=True,
        ),
        Tool(
            name="record_add",
            description="Store a durable memory (a fact, decision or preference) as a record.",
            handler=record_add,
            parameters=ADD_PARAMETERS,
        ),
        Tool(
            name="record_update",
            description="Correct a memory record (ref@N from a search); keeps its history.",
            handler=record_update,
            parameters=UPDATE_PARAMETERS,
        ),
        Tool(
            name="record_forget",
            description=(
                "Forget a memory record: it leaves search and get at once; the owner can "
                "restore it (only a purge erases it for good)."
            ),
            handler=record_forget,
            parameters=FORGET_PARAMETERS,
        ),
    ]
