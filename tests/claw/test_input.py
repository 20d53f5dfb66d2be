"""The input checks every entry point applies: text, bounded JSON, finite numbers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from claw._input import InvalidInputError, JsonLimits, check_json, check_text, text_problem


@pytest.mark.parametrize(
    ("value", "field", "says"),
    [
        ("\ud800", "params.query", "lone surrogate (U+D800 at character 0)"),
        ("ok \udfff", "params.agentId", "lone surrogate (U+DFFF at character 3)"),
        ("a\x00b", "arguments.text", "NUL (U+0000 at character 1)"),
    ],
)
def test_text_that_is_not_text_is_refused_naming_the_field(
    value: str, field: str, says: str
) -> None:
    with pytest.raises(InvalidInputError) as info:
        check_text(value, field)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ") and says in str(info.value)
    assert isinstance(info.value, ValueError)


def test_json_is_walked_to_the_field_that_is_wrong() -> None:
    value = json.loads('{"reference": {"id": "\\ud800", "providerId": "p"}, "n": [1, 2]}')
    with pytest.raises(InvalidInputError) as info:
        check_json(value, "params")
    assert info.value.field == "params.reference.id"
    with pytest.raises(InvalidInputError, match=r"params\.metadata\['a b'\]\[1\]: is nan"):
        check_json({"metadata": {"a b": [1, float("nan")]}}, "params")
    with pytest.raises(InvalidInputError, match="is inf"):
        check_json(float("inf"), "x")
    with pytest.raises(InvalidInputError, match=r"x\['\\x00'\] \(a key\): contains NUL"):
        check_json({"\x00": 1}, "x")
    with pytest.raises(InvalidInputError) as info:
        check_json({"m": {"\ud800": 1}}, "arguments")
    # The message names the key escaped, so it can itself be stored and sent.
    assert str(info.value).startswith("arguments.m['\\ud800'] (a key): contains a lone")
    str(info.value).encode("utf-8")
    with pytest.raises(InvalidInputError, match="beyond 64 bits"):
        check_json({"big": 2**64}, "x")
    with pytest.raises(InvalidInputError, match="is a set, not a JSON value"):
        check_json({"s": {1}}, "x")


def test_depth_and_size_are_bounded_without_recursion() -> None:
    deep: object = "leaf"
    for _ in range(100_000):  # far past the interpreter's recursion limit
        deep = [deep]
    with pytest.raises(InvalidInputError, match="nested more than 32 levels deep"):
        check_json(deep, "metadata")
    nine_hundred: object = {}
    for _ in range(900):
        nine_hundred = {"a": nine_hundred}
    with pytest.raises(InvalidInputError, match=r"^metadata(\.a){32}: is nested"):
        check_json(nine_hundred, "metadata")
    check_json([[["ok"]]], "x", JsonLimits(max_depth=3))
    with pytest.raises(InvalidInputError, match="more than 10 values"):
        check_json(list(range(10)), "x", JsonLimits(max_nodes=10))


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False,
    allow_infinity=False) | st.text(st.characters(blacklist_categories=("Cs",),
    blacklist_characters="\x00")),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
        children, max_size=4),
    max_leaves=20,
)


@given(_json)
def test_every_bounded_json_value_of_text_and_numbers_passes(value: object) -> None:
    check_json(value, "x")
    assert text_problem(json.dumps(value)) is None
