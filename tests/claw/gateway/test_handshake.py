"""The connect handshake: tokens, scopes, and refusal of anything else as a first frame."""

from __future__ import annotations

import pytest
import trio
import trio_websocket

import claw
from claw.gateway import Gateway, GatewayAddress, GatewayRequestError, open_gateway_client

from .conftest import (
    ADMIN_TOKEN,
    READ_TOKEN,
    connect_frame,
    open_raw,
    receive_json,
    send_json,
)


async def expect_refused_and_closed(
    ws: trio_websocket.WebSocketConnection, request_id: object
) -> None:
    answer = await receive_json(ws)
    assert answer["type"] == "res"
    assert answer["id"] == request_id
    assert answer["ok"] is False
    assert answer["error"]["code"] == "UNAUTHORIZED"
    with pytest.raises(trio_websocket.ConnectionClosed) as closed:
        await ws.get_message()
    assert closed.value.reason.code == 1008


async def test_good_token_gets_hello_ok_with_granted_scopes(address: GatewayAddress) -> None:
    async with open_raw(address) as ws:
        await send_json(ws, connect_frame(READ_TOKEN, ["operator.read"]))
        answer = await receive_json(ws)
    assert answer["type"] == "res"
    assert answer["id"] == "1"
    assert answer["ok"] is True
    payload = answer["payload"]
    assert payload["type"] == "hello-ok"
    assert payload["scopes"] == ["operator.read"]
    assert payload["connectionId"].startswith("conn-")
    assert "test.echo" in payload["methods"]


async def test_granted_scopes_are_the_requested_ones_the_token_allows_sorted(
    address: GatewayAddress,
) -> None:
    async with open_raw(address) as ws:
        await send_json(
            ws,
            connect_frame(ADMIN_TOKEN, ["operator.write", "operator.read", "operator.admin"]),
        )
        answer = await receive_json(ws)
    assert answer["payload"]["scopes"] == ["operator.admin", "operator.read"]


async def test_read_token_asking_for_admin_is_granted_only_read(address: GatewayAddress) -> None:
    async with open_gateway_client(
        address.url, READ_TOKEN, scopes=["operator.admin", "operator.read"]
    ) as client:
        assert client.scopes == {"operator.read"}


async def test_bad_token_is_refused_unauthorized_and_the_connection_closed(
    address: GatewayAddress,
) -> None:
    async with open_raw(address) as ws:
        await send_json(ws, connect_frame("wrong-token", ["operator.read"], request_id=7))
        await expect_refused_and_closed(ws, 7)


async def test_token_prefix_is_not_accepted(address: GatewayAddress) -> None:
    async with open_raw(address) as ws:
        await send_json(ws, connect_frame(READ_TOKEN[:-1], ["operator.read"]))
        await expect_refused_and_closed(ws, "1")


@pytest.mark.parametrize(
    "first",
    [
        {"type": "req", "id": "a", "method": "test.echo", "params": {}},
        {"type": "cancel", "id": "a"},
        {"type": "req", "id": "a", "method": "connect", "params": {}},
        {"type": "req", "id": "a", "method": "connect", "params": {"auth": {"token": 5}}},
        {
            "type": "req",
            "id": "a",
            "method": "connect",
            "params": {"auth": {"token": READ_TOKEN}, "scopes": "operator.read"},
        },
    ],
    ids=["other-method", "cancel", "no-auth", "token-not-string", "scopes-not-array"],
)
async def test_any_other_first_frame_is_refused_and_closed(
    address: GatewayAddress, first: object
) -> None:
    async with open_raw(address) as ws:
        await send_json(ws, first)
        await expect_refused_and_closed(ws, "a")


@pytest.mark.parametrize("message", ["not json", "[1, 2]", b"\x00binary", '{"type": "req"}'])
async def test_malformed_first_frame_is_refused_with_null_id_and_closed(
    address: GatewayAddress, message: str | bytes
) -> None:
    async with open_raw(address) as ws:
        await ws.send_message(message)
        await expect_refused_and_closed(ws, None)


async def test_client_raises_unauthorized_for_a_bad_token(address: GatewayAddress) -> None:
    with pytest.raises(GatewayRequestError) as refused:
        async with open_gateway_client(address.url, "nope"):
            pytest.fail("connected with a bad token")
    assert refused.value.code == "UNAUTHORIZED"


async def test_missing_scopes_asks_for_operator_read(address: GatewayAddress) -> None:
    async with open_raw(address) as ws:
        await send_json(ws, connect_frame(ADMIN_TOKEN, None))
        answer = await receive_json(ws)
    assert answer["payload"]["scopes"] == ["operator.read"]


async def test_single_token_shorthand_allows_operator_read_only(host: claw.Host) -> None:
    gateway = Gateway(host, config=claw.GatewayConfig(token="solo-token-0123456"))
    async with trio.open_nursery() as nursery:
        address = await nursery.start(gateway.serve)
        async with open_gateway_client(
            address.url, "solo-token-0123456", scopes=["operator.read", "operator.admin"]
        ) as client:
            assert client.scopes == {"operator.read"}
        nursery.cancel_scope.cancel()


async def test_gateway_without_any_token_is_a_config_error(host: claw.Host) -> None:
    with pytest.raises(claw.ConfigError, match="gateway.token"):
        Gateway(host, config=claw.GatewayConfig())


async def test_empty_token_is_a_config_error(host: claw.Host) -> None:
    with pytest.raises(claw.ConfigError):
        Gateway(host, config=claw.GatewayConfig(tokens={"": ("operator.read",)}))


@pytest.mark.parametrize("scopes", [["operator.admin"], ["operator.write", "x"], []])
async def test_a_scope_request_the_token_cannot_grant_is_refused_not_answered_empty(
    address: GatewayAddress, scopes: list[str]
) -> None:
    async with open_raw(address) as ws:
        await send_json(ws, connect_frame(READ_TOKEN, scopes, request_id=9))
        answer = await receive_json(ws)
        assert (answer["id"], answer["ok"]) == (9, False)
        assert answer["error"]["code"] == "FORBIDDEN"
        assert "operator.read" in answer["error"]["message"]  # what the token does allow
        with pytest.raises(trio_websocket.ConnectionClosed) as closed:
            await ws.get_message()
        assert closed.value.reason.code == 1008
