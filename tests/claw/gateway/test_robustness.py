"""Robustness: bad frames are answered, big ones bounded, slow clients isolated, shutdown clean."""

from __future__ import annotations

import gc
import json
import logging
import signal
from typing import Any

import pytest
import trio
import trio.testing
import trio_websocket

import claw
from claw.gateway import (
    Gateway,
    GatewayAddress,
    GatewayConnectionError,
    open_gateway_client,
    run_gateway_until_signal,
)
from claw.gateway._server import SERVING_GC_THRESHOLD, transport_limit

from .conftest import (
    MAX_MESSAGE_BYTES,
    READ_TOKEN,
    Recorder,
    connect_raw,
    install_test_methods,
    make_gateway_config,
    open_raw,
    receive_json,
    send_json,
)

MALFORMED: list[tuple[str | bytes, Any]] = [
    ("not json", None),
    ("", None),
    ("[1, 2]", None),
    ("null", None),
    ('"a string"', None),
    ("{}", None),
    (b"\x00\x01binary", None),
    ('{"type": "req", "id": true, "method": "test.echo"}', None),
    ('{"type": "req", "id": {"x": 1}, "method": "test.echo"}', None),
    ('{"type": "req", "id": "", "method": "test.echo"}', None),
    ('{"type": "req", "id": 1.5, "method": "test.echo"}', None),
    ('{"type": "req", "id": "a", "method": "test.echo", "params": {"x": NaN}}', None),
    ("[" * 2000 + "]" * 2000, None),
    ('{"id": "a"}', "a"),
    ('{"type": "res", "id": "a"}', "a"),
    ('{"type": "req", "id": "a"}', "a"),
    ('{"type": "req", "id": "a", "method": 5}', "a"),
    ('{"type": "req", "id": "a", "method": ""}', "a"),
    ('{"type": "req", "id": 3, "method": "test.echo", "params": []}', 3),
]


@pytest.mark.parametrize(("message", "expected_id"), MALFORMED)
async def test_malformed_frames_are_answered_and_the_connection_survives(
    address: GatewayAddress, message: str | bytes, expected_id: Any
) -> None:
    async with open_raw(address) as ws:
        await connect_raw(ws)
        await ws.send_message(message)
        answer = await receive_json(ws)
        assert answer["type"] == "res"
        assert answer["id"] == expected_id
        assert answer["ok"] is False
        assert answer["error"]["code"] == "INVALID_REQUEST"
        assert answer["error"]["message"]
        await send_json(ws, {"type": "req", "id": "after", "method": "test.echo"})
        assert (await receive_json(ws))["ok"] is True


def _echo_of(text: str) -> str:
    return json.dumps({"type": "req", "id": "big", "method": "test.echo", "params": {"s": text}})


@pytest.mark.parametrize(
    "text",
    ["x" * MAX_MESSAGE_BYTES, "é" * (MAX_MESSAGE_BYTES // 2)],
    ids=["ascii", "two-byte-characters"],
)
async def test_oversize_frames_are_answered_and_the_connection_survives(
    address: GatewayAddress, text: str
) -> None:
    message = _echo_of(text)
    assert len(message.encode()) > MAX_MESSAGE_BYTES
    async with open_raw(address) as ws:
        await connect_raw(ws)
        await ws.send_message(message)
        answer = await receive_json(ws)
        assert answer["id"] is None
        assert answer["error"]["code"] == "INVALID_REQUEST"
        assert str(MAX_MESSAGE_BYTES) in answer["error"]["message"]
        await send_json(ws, {"type": "req", "id": "after", "method": "test.echo"})
        assert (await receive_json(ws))["ok"] is True


async def test_frame_at_the_limit_is_served(address: GatewayAddress) -> None:
    overhead = len(_echo_of(""))
    message = _echo_of("y" * (MAX_MESSAGE_BYTES - overhead))
    assert len(message.encode()) == MAX_MESSAGE_BYTES
    async with open_raw(address) as ws:
        await connect_raw(ws)
        await ws.send_message(message)
        answer = await receive_json(ws)
    assert answer["ok"] is True


async def test_frame_beyond_the_transport_bound_closes_with_1009_and_others_are_served(
    address: GatewayAddress,
) -> None:
    async with open_raw(address) as ws:
        await connect_raw(ws)
        await ws.send_message("z" * (transport_limit(MAX_MESSAGE_BYTES) + 1))
        with pytest.raises(trio_websocket.ConnectionClosed) as closed:
            await ws.get_message()
    assert closed.value.reason.code == 1009
    async with open_gateway_client(address.url, READ_TOKEN) as client:
        assert (await client.request("test.echo"))["params"] == {}


async def test_many_concurrent_clients_are_all_answered_correctly(
    address: GatewayAddress,
) -> None:
    clients, per_client = 24, 8
    answers: dict[tuple[int, int], Any] = {}

    async def one_client(c: int) -> None:
        async with open_gateway_client(address.url, READ_TOKEN) as client:

            async def one_request(r: int) -> None:
                payload = await client.request("test.echo", {"client": c, "n": r})
                answers[(c, r)] = payload["params"]

            async with trio.open_nursery() as nursery:
                for r in range(per_client):
                    nursery.start_soon(one_request, r)

    async with trio.open_nursery() as nursery:
        for c in range(clients):
            nursery.start_soon(one_client, c)
    assert answers == {
        (c, r): {"client": c, "n": r} for c in range(clients) for r in range(per_client)
    }


async def test_a_client_that_does_not_read_does_not_stall_another(
    host: claw.Host, nursery: trio.Nursery, recorder: Recorder
) -> None:
    gateway = Gateway(host, config=make_gateway_config(max_in_flight=256, max_queued_messages=4))
    install_test_methods(gateway, recorder)
    address: GatewayAddress = await nursery.start(gateway.serve)
    blob_size, blobs = 256 * 1024, 128  # far more than loopback socket buffers hold
    async with open_raw(
        address, message_queue_size=1, max_message_bytes=2 * blob_size, disconnect_timeout=0
    ) as slow:
        hello = await connect_raw(slow)
        for n in range(blobs):
            await send_json(
                slow, {"type": "req", "id": n, "method": "test.blob", "params": {"size": blob_size}}
            )
        async with open_gateway_client(address.url, READ_TOKEN) as fast:
            for n in range(20):
                assert (await fast.request("test.echo", {"n": n}))["params"] == {"n": n}
        await trio.testing.wait_all_tasks_blocked()
        stats = gateway.statistics().connection(hello["connectionId"])
        assert stats is not None
        # The slow client's answers are still backed up behind its unread socket.
        assert stats.requests_in_flight > 0
        assert stats.responses_queued == 4


async def test_cancelling_the_server_closes_connections_with_going_away(
    gateway: Gateway, recorder: Recorder
) -> None:
    server_scope = trio.CancelScope()
    server_done = trio.Event()

    async def run_server(*, task_status: trio.TaskStatus[GatewayAddress]) -> None:
        with server_scope:
            async with trio.open_nursery() as nursery:
                task_status.started(await nursery.start(gateway.serve))
        server_done.set()

    async with trio.open_nursery() as nursery:
        address: GatewayAddress = await nursery.start(run_server)
        async with open_raw(address) as ws:
            await connect_raw(ws)
            wait = {"type": "req", "id": "w", "method": "test.wait", "params": {"gate": "g"}}
            await send_json(ws, wait)
            await recorder.started_event("g").wait()
            server_scope.cancel()
            with pytest.raises(trio_websocket.ConnectionClosed) as closed:
                await ws.get_message()
        assert closed.value.reason.code == 1001
        await server_done.wait()
    assert recorder.cancelled_event("g").is_set()
    assert gateway.statistics().connections == ()
    with pytest.raises(GatewayConnectionError):
        async with open_gateway_client(address.url, READ_TOKEN):
            pytest.fail("connected to a stopped gateway")


async def test_signal_runner_stops_on_sigterm_and_closes_connections(gateway: Gateway) -> None:
    stopped_by: list[int] = []

    async def run(*, task_status: trio.TaskStatus[GatewayAddress]) -> None:
        stopped_by.append(await run_gateway_until_signal(gateway, task_status=task_status))

    async with trio.open_nursery() as nursery:
        address: GatewayAddress = await nursery.start(run)
        async with open_raw(address) as ws:
            await connect_raw(ws)
            signal.raise_signal(signal.SIGTERM)
            with pytest.raises(trio_websocket.ConnectionClosed) as closed:
                await ws.get_message()
        assert closed.value.reason.code == 1001
    assert stopped_by == [signal.SIGTERM]


async def test_a_serving_process_collects_cycles_less_often_and_restores_the_collector(
    gateway: Gateway,
) -> None:
    """While the signal runner serves, the collector's youngest generation waits for
    SERVING_GC_THRESHOLD allocations; once it returns, the thresholds are what they were
    (the older generations' are never touched)."""
    before = gc.get_threshold()
    seen: list[tuple[int, ...]] = []

    async def run(*, task_status: trio.TaskStatus[GatewayAddress]) -> None:
        await run_gateway_until_signal(gateway, task_status=task_status)

    async with trio.open_nursery() as nursery:
        await nursery.start(run)
        seen.append(gc.get_threshold())
        signal.raise_signal(signal.SIGTERM)
    assert seen == [(max(before[0], SERVING_GC_THRESHOLD), *before[1:])]
    assert gc.get_threshold() == before


async def test_a_client_that_never_sends_connect_is_refused_after_the_handshake_timeout(
    host: claw.Host, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    gateway = Gateway(host, config=make_gateway_config(), handshake_timeout=5.0)
    address: GatewayAddress = await nursery.start(gateway.serve)
    async with open_raw(address) as ws:
        answer = await receive_json(ws)
        assert answer["error"]["code"] == "UNAUTHORIZED"
        with pytest.raises(trio_websocket.ConnectionClosed) as closed:
            await ws.get_message()
    assert closed.value.reason.code == 1008


async def test_garbage_instead_of_a_websocket_upgrade_is_dropped_and_others_served(
    host: claw.Host,
    nursery: trio.Nursery,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="claw.gateway")
    gateway = Gateway(host, config=make_gateway_config(), handshake_timeout=5.0)
    install_test_methods(gateway, Recorder())
    address: GatewayAddress = await nursery.start(gateway.serve)
    stream = await trio.open_tcp_stream("127.0.0.1", address.port)
    async with stream:
        await stream.send_all(b"\x16\x03\x01 not http at all\r\n\r\n")
        received = b""
        while chunk := await stream.receive_some():
            received += chunk
    assert not received.startswith(b"HTTP/1.1 101")
    async with open_gateway_client(address.url, READ_TOKEN) as client:
        assert (await client.request("test.echo"))["params"] == {}
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
