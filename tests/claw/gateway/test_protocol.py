"""Frame decoding and response encoding, without a socket."""

from __future__ import annotations

import json

import pytest

import claw
from claw._input import MAX_NODES
from claw.gateway import ERROR_CODES, GatewayError
from claw.gateway import _protocol as protocol
from claw.gateway._auth import TokenTable
from claw.gateway._protocol import (
    CancelFrame,
    FrameError,
    RequestFrame,
    decode_frame,
    encode_error,
    encode_result,
)

BIG = 1 << 20


def test_request_frame_decodes_with_default_params() -> None:
    assert decode_frame('{"type":"req","id":"1","method":"m"}', max_bytes=BIG) == RequestFrame(
        id="1", method="m", params={}
    )


def test_cancel_frame_decodes() -> None:
    assert decode_frame('{"type":"cancel","id":7}', max_bytes=BIG) == CancelFrame(id=7)


@pytest.mark.parametrize(
    "message",
    [
        "[" * 5000 + "]" * 5000,
        '{"type":"req","id":"a","method":"m","params":{"n":' + "9" * 5000 + "}}",
        '{"type":"req","id":"a","method":"m","params":{"n":Infinity}}',
        '{"type":"req","id":' + str(2**60) + ',"method":"m"}',
        '{"type":"req","id":"' + "i" * 129 + '","method":"m"}',
    ],
    ids=["deep-nesting", "huge-integer", "infinity", "unsafe-integer-id", "long-id"],
)
def test_hostile_json_is_a_frame_error_not_a_crash(message: str) -> None:
    with pytest.raises(FrameError) as refused:
        decode_frame(message, max_bytes=BIG)
    assert refused.value.request_id is None


def test_oversize_is_measured_in_utf8_bytes() -> None:
    message = json.dumps({"type": "req", "id": "1", "method": "m", "params": {"s": "€" * 10}})
    decode_frame(message, max_bytes=len(message.encode()))
    with pytest.raises(FrameError, match="larger than"):
        decode_frame(message, max_bytes=len(message.encode()) - 1)


def test_a_frame_of_few_characters_but_too_many_utf8_bytes_is_refused() -> None:
    message = json.dumps(
        {"type": "req", "id": "1", "method": "m", "params": {"s": "€" * 100}},
        ensure_ascii=False,
    )
    size = len(message.encode())
    assert len(message) < size - 1
    decode_frame(message, max_bytes=size)
    with pytest.raises(FrameError, match="larger than"):
        decode_frame(message, max_bytes=size - 1)
    with pytest.raises(FrameError, match="larger than"):
        decode_frame(message, max_bytes=len(message))


def test_a_frame_with_a_byte_order_mark_is_refused_saying_so() -> None:
    with pytest.raises(FrameError, match="byte order mark") as refused:
        decode_frame('\ufeff{"type":"req","id":"1","method":"m"}', max_bytes=BIG)
    assert refused.value.request_id is None


def test_encoded_responses_have_the_wire_shape() -> None:
    assert json.loads(encode_result("1", {"a": [1]})) == {
        "type": "res",
        "id": "1",
        "ok": True,
        "payload": {"a": [1]},
    }
    assert json.loads(encode_error(None, "FORBIDDEN", "no")) == {
        "type": "res",
        "id": None,
        "ok": False,
        "error": {"code": "FORBIDDEN", "message": "no"},
    }


def test_error_codes_are_exactly_the_wire_codes() -> None:
    assert {
        "INVALID_REQUEST",
        "UNAUTHORIZED",
        "FORBIDDEN",
        "NOT_FOUND",
        "UNAVAILABLE",
        "INTERNAL",
    } == ERROR_CODES


def test_gateway_error_refuses_an_unknown_code() -> None:
    with pytest.raises(ValueError, match="not a gateway error code"):
        GatewayError("TEAPOT", "no")  # type: ignore[arg-type]
    error = GatewayError("NOT_FOUND", "gone")
    assert isinstance(error, claw.ClawError)
    assert isinstance(error, RuntimeError)
    assert (error.code, error.message) == ("NOT_FOUND", "gone")


def test_token_table_unions_the_shorthand_and_the_table() -> None:
    t, u, v = ("t" * 16, "u" * 16, "v" * 16)
    table = TokenTable.from_config(
        claw.GatewayConfig(token=t, tokens={t: ("operator.admin",), u: ("operator.read",)})
    )
    assert table.allowed_scopes(t) == {"operator.read", "operator.admin"}
    assert table.allowed_scopes(u) == {"operator.read"}
    assert table.allowed_scopes(v) is None
    assert table.allowed_scopes("") is None
    assert table.grant(u, ["operator.admin"]) == frozenset()


_REQ = '{"type":"req","method":"m",'


@pytest.mark.parametrize(
    ("frame", "request_id", "says"),
    [
        (_REQ + '"id":"\\ud800"}', None, '"id" contains a lone surrogate'),
        ('{"type":"req","id":1,"method":"m\\udc00"}', 1, '"method" contains a lone surrogate'),
        (_REQ + '"id":2,"params":{"q":"\\ud800"}}', 2, "params.q: contains a lone surrogate"),
        (_REQ + '"id":3,"params":{"q":["a\\u0000"]}}', 3, "params.q[0]: contains NUL"),
        (_REQ + '"id":4,"params":{"n":1e400}}', 4, "params.n: is inf, not a finite number"),
        (_REQ + '"id":5,"params":{"n":18446744073709551616}}', 5, "beyond 64 bits"),
    ],
)
def test_text_that_is_not_text_is_refused_where_the_frame_is_decoded(
    frame: str, request_id: object, says: str
) -> None:
    with pytest.raises(FrameError) as info:
        decode_frame(frame, max_bytes=4096)
    assert info.value.request_id == request_id
    assert says in info.value.message
    info.value.message.encode("utf-8")  # the answer itself can be sent


_FAST_PATH_FRAMES = [
    _REQ + '"id":"a","params":{"version":2,"query":"db rotation","maxResults":6}}',
    _REQ + '"id":"b","params":{"q":"x","n":-9223372036854775808,"f":1.5,"t":true,"z":null}}',
    _REQ + '"id":"c","params":{"n":9223372036854775807}}',
    _REQ + '"id":"d","params":{"n":9223372036854775808}}',
    _REQ + '"id":"e","params":{"n":-9223372036854775809}}',
    _REQ + '"id":"f","params":{"n":1e400}}',
    _REQ + '"id":"g","params":{"n":-1e400,"m":1}}',
    _REQ + '"id":"h","params":{"q":"caf\\u00e9"}}',
    _REQ + '"id":"i","params":{"q":"a\\u0000"}}',
    _REQ + '"id":"j","params":{"q\\u0000":1}}',
    _REQ + '"id":"k\\ud800","params":{}}',
    _REQ + '"id":"l","params":{"q":"\\\\u0000"}}',
    _REQ + '"id":"m","params":{"q":"caf\u00e9"}}',
    _REQ + '"id":"n","params":{"q":["a",{"b":"\\ud800"}]}}',
    _REQ + '"id":"o","params":{"q":{}}}',
    '{"type":"req","id":9,"method":"m\\u0000","params":{}}',
    _REQ + '"id":"p","params":{' + ",".join(f'"k{i}":{i}' for i in range(50)) + "}}",
]


def _outcome(message: str) -> object:
    try:
        return decode_frame(message, max_bytes=BIG)
    except FrameError as exc:
        return ("refused", exc.request_id, exc.message)


@pytest.mark.parametrize("message", _FAST_PATH_FRAMES)
def test_plain_frames_skip_the_text_walk_with_the_same_outcome(
    message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame whose text is plain ASCII without escapes is not walked string by string:
    what it decodes to, or the error it gets, is what the full check of every value
    gives."""
    fast = _outcome(message)
    monkeypatch.setattr(protocol, "_flat_and_bounded", lambda params: False)
    assert fast == _outcome(message)


def test_the_node_bound_still_holds_for_a_flat_plain_frame() -> None:
    params = ",".join(f'"k{i}":{i}' for i in range(MAX_NODES))
    with pytest.raises(FrameError, match=f"more than {MAX_NODES} values"):
        decode_frame(_REQ + '"id":"a","params":{' + params + "}}", max_bytes=1 << 30)
