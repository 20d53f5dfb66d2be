"""Pins the public surface: every public name exported once, from the right place."""

from __future__ import annotations

import types

import pytest

import claw
import claw.aio
import claw.blocking
import claw.jupyter
import claw.plugin_sdk

PUBLIC_MODULES = [claw, claw.plugin_sdk, claw.jupyter, claw.aio, claw.blocking]


def _public(module: types.ModuleType) -> dict[str, object]:
    return {
        name: obj
        for name, obj in vars(module).items()
        if not name.startswith("_") and not isinstance(obj, types.ModuleType)
    }


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_every_public_object_is_exported_under_one_name(module: types.ModuleType) -> None:
    seen: dict[int, str] = {}
    for name, obj in _public(module).items():
        if isinstance(obj, str | int | float | tuple):
            continue
        assert id(obj) not in seen, f"{name} and {seen.get(id(obj))} are the same object"
        seen[id(obj)] = name


def test_public_classes_report_the_public_module() -> None:
    for name, obj in _public(claw).items():
        if isinstance(obj, type) and getattr(obj, "__module__", "").startswith("claw."):
            assert obj.__module__ == "claw" or not obj.__module__.startswith("claw._"), name


@pytest.mark.parametrize(
    "cls",
    [
        claw.OperatorAuthority,
        claw.SessionAuthority,
        claw.HostAuthority,
        claw.MemoryAudience,
        claw.FlushIdentity,
        claw.ConversationRecallPass,
        claw.MemoryCallerContext,
        claw.Host,
        claw.HostScope,
        claw.PluginApi,
        claw.aio.Memory,
        claw.aio.Host,
        claw.aio.Sessions,
        claw.blocking.Memory,
        claw.blocking.Host,
        claw.blocking.Sessions,
    ],
    ids=lambda c: f"{c.__module__}.{c.__name__}",
)
def test_public_concrete_classes_are_final(cls: type) -> None:
    with pytest.raises(TypeError):
        type("Sub", (cls,), {})


def test_errors_are_rooted_in_claw_error() -> None:
    for name, obj in _public(claw).items():
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert issubclass(obj, claw.ClawError), name


def test_plugin_sdk_exposes_no_minting_power() -> None:
    for name in _public(claw.plugin_sdk):
        assert name not in {"Host", "HostScope", "open_host", "CapabilityRegistry"}, name


@pytest.mark.parametrize("module", [claw.aio, claw.blocking], ids=lambda m: m.__name__)
def test_the_facades_report_their_public_module_and_have_no_public_constructor(
    module: types.ModuleType,
) -> None:
    for name in ("Memory", "Host", "Sessions"):
        cls = getattr(module, name)
        assert cls.__module__ == module.__name__
        with pytest.raises(TypeError, match="no public constructor"):
            cls()
