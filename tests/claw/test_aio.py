"""claw.aio: claw's memory and host APIs awaited from asyncio tasks.

Each test is a plain function that runs ``asyncio.run``: the asyncio side is the
caller's, the Trio side is claw's thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import trio

import claw
import claw.aio
import claw_memory
from claw.models import UserMessage
from claw.sessions import SessionExistsError, SessionNotFoundError
from claw_testing import ScriptedModel, ScriptedReply, harness_config


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


def bridge_threads(name: str = "claw-aio") -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "MEMORY.md").write_text("- The deploy window is Friday 14:00 UTC.\n")
    return root


class Parked:
    """A Trio function that parks until cancelled, telling the asyncio side it started."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.started = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    async def __call__(self) -> None:
        self._loop.call_soon_threadsafe(self.started.set)
        try:
            await trio.sleep_forever()
        finally:
            self.log.append("unwound")


def test_memory_search_add_forget_and_status_from_asyncio(workspace: Path) -> None:
    async def main() -> None:
        async with claw.aio.open_memory(workspace) as mem:
            added = await mem.add("Bob is the release manager for apollo.")
            found = await mem.search("release manager apollo")
            assert [h.citation.path for h in found.hits if h.citation] == [
                added.reference.id
            ]
            got = await mem.get(added.reference)
            assert "Bob is the release manager" in (got.text or "")
            assert (await mem.status()).status == "ready"
            forgotten = await mem.forget(added.reference)
            assert "Bob is the release manager" in (forgotten.removed_text or "")
            assert (await mem.search("release manager apollo")).hits == ()
            assert forgotten.removal_id is not None
            assert [r.id for r in await mem.removals()] == [forgotten.removal_id]
            await mem.restore(forgotten.removal_id)
            assert (await mem.search("release manager apollo")).hits != ()

    run(main)


def test_errors_keep_their_claw_types(workspace: Path, tmp_path: Path) -> None:
    async def main() -> None:
        with pytest.raises(claw.ConfigError, match="is not a directory"):
            await claw.aio.open_memory(tmp_path / "missing")
        async with claw.aio.open_memory(workspace, scopes=("operator.read",)) as mem:
            with pytest.raises(claw.CapabilityDeniedError):
                await mem.add("a read-only handle cannot write")

    run(main)
    assert bridge_threads() == []  # the failed open closed its thread


def test_await_then_aclose_keeps_it_open_in_between(workspace: Path) -> None:
    async def main() -> None:
        mem = await claw.aio.open_memory(workspace)
        assert (await mem.search("deploy window")).hits
        assert len(bridge_threads()) == 1
        await mem.aclose()
        await mem.aclose()  # idempotent
        assert mem.local.host.closed
        with pytest.raises(claw.HostClosedError):
            await mem.search("deploy window")

    run(main)
    assert bridge_threads() == []


def test_cancelling_the_task_cancels_the_trio_call_before_it_returns(workspace: Path) -> None:
    async def main() -> None:
        async with claw.aio.open_memory(workspace) as mem:
            parked = Parked()
            task = asyncio.create_task(mem.call(parked))
            await parked.started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert parked.log == ["unwound"]  # Trio unwound before asyncio saw it end
            assert (await mem.search("deploy window")).hits  # the facade still works

    run(main)


def test_an_asyncio_timeout_cancels_the_trio_call(workspace: Path) -> None:
    async def main() -> None:
        async with claw.aio.open_memory(workspace) as mem:
            parked = Parked()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0):
                    await mem.call(parked)
            assert parked.log == ["unwound"]

    run(main)


def test_closing_the_facade_fails_the_calls_in_flight_and_closes_the_host(
    workspace: Path,
) -> None:
    async def main() -> None:
        mem = await claw.aio.open_memory(workspace)
        parked = Parked()
        task = asyncio.create_task(mem.call(parked))
        await parked.started.wait()
        await mem.aclose()
        with pytest.raises(claw.HostClosedError, match="closed while the call ran"):
            await task
        assert parked.log == ["unwound"]
        assert mem.local.host.closed

    run(main)
    assert bridge_threads() == []


def _parking_plugin(started: threading.Event, log: list[str]) -> claw.Plugin:
    async def never_ready(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            log.append("unwound")

    def register(api: claw.PluginApi) -> None:
        api.register_service("parks", never_ready)

    return claw.Plugin(id="parks-at-start", register=register)


def test_cancelling_an_open_in_progress_closes_its_thread(tmp_path: Path) -> None:
    started, log = threading.Event(), []
    config = harness_config(tmp_path / "ws", tmp_path / "state")
    (tmp_path / "ws").mkdir()

    async def main() -> None:
        task = asyncio.create_task(_open(config, started, log))
        await asyncio.get_running_loop().run_in_executor(None, started.wait)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main)
    assert log == ["unwound"]
    assert bridge_threads() == []


async def _open(config: claw.HostConfig, started: threading.Event, log: list[str]) -> None:
    await claw.aio.open_host(config, plugins=[_parking_plugin(started, log)])


def test_sessions_and_turns_from_asyncio(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "MEMORY.md").write_text("- Alice prefers green tea.\n")
    config = harness_config(tmp_path / "ws", tmp_path / "state")
    model = ScriptedModel(
        [ScriptedReply(tool_calls=[("memory_search", {"query": "tea"})]), "Green tea."]
    )

    async def main() -> None:
        async with claw.aio.open_host(config, plugins=[claw_memory.plugin]) as host:
            await host.register_model_provider("scripted", lambda name: model)
            row = await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
            assert row.session_key == "dm:alice"
            with pytest.raises(SessionExistsError):
                await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
            result = await host.run_turn(
                "dm:alice", UserMessage("tea?", sender="alice"), sender_is_owner=True
            )
            assert result.reply.text == "Green tea."
            assert [r.session_key for r in await host.sessions.list()] == ["dm:alice"]
            mem = await host.open_memory()
            assert (await mem.search("green tea")).hits
            await mem.aclose()  # revokes the operator's capabilities, the host stays
            assert not host.trio_host.closed
            await host.sessions.reset("dm:alice")
            await host.sessions.delete("dm:alice")
            assert await host.sessions.get("dm:alice") is None
            with pytest.raises(SessionNotFoundError):
                await host.sessions.delete("dm:alice")
        assert host.trio_host.closed

    run(main)
    model.assert_script_consumed()
