"""Pins the public surface of claw.gateway."""

from __future__ import annotations

import types

import pytest

import claw
import claw.gateway


def _public() -> dict[str, object]:
    return {
        name: obj
        for name, obj in vars(claw.gateway).items()
        if not name.startswith("_") and not isinstance(obj, types.ModuleType)
    }


def test_every_public_object_is_exported_under_one_name() -> None:
    seen: dict[int, str] = {}
    for name, obj in _public().items():
        if isinstance(obj, str | int | float | tuple | frozenset):
            continue
        assert id(obj) not in seen, f"{name} and {seen.get(id(obj))} are the same object"
        seen[id(obj)] = name


def test_public_classes_report_the_public_module() -> None:
    for name, obj in _public().items():
        if isinstance(obj, type):
            assert obj.__module__ == "claw.gateway", name


@pytest.mark.parametrize(
    "cls",
    [claw.gateway.Gateway, claw.gateway.GatewayClient, claw.gateway.GatewayRequestContext],
    ids=lambda c: c.__name__,
)
def test_public_concrete_classes_are_final(cls: type) -> None:
    with pytest.raises(TypeError):
        type("Sub", (cls,), {})


@pytest.mark.parametrize(
    "cls",
    [claw.gateway.GatewayClient, claw.gateway.GatewayRequestContext],
    ids=lambda c: c.__name__,
)
def test_objects_only_the_gateway_creates_have_no_public_constructor(cls: type) -> None:
    with pytest.raises(TypeError, match="no public constructor"):
        cls()


def test_errors_are_rooted_in_claw_error() -> None:
    errors = [
        obj
        for obj in _public().values()
        if isinstance(obj, type) and issubclass(obj, BaseException)
    ]
    assert len(errors) == 3
    for error in errors:
        assert issubclass(error, claw.ClawError), error


def test_the_gateway_page_documents_every_method_parameter_limit_and_code() -> None:
    from pathlib import Path

    from claw.gateway import ERROR_CODES, _memory

    page = (Path(__file__).parents[3] / "docs" / "gateway.md").read_text(encoding="utf-8")
    fields = (
        _memory._SEARCH_V2_FIELDS
        | _memory._GET_FIELDS
        | _memory._REFERENCE_FIELDS
        | _memory._STATUS_FIELDS
    )
    missing = [f for f in sorted(fields) if f"`{f}`" not in page]
    missing += [c for c in sorted(ERROR_CODES) if f"`{c}`" not in page]
    missing += [c for c in ("1001", "1008", "1009", "1013") if c not in page]
    for key in ("max_message_bytes", "max_in_flight", "idle_timeout", "max_connections"):
        if f"`gateway.{key}`" not in page:
            missing.append(key)
    for result_key in ("nextCursor", "totalLines", "truncated", "searchMode", "not_found"):
        if result_key not in page:
            missing.append(result_key)
    assert missing == []
