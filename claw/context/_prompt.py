"""The per-run memory prompt snapshot and ``build_memory_system_prompt_addition``.

Before a non-legacy engine's ``assemble()`` the host awaits the selected memory
plugin's async prompt preparation and freezes the result into a
:class:`MemoryPromptSnapshot` for that run. ``build_memory_system_prompt_addition``
is synchronous: it reads that snapshot, and only while the host is running
``assemble()`` for the run (a context variable set around the call). Outside it
raises, and a tool or citation context other than the one ``assemble()`` received is
refused, so a snapshot can never cross a run boundary.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import attrs

from .._errors import ContractError


@attrs.frozen
class MemoryPromptSnapshot:
    """The immutable memory prompt context of one run.

    ``guidance`` holds the lines the memory plugin's prompt preparation returned
    (already sanitised by the plugin); ``search_tool`` and ``get_tool`` name the memory
    tools the prompt may point the model at.
    """

    session_key: str
    available_tools: frozenset[str]
    citations_mode: str
    guidance: tuple[str, ...] = ()
    search_tool: str = "memory_search"
    get_tool: str = "memory_get"


_ACTIVE: ContextVar[MemoryPromptSnapshot | None] = ContextVar("claw_memory_prompt", default=None)


@contextmanager
def active_prompt_snapshot(snapshot: MemoryPromptSnapshot) -> Iterator[None]:
    """Make ``snapshot`` readable for the duration of one ``assemble()`` call (host use)."""
    token = _ACTIVE.set(snapshot)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def build_memory_system_prompt_addition(
    *,
    available_tools: Iterable[str],
    citations_mode: str | None,
    agent_session_key: str | None,
) -> str:
    """The memory section of the system prompt for the run whose ``assemble()`` is active.

    Pass the ``available_tools``, ``citations_mode`` and session key that ``assemble()``
    received, unchanged. Returns ``""`` when the run has no memory tools and no guidance.
    """
    snapshot = _ACTIVE.get()
    if snapshot is None:
        raise ContractError(
            "build_memory_system_prompt_addition() reads the run's memory snapshot and is "
            "only available while the host runs the engine's assemble()"
        )
    tools = frozenset(available_tools)
    if (
        agent_session_key != snapshot.session_key
        or tools != snapshot.available_tools
        or (citations_mode or "auto") != snapshot.citations_mode
    ):
        raise ContractError(
            "build_memory_system_prompt_addition() must receive the tool and citation "
            "context assemble() was given, unchanged"
        )
    lines: list[str] = []
    has_search = snapshot.search_tool in tools
    has_get = snapshot.get_tool in tools
    if has_search:
        step = f"search memory with {snapshot.search_tool}"
        if has_get:
            step += f", then read the lines you need with {snapshot.get_tool}"
        lines.append(
            "Before answering about prior work, decisions, dates, people, preferences or "
            f"todos, {step}. If memory has nothing relevant, say so."
        )
        if snapshot.citations_mode in ("on", "auto"):
            lines.append("When you rely on memory, cite it as: Source: <path>#L<line>.")
    lines.extend(snapshot.guidance)
    if not lines:
        return ""
    return "## Memory\n" + "\n".join(lines)
