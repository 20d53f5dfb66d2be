"""Pins the public surface of claw.flush and the plan types plugins import."""

from __future__ import annotations

import types

import claw
import claw.flush
import claw.plugin_sdk

PLAN_TYPES = [
    "MemoryFlushPlan",
    "MemoryFlushFilePlanDraft",
    "MemoryFlushToolsPlan",
    "MemoryFlushPlanRequest",
    "MemoryFlushTiming",
    "FlushPlanError",
]


def test_plan_types_are_one_object_in_claw_the_sdk_and_claw_flush() -> None:
    for name in PLAN_TYPES:
        obj = getattr(claw.flush, name)
        assert getattr(claw, name) is obj, name
        assert getattr(claw.plugin_sdk, name) is obj, name


def test_flush_classes_report_the_public_module() -> None:
    for name, obj in vars(claw.flush).items():
        if name.startswith("_") or isinstance(obj, types.ModuleType):
            continue
        if isinstance(obj, type):
            assert obj.__module__ == "claw.flush", name


def test_flush_errors_are_claw_errors() -> None:
    assert issubclass(claw.flush.FlushPlanError, claw.ContractError)
    assert issubclass(claw.flush.FlushToolError, claw.ClawError)
    assert issubclass(claw.flush.FlushToolError, ValueError)
