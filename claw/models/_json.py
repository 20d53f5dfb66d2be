"""Immutable JSON values, so that messages holding JSON stay hashable values.

Tool-call arguments and tool parameter schemas are arbitrary JSON. A plain
``dict`` inside a frozen attrs instance would make the instance unhashable and
mutable through the back door, so JSON objects are deep-frozen into
:class:`JsonObject` (a read-only mapping) and arrays into tuples.

Equality and hashing go through the canonical JSON text (sorted keys, no
spaces), which keeps them consistent with each other: ``1``, ``1.0`` and
``True`` are different JSON values and compare unequal here, although Python
considers them equal.

A value is checked once, before it is frozen, by the rules every entry point applies
(:mod:`claw._input`): text that is text (no lone surrogate, no NUL), finite numbers,
64-bit integers, at most 32 levels of nesting. So a frozen value can always be stored,
encoded and sent, and a model's tool call that breaks a rule is refused where it
arrives, naming the field, rather than failing a transcript write later.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any, TypeAlias, final

from .._input import InvalidInputError, check_json
from ._errors import MessageFormatError

JSON: TypeAlias = "bool | int | float | str | tuple[JSON, ...] | JsonObject | None"
"""A frozen JSON value: arrays are tuples, objects are :class:`JsonObject`."""


def check_json_value(value: object, path: str = "$") -> None:
    """Raise :class:`MessageFormatError` naming the field unless ``value`` is acceptable
    JSON (see :func:`claw._input.check_json`)."""
    try:
        check_json(value, path)
    except InvalidInputError as exc:
        raise MessageFormatError(exc.field, exc.problem) from None


def freeze_json(value: object, path: str = "$") -> JSON:
    """Validate a JSON-shaped Python value and return its frozen form.

    Accepts ``None``, ``bool``, ``int`` (64-bit), finite ``float``, ``str`` (valid
    Unicode without NUL), lists and tuples, and mappings with ``str`` keys, at most 32
    levels deep. Raises :class:`MessageFormatError` naming the path of the first bad
    value.
    """
    check_json_value(value, path)
    return _freeze(value, path)


def _freeze(value: object, path: str) -> JSON:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise MessageFormatError(path, f"{value!r} is not a JSON number")
        return value
    if isinstance(value, JsonObject):
        return value
    if isinstance(value, Mapping):
        return JsonObject._build(value, path)
    if isinstance(value, list | tuple):
        return tuple(_freeze(item, f"{path}[{i}]") for i, item in enumerate(value))
    raise MessageFormatError(path, f"{type(value).__name__} is not a JSON value")


def thaw_json(value: JSON) -> Any:
    """Return the plain ``dict``/``list`` form of a frozen JSON value (for ``json.dumps``)."""
    if isinstance(value, JsonObject):
        return value.thaw()
    if isinstance(value, tuple):
        return [thaw_json(item) for item in value]
    return value


@final
class JsonObject(Mapping[str, JSON]):
    """A deep-frozen JSON object: a read-only, hashable mapping of ``str`` to JSON."""

    __slots__ = ("_canonical", "_items")

    _items: dict[str, JSON]
    _canonical: str

    def __init__(self, value: Mapping[str, object] | None = None) -> None:
        frozen = JsonObject._from_mapping(value or {}, "$")
        self._items = frozen._items
        self._canonical = frozen._canonical

    @classmethod
    def _from_mapping(cls, value: Mapping[Any, object], path: str) -> JsonObject:
        check_json_value(value, path)
        return cls._build(value, path)

    @classmethod
    def _build(cls, value: Mapping[Any, object], path: str) -> JsonObject:
        items: dict[str, JSON] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise MessageFormatError(path, f"object key {key!r} is not a string")
            items[key] = _freeze(item, f"{path}.{key}")
        self = object.__new__(cls)
        self._items = items
        self._canonical = json.dumps(
            {k: thaw_json(v) for k, v in items.items()},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )
        return self

    @classmethod
    def coerce(cls, value: Mapping[str, object]) -> JsonObject:
        """Freeze ``value`` unless it already is a :class:`JsonObject` (an attrs converter)."""
        if isinstance(value, JsonObject):
            return value
        if not isinstance(value, Mapping):
            raise MessageFormatError("$", f"expected a JSON object, got {type(value).__name__}")
        return cls._from_mapping(value, "$")

    @classmethod
    def from_json_text(cls, text: str) -> JsonObject:
        """Parse JSON text that must hold an object."""
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MessageFormatError("$", f"invalid JSON text: {exc}") from exc
        if not isinstance(value, dict):
            raise MessageFormatError("$", f"expected a JSON object, got {type(value).__name__}")
        return cls._from_mapping(value, "$")

    def to_json_text(self) -> str:
        """The canonical JSON text: sorted keys, compact separators, UTF-8 kept as is."""
        return self._canonical

    def thaw(self) -> dict[str, Any]:
        """A fresh, mutable ``dict`` copy with lists for arrays."""
        return {k: thaw_json(v) for k, v in self._items.items()}

    def __getitem__(self, key: str) -> JSON:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._canonical)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, JsonObject):
            return self._canonical == other._canonical
        if isinstance(other, Mapping):
            try:
                return self._canonical == JsonObject._from_mapping(other, "$")._canonical
            except MessageFormatError:
                return False
        return NotImplemented

    def __repr__(self) -> str:
        return f"JsonObject({self._canonical})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (JsonObject.from_json_text, (self._canonical,))
