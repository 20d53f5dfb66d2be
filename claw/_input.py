"""What a client may send: text that is text, JSON that is bounded, numbers that are numbers.

Every entry point (a gateway frame's ``params``, an MCP tool call's arguments, a model's
tool-call arguments, the Python API's text) checks what it received here, once, before
any other code sees it; a value that fails is refused with :class:`InvalidInputError`,
which names the field (``params.reference.id``) and what is wrong with it.

What is refused, and why each would otherwise fail far from where it came in:

* **A lone surrogate** (``"\\ud800"``: JSON can escape one, and Python keeps it in a
  ``str``, but it is not Unicode and has no UTF-8 encoding). Every store, index, socket and
  log that encodes the string raises ``UnicodeEncodeError`` there instead: an INTERNAL
  answer, a dropped connection, or a "provider failed".
* **NUL** (U+0000): PostgreSQL's text cannot hold it, and the driver's error names the
  server; C strings end at it.
* **NaN and the infinities**: not JSON; a JSON encoder downstream refuses or emits them.
* **Nesting deeper than** ``max_depth``: recursive encoders and decoders downstream stop
  at Python's recursion limit (``RecursionError``), far from the request.
* **More than** ``max_nodes`` values, or integers beyond 64 bits: unbounded work or
  storage overflow.

The walk is iterative, so a deep value cannot exhaust the stack here either.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from ._errors import ClawError

MAX_DEPTH = 32
MAX_NODES = 100_000
_INT64 = 2**63


class InvalidInputError(ClawError, ValueError):
    """A value a client sent is not acceptable input; ``field`` names where it is."""

    field: str
    problem: str

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


@attrs.frozen
class JsonLimits:
    """How large a JSON value may be: nesting depth and the number of values in it."""

    max_depth: int = MAX_DEPTH
    max_nodes: int = MAX_NODES


DEFAULT_LIMITS = JsonLimits()


def text_problem(text: str) -> str | None:
    """Why ``text`` is not acceptable text (a lone surrogate, NUL), or ``None``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"contains a lone surrogate (U+{ord(text[exc.start]):04X} at character "
            f"{exc.start}), which is not Unicode text; send valid UTF-8"
        )
    if "\x00" in text:
        return f"contains NUL (U+0000 at character {text.index(chr(0))}), which is not accepted"
    return None


def check_text(text: str, field: str) -> None:
    """Refuse ``text`` (as :class:`InvalidInputError` naming ``field``) if it is not text."""
    problem = text_problem(text)
    if problem is not None:
        raise InvalidInputError(field, problem)


def _child(field: str, key: object) -> str:
    """The path of ``field``'s item ``key``; a key that is not plain text is shown escaped
    (``ascii``), so that a message naming it can itself be stored and sent."""
    if isinstance(key, int):
        return f"{field}[{key}]"
    text = str(key)
    if len(text) > 64:
        return f"{field}[{text[:64]!a}...]"
    if text.isidentifier() and text.isascii():
        return f"{field}.{text}"
    return f"{field}[{text!r}]" if text_problem(text) is None else f"{field}[{text!a}]"


def check_json(value: Any, field: str, limits: JsonLimits = DEFAULT_LIMITS) -> None:
    """Refuse ``value`` unless it is bounded JSON of text, finite numbers and 64-bit integers.

    Accepts what ``json.loads`` produces (dicts with string keys, lists, str, int, float,
    bool, None) and tuples; anything else is refused as not JSON.
    """
    stack: list[tuple[Any, str, int]] = [(value, field, 0)]
    nodes = 0
    while stack:
        current, where, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            raise InvalidInputError(field, f"holds more than {limits.max_nodes} values")
        if current is None or isinstance(current, bool):
            continue
        if isinstance(current, str):
            check_text(current, where)
        elif isinstance(current, int):
            if not -_INT64 <= current < _INT64:
                raise InvalidInputError(where, "is an integer beyond 64 bits")
        elif isinstance(current, float):
            if not math.isfinite(current):
                raise InvalidInputError(where, f"is {current!r}, not a finite number")
        elif isinstance(current, Mapping | list | tuple):
            if depth >= limits.max_depth:
                raise InvalidInputError(
                    where, f"is nested more than {limits.max_depth} levels deep"
                )
            if isinstance(current, Mapping):
                for key, item in current.items():
                    if not isinstance(key, str):
                        raise InvalidInputError(where, "has a key that is not a string")
                    problem = text_problem(key)
                    if problem is not None:
                        raise InvalidInputError(f"{_child(where, key)} (a key)", problem)
                    stack.append((item, _child(where, key), depth + 1))
            else:
                stack.extend((item, _child(where, i), depth + 1) for i, item in enumerate(current))
        else:
            raise InvalidInputError(where, f"is a {type(current).__name__}, not a JSON value")
