"""Hypothesis throws random frames at a live gateway on 127.0.0.1:0.

After each burst the gateway must have answered every frame that deserves an answer
(everything but a well-formed cancel) with a well-formed response, and nothing else;
the connection must still serve a request, and another client must be served too.
Before ``connect``, any frame is refused with UNAUTHORIZED and the connection closed.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import trio
import trio_websocket
from hypothesis import given, settings
from hypothesis import strategies as st

import claw
from claw.gateway import ERROR_CODES, Gateway, GatewayAddress, open_gateway_client

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

# The spec: ids are non-empty strings of at most 128 characters, or integers that a
# JavaScript client can represent exactly.
_MAX_SAFE = 2**53 - 1

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)

frame_objects = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["req", "cancel", "res", "REQ"]) | json_values,
        "id": st.sampled_from(["1", "2", "a", 1, 2]) | st.text(max_size=140) | json_values,
        "method": st.sampled_from(["test.echo", "test.fail", "test.admin", "connect", "memory.x"])
        | json_values,
        "params": st.dictionaries(st.text(max_size=6), json_values, max_size=3) | json_values,
    },
)

huge = st.integers(min_value=MAX_MESSAGE_BYTES - 64, max_value=3 * MAX_MESSAGE_BYTES)

frames: st.SearchStrategy[str | bytes] = st.one_of(
    frame_objects.map(json.dumps),
    json_values.map(json.dumps),
    st.text(max_size=200),
    st.binary(max_size=200),
    huge.map(lambda n: "q" * n),
    huge.map(
        lambda n: json.dumps(
            {"type": "req", "id": "h", "method": "test.echo", "params": {"s": "é" * (n // 2)}}
        )
    ),
)


def deserves_no_answer(message: str | bytes) -> bool:
    """Only a well-formed cancel frame within the size limit goes unanswered."""
    if isinstance(message, bytes) or len(message.encode()) > MAX_MESSAGE_BYTES:
        return False
    try:
        data = json.loads(message)
    except ValueError:
        return False
    if not isinstance(data, dict) or data.get("type") != "cancel" or "id" not in data:
        return False
    request_id = data["id"]
    if isinstance(request_id, str):
        return 0 < len(request_id) <= 128
    return (
        isinstance(request_id, int)
        and not isinstance(request_id, bool)
        and abs(request_id) <= _MAX_SAFE
    )


def sent_id(message: str | bytes) -> Any:
    try:
        data = json.loads(message)
    except ValueError:
        return None
    return data.get("id") if isinstance(data, dict) else None


def assert_well_formed(answer: dict[str, Any], possible_ids: list[Any]) -> None:
    assert answer["type"] == "res"
    assert answer["id"] is None or answer["id"] in possible_ids
    if answer["ok"] is True:
        assert isinstance(answer["payload"], dict)
    else:
        assert answer["ok"] is False
        assert answer["error"]["code"] in ERROR_CODES
        assert isinstance(answer["error"]["message"], str)


class _Failures(logging.Handler):
    """Collects connection-level failures the gateway logged (there must be none)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "gateway connection failed" in record.getMessage():
            self.messages.append(self.format(record))


async def _burst(address: GatewayAddress, burst: list[str | bytes], before_connect: bool) -> None:
    async with open_raw(address, max_message_bytes=1 << 20) as ws:
        if before_connect:
            await ws.send_message(burst[0])
            answer = await receive_json(ws)
            assert answer["error"]["code"] == "UNAUTHORIZED"
            try:
                await ws.get_message()
            except trio_websocket.ConnectionClosed as closed:
                assert closed.reason.code == 1008
            else:
                raise AssertionError("the gateway kept an unauthenticated connection open")
            return
        await connect_raw(ws)
        for message in burst:
            await ws.send_message(message)
        expected = sum(not deserves_no_answer(m) for m in burst)
        possible_ids = [sent_id(m) for m in burst]
        for _ in range(expected):
            assert_well_formed(await receive_json(ws), possible_ids)
        await send_json(ws, {"type": "req", "id": "sentinel", "method": "test.echo"})
        after = await receive_json(ws)
        assert after["id"] == "sentinel", f"an extra or missing answer: {after}"
        assert after["ok"] is True


@settings(max_examples=50, deadline=None)
@given(burst=st.lists(frames, min_size=1, max_size=6), before_connect=st.booleans())
async def test_random_frames_are_always_answered_and_the_gateway_keeps_serving(
    burst: list[str | bytes], before_connect: bool
) -> None:
    failures = _Failures()
    logging.getLogger("claw.gateway").addHandler(failures)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = claw.HostConfig(
                workspace_dir=Path(tmp),
                state_dir=Path(tmp) / "state",
                plugins=claw.PluginsConfig(discover=False),
                workers=claw.WorkersConfig(inline=True),
            )
            async with claw.open_host(config) as host, trio.open_nursery() as nursery:
                gateway = Gateway(host, config=make_gateway_config())
                install_test_methods(gateway, Recorder())
                address: GatewayAddress = await nursery.start(gateway.serve)
                with trio.fail_after(10):  # a hang guard, not a timing assertion
                    await _burst(address, burst, before_connect)
                    async with open_gateway_client(address.url, READ_TOKEN) as other:
                        assert (await other.request("test.echo", {"k": 1}))["params"] == {"k": 1}
                nursery.cancel_scope.cancel()
    finally:
        logging.getLogger("claw.gateway").removeHandler(failures)
    assert failures.messages == []
