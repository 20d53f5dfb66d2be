"""The pytest plugin that ``pip install trio-claw`` registers (entry point ``pytest11``).

It only makes the fixtures of :mod:`claw_testing._fixtures` available to every test
session; see that module (or ``docs/testing.md``) for what each fixture provides.
"""

from ._fixtures import (
    claw_config,
    claw_events,
    claw_host,
    claw_plugins,
    claw_sessions,
    gateway_client,
    hash_embedder,
    memory_workspace,
    recording_memory,
    recording_memory_host,
    scripted_model,
    socket_gateway_client,
)

__all__ = [
    "claw_config",
    "claw_events",
    "claw_host",
    "claw_plugins",
    "claw_sessions",
    "gateway_client",
    "hash_embedder",
    "memory_workspace",
    "recording_memory",
    "recording_memory_host",
    "scripted_model",
    "socket_gateway_client",
]
