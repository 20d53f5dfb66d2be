"""Tests of the notes plugin, written as its author would: only claw_testing fixtures.

The fixtures come from the claw_testing pytest plugin that installing trio-claw
registers; this file overrides three of them to load the plugin, select it into the
memory slot, and give the scripted model a small context window (so that a flush is due
after one long message).
"""

from __future__ import annotations

import attrs
import pytest
from notes_plugin import PLUGIN_ID, SAVE_TOOL, Note, NoteBook

import claw
from claw.gateway import GatewayClient
from claw.memory import MemorySearchRequest
from claw.models import UserMessage
from claw_testing import EventRecorder, ScriptedModel, ScriptedReply, SessionBuilder

WINDOW = 4000  # with the flush timing below, a flush is due above 2000 estimated tokens


@pytest.fixture
def notes() -> NoteBook:
    return NoteBook(
        notes=[
            Note(id="n-shared", text="The office closes at six on Fridays."),
            Note(id="n-private", text="Alice's door code is 4721.", private=True),
        ]
    )


@pytest.fixture
def claw_plugins(notes: NoteBook) -> list[claw.Plugin]:
    return [notes.plugin()]


@pytest.fixture
def claw_config(claw_config: claw.HostConfig) -> claw.HostConfig:
    flush = claw.MemoryFlushConfig(soft_threshold_tokens=1000, reserve_tokens_floor=1000)
    defaults = attrs.evolve(
        claw_config.agents.defaults, compaction=claw.CompactionConfig(memory_flush=flush)
    )
    slots = claw.SlotsConfig(memory=PLUGIN_ID)
    return attrs.evolve(
        claw_config,
        agents=claw.AgentsConfig(defaults=defaults),
        plugins=attrs.evolve(claw_config.plugins, slots=slots),
    )


@pytest.fixture
def scripted_model() -> ScriptedModel:
    return ScriptedModel([], context_window=WINDOW)


async def _search(host: claw.Host, session_key: str, owner: bool, query: str) -> list[str]:
    async with (
        host.open_run(session_key, sender_is_owner=owner) as run,
        host.memory.open(run.caller) as reader,
    ):
        result = await reader.search(MemorySearchRequest(query=query))
    return [hit.reference.id for hit in result.hits]


async def test_the_owner_recalls_private_notes_and_a_group_only_shared_ones(
    claw_host: claw.Host, claw_sessions: SessionBuilder
) -> None:
    await claw_sessions.owner_direct("dm:alice")
    await claw_sessions.group("grp:office")
    query = "door code office"
    assert await _search(claw_host, "dm:alice", True, query) == ["n-private", "n-shared"]
    assert await _search(claw_host, "grp:office", False, query) == ["n-shared"]
    # A stranger in a direct chat is not the owner either.
    await claw_sessions.direct("dm:mallory")
    assert await _search(claw_host, "dm:mallory", False, query) == ["n-shared"]


async def test_a_reader_refuses_to_search_once_its_session_was_reset(
    claw_host: claw.Host, claw_sessions: SessionBuilder
) -> None:
    await claw_sessions.owner_direct("dm:alice")
    async with (
        claw_host.open_run("dm:alice", sender_is_owner=True) as run,
        claw_host.memory.open(run.caller) as reader,
    ):
        await claw_host.sessions.reset("dm:alice")
        with pytest.raises(claw.StaleCapabilityError):
            await reader.search(MemorySearchRequest(query="door code"))


async def test_an_operator_reads_every_note_over_the_gateway(
    gateway_client: GatewayClient,
) -> None:
    payload = await gateway_client.request(
        "memory.search", {"version": 2, "query": "door code office"}
    )
    assert payload["providerId"] == PLUGIN_ID
    assert [h["reference"]["id"] for h in payload["hits"]] == ["n-private", "n-shared"]


async def test_only_an_owner_run_may_save_a_note(
    claw_host: claw.Host,
    claw_sessions: SessionBuilder,
    scripted_model: ScriptedModel,
    notes: NoteBook,
) -> None:
    await claw_sessions.owner_direct("dm:alice")
    await claw_sessions.group("grp:office")
    save = ScriptedReply(tool_calls=[(SAVE_TOOL, {"text": "Alice likes green tea"})])
    scripted_model.extend([save, "noted", save, "I cannot"])
    await claw_host.run_turn("dm:alice", UserMessage("remember: green tea"), sender_is_owner=True)
    await claw_host.run_turn("grp:office", UserMessage("remember this"), sender_is_owner=False)
    assert [n.text for n in notes.notes if n.private] == [
        "Alice's door code is 4721.",
        "Alice likes green tea",
    ]
    refused = scripted_model.calls[3].messages[-1]
    assert "owner's private audience" in str(refused)


async def test_a_long_conversation_flushes_into_a_note_before_compaction(
    claw_host: claw.Host,
    claw_sessions: SessionBuilder,
    scripted_model: ScriptedModel,
    claw_events: EventRecorder,
    notes: NoteBook,
) -> None:
    await claw_sessions.owner_direct("dm:alice")
    scripted_model.extend(
        [
            ScriptedReply(tool_calls=[(SAVE_TOOL, {"text": "Alice moved to Lisbon"})]),
            "NO_REPLY",
            "answered",
        ]
    )
    long_message = "We talked about many things. " * 300  # about 2100 estimated tokens
    result = await claw_host.run_turn("dm:alice", UserMessage(long_message), sender_is_owner=True)
    assert result.flush is not None and result.flush.status == "completed"
    assert "Lisbon" in notes.notes[-1].text
    assert list(notes.applied_flushes) == [result.flush.flush_id]
    claw_events.assert_order("turn.admitted", "flush.completed", "turn.terminal")
    scripted_model.assert_script_consumed()
