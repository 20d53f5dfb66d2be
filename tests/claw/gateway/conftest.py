"""Fixtures for the gateway tests: a gateway with test methods, served on 127.0.0.1:0."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio_websocket

import claw
from claw.gateway import (
    Gateway,
    GatewayAddress,
    GatewayError,
    GatewayRequestContext,
)
from claw.gateway._client import open_websocket_stream

READ_TOKEN = "read-token-12345"
ADMIN_TOKEN = "admin-token-5678"
MAX_MESSAGE_BYTES = 4096


@attrs.define
class Recorder:
    """What the test methods saw: contexts, calls, and the events tests use to force order."""

    contexts: dict[str, GatewayRequestContext] = attrs.field(factory=dict)
    calls: list[str] = attrs.field(factory=list)
    gates: dict[str, trio.Event] = attrs.field(factory=dict)
    started: dict[str, trio.Event] = attrs.field(factory=dict)
    cancelled: dict[str, trio.Event] = attrs.field(factory=dict)

    def gate(self, name: str) -> trio.Event:
        return self.gates.setdefault(name, trio.Event())

    def started_event(self, name: str) -> trio.Event:
        return self.started.setdefault(name, trio.Event())

    def cancelled_event(self, name: str) -> trio.Event:
        return self.cancelled.setdefault(name, trio.Event())


def install_test_methods(gateway: Gateway, recorder: Recorder) -> None:
    """Register the methods the tests call."""

    async def echo(ctx: GatewayRequestContext) -> dict[str, Any]:
        return {"params": ctx.params, "requestId": ctx.request_id}

    async def wait(ctx: GatewayRequestContext) -> dict[str, Any]:
        # Parks on a named gate until the test opens it; then checks it may still answer.
        name = str(ctx.params["gate"])
        recorder.contexts[name] = ctx
        recorder.started_event(name).set()
        try:
            await recorder.gate(name).wait()
        except trio.Cancelled:
            recorder.cancelled_event(name).set()
            raise
        if ctx.params.get("check", True):
            ctx.check_current()
        return {"gate": name}

    async def blob(ctx: GatewayRequestContext) -> dict[str, Any]:
        return {"blob": "x" * int(ctx.params["size"])}

    async def fail(ctx: GatewayRequestContext) -> dict[str, Any]:
        raise RuntimeError("secret detail /var/lib/claw/state.db")

    async def not_found(ctx: GatewayRequestContext) -> dict[str, Any]:
        raise GatewayError("NOT_FOUND", "no such thing")

    async def admin(ctx: GatewayRequestContext) -> dict[str, Any]:
        recorder.calls.append("test.admin")
        return {"admin": True}

    async def bad_payload(ctx: GatewayRequestContext) -> Any:
        return ["not", "a", "mapping"]

    gateway.register_method("test.echo", echo)
    gateway.register_method("test.wait", wait)
    gateway.register_method("test.blob", blob)
    gateway.register_method("test.fail", fail)
    gateway.register_method("test.notFound", not_found)
    gateway.register_method("test.admin", admin, required_scope="operator.admin")
    gateway.register_method("test.badPayload", bad_payload)


def make_gateway_config(**overrides: Any) -> claw.GatewayConfig:
    fields: dict[str, Any] = {
        "tokens": {
            READ_TOKEN: ("operator.read",),
            ADMIN_TOKEN: ("operator.read", "operator.admin"),
        },
        "max_message_bytes": MAX_MESSAGE_BYTES,
        "max_in_flight": 8,
        "max_queued_messages": 8,
    }
    fields.update(overrides)
    return claw.GatewayConfig(**fields)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def gateway_config() -> claw.GatewayConfig:
    return make_gateway_config()


@pytest.fixture
def gateway(host: claw.Host, gateway_config: claw.GatewayConfig, recorder: Recorder) -> Gateway:
    gw = Gateway(host, config=gateway_config)
    install_test_methods(gw, recorder)
    return gw


@pytest.fixture
async def address(nursery: trio.Nursery, gateway: Gateway) -> GatewayAddress:
    result: GatewayAddress = await nursery.start(gateway.serve)
    return result


@asynccontextmanager
async def open_raw(
    address: GatewayAddress, **kwargs: Any
) -> AsyncIterator[trio_websocket.WebSocketConnection]:
    """A bare WebSocket to the gateway, for speaking the frames by hand."""
    async with open_websocket_stream(address.url, **kwargs) as ws:
        yield ws


async def send_json(ws: trio_websocket.WebSocketConnection, frame: Any) -> None:
    await ws.send_message(json.dumps(frame))


async def receive_json(ws: trio_websocket.WebSocketConnection) -> dict[str, Any]:
    message = await ws.get_message()
    assert isinstance(message, str)
    frame = json.loads(message)
    assert isinstance(frame, dict)
    return frame


def connect_frame(token: str, scopes: list[str] | None = None, request_id: Any = "1") -> Any:
    params: dict[str, Any] = {"auth": {"token": token}}
    if scopes is not None:
        params["scopes"] = scopes
    return {"type": "req", "id": request_id, "method": "connect", "params": params}


async def connect_raw(ws: trio_websocket.WebSocketConnection, token: str = READ_TOKEN) -> Any:
    await send_json(ws, connect_frame(token, ["operator.read"]))
    hello = await receive_json(ws)
    assert hello["ok"] is True, hello
    return hello["payload"]
