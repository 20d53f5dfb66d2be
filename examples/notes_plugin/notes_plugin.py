"""notes: a small third-party memory provider for claw, written against ``claw.plugin_sdk`` only.

The agent keeps short notes in a record store (here a list in memory; a real plugin would
use its own database). A note is either *shared* (anyone talking to the agent may recall
it) or *private* (only the owner, in an owner-private run, or an authenticated operator).
The plugin registers:

* a native memory provider (``provider_runtime``, on the SDK's provider skeleton) the
  host opens for each caller with a minted caller context: it decides visibility from
  the authority and audience it is given, and calls ``context.assert_current()`` right
  before every effect;
* the agent tool ``notes_save``, which only an owner-private run may use;
* a pre-compaction flush plan: before the host compacts a session, the model gets one
  silent turn with ``notes_save`` to keep what matters; a retried flush carries the same
  ``flush_id``, which the tool uses to save each note once.

Install it as any claw plugin: ``[project.entry-points."claw.plugins"] notes =
"notes_plugin:plugin"`` in your package, or pass ``plugins=[notes_plugin.plugin]`` to
``claw.open_host``, and select it with ``plugins.slots.memory = "notes"``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs
import trio

from claw.plugin_sdk import (
    CapabilityDeniedError,
    Citation,
    MemoryCallerContext,
    MemoryFlushPlanRequest,
    MemoryFlushToolsPlan,
    MemoryGetRequest,
    MemoryGetResult,
    MemoryHealth,
    MemoryReference,
    MemorySearchHit,
    MemorySearchRequest,
    MemorySearchResult,
    OperatorAuthority,
    Plugin,
    PluginApi,
    PluginContracts,
    ProviderCapabilities,
    ProviderHandle,
    ProviderRuntime,
    SessionAuthority,
    Tool,
    ToolContext,
    build_capability,
)

PLUGIN_ID = "notes"
SAVE_TOOL = "notes_save"
FLUSH_PROMPT = "The conversation will be compacted. Save durable facts with notes_save."

_WORD = re.compile(r"\w+")


@attrs.frozen
class Note:
    """One note of an agent; ``private`` notes are for the owner only."""

    id: str
    text: str
    private: bool = False
    agent_id: str = "main"


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def _may_see_private(context: MemoryCallerContext) -> bool:
    authority = context.authority
    if isinstance(authority, OperatorAuthority):
        return True
    if isinstance(authority, SessionAuthority):
        audience = authority.audience
        return audience is not None and audience.kind == "owner-private"
    return False  # a host operation reads no private notes


@attrs.define(eq=False)
class _Reader(ProviderHandle["NoteBook"]):
    """A caller-bound handle over the note book (``service``): everything it returns is
    what this caller may see."""

    def _visible(self, note: Note) -> bool:
        return note.agent_id == self.agent_id and (
            not note.private or _may_see_private(self.context)
        )

    async def search(self, request: MemorySearchRequest) -> MemorySearchResult:
        await trio.lowlevel.checkpoint()
        self.context.assert_current()
        wanted = _words(request.query)
        scored: list[tuple[float, MemorySearchHit]] = []
        for note in self.service.notes:
            if not wanted or not self._visible(note):
                continue
            score = len(wanted & _words(note.text)) / len(wanted)
            if score > 0 and (request.min_score is None or score >= request.min_score):
                hit = MemorySearchHit(
                    reference=MemoryReference(provider_id=PLUGIN_ID, id=note.id),
                    excerpt=note.text,
                    score=score,
                    citation=Citation(path=f"notes/{note.id}", start_line=1, end_line=1),
                )
                scored.append((score, hit))
        scored.sort(key=lambda item: (-item[0], item[1].reference.id))
        return MemorySearchResult(hits=tuple(hit for _, hit in scored[: request.max_results]))

    async def get(self, request: MemoryGetRequest) -> MemoryGetResult:
        await trio.lowlevel.checkpoint()
        self.context.assert_current()
        for note in self.service.notes:
            if note.id == request.reference.id and self._visible(note):
                return MemoryGetResult(status="ok", reference=request.reference, text=note.text)
        return MemoryGetResult(status="not_found", reference=request.reference)

    async def health(self) -> MemoryHealth:
        await trio.lowlevel.checkpoint()
        self.context.assert_current()
        return MemoryHealth(status="ready")


@attrs.define(eq=False)
class _Runtime(ProviderRuntime["NoteBook", _Reader]):
    """The provider runtime: ``open`` (the SDK's) checks the caller for the agent and
    hands out a :class:`_Reader`."""

    handle_class = _Reader

    def capabilities(self) -> ProviderCapabilities:
        return ProviderCapabilities(sources=("memory",))


@attrs.define(eq=False)
class NoteBook:
    """The plugin's state: the notes, and the flush ids whose saves were applied."""

    notes: list[Note] = attrs.field(factory=list)
    applied_flushes: dict[str, list[str]] = attrs.field(factory=dict)

    async def save(self, context: ToolContext, arguments: Mapping[str, Any]) -> str:
        """The ``notes_save`` tool: a private note, in an owner-private run only."""
        text = str(arguments.get("text", "")).strip()
        if not text:
            return "nothing to save"
        audience = context.audience
        if audience is None or audience.kind != "owner-private":
            raise CapabilityDeniedError("notes_save needs the owner's private audience")
        flush = context.memory_flush
        if flush is not None and text in self.applied_flushes.get(flush.flush_id, []):
            return "already saved in this flush"

        async def append(caller: MemoryCallerContext) -> str:
            caller.assert_current()  # immediately before the effect
            self.notes.append(
                Note(
                    id=f"n{len(self.notes) + 1}", text=text, private=True, agent_id=context.agent_id
                )
            )
            if flush is not None:
                self.applied_flushes.setdefault(flush.flush_id, []).append(text)
            await trio.lowlevel.checkpoint()
            return "saved"

        # Through the host's guard: its release check right before the effect.
        assert context.memory is not None  # this plugin registered a memory capability
        return await context.memory.write(SAVE_TOOL, append)

    def flush_plan(self, request: MemoryFlushPlanRequest) -> MemoryFlushToolsPlan:
        """Before compaction: one silent turn that may call ``notes_save``."""
        return MemoryFlushToolsPlan(
            persistence_tool_names=(SAVE_TOOL,),
            prompt=FLUSH_PROMPT,
            system_prompt="Session nearing compaction.",
        )

    def plugin(self) -> Plugin:
        """The plugin object that registers this note book with a host."""

        def register(api: PluginApi) -> None:
            api.register_tool(
                Tool(
                    name=SAVE_TOOL,
                    description="Save a private note for the owner.",
                    handler=self.save,
                    parameters={
                        "type": "object",
                        "properties": {"text": {"type": "string"}},
                        "required": ["text"],
                    },
                )
            )
            api.register_memory_capability(
                build_capability(
                    provider_runtime=_Runtime(self), provider_flush_plan_resolver=self.flush_plan
                )
            )

        return Plugin(
            id=PLUGIN_ID,
            name="Notes",
            register=register,
            contracts=PluginContracts(tools=(SAVE_TOOL,)),
        )


plugin = NoteBook().plugin()
"""The plugin for entry-point discovery (one process-wide note book)."""
