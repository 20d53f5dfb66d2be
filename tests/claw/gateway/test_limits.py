"""Connection limits: an idle authenticated connection is closed, and the number of
connections is capped (both configurable in ``[gateway]``)."""

from __future__ import annotations

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
    loaded = claw.HostConfig.from_mapping(
        {"gateway": {"idle_timeout": 12.5, "max_connections": 3, "token": "t"}}
    )
    assert (loaded.gateway.idle_timeout, loaded.gateway.max_connections) == (12.5, 3)
