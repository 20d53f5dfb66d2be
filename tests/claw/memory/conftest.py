"""Fixtures: hosts whose memory slot is a recording native provider or a legacy runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import attrs
import pytest

import claw
from claw.memory import (
    LegacyReadResult,
    LegacySearchResult,
    MemoryPluginCapability,
    Source,
)
from claw_testing import MemoryRecord, RecordingMemoryProvider


def memory_config(host_config: claw.HostConfig, memory: str) -> claw.HostConfig:
    return attrs.evolve(
        host_config,
        plugins=attrs.evolve(host_config.plugins, slots=claw.SlotsConfig(memory=memory)),
    )


RECORDS = [
    MemoryRecord(id="shared-1", text="the deploy key rotates every friday"),
    MemoryRecord(
        id="owner-1", text="owner secret: friday deploy pin 4411", visibility="owner-private"
    ),
    MemoryRecord(
        id="grp-1",
        text="group agreed the friday deploy moves to monday",
        visibility="conversation",
        conversation_key="grp:1",
    ),
    MemoryRecord(
        id="sess-main",
        text="transcript: we talked about the friday deploy",
        source="sessions",
        session_key="dm:alice",
    ),
    MemoryRecord(
        id="sess-other",
        text="transcript of another agent about the friday deploy",
        source="sessions",
        agent_id="other",
        session_key="dm:zed",
    ),
    MemoryRecord(
        id="proj-1",
        text="project apollo uses the friday deploy train",
        project_key="apollo",
        trigger="deploy",
    ),
]


@pytest.fixture
def provider() -> RecordingMemoryProvider:
    return RecordingMemoryProvider(provider_id="recording-memory", records=list(RECORDS))


@pytest.fixture
async def native_host(
    host_config: claw.HostConfig, provider: RecordingMemoryProvider
) -> AsyncIterator[claw.Host]:
    plugin = claw.Plugin(
        id="recording-memory",
        register=lambda api: api.register_memory_capability(provider.capability()),
    )
    async with claw.open_host(
        memory_config(host_config, "recording-memory"), plugins=[plugin]
    ) as host:
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        await host.sessions.create("grp:1", agent_id="main", chat_type="group")
        yield host


@attrs.define
class FileManager:
    """A legacy, file-shaped search manager over an in-memory set of files."""

    files: Mapping[str, str]
    calls: list[str]
    status_extra: Mapping[str, Any] = attrs.field(factory=dict)

    async def search(
        self,
        query: str,
        *,
        max_results: int,
        min_score: float | None,
        sources: tuple[Source, ...],
        session_key: str | None,
    ) -> Sequence[LegacySearchResult]:
        self.calls.append("search")
        out = []
        for path, text in sorted(self.files.items()):
            source: Source = "sessions" if path.startswith("sessions/") else "memory"
            if source not in sources:
                continue
            for number, line in enumerate(text.splitlines(), start=1):
                if query.lower() in line.lower():
                    out.append(
                        LegacySearchResult(
                            path=path,
                            start_line=number,
                            end_line=number,
                            score=0.9,
                            snippet=line,
                            source=source,
                            citation=f"{path}#L{number}",
                        )
                    )
        return out[:max_results]

    async def read_file(
        self, path: str, *, from_line: int | None, lines: int | None
    ) -> LegacyReadResult | None:
        self.calls.append("read_file")
        if path not in self.files:
            return None
        all_lines = self.files[path].splitlines()
        start = (from_line or 1) - 1
        count = lines or len(all_lines)
        return LegacyReadResult(
            path=path,
            text="\n".join(all_lines[start : start + count]),
            from_line=start + 1,
            lines=count,
            total_lines=len(all_lines),
        )

    async def status(self) -> Mapping[str, Any]:
        self.calls.append("status")
        return {
            "status": "ready",
            "files": len(self.files),
            "db_path": "/var/lib/claw/index.sqlite",
            "workspace": "/home/alice/workspace",
            "model": "hash-384",
            **self.status_extra,
        }

    async def close(self) -> None:
        self.calls.append("close")


@attrs.define
class LegacyRuntime:
    manager: FileManager

    async def get_search_manager(self, *, agent_id: str, context: Any) -> FileManager:
        self.manager.calls.append(f"get_search_manager:{agent_id}")
        return self.manager


LEGACY_FILES = {
    "MEMORY.md": "# Memory\nThe deploy happens on friday.\nCoffee is at nine.",
    "sessions/dm-alice.md": "alice: the deploy moved\nagent: noted",
}


async def _no_tool(context: Any, arguments: Mapping[str, Any]) -> str:
    raise AssertionError("the legacy test tool is never dispatched")  # pragma: no cover


@pytest.fixture
def legacy_manager() -> FileManager:
    return FileManager(files=dict(LEGACY_FILES), calls=[])


@pytest.fixture
async def legacy_host(
    host_config: claw.HostConfig, legacy_manager: FileManager
) -> AsyncIterator[claw.Host]:
    cap = MemoryPluginCapability(runtime=LegacyRuntime(legacy_manager))

    def register(api: claw.PluginApi) -> None:
        api.register_memory_capability(cap)
        api.register_tool(claw.Tool(name="memory_search", description="d", handler=_no_tool))

    plugin = claw.Plugin(
        id="legacy-mem",
        register=register,
        contracts=claw.PluginContracts(tools=("memory_search",)),
    )
    async with claw.open_host(memory_config(host_config, "legacy-mem"), plugins=[plugin]) as host:
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        yield host
