"""A claw host in a child process, driven by the multi-process tests.

Usage: ``python -m tests.claw.multiprocess._child MODE STATE_DIR [ARGS...]`` (from the
repository root). Every report is one line written
in one ``write`` (a reader never sees half of one). Modes:

* ``open-race N GO``: wait for the file ``GO`` to exist, open a host on a fresh state
  directory at the same moment as the other children, create ``dm:N``, print ``OK``.
* ``holder [deaf] [recall]``: open a host whose memory slot holds a recording provider
  with one owner-private record, open an owner run of ``dm:alice`` (with ``recall``,
  holding a conversation recall pass naming ``grp:1``), print ``RUN``, then obey
  stdin: ``search`` prints ``HITS n`` or ``STALE ...``. Every session change the mirror
  sees prints ``CHANGED key``. ``deaf`` disables the watcher that brings other
  processes' commits into the mirror, so only the release check can refuse.
* ``tool-turn [deaf]``: open a host whose memory slot holds Memory Core over a
  workspace whose ``MEMORY.md`` says alice likes tea; then, per stdin line ``turn``,
  run a turn of ``dm:alice`` whose model prints ``IN_MODEL``, waits for the stdin line
  ``go`` and asks for the ``memory_search`` tool; the tool's answer is printed as
  ``TOOL <json text>``. ``deaf`` disables the watcher as for ``holder``.
* ``hang-turn``: admit a turn of ``dm:alice`` whose model never answers; print
  ``ADMITTED turn_id`` and wait to be killed.
* ``admit GO TURN KEY``: wait for ``GO``, then admit turn ``TURN`` with advancement key
  ``KEY`` into ``dm:alice``'s transcript directly; print ``OK turn_id``.
* ``commit GO ENGINE_DB``: wait for ``GO``, then open a host whose engine is the
  reference engine on ``ENGINE_DB`` (opening retries the pending commits); print
  ``OK``.
* ``turns LOG``: open a host whose model logs its calls to ``LOG`` and whose memory
  slot holds a flush plan (``tests/_session_turns.py``); print ``READY``, then obey
  stdin: ``run N`` runs ``N`` turns of ``dm:alice`` (past their flush and compaction
  thresholds) and prints ``DONE`` with a JSON report of the flushes and compactions
  this process ran so far.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import trio

import claw
import claw_memory
from claw.memory import MemorySearchRequest
from claw.models import AssistantMessage, Message, ToolCall, ToolResult, ToolSpec
from claw.state.sqlite._sessions import SessionStore
from claw_testing import (
    MemoryRecord,
    RecordingMemoryProvider,
    ReferenceContextEngine,
    harness_config,
    memory_provider_plugin,
)
from tests._session_turns import LoggingModel, flush_plugin, flush_turns_compaction, run_turns


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def wait_for(go: Path) -> None:
    while not go.exists():  # real processes: a short real sleep is the point
        time.sleep(0.001)


def _config(state: Path, **kw: object) -> claw.HostConfig:
    return harness_config(state.parent, state, **kw)  # type: ignore[arg-type]


async def open_race(state: Path, n: str, go: Path) -> None:
    wait_for(go)
    async with claw.open_host(_config(state)) as host:
        await host.sessions.create(f"dm:{n}", agent_id="main", chat_type="direct")
    say("OK")


async def _deaf_watch(
    self: SessionStore, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    task_status.started()
    await trio.sleep_forever()


async def holder(state: Path, deaf: bool, recall: bool) -> None:
    if deaf:
        SessionStore.watch = _deaf_watch  # type: ignore[method-assign]
    provider = RecordingMemoryProvider(
        provider_id="rec",
        records=[MemoryRecord(id="r1", text="alice likes tea", visibility="owner-private")],
    )
    plugin = memory_provider_plugin(provider, plugin_id="rec")
    async with claw.open_host(_config(state, memory="rec"), plugins=[plugin]) as host:
        host.sessions.add_listener(lambda key: say(f"CHANGED {key}"))
        named = ["grp:1"] if recall else None
        async with host.open_run(
            "dm:alice", sender_is_owner=True, conversation_recall=named
        ) as run:
            assert run.audience is not None
            say("RUN")
            while line := (await trio.to_thread.run_sync(sys.stdin.readline)).strip():
                if line != "search":
                    say(f"UNKNOWN {line}")
                    continue
                try:
                    async with host.memory.open(run.caller) as handle:
                        result = await handle.search(MemorySearchRequest(query="tea"))
                except claw.StaleCapabilityError as exc:
                    say(f"STALE {exc}")
                else:
                    say(f"HITS {len(result.hits)}")


class _ToolModel:
    """Asks for ``memory_search`` once it is told to go; reports the tool's answer."""

    context_window = 32_768

    async def complete(
        self, *, messages: Sequence[Message], system_prompt: str, tools: Sequence[ToolSpec]
    ) -> AssistantMessage:
        last = messages[-1]
        if isinstance(last, ToolResult):
            say("TOOL " + json.dumps(last.content))
            return AssistantMessage(text="done")
        say("IN_MODEL")
        line = (await trio.to_thread.run_sync(sys.stdin.readline)).strip()
        assert line == "go", line
        call = ToolCall(id="call-1", name="memory_search", arguments={"query": "tea"})
        return AssistantMessage(text="", tool_calls=(call,))


async def tool_turn(state: Path, deaf: bool) -> None:
    if deaf:
        SessionStore.watch = _deaf_watch  # type: ignore[method-assign]
    (state.parent / "MEMORY.md").write_text("# Memory\n\nalice likes tea\n")
    async with claw.open_host(_config(state), plugins=[claw_memory.plugin]) as host:
        model = _ToolModel()
        host.models.register_provider("scripted", lambda name: model)
        say("READY")
        while line := (await trio.to_thread.run_sync(sys.stdin.readline)).strip():
            assert line == "turn", line
            await host.run_turn("dm:alice", claw.UserMessage("tea?"), sender_is_owner=True)


class _SilentModel:
    """A model that never answers: its turn stays in flight until the process dies."""

    context_window = 32_768

    async def complete(
        self, *, messages: Sequence[Message], system_prompt: str, tools: Sequence[ToolSpec]
    ) -> AssistantMessage:
        say("IN_MODEL")
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover


async def hang_turn(state: Path) -> None:
    async with claw.open_host(_config(state)) as host:
        host.models.register_provider("scripted", lambda name: _SilentModel())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                functools.partial(
                    host.run_turn, "dm:alice", claw.UserMessage("question"), sender_is_owner=True
                )
            )
            await trio.sleep_forever()


async def admit(state: Path, go: Path, turn_id: str, key: str) -> None:
    async with claw.open_host(_config(state)) as host:
        row = host.sessions.get_nowait("dm:alice")
        assert row is not None
        wait_for(go)
        _, turn = await host.transcripts.record_admitted(
            "dm:alice", row.session_id, claw.UserMessage("q"), turn_id=turn_id, advancement_key=key
        )
        say(f"OK {turn.turn_id}")


async def commit(state: Path, go: Path, engine_db: Path) -> None:
    engine = ReferenceContextEngine(engine_db)
    plugin = claw.Plugin(
        id="reference-plugin",
        register=lambda api: api.register_context_engine("reference", lambda ctx: engine),
    )
    wait_for(go)
    async with claw.open_host(_config(state, context_engine="reference"), plugins=[plugin]):
        pass
    engine.close()
    say("OK")


async def turns(state: Path, log: Path) -> None:
    config = _config(state, memory="flusher", compaction=flush_turns_compaction())
    async with claw.open_host(config, plugins=[flush_plugin()]) as host:
        model = LoggingModel(log)
        host.models.register_provider("scripted", lambda name: model)
        say("READY")
        report: dict[str, object] = {}
        while line := (await trio.to_thread.run_sync(sys.stdin.readline)).strip():
            command, count = line.split()
            assert command == "run", line
            report = await run_turns(host, "dm:alice", int(count))
            say("DONE " + json.dumps(report))


def main(argv: list[str]) -> None:
    mode, state, *args = argv
    path = Path(state)
    if mode == "open-race":
        trio.run(open_race, path, args[0], Path(args[1]))
    elif mode == "holder":
        trio.run(holder, path, "deaf" in args, "recall" in args)
    elif mode == "tool-turn":
        trio.run(tool_turn, path, "deaf" in args)
    elif mode == "hang-turn":
        trio.run(hang_turn, path)
    elif mode == "admit":
        trio.run(admit, path, Path(args[0]), args[1], args[2])
    elif mode == "commit":
        trio.run(commit, path, Path(args[0]), Path(args[1]))
    elif mode == "turns":
        trio.run(turns, path, Path(args[0]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
