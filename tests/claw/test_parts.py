"""The host's parts are built from their collaborators, without a ``Host``.

``open_host`` builds each part once and hands it the narrow collaborators it uses; these
tests build the same parts by hand over an SQLite state directory, which is what lets a
part be understood, and tested, on its own.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest
import trio

import claw
from claw._agents import Agents
from claw._capabilities import CapabilityRegistry
from claw._currency import Currency
from claw._events import EventLog
from claw._plugins import PluginRegistry, RegisteredTool
from claw._runs import RunOpener
from claw._scopes import Lifecycle, Scopes
from claw._slots import SlotSelection, SlotView
from claw._workers import InlineWorkerPool
from claw.context._engines import ContextEngineSlot
from claw.flush import FlushCoordinator
from claw.memory import MemoryPluginCapability, MemoryRuntime, MemorySearchRequest
from claw.memory._refresh import PostCompactionRefresh
from claw.memory._writes import describe_writer
from claw.memory_files import MemoryFiles
from claw.models import ModelRegistry, ToolCall, UserMessage
from claw.sessions import SessionRow
from claw.state import StateStores
from claw.state.sqlite import SQLiteStateBackend
from claw.turns._runner import TurnMaintenance, TurnRunner
from claw.turns._tools import ToolDispatch
from claw_testing import MemoryRecord, RecordingMemoryProvider, ScriptedModel


@attrs.frozen
class Kernel:
    """The parts every other part is built on, made by hand."""

    stores: StateStores
    lifecycle: Lifecycle
    currency: Currency
    scopes: Scopes
    runs: RunOpener


@pytest.fixture
async def kernel(tmp_path: Path) -> AsyncIterator[Kernel]:
    backend = SQLiteStateBackend(tmp_path / "state")
    async with backend.open(workers=InlineWorkerPool(), clock=lambda: 1_000.0) as stores:
        registry = CapabilityRegistry()
        currency = Currency(registry, stores.sessions)
        stores.sessions.add_listener(lambda key: currency.revoke_session(key, "changed"))
        lifecycle = Lifecycle()
        scopes = Scopes(registry, lifecycle)
        lifecycle.open()
        yield Kernel(
            stores=stores,
            lifecycle=lifecycle,
            currency=currency,
            scopes=scopes,
            runs=RunOpener(
                scopes=scopes,
                sessions=stores.sessions,
                currency=currency,
                default_agent_id="main",
            ),
        )
        lifecycle.close()


def _slots(registry: PluginRegistry, memory_plugin: str | None) -> SlotView:
    selection = SlotSelection(
        context_engine="legacy",
        context_engine_plugin=None,
        memory_plugin=memory_plugin,
        memory_sidecars=(),
    )
    return SlotView.of(selection, registry)


def _memory_files(workspace: Path) -> MemoryFiles:
    clock = lambda: 1_000.0  # noqa: E731
    return MemoryFiles.create(
        workspace,
        workers=InlineWorkerPool(),
        describe=functools.partial(describe_writer, clock=clock),
        now=clock,
    )


def _memory(kernel: Kernel, provider: RecordingMemoryProvider) -> MemoryRuntime:
    registry = PluginRegistry()
    registry.memory_capabilities[provider.provider_id] = MemoryPluginCapability(
        provider_runtime=provider
    )
    sessions = kernel.stores.sessions
    return MemoryRuntime(
        kernel.currency,
        _slots(registry, provider.provider_id),
        kernel.lifecycle,
        Agents("main", sessions),
    )


async def test_a_run_opener_mints_what_the_currency_checker_then_revokes(kernel: Kernel) -> None:
    sessions = kernel.stores.sessions
    await sessions.create("dm:alice", agent_id="main", chat_type="direct")
    async with kernel.runs.open("dm:alice", sender_is_owner=True) as run:
        assert run.audience is not None and run.audience.kind == "owner-private"
        await kernel.currency.verify_committed(run.caller)
        await sessions.reset("dm:alice")
        with pytest.raises(claw.StaleCapabilityError):
            kernel.currency.verify(run.caller)
        with pytest.raises(claw.StaleCapabilityError):
            await kernel.currency.verify_committed(run.caller)
    with pytest.raises(claw.StaleCapabilityError):
        kernel.currency.verify(run.caller)


async def test_the_checks_made_at_once_say_when_they_must_wait_or_read(kernel: Kernel) -> None:
    """current_now and committed_now answer a current caller at once, and say False
    (the awaiting checks' cue) where the answer needs a read of the session store; a
    stale caller, and a failing request condition, raise."""
    sessions = kernel.stores.sessions
    await sessions.create("dm:alice", agent_id="main", chat_type="direct")
    currency = kernel.currency
    asked: list[str] = []
    async with kernel.scopes.open("op") as scope:
        operator = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
        assert currency.current_now(operator, lambda: asked.append("now"))
        assert currency.committed_now(operator, lambda: asked.append("committed"))
        assert asked == ["now", "committed"]

        def closed() -> None:
            raise claw.HostClosedError("the request's connection closed")

        with pytest.raises(claw.HostClosedError):
            currency.committed_now(operator, closed)
    async with kernel.runs.open("dm:alice", sender_is_owner=True) as run:
        assert currency.current_now(run.caller)
        # An audience: its release check reads the committed lineage, not at once.
        assert not currency.committed_now(run.caller)
        await currency.await_committed(run.caller)
        await sessions.reset("dm:alice")
        with pytest.raises(claw.StaleCapabilityError):
            currency.current_now(run.caller)
    with pytest.raises(claw.StaleCapabilityError):
        currency.committed_now(operator)


async def test_a_closed_lifecycle_stops_scopes_and_the_memory_guard(kernel: Kernel) -> None:
    provider = RecordingMemoryProvider(provider_id="rec")
    memory = _memory(kernel, provider)
    async with kernel.scopes.open("op") as scope:
        ctx = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
        kernel.lifecycle.closing()
        with pytest.raises(claw.HostClosedError):
            scope.mint_host_authority("status")
        with pytest.raises(claw.HostClosedError):
            async with memory.open(ctx):
                pass  # pragma: no cover
    assert provider.calls == []


async def test_the_memory_guard_and_its_refresh_need_no_host(kernel: Kernel) -> None:
    provider = RecordingMemoryProvider(
        provider_id="rec", records=[MemoryRecord(id="m1", text="the friday deploy")]
    )
    memory = _memory(kernel, provider)
    events = EventLog()
    refresh = PostCompactionRefresh(memory, kernel.scopes, events)
    await kernel.stores.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    row = kernel.stores.sessions.get_nowait("dm:alice")
    assert isinstance(row, SessionRow)
    await refresh(row)
    assert events.kinds()[-1] == "memory.refresh_omitted"
    provider.refreshable = True
    await refresh(row)
    assert events.kinds()[-1] == "memory.refreshed"
    async with kernel.runs.open("dm:alice", sender_is_owner=True) as run:
        async with memory.open(run.caller) as handle:
            result = await handle.search(MemorySearchRequest(query="friday"))
    assert [hit.reference.id for hit in result.hits] == ["m1"]


async def test_tool_dispatch_refuses_the_memory_owners_tools_for_a_stale_caller(
    kernel: Kernel, tmp_path: Path
) -> None:
    ran: list[str] = []

    async def handler(context: claw.ToolContext, arguments: object) -> str:
        ran.append(context.owner_plugin_id)
        return "ran"

    tools = {
        name: RegisteredTool(plugin_id=owner, tool=claw.Tool(name, "t", handler=handler))
        for name, owner in (("owned", "rec"), ("other", "elsewhere"))
    }
    provider = RecordingMemoryProvider(provider_id="rec")
    dispatch = ToolDispatch(
        workspace_dir=tmp_path, currency=kernel.currency, memory=_memory(kernel, provider)
    )
    sessions = kernel.stores.sessions
    await sessions.create("dm:alice", agent_id="main", chat_type="direct")
    async with kernel.runs.open("dm:alice", sender_is_owner=True) as run:
        first = await dispatch.call(ToolCall(id="1", name="owned", arguments={}), tools, run)
        await sessions.reset("dm:alice")
        refused = await dispatch.call(ToolCall(id="2", name="owned", arguments={}), tools, run)
        other = await dispatch.call(ToolCall(id="3", name="other", arguments={}), tools, run)
    assert first.content == "ran" and not first.is_error
    assert refused.is_error and "the tool was not run" in refused.content
    assert other.content == "ran"
    assert ran == ["rec", "elsewhere"]


async def test_a_turn_runner_runs_a_turn_without_a_host(kernel: Kernel, tmp_path: Path) -> None:
    events = EventLog()
    models = ModelRegistry()
    model = ScriptedModel(["hello alice"])
    models.register_provider("scripted", lambda name: model)
    defaults = claw.AgentDefaultsConfig(model="scripted/main")
    slots = _slots(PluginRegistry(), None)
    memory = MemoryRuntime(
        kernel.currency, slots, kernel.lifecycle, Agents("main", kernel.stores.sessions)
    )
    dispatch = ToolDispatch(workspace_dir=tmp_path, currency=kernel.currency, memory=memory)
    refreshed: list[SessionRow] = []

    async def refresh(row: SessionRow) -> None:
        refreshed.append(row)
        await trio.lowlevel.checkpoint()

    runner = TurnRunner(
        store=kernel.stores.transcripts,
        slot=ContextEngineSlot(registered=None, events=events),
        models=models,
        locks=kernel.stores.session_locks,
        sessions=kernel.stores.sessions,
        runs=kernel.runs,
        slots=slots,
        memory=memory,
        tools=dispatch,
        events=events,
        defaults=defaults,
        maintenance=TurnMaintenance(
            flush=FlushCoordinator(
                defaults=defaults,
                workspace_dir=tmp_path,
                transcripts=kernel.stores.transcripts,
                slots=slots,
                models=models,
                workers=InlineWorkerPool(),
                events=events,
                tools=dispatch,
                clock=lambda: 1_000.0,
                memory_files=_memory_files(tmp_path),
            ),
            refresh=refresh,
        ),
    )
    await kernel.stores.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    result = await runner.run_turn("dm:alice", UserMessage("hi"), sender_is_owner=True)
    assert result.reply.text == "hello alice"
    assert result.commit == "legacy" and result.flush is None
    assert {"turn.admitted", "turn.terminal"} <= set(events.kinds())
    assert refreshed == []


async def test_the_memory_file_writer_records_a_run_without_a_host(
    kernel: Kernel, tmp_path: Path
) -> None:
    """What the writer records of a caller comes from its minted authority alone."""
    (tmp_path / "ws").mkdir()
    files = _memory_files(tmp_path / "ws")
    await kernel.stores.sessions.create("dm:alice", agent_id="main", chat_type="direct")
    async with kernel.runs.open("dm:alice", sender_is_owner=True) as run:
        written = await files.append(run.caller, "memory/notes.md", "- Alice likes tea.")
        by = files.describe(run.caller, tool="memory_add")
    assert (tmp_path / "ws" / "memory/notes.md").read_text() == "- Alice likes tea.\n"
    assert written.path == "memory/notes.md"
    row = await kernel.stores.sessions.get("dm:alice")
    assert row is not None
    assert (by.kind, by.session_key, by.session_id, by.lifecycle_revision, by.owner) == (
        "run",
        "dm:alice",
        row.session_id,
        row.lifecycle_revision,
        True,
    )
    assert (by.tool, by.plugin_id, by.at) == ("memory_add", "claw", 1_000.0)
