"""Conversation messages, tool calls and tool specs: frozen values with a JSON form.

These are what a :class:`~claw.models.Model` reads and returns, what the
transcript stores and what crosses the wire. They are frozen attrs classes
holding only immutable data (strings, tuples, :class:`JsonObject`), so a
message can be hashed, shared between tasks and kept in a snapshot without
anyone mutating it underneath.

The JSON form (``to_dict`` / ``from_dict``) uses camelCase keys like the rest
of claw's wire shapes and a ``role`` discriminator on messages. ``from_dict``
validates explicitly: a missing, mistyped or unknown key raises
:class:`MessageFormatError` naming the field path, never a ``KeyError`` from
deep inside.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, TypeAlias

import attrs

from .._input import text_problem
from ._errors import MessageFormatError
from ._json import JsonObject, freeze_json

_str = attrs.validators.instance_of(str)


def _non_negative_int(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative int, got {value!r}")


def _non_empty_str(_inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{attribute.name} must be a non-empty string, got {value!r}")


@attrs.frozen
class Usage:
    """Token counts reported for one model call."""

    input_tokens: int = attrs.field(validator=_non_negative_int)
    output_tokens: int = attrs.field(validator=_non_negative_int)

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"inputTokens": ..., "outputTokens": ...}``."""
        return {"inputTokens": self.input_tokens, "outputTokens": self.output_tokens}

    @classmethod
    def from_dict(cls, data: object, *, path: str = "") -> Usage:
        """Parse the JSON form; raises :class:`MessageFormatError` naming the bad field."""
        r = _Reader(data, path, ("inputTokens", "outputTokens"))
        return cls(input_tokens=r.count("inputTokens"), output_tokens=r.count("outputTokens"))


def _arguments(value: Mapping[str, object]) -> JsonObject:
    return _coerce_object(value, "arguments")


def _parameters(value: Mapping[str, object]) -> JsonObject:
    return _coerce_object(value, "parameters")


def _coerce_object(value: Mapping[str, object], name: str) -> JsonObject:
    if isinstance(value, JsonObject):
        return value
    if not isinstance(value, Mapping):
        raise MessageFormatError(name, f"expected a JSON object, got {type(value).__name__}")
    frozen = freeze_json(value, name)
    assert isinstance(frozen, JsonObject)
    return frozen


@attrs.frozen
class ToolCall:
    """One tool invocation requested by the model.

    ``arguments`` is deep-frozen (see :class:`JsonObject`): arrays read back as
    tuples. Use ``arguments.thaw()`` for a mutable ``dict``.

    ``invalid_arguments`` is set (and ``arguments`` empty) when the model sent arguments
    claw does not accept (not JSON, NaN, a lone surrogate, nesting beyond 32 levels; see
    :meth:`from_model`): it says what was wrong, the turn goes on, and the tool is not
    run; the model is told why in the tool's result.
    """

    id: str = attrs.field(validator=_non_empty_str)
    name: str = attrs.field(validator=_non_empty_str)
    arguments: JsonObject = attrs.field(factory=JsonObject, converter=_arguments)
    invalid_arguments: str | None = attrs.field(default=None, kw_only=True)

    @classmethod
    def from_model(
        cls, *, id: str, name: str, arguments: object, invalid: str | None = None
    ) -> ToolCall:
        """A tool call as a model sent it, whatever its arguments: arguments that are not
        acceptable JSON (or ``invalid``, a reason the caller found already) are not kept
        (they could not be stored or sent again) but named in ``invalid_arguments``.
        A name or id that is not text is kept with its bad characters escaped."""
        id, name = _as_text(id) or "call", _as_text(name) or "?"
        if invalid is None:
            try:
                return cls(id=id, name=name, arguments=arguments)  # type: ignore[arg-type]
            except MessageFormatError as exc:
                invalid = str(exc)
        return cls(id=id, name=name, arguments=JsonObject(), invalid_arguments=invalid)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"id", "name", "arguments"}`` (and ``"invalidArguments"``)."""
        data: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments.thaw(),
        }
        if self.invalid_arguments is not None:
            data["invalidArguments"] = self.invalid_arguments
        return data

    @classmethod
    def from_dict(cls, data: object, *, path: str = "") -> ToolCall:
        """Parse the JSON form; raises :class:`MessageFormatError` naming the bad field."""
        r = _Reader(data, path, ("id", "name", "arguments", "invalidArguments"))
        invalid = r.optional("invalidArguments")
        if invalid is not None and not isinstance(invalid, str):
            raise MessageFormatError(r.path("invalidArguments"), "expected a string")
        return cls(
            id=r.text("id"),
            name=r.text("name"),
            arguments=r.json_object("arguments"),
            invalid_arguments=invalid,
        )


def _as_text(value: object) -> str:
    """``value`` as storable text: a lone surrogate or NUL escaped as ``\\udXXX``."""
    text = value if isinstance(value, str) else str(value)
    if text_problem(text) is None:
        return text
    escaped = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return escaped.replace("\x00", "\\x00")


@attrs.frozen
class ToolSpec:
    """A tool offered to the model: its name, what it does, its JSON-schema parameters."""

    name: str = attrs.field(validator=_non_empty_str)
    description: str = attrs.field(validator=_str)
    parameters: JsonObject = attrs.field(
        factory=lambda: JsonObject({"type": "object", "properties": {}}),
        converter=_parameters,
    )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"name", "description", "parameters"}``."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters.thaw(),
        }

    @classmethod
    def from_dict(cls, data: object, *, path: str = "") -> ToolSpec:
        """Parse the JSON form; raises :class:`MessageFormatError` naming the bad field."""
        r = _Reader(data, path, ("name", "description", "parameters"))
        return cls(
            name=r.text("name"),
            description=r.text("description", allow_empty=True),
            parameters=r.json_object("parameters"),
        )


@attrs.frozen
class SystemMessage:
    """An instruction from the host or operator, inside the conversation."""

    ROLE: ClassVar[str] = "system"
    text: str = attrs.field(validator=_str)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"role": "system", "text"}``."""
        return {"role": self.ROLE, "text": self.text}

    @classmethod
    def from_dict(cls, data: object, *, path: str = "") -> SystemMessage:
        """Parse the JSON form; raises :class:`MessageFormatError` naming the bad field."""
        r = _Reader(data, path, ("role", "text"), role=cls.ROLE)
        return cls(text=r.text("text", allow_empty=True))


def _optional_sender(_inst: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(f"{attribute.name} must be a non-empty string or None, got {value!r}")


@attrs.frozen
class UserMessage:
    """What the user said; ``sender`` is the display name the channel gave, if any.

    The sender name is for transcripts and retrieval ("who said what"); it grants
    nothing: whether a sender is the trusted owner is asserted separately by the
    channel layer when it admits the turn.
    """

    ROLE: ClassVar[str] = "user"
    text: str = attrs.field(validator=_str)
    sender: str | None = attrs.field(default=None, validator=_optional_sender)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"role": "user", "text", "sender"?}``."""
        out: dict[str, Any] = {"role": self.ROLE, "text": self.text}
        if self.sender is not None:
            out["sender"] = self.sender
        return out

    @classmethod
    def from_dict(cls, data: object, *, path: str = "") -> UserMessage:
        """Parse the JSON form; raises :class:`MessageFormatError` naming the bad field."""
        r = _Reader(data, path, ("role", "text", "sender"), role=cls.ROLE)
        sender = r.optional("sender")
        if sender is not None and (not isinstance(sender, str) or not sender):
            raise MessageFormatError(r.path("sender"), "expected a non-empty string")
        return cls(text=r.text("text", allow_empty=True), sender=sender)


def _tool_calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    calls = tuple(value)
    for i, call in enumerate(calls):
        if not isinstance(call, ToolCall):
            raise TypeError(f"tool_calls[{i}] must be a ToolCall, got {type(call).__name__}")
    return calls


def _optional_usage(
    _inst: object, _attribute: attrs.Attribute[Usage | None], value: object
) -> None:
    if value is not None and not isinstance(value, Usage):
        raise TypeError(f"usage must be a Usage or None, got {type(value).__name__}")


@attrs.frozen
class AssistantMessage:
    """The model's answer: text, and possibly tool calls to run before it continues."""

    ROLE: ClassVar[str] = "assistant"
    text: str = attrs.field(validator=_str)
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tool_calls)
    usage: Usage | None = attrs.field(default=None, validator=_optional_usage)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"role": "assistant", "text", "toolCalls", "usage"}``."""
        return {
            "role": self.ROLE,
            "text": self.text,
            "toolCalls": [call.to_dict() for call in self.tool_calls],
            "usage": None if self.usage is None else self.usage.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: object, *, path: str = "") -> AssistantMessage:
        """Parse the JSON form; ``toolCalls`` and ``usage`` may be omitted."""
        r = _Reader(data, path, ("role", "text", "toolCalls", "usage"), role=cls.ROLE)
        calls = tuple(
            ToolCall.from_dict(item, path=item_path)
            for item_path, item in r.array("toolCalls", optional=True)
        )
        usage_data = r.optional("usage")
        usage = None if usage_data is None else Usage.from_dict(usage_data, path=r.path("usage"))
        return cls(text=r.text("text", allow_empty=True), tool_calls=calls, usage=usage)


@attrs.frozen
class ToolResult:
    """The outcome of one tool call, answering the call with id ``call_id``."""

    ROLE: ClassVar[str] = "tool"
    call_id: str = attrs.field(validator=_non_empty_str)
    name: str = attrs.field(validator=_non_empty_str)
    content: str = attrs.field(validator=_str)
    is_error: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"role": "tool", "callId", "name", "content", "isError"}``."""
        return {
            "role": self.ROLE,
            "callId": self.call_id,
            "name": self.name,
            "content": self.content,
            "isError": self.is_error,
        }

    @classmethod
    def from_dict(cls, data: object, *, path: str = "") -> ToolResult:
        """Parse the JSON form; ``isError`` may be omitted (false)."""
        r = _Reader(data, path, ("role", "callId", "name", "content", "isError"), role=cls.ROLE)
        return cls(
            call_id=r.text("callId"),
            name=r.text("name"),
            content=r.text("content", allow_empty=True),
            is_error=r.flag("isError", default=False),
        )


@attrs.frozen
class CompactionSummary:
    """The summary standing in for the older conversation a compaction replaced.

    It is what a compaction transcript entry looks like among the visible
    messages; model clients render it as context, not as something the user said.
    """

    ROLE: ClassVar[str] = "summary"
    text: str = attrs.field(validator=_str)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"role": "summary", "text"}``."""
        return {"role": self.ROLE, "text": self.text}

    @classmethod
    def from_dict(cls, data: object, *, path: str = "") -> CompactionSummary:
        """Parse the JSON form; raises :class:`MessageFormatError` naming the bad field."""
        r = _Reader(data, path, ("role", "text"), role=cls.ROLE)
        return cls(text=r.text("text", allow_empty=True))


Message: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolResult | CompactionSummary
"""Anything that can appear in the message list given to a model."""

_MESSAGE_TYPES: dict[str, type[Message]] = {
    cls.ROLE: cls
    for cls in (SystemMessage, UserMessage, AssistantMessage, ToolResult, CompactionSummary)
}


def message_to_dict(message: Message) -> dict[str, Any]:
    """The JSON form of any message (dispatches on its type)."""
    if not isinstance(message, tuple(_MESSAGE_TYPES.values())):
        raise TypeError(f"not a message: {type(message).__name__}")
    return message.to_dict()


def message_from_dict(data: object, *, path: str = "") -> Message:
    """Parse any message from its JSON form, choosing the type by ``role``.

    Raises :class:`MessageFormatError` naming the bad field, including an
    unknown role.
    """
    if not isinstance(data, Mapping):
        raise MessageFormatError(path or "$", f"expected a JSON object, got {type(data).__name__}")
    role = data.get("role")
    cls = _MESSAGE_TYPES.get(role) if isinstance(role, str) else None
    if cls is None:
        known = ", ".join(sorted(_MESSAGE_TYPES))
        raise MessageFormatError(
            _join(path, "role"), f"unknown role {role!r}; expected one of {known}"
        )
    return cls.from_dict(data, path=path)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Reader:
    """Reads fields of one JSON object, raising :class:`MessageFormatError` with paths."""

    def __init__(
        self, data: object, path: str, allowed: tuple[str, ...], *, role: str | None = None
    ) -> None:
        if not isinstance(data, Mapping):
            raise MessageFormatError(
                path or "$", f"expected a JSON object, got {type(data).__name__}"
            )
        unknown = sorted(str(k) for k in data if k not in allowed)
        if unknown:
            raise MessageFormatError(
                self._join_static(path, unknown[0]),
                f"unknown field; expected only {', '.join(allowed)}",
            )
        self._data = data
        self._path = path
        if role is not None and data.get("role") != role:
            raise MessageFormatError(
                self.path("role"), f"expected {role!r}, got {data.get('role')!r}"
            )

    @staticmethod
    def _join_static(path: str, key: str) -> str:
        return _join(path, key)

    def path(self, key: str) -> str:
        return _join(self._path, key)

    def _required(self, key: str) -> object:
        if key not in self._data:
            raise MessageFormatError(self.path(key), "missing required field")
        return self._data[key]

    def optional(self, key: str) -> object:
        return self._data.get(key)

    def text(self, key: str, *, allow_empty: bool = False) -> str:
        value = self._required(key)
        if not isinstance(value, str):
            raise MessageFormatError(
                self.path(key), f"expected a string, got {type(value).__name__}"
            )
        if not value and not allow_empty:
            raise MessageFormatError(self.path(key), "must not be empty")
        return value

    def count(self, key: str) -> int:
        value = self._required(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise MessageFormatError(
                self.path(key), f"expected a non-negative integer, got {value!r}"
            )
        return value

    def flag(self, key: str, *, default: bool) -> bool:
        value = self._data.get(key, default)
        if not isinstance(value, bool):
            raise MessageFormatError(self.path(key), f"expected a boolean, got {value!r}")
        return value

    def json_object(self, key: str) -> JsonObject:
        value = self._required(key)
        if not isinstance(value, Mapping):
            raise MessageFormatError(
                self.path(key), f"expected a JSON object, got {type(value).__name__}"
            )
        frozen = freeze_json(value, self.path(key))
        assert isinstance(frozen, JsonObject)
        return frozen

    def array(self, key: str, *, optional: bool = False) -> list[tuple[str, object]]:
        value = self._data.get(key) if optional else self._required(key)
        if value is None and optional:
            return []
        if not isinstance(value, list | tuple):
            raise MessageFormatError(
                self.path(key), f"expected an array, got {type(value).__name__}"
            )
        return [(f"{self.path(key)}[{i}]", item) for i, item in enumerate(value)]
