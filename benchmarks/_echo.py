"""The ceiling of the gateway benchmark: a bare trio-websocket server answering its frames.

It speaks just enough of the gateway protocol for :func:`claw.gateway.open_gateway_client`:
the ``connect`` request is answered with a ``hello-ok`` payload, and every other request
with one fixed payload (a real ``memory.search`` answer the benchmark recorded from
``claw serve``, so the frames on the wire are the same size). Each frame is decoded and
each answer encoded with the standard ``json`` module; nothing else happens per request.
What this server costs per request is what the WebSocket framing, the sockets and JSON
cost on this machine, with no search, session, scope or capability work.

    python -m benchmarks._echo PAYLOAD_JSON_FILE

prints ``listening on ws://127.0.0.1:PORT`` and serves until terminated.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import trio
import trio_websocket

_HELLO = {
    "type": "hello-ok",
    "protocol": 1,
    "connectionId": "echo",
    "scopes": ["operator.read"],
    "methods": ["memory.search"],
    "maxMessageBytes": 1024 * 1024,
    "maxInFlight": 64,
}
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


async def _serve_connection(request: trio_websocket.WebSocketRequest, payload: Any) -> None:
    ws = await request.accept()
    try:
        connect = json.loads(await ws.get_message())
        await ws.send_message(
            _ENCODER.encode({"type": "res", "id": connect["id"], "ok": True, "payload": _HELLO})
        )
        while True:
            frame = json.loads(await ws.get_message())
            if frame.get("type") == "req":
                await ws.send_message(
                    _ENCODER.encode(
                        {"type": "res", "id": frame["id"], "ok": True, "payload": payload}
                    )
                )
            # A cancel frame needs no answer: its request was answered already.
    except trio_websocket.ConnectionClosed:
        pass


async def serve(payload: Any) -> None:
    async with trio.open_nursery() as nursery:

        async def handler(request: trio_websocket.WebSocketRequest) -> None:
            await _serve_connection(request, payload)

        server = await nursery.start(trio_websocket.serve_websocket, handler, "127.0.0.1", 0, None)
        print(f"listening on ws://127.0.0.1:{server.port}", flush=True)


def main() -> None:
    payload = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    trio.run(serve, payload)


if __name__ == "__main__":
    main()
