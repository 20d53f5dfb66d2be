"""The in-memory transport: the real protocol over a memory stream pair, no socket."""

from __future__ import annotations

import pytest
import trio

import claw
from claw.gateway import Gateway, GatewayRequestError, open_in_memory_gateway_client

from .conftest import READ_TOKEN, Recorder


async def test_in_memory_client_speaks_the_protocol(gateway: Gateway) -> None:
    async with open_in_memory_gateway_client(gateway, READ_TOKEN) as client:
        assert client.scopes == {"operator.read"}
        assert (await client.request("test.echo", {"a": 1}))["params"] == {"a": 1}
        with pytest.raises(GatewayRequestError) as refused:
            await client.request("test.admin")
        assert refused.value.code == "FORBIDDEN"


async def test_in_memory_client_refuses_a_bad_token(gateway: Gateway) -> None:
    with pytest.raises(GatewayRequestError) as refused:
        async with open_in_memory_gateway_client(gateway, "bad"):
            pytest.fail("connected with a bad token")
    assert refused.value.code == "UNAUTHORIZED"


async def test_leaving_the_in_memory_client_revokes_the_connection_authority(
    host: claw.Host, gateway: Gateway, recorder: Recorder
) -> None:
    async with open_in_memory_gateway_client(gateway, READ_TOKEN) as client:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.request, "test.wait", {"gate": "g"})
            await recorder.started_event("g").wait()
            authority = recorder.contexts["g"].authority
            host.verify(authority)
            recorder.gate("g").set()
    with pytest.raises(claw.StaleCapabilityError):
        host.verify(authority)
    assert gateway.statistics().connections == ()


async def test_in_memory_cancel_aborts_the_request(gateway: Gateway, recorder: Recorder) -> None:
    async with open_in_memory_gateway_client(gateway, READ_TOKEN) as client:
        codes: list[str] = []

        async def ask() -> None:
            with pytest.raises(GatewayRequestError) as aborted:
                await client.request("test.wait", {"gate": "g"}, request_id=5)
            codes.append(aborted.value.code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await recorder.started_event("g").wait()
            await client.cancel(5)
        assert codes == ["UNAVAILABLE"]
        assert recorder.cancelled_event("g").is_set()


async def test_body_exceptions_come_out_unwrapped(gateway: Gateway) -> None:
    with pytest.raises(KeyError):
        async with open_in_memory_gateway_client(gateway, READ_TOKEN):
            raise KeyError("mine")
