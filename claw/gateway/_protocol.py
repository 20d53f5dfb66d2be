"""The wire protocol: decoding client frames and encoding responses, with no I/O.

Every frame is one JSON object in one WebSocket text message. A client sends
``{"type": "req", "id": ID, "method": M, "params": {...}}`` or
``{"type": "cancel", "id": ID}``; the gateway answers each request once with
``{"type": "res", "id": ID, "ok": true, "payload": {...}}`` or
``{"type": "res", "id": ID, "ok": false, "error": {"code": C, "message": "..."}}``.

Decoding is total: any input either yields a frame or raises :class:`FrameError`
carrying the request id when one could be read, so that the connection can answer
and keep going.

Every string in a frame is checked here, once, by :mod:`claw._input`: a lone surrogate
(``"\ud800"`` is valid JSON, and Python keeps it, but it is not Unicode) or NUL
anywhere in ``params`` (values and keys, at any depth), nesting beyond 32 levels, or an
integer beyond 64 bits is answered ``INVALID_REQUEST`` naming the field
(``params.reference.id: contains a lone surrogate ...``), so no handler, provider,
database or log ever receives one. An ``id`` or ``method`` that is not text is refused
the same way (an id that is not text is not echoed: the answer's id is ``null``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, NoReturn

import attrs

from .._input import MAX_NODES, InvalidInputError, check_json, text_problem
from ._errors import ErrorCode

RequestId = str | int
"""A request id as the client sent it: a non-empty string or an integer."""

MAX_ID_CHARS = 128
MAX_METHOD_CHARS = 128
# Integers beyond what a JavaScript client can represent exactly would not match.
_MAX_SAFE_INTEGER = 2**53 - 1
_INT64 = 2**63


class FrameError(Exception):
    """A frame the gateway cannot act on; answered with an error, never raised to callers."""

    def __init__(self, request_id: RequestId | None, message: str) -> None:
        self.request_id = request_id
        self.message = message
        super().__init__(message)


@attrs.frozen
class RequestFrame:
    """A decoded ``req`` frame."""

    id: RequestId
    method: str
    params: dict[str, Any]


@attrs.frozen
class CancelFrame:
    """A decoded ``cancel`` frame: abort the in-flight request ``id``."""

    id: RequestId


Frame = RequestFrame | CancelFrame


def json_type_name(value: object) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every frame (json.loads with an option builds a new one per call).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _valid_id(value: object) -> bool:
    if isinstance(value, str):
        return 0 < len(value) <= MAX_ID_CHARS
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and -_MAX_SAFE_INTEGER <= value <= _MAX_SAFE_INTEGER
    )


def decode_frame(message: str | bytes, *, max_bytes: int) -> Frame:
    """Decode one client message into a frame, or raise :class:`FrameError` saying why not."""
    if isinstance(message, bytes):
        raise FrameError(None, "binary frames are not accepted; send JSON text frames")
    # A character takes one to four UTF-8 bytes: only a frame in between is encoded to
    # count them (an ordinary request is far below the limit and costs no copy).
    chars = len(message)
    if chars > max_bytes or (chars * 4 > max_bytes and len(message.encode("utf-8")) > max_bytes):
        raise FrameError(None, f"frame is larger than the gateway's limit of {max_bytes} bytes")
    # Plain text: ASCII with no \u escape, so no string the JSON holds can contain a lone
    # surrogate or NUL (a raw control character is not valid JSON in a string), and its
    # strings need not be checked one by one (the common request: see _flat_and_bounded).
    plain_text = message.isascii() and "\\u" not in message
    if message.startswith("\ufeff"):
        raise FrameError(None, "frame is not valid JSON (it starts with a byte order mark)")
    try:
        data = _DECODER.decode(message)
    except json.JSONDecodeError as exc:
        raise FrameError(None, f"frame is not valid JSON ({exc.msg} at offset {exc.pos})") from None
    except RecursionError:
        raise FrameError(None, "frame is not valid JSON (nested too deeply)") from None
    except ValueError:
        # NaN/Infinity, or an integer literal too long to convert.
        raise FrameError(None, "frame is not valid JSON (a number is out of range)") from None
    if not isinstance(data, dict):
        raise FrameError(None, f"a frame must be a JSON object, got {json_type_name(data)}")
    if "id" not in data:
        raise FrameError(None, 'frame has no "id"')
    raw_id = data["id"]
    if not _valid_id(raw_id):
        raise FrameError(
            None,
            f'"id" must be a non-empty string of at most {MAX_ID_CHARS} characters or an '
            f"integer, got {json_type_name(raw_id)}",
        )
    if isinstance(raw_id, str) and not plain_text:
        problem = text_problem(raw_id)
        if problem is not None:
            raise FrameError(None, f'"id" {problem}')
    request_id: RequestId = raw_id
    frame_type = data.get("type")
    if frame_type == "cancel":
        return CancelFrame(id=request_id)
    if frame_type != "req":
        shown = repr(frame_type[:32]) if isinstance(frame_type, str) else json_type_name(frame_type)
        raise FrameError(request_id, f'unknown frame type {shown}; send "req" or "cancel"')
    method = data.get("method")
    if not isinstance(method, str) or not 0 < len(method) <= MAX_METHOD_CHARS:
        raise FrameError(
            request_id,
            f'"method" must be a non-empty string of at most {MAX_METHOD_CHARS} characters',
        )
    if not plain_text and (problem := text_problem(method)) is not None:
        raise FrameError(request_id, f'"method" {problem}')
    params = data.get("params", {})
    if not isinstance(params, dict):
        raise FrameError(request_id, f'"params" must be an object, got {json_type_name(params)}')
    if not (plain_text and _flat_and_bounded(params)):
        try:
            check_json(params, "params")
        except InvalidInputError as exc:
            raise FrameError(request_id, str(exc)) from None
    return RequestFrame(id=request_id, method=method, params=params)


def _flat_and_bounded(params: dict[str, Any]) -> bool:
    """Whether :func:`~claw._input.check_json` would accept ``params`` without looking at
    its text, for a frame whose text is plain (see :func:`decode_frame`): a flat object
    of text, booleans, nulls, 64-bit integers and finite numbers, within the node bound.
    Anything else (``False``) gets the full walk, which names what is wrong."""
    if len(params) >= MAX_NODES:
        return False
    for value in params.values():
        kind = type(value)
        if kind is str or kind is bool or value is None:
            continue
        if kind is int:
            if not -_INT64 <= value < _INT64:
                return False
        elif kind is float:
            if not math.isfinite(value):
                return False
        else:
            return False
    return True


# One encoder for every frame (json.dumps with these options builds a new one per call).
# No circular-reference bookkeeping: a payload is a tree a handler built, and a cycle
# still fails (RecursionError, answered as an internal error) rather than looping.
_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, check_circular=False, separators=(",", ":")
)


def encode(frame: Mapping[str, Any]) -> str:
    """Serialize one frame; raises ``TypeError``/``ValueError`` for non-JSON values."""
    return _ENCODER.encode(frame)


def encode_result(request_id: RequestId, payload: Mapping[str, Any]) -> str:
    """A success response."""
    return encode({"type": "res", "id": request_id, "ok": True, "payload": payload})


def encode_error(request_id: RequestId | None, code: ErrorCode, message: str) -> str:
    """An error response; ``request_id`` is ``None`` (``null``) when the frame had none."""
    return encode(
        {
            "type": "res",
            "id": request_id,
            "ok": False,
            "error": {"code": code, "message": message},
        }
    )
