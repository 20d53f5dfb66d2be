"""One claw host process on the shared PostgreSQL state, driven line by line.

Run as ``python -m tests.postgres.host_child DSN WORKSPACE STATE_DIR [LOG]``. It opens a host
with ``[state] backend = "postgresql"`` and the recording memory provider (one
owner-private record, and a gate so a search can be held inside the provider), prints
``{"ready": owner_id}``, then answers one JSON command per stdin line with one JSON
line on stdout (each written in one write):

* ``{"op": "create"|"reset", "key": K}``
* ``{"op": "wait_known", "key": K}``: wait until this host's mirror has ``K``
* ``{"op": "hold", "key": K}``: open a run and a memory handle on ``K`` and keep them
  (``"recall": [keys]`` grants the run a conversation recall pass naming ``keys``)
* ``{"op": "search"}``: search through the held handle: ``{"hits": [...]}`` or
  ``{"error": class name}``
* ``{"op": "search_gated"}``: start a search that waits inside the provider; answers
  ``{"entered": true}`` once the provider has it, then ``{"op": "open_gate"}`` lets it
  go and answers its outcome like ``search``
* ``{"op": "admit", "key": K, "session_id": S, "turn_id": T, "advancement_key": A}``
* ``{"op": "close_orphans"}``, ``{"op": "append_terminal", "key", "session_id",
  "turn_id"}``, ``{"op": "exit"}``

With ``LOG``, the memory slot holds a flush plan instead and the model logs its calls
there (``tests/_session_turns.py``), for these:

* ``{"op": "turns", "key": K, "count": N}``: run ``N`` turns of ``K`` past their flush
  and compaction thresholds; answers the flushes and compactions this host ran so far
* ``{"op": "hang_turn", "key": K}``: start a turn whose model never answers; answers
  ``{"in_model": true}`` once the model has it (the host then holds ``K``)
* ``{"op": "turn_within", "key": K, "seconds": S}``: try a turn of ``K``, giving up
  after ``S`` seconds: ``{"cancelled": bool, "turns": how many the ledger holds}``
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

import trio

import claw
from claw.memory import MemorySearchRequest
from claw.models import AssistantMessage, UserMessage
from claw_testing import MemoryRecord, RecordingMemoryProvider
from tests._session_turns import HANG, LoggingModel, flush_plugin, flush_turns_compaction, run_turns


def _say(obj: dict[str, Any]) -> None:
    os.write(1, (json.dumps(obj) + "\n").encode())


async def _lines() -> Any:
    stream = trio.lowlevel.FdStream(os.dup(0))
    buffer = b""
    async with stream:
        while True:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    yield json.loads(line)


async def main(dsn: str, workspace: Path, state_dir: Path, log: Path | None) -> None:
    provider = RecordingMemoryProvider(
        provider_id="rec",
        records=[MemoryRecord(id="o", text="owner secret deploy pin", visibility="owner-private")],
    )
    plugin = claw.Plugin(
        id="rec", register=lambda api: api.register_memory_capability(provider.capability())
    )
    config = claw.HostConfig(
        workspace_dir=workspace,
        state_dir=state_dir,
        plugins=claw.PluginsConfig(
            discover=False, slots=claw.SlotsConfig(memory="rec" if log is None else "flusher")
        ),
        state=claw.StateConfig(backend="postgresql", dsn=dsn),
        agents=claw.AgentsConfig(
            defaults=claw.AgentDefaultsConfig(
                model="scripted/main", compaction=flush_turns_compaction()
            )
        ),
    )
    plugins = [plugin, flush_plugin()]
    async with claw.open_host(config, plugins=plugins) as host, trio.open_nursery() as nursery:
        model = LoggingModel(log if log is not None else state_dir / "model.log")
        host.models.register_provider("scripted", lambda name: model)
        _say({"ready": host.transcripts.owner_id})
        held: list[Any] = []
        gated: trio.MemorySendChannel[dict[str, Any]] | None = None
        gated_out: trio.MemoryReceiveChannel[dict[str, Any]] | None = None

        async def search() -> dict[str, Any]:
            try:
                found = await held[1].search(MemorySearchRequest(query="deploy"))
            except claw.ClawError as exc:
                return {"error": type(exc).__name__, "message": str(exc)}
            return {"hits": [h.reference.id for h in found.hits]}

        async for cmd in _lines():
            op = cmd["op"]
            if op == "exit":
                break
            if op == "create":
                row = await host.sessions.create(cmd["key"], agent_id="main", chat_type="direct")
                _say({"revision": row.lifecycle_revision, "session_id": row.session_id})
            elif op == "reset":
                row = await host.sessions.reset(cmd["key"])
                _say({"revision": row.lifecycle_revision})
            elif op == "wait_known":
                # The mirror learns of another host's create through NOTIFY.
                while True:
                    if host.sessions.get_nowait(cmd["key"]) is not None:
                        break
                    await trio.sleep(0.005)
                _say({"known": True})
            elif op == "hold":
                run_cm = host.open_run(
                    cmd["key"], sender_is_owner=True, conversation_recall=cmd.get("recall")
                )
                run = await run_cm.__aenter__()
                handle_cm = host.memory.open(run.caller)
                handle = await handle_cm.__aenter__()
                held[:] = [run, handle, handle_cm, run_cm]
                _say({"held": True})
            elif op == "search":
                _say(await search())
            elif op == "search_gated":
                provider.gate = trio.Event()
                gated, gated_out = trio.open_memory_channel[dict[str, Any]](1)

                async def gated_search(send: trio.MemorySendChannel[dict[str, Any]]) -> None:
                    async with send:
                        await send.send(await search())

                entered = provider.call_names().count("search.enter")
                nursery.start_soon(gated_search, gated)
                # The provider records "search.enter" before it waits on the gate.
                while True:
                    if provider.call_names().count("search.enter") > entered:
                        break
                    await trio.sleep(0.001)
                _say({"entered": True})
            elif op == "open_gate":
                assert provider.gate is not None and gated_out is not None
                provider.gate.set()
                _say(await gated_out.receive())
                provider.gate = None
            elif op == "admit":
                entry, turn = await host.transcripts.record_admitted(
                    cmd["key"], cmd["session_id"], UserMessage("hello"),
                    turn_id=cmd["turn_id"], advancement_key=cmd["advancement_key"],
                    engine_id="engine",
                )
                _say({"turn_id": turn.turn_id, "seq": entry.seq, "status": turn.status.value})
            elif op == "append_terminal":
                (entry,) = await host.transcripts.append(
                    cmd["key"], cmd["session_id"], [AssistantMessage("done")],
                    turn_id=cmd["turn_id"], terminal=True,
                )
                _say({"seq": entry.seq})
            elif op == "close_orphans":
                closed = await host.transcripts.close_orphaned_turns("its host is gone")
                _say({"closed": [t.turn_id for t in closed]})
            elif op == "turns":
                _say(await run_turns(host, cmd["key"], cmd["count"]))
            elif op == "hang_turn":
                nursery.start_soon(
                    functools.partial(
                        host.run_turn, cmd["key"], UserMessage(HANG), sender_is_owner=True
                    )
                )
                await model.hung.wait()
                _say({"in_model": True})
            elif op == "turn_within":
                with trio.move_on_after(cmd["seconds"]) as waiting:
                    await host.run_turn(cmd["key"], UserMessage("me too"), sender_is_owner=True)
                turns = await host.transcripts.turns()
                _say({"cancelled": waiting.cancelled_caught, "turns": len(turns)})
            else:
                _say({"error": f"unknown op {op!r}"})
        if held:
            await held[2].__aexit__(None, None, None)
            await held[3].__aexit__(None, None, None)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    log = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    trio.run(main, sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), log)
