"""The pytest plugin, as a user meets it: a test file that only requests fixtures."""

from __future__ import annotations

import pytest

USER_CONFIG = """
[tool.pytest.ini_options]
trio_mode = true
filterwarnings = ["error"]
addopts = ["-p", "no:cacheprovider"]
"""

USER_TESTS = """
import pytest

import claw
from claw.models import UserMessage
from claw_testing import MemoryRecord, ScriptedReply


async def test_memory_core_indexes_the_workspace(memory_workspace, gateway_client):
    memory_workspace.write_memory("- Alice prefers green tea.\\n")
    payload = await gateway_client.request(
        "memory.search", {"version": 2, "query": "green tea", "minScore": 0}
    )
    assert payload["hits"][0]["citation"]["path"] == "MEMORY.md"


async def test_a_scripted_turn_is_recorded(claw_host, claw_sessions, scripted_model, claw_events):
    await claw_sessions.owner_direct("dm:alice")
    scripted_model.extend([ScriptedReply(tool_calls=[("memory_search", {"query": "tea"})]), "ok"])
    result = await claw_host.run_turn(
        "dm:alice", UserMessage("what tea?", sender="alice"), sender_is_owner=True
    )
    assert result.reply.text == "ok"
    assert "memory_search" in scripted_model.calls[0].tool_names
    claw_events.assert_order("turn.admitted", "turn.terminal")
    scripted_model.assert_script_consumed()


async def test_a_group_run_has_a_conversation_audience(claw_host, claw_sessions):
    await claw_sessions.group("grp:team")
    async with claw_host.open_run("grp:team", sender_is_owner=False) as run:
        assert run.audience.kind == "conversation"


async def test_the_recording_provider_sees_what_the_host_lets_through(
    recording_memory, recording_memory_host
):
    recording_memory.records.append(MemoryRecord(id="r1", text="the budget is due friday"))
    assert recording_memory_host.slots.memory_plugin == "recording-memory"
    async with recording_memory_host.open_scope("op") as scope:
        ctx = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
        async with recording_memory_host.memory.open(ctx) as handle:
            from claw.memory import MemorySearchRequest

            result = await handle.search(MemorySearchRequest(query="budget"))
    assert [h.reference.id for h in result.hits] == ["r1"]
    assert "search" in recording_memory.call_names()


async def test_time_is_virtual_with_autojump_clock(claw_host, claw_sessions, autojump_clock):
    import trio

    await claw_sessions.group("grp:clock")
    start = trio.current_time()
    await trio.sleep(3600)
    assert trio.current_time() - start == 3600


@pytest.fixture
def claw_plugins(claw_plugins):
    def register(api):
        api.register_tool(claw.Tool(name="ping", description="ping", handler=pong))

    return [*claw_plugins, claw.Plugin(id="pinger", register=register,
                                       contracts=claw.PluginContracts(tools=("ping",)))]


async def pong(context, arguments):
    return "pong"


async def test_an_overridden_claw_plugins_fixture_adds_a_plugin(claw_host):
    assert {t.name for t in claw_host.plugin_registry.tools_of("pinger")} == {"ping"}
"""


def test_a_user_test_file_runs_green_through_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(USER_CONFIG)
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_inprocess("-q")
    result.assert_outcomes(passed=6)


def test_a_failing_event_assertion_names_what_was_recorded(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(USER_CONFIG)
    pytester.makepyfile(
        test_fail="""
async def test_no_flush_happened(claw_host, claw_events):
    claw_events.assert_emitted("flush.completed")
"""
    )
    result = pytester.runpytest_inprocess("-q")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no event flush.completed; recorded: no events*"])


def test_the_plugin_registers_every_documented_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(USER_CONFIG)
    result = pytester.runpytest_inprocess("--fixtures", "-q")
    for name in (
        "memory_workspace",
        "claw_plugins",
        "claw_config",
        "scripted_model",
        "claw_host",
        "claw_sessions",
        "claw_events",
        "hash_embedder",
        "recording_memory",
        "recording_memory_host",
        "gateway_client",
        "socket_gateway_client",
    ):
        result.stdout.fnmatch_lines([f"{name}*"])
