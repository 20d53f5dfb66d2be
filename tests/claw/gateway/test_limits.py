"""Connection limits: an idle authenticated connection is closed, the number of
connections is capped, and connections that have not authenticated are bounded apart
(all configurable in ``[gateway]``)."""

from __future__ import annotations

import contextlib

import pytest
import trio
import trio.testing
import trio_websocket

import claw
from claw.gateway import Gateway, GatewayAddress
from claw.gateway._session import Session

from .conftest import (
    Recorder,
    connect_raw,
    install_test_methods,
    make_gateway_config,
    open_raw,
    receive_json,
    send_json,
)


def _gateway(host: claw.Host, recorder: Recorder, **config: object) -> Gateway:
    gateway = Gateway(host, config=make_gateway_config(**config))
    install_test_methods(gateway, recorder)
    return gateway


async def test_an_idle_authenticated_connection_is_closed_after_the_idle_timeout(
    host: claw.Host,
    nursery: trio.Nursery,
    recorder: Recorder,
    autojump_clock: trio.testing.MockClock,
) -> None:
    gateway = _gateway(host, recorder, idle_timeout=30.0)
    address: GatewayAddress = await nursery.start(gateway.serve)
    async with open_raw(address) as ws:
        await connect_raw(ws)
        await trio.sleep(20)
        # Activity restarts the clock.
        await send_json(ws, {"type": "req", "id": "e", "method": "test.echo"})
        assert (await receive_json(ws))["ok"] is True
        start = trio.current_time()
        with pytest.raises(trio_websocket.ConnectionClosed) as closed:
            await ws.get_message()
        assert 30 <= trio.current_time() - start < 31
    assert closed.value.reason.code == 1001
    assert "idle" in (closed.value.reason.reason or "")
    assert gateway.statistics().connections == ()


async def test_a_connection_waiting_for_an_answer_is_not_idle(
    host: claw.Host,
    nursery: trio.Nursery,
    recorder: Recorder,
    autojump_clock: trio.testing.MockClock,
) -> None:
    gateway = _gateway(host, recorder, idle_timeout=30.0)
    address: GatewayAddress = await nursery.start(gateway.serve)
    async with open_raw(address) as ws:
        await connect_raw(ws)
        await send_json(
            ws, {"type": "req", "id": "w", "method": "test.wait", "params": {"gate": "g"}}
        )
        await recorder.started_event("g").wait()
        await trio.sleep(300)
        recorder.gate("g").set()
        answer = await receive_json(ws)
        assert (answer["id"], answer["ok"]) == ("w", True)


class _StalledSocket:
    """A connection whose client stopped reading: every write after the hello waits."""

    def __init__(self) -> None:
        self.incoming, self._received = trio.open_memory_channel[str](8)
        self.sent: list[str] = []
        self.reading = trio.Event()

    async def get_message(self) -> str:
        return await self._received.receive()

    async def send_message(self, text: str) -> None:
        self.sent.append(text)
        if len(self.sent) > 1:
            await self.reading.wait()


async def test_a_connection_still_writing_an_answer_is_not_idle(
    host: claw.Host, autojump_clock: trio.testing.MockClock
) -> None:
    ws = _StalledSocket()
    session = Session(
        connection_id="conn-stalled",
        scopes=frozenset({"operator.read"}),
        ws=ws,  # type: ignore[arg-type]
        host=host,
        methods={},
        max_message_bytes=1024,
        max_in_flight=4,
        max_queued_messages=4,
        idle_timeout=30.0,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.run, nursery, "c", {"type": "hello-ok"})
        # The reader answers a malformed frame itself; the client does not read it.
        await ws.incoming.send("not json")
        await trio.sleep(100)
        assert not session.idle_closed
        assert len(ws.sent) == 2 and "INVALID_REQUEST" in ws.sent[1]
        ws.reading.set()
        start = trio.current_time()
    # Idle once the answer is written: at the next look, at most idle_timeout later.
    assert session.idle_closed
    assert 0 < trio.current_time() - start <= 30


async def test_connections_beyond_the_cap_are_refused_and_the_others_served(
    host: claw.Host, nursery: trio.Nursery, recorder: Recorder
) -> None:
    gateway = _gateway(host, recorder, max_connections=2)
    address: GatewayAddress = await nursery.start(gateway.serve)
    async with open_raw(address) as first, open_raw(address) as second:
        await connect_raw(first)
        await connect_raw(second)
        async with open_raw(address) as third:
            refusal = await receive_json(third)
            assert refusal["ok"] is False
            assert refusal["error"]["code"] == "UNAVAILABLE"
            assert "connections" in refusal["error"]["message"]
            with pytest.raises(trio_websocket.ConnectionClosed) as closed:
                await third.get_message()
            assert closed.value.reason.code == 1013
        await send_json(first, {"type": "req", "id": "e", "method": "test.echo"})
        assert (await receive_json(first))["ok"] is True
    # Once the others are gone, a new client gets in.
    with trio.fail_after(10):
        while gateway.statistics().connections:  # noqa: ASYNC110 - a real server
            await trio.sleep(0.01)
    async with open_raw(address) as again:
        await connect_raw(again)


def test_the_limits_are_validated_in_the_config() -> None:
    with pytest.raises((ValueError, claw.ConfigError)):
        claw.GatewayConfig(idle_timeout=0)
    with pytest.raises((ValueError, claw.ConfigError)):
        claw.GatewayConfig(max_connections=0)
    with pytest.raises(claw.ConfigError, match="handshake_timeout"):
        claw.GatewayConfig(handshake_timeout=float("inf"))
    with pytest.raises(claw.ConfigError, match="max_pending_connections"):
        claw.GatewayConfig(max_pending_connections=0)
    loaded = claw.HostConfig.from_mapping(
        {
            "gateway": {
                "idle_timeout": 12.5,
                "max_connections": 3,
                "token": "t",
                "handshake_timeout": 2.5,
                "max_pending_connections": 7,
            }
        }
    )
    assert (loaded.gateway.idle_timeout, loaded.gateway.max_connections) == (12.5, 3)
    assert (loaded.gateway.handshake_timeout, loaded.gateway.max_pending_connections) == (2.5, 7)


async def _silent_socket(address: GatewayAddress) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", address.port)


async def _wait_for_pending(gateway: Gateway, count: int) -> None:
    with trio.fail_after(10):
        while gateway.statistics().pending_connections != count:  # noqa: ASYNC110 - a real server
            await trio.sleep(0.001)


async def test_a_socket_that_never_upgrades_is_dropped_at_the_configured_handshake_timeout(
    host: claw.Host,
    nursery: trio.Nursery,
    recorder: Recorder,
    autojump_clock: trio.testing.MockClock,
) -> None:
    gateway = _gateway(host, recorder, handshake_timeout=3.0)
    assert gateway.handshake_timeout == 3.0
    address: GatewayAddress = await nursery.start(gateway.serve)
    stream = await _silent_socket(address)
    async with stream:
        await _wait_for_pending(gateway, 1)
        start = trio.current_time()
        assert await stream.receive_some() == b""
        assert 3.0 <= trio.current_time() - start < 3.1
    await _wait_for_pending(gateway, 0)


async def test_the_upgrade_and_the_connect_share_one_handshake_deadline(
    host: claw.Host,
    nursery: trio.Nursery,
    recorder: Recorder,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A client that upgrades late has only what is left of the deadline for its connect."""
    gateway = _gateway(host, recorder, handshake_timeout=4.0)
    address: GatewayAddress = await nursery.start(gateway.serve)
    stream = await _silent_socket(address)
    async with stream:
        start = trio.current_time()
        await trio.sleep(3.0)
        await stream.send_all(
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n"
        )
        received = b""
        while b"UNAUTHORIZED" not in received:
            chunk = await stream.receive_some()
            assert chunk, received
            received += chunk
        # Upgraded, then refused a second later: at 4 s, not at 3 + 4.
        assert received.startswith(b"HTTP/1.1 101")
        assert 4.0 <= trio.current_time() - start < 4.1


async def test_sockets_that_never_authenticate_do_not_count_against_max_connections(
    host: claw.Host, nursery: trio.Nursery, recorder: Recorder
) -> None:
    gateway = _gateway(host, recorder, max_connections=1)
    address: GatewayAddress = await nursery.start(gateway.serve)
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(3):
            await stack.enter_async_context(await _silent_socket(address))
        await _wait_for_pending(gateway, 3)
        async with open_raw(address) as ws:
            await connect_raw(ws)
            stats = gateway.statistics()
            assert (len(stats.connections), stats.pending_connections) == (1, 3)
            # The one authenticated place is taken: the next client that authenticates
            # is refused, however many sockets merely wait.
            async with open_raw(address) as second:
                refusal = await receive_json(second)
                assert refusal["error"]["code"] == "UNAVAILABLE"


async def test_beyond_the_pending_bound_the_longest_waiting_socket_is_dropped(
    host: claw.Host, nursery: trio.Nursery, recorder: Recorder
) -> None:
    gateway = _gateway(host, recorder, max_pending_connections=2)
    address: GatewayAddress = await nursery.start(gateway.serve)
    first = await _silent_socket(address)
    await _wait_for_pending(gateway, 1)
    second = await _silent_socket(address)
    await _wait_for_pending(gateway, 2)
    async with first, second:
        # A client that authenticates pushes out the oldest waiting socket, not itself.
        async with open_raw(address) as ws:
            await connect_raw(ws)
            with trio.fail_after(10):
                assert await first.receive_some() == b""
            assert gateway.statistics().pending_connections == 1
            await send_json(ws, {"type": "req", "id": "e", "method": "test.echo"})
            assert (await receive_json(ws))["ok"] is True
