import json
import pickle
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from claw.models import (
    AssistantMessage,
    CompactionSummary,
    JsonObject,
    Message,
    MessageFormatError,
    SystemMessage,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
    message_from_dict,
    message_to_dict,
)

# JSON text as claw accepts it: valid Unicode without NUL (claw._input).
json_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | json_text
)
json_keys = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(json_keys, children, max_size=4)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(json_keys, json_values, max_size=5)
names = st.text(min_size=1, max_size=20)
usages = st.builds(Usage, st.integers(0, 10**7), st.integers(0, 10**7))
tool_calls = st.builds(ToolCall, id=names, name=names, arguments=json_objects)
messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(SystemMessage, st.text()),
    st.builds(UserMessage, st.text()),
    st.builds(CompactionSummary, st.text()),
    st.builds(
        AssistantMessage,
        st.text(),
        tool_calls=st.lists(tool_calls, max_size=3).map(tuple),
        usage=st.none() | usages,
    ),
    st.builds(ToolResult, call_id=names, name=names, content=st.text(), is_error=st.booleans()),
)


@given(messages)
def test_every_message_survives_a_json_text_round_trip(message: Message) -> None:
    text = json.dumps(message_to_dict(message))
    back = message_from_dict(json.loads(text))
    assert back == message
    assert type(back) is type(message)
    assert hash(back) == hash(message)


@given(st.builds(ToolSpec, name=names, description=st.text(), parameters=json_objects))
def test_tool_spec_survives_a_json_round_trip(spec: ToolSpec) -> None:
    assert ToolSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


@given(json_objects)
def test_json_object_equality_and_hash_follow_the_canonical_json_text(
    value: dict[str, Any],
) -> None:
    frozen = JsonObject(value)
    again = JsonObject.from_json_text(json.dumps(value))
    assert frozen == again
    assert hash(frozen) == hash(again)
    assert frozen == value
    assert frozen.thaw() == json.loads(json.dumps(value))
    assert pickle.loads(pickle.dumps(frozen)) == frozen


def test_json_object_distinguishes_true_from_one_although_python_does_not() -> None:
    assert JsonObject({"a": 1}) != JsonObject({"a": True})
    assert JsonObject({"a": 1}) != JsonObject({"a": 1.0})


def test_tool_call_arguments_are_deep_frozen_and_the_message_is_hashable() -> None:
    source = {"q": "x", "tags": ["a", "b"], "opts": {"k": 1}}
    call = ToolCall(id="c1", name="search", arguments=source)
    source["q"] = "changed"
    source["tags"].append("c")  # type: ignore[attr-defined]
    assert call.arguments["q"] == "x"
    assert call.arguments["tags"] == ("a", "b")
    assert isinstance(call.arguments["opts"], JsonObject)
    message = AssistantMessage("", tool_calls=[call])
    assert isinstance(message.tool_calls, tuple)
    assert {message: 1}[AssistantMessage("", tool_calls=(call,))] == 1
    with pytest.raises(TypeError):
        call.arguments["q"] = "y"  # type: ignore[index]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        message.text = "y"  # type: ignore[misc]


def test_arguments_that_are_not_json_are_refused_naming_the_path() -> None:
    with pytest.raises(MessageFormatError, match=r"arguments\.when") as info:
        ToolCall(id="c1", name="t", arguments={"when": object()})
    assert info.value.field == "arguments.when"
    with pytest.raises(MessageFormatError, match=r"arguments\.x: is nan, not a finite number"):
        ToolCall(id="c1", name="t", arguments={"x": float("nan")})


@pytest.mark.parametrize(
    ("data", "field", "fragment"),
    [
        ({"role": "wizard", "text": "x"}, "role", "unknown role 'wizard'"),
        ({"text": "x"}, "role", "unknown role None"),
        ({"role": "user"}, "text", "missing required field"),
        ({"role": "user", "text": 3}, "text", "expected a string"),
        ({"role": "user", "text": "x", "extra": 1}, "extra", "unknown field"),
        ({"role": "tool", "callId": "", "name": "t", "content": ""}, "callId", "must not be empty"),
        (
            {"role": "tool", "callId": "c", "name": "t", "content": "", "isError": "no"},
            "isError",
            "expected a boolean",
        ),
        ({"role": "assistant", "text": "", "toolCalls": {}}, "toolCalls", "expected an array"),
        (
            {"role": "assistant", "text": "", "toolCalls": [{"id": "c", "name": "t"}]},
            "toolCalls[0].arguments",
            "missing required field",
        ),
        (
            {
                "role": "assistant",
                "text": "",
                "toolCalls": [{"id": "c", "name": "t", "arguments": {"a": {"b": float("inf")}}}],
            },
            "toolCalls[0].arguments.a.b",
            "not a finite number",
        ),
        (
            {"role": "assistant", "text": "", "usage": {"inputTokens": -1, "outputTokens": 0}},
            "usage.inputTokens",
            "non-negative integer",
        ),
        (
            {"role": "assistant", "text": "", "usage": {"inputTokens": True, "outputTokens": 0}},
            "usage.inputTokens",
            "non-negative integer",
        ),
        ("just text", "$", "expected a JSON object"),
    ],
)
def test_malformed_message_json_raises_an_error_naming_the_field(
    data: object, field: str, fragment: str
) -> None:
    with pytest.raises(MessageFormatError) as info:
        message_from_dict(data)
    assert info.value.field == field
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_type_specific_from_dict_refuses_another_role() -> None:
    with pytest.raises(MessageFormatError, match="expected 'user', got 'system'"):
        UserMessage.from_dict({"role": "system", "text": "x"})


def test_assistant_json_may_omit_tool_calls_and_usage() -> None:
    assert message_from_dict({"role": "assistant", "text": "hi"}) == AssistantMessage("hi")
    assert message_from_dict(
        {"role": "assistant", "text": "hi", "toolCalls": None, "usage": None}
    ) == AssistantMessage("hi")


def test_constructors_validate_their_fields() -> None:
    with pytest.raises(ValueError, match="input_tokens"):
        Usage(-1, 0)
    with pytest.raises(TypeError, match="tool_calls"):
        AssistantMessage("x", tool_calls=[{"id": "c"}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="name"):
        ToolSpec(name="", description="d")
    with pytest.raises(TypeError):
        UserMessage(3)  # type: ignore[arg-type]


def test_tool_spec_defaults_to_an_empty_object_schema() -> None:
    spec = ToolSpec("now", "the time")
    assert spec.parameters == {"type": "object", "properties": {}}
    assert Usage(3, 4).total_tokens == 7
