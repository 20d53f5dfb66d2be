"""One-call local access to a workspace's memory: ``claw.open_memory(workspace)``.

The host route to memory takes four steps (open a host, open a scope, mint an
operator's authority and caller context, open the provider handle). A program on the
workspace owner's own machine usually wants one::

    async with claw.open_memory("path/to/workspace") as mem:
        result = await mem.search("deploy window")
        added = await mem.add("The deploy window moved to Thursday 14:00 UTC")
        await mem.forget(added.reference)

:func:`open_memory` opens the host (with ``claw.toml`` of the workspace when present,
as the ``claw`` command does) and acts as a local operator with ``operator.read`` and
``operator.write``: the same authority ``claw memory ...`` uses on the same machine.
Every call still goes through the host's guard and the provider's own policy.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs

from ._capabilities import MemoryCallerContext
from ._config import HostConfig
from ._errors import ConfigError
from ._host import Host, open_host
from ._util import final
from .memory import (
    MemoryAddResult,
    MemoryForgetResult,
    MemoryGetRequest,
    MemoryGetResult,
    MemoryHealth,
    MemoryPurgeResult,
    MemoryReference,
    MemoryRemoval,
    MemoryRestoreResult,
    MemorySearchRequest,
    MemorySearchResult,
    Source,
    parse_line_fragment,
)

LOCAL_SCOPES = ("operator.read", "operator.write")
_REVISION = re.compile(r"[0-9a-fA-F]{8,64}")


def load_workspace_config(
    workspace: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
) -> HostConfig:
    """The host config of ``workspace`` (default: the current directory).

    ``config`` is a TOML file (default: ``claw.toml`` in the workspace, when present);
    an explicit ``workspace`` wins over the file's ``workspace_dir``. Errors name the
    file or the key that is wrong.
    """
    root = Path(workspace).expanduser().resolve() if workspace is not None else Path.cwd()
    if not root.is_dir():
        raise ConfigError("workspace_dir", f"{root} is not a directory", value=str(root))
    path = Path(config).expanduser() if config is not None else root / "claw.toml"
    if not path.is_file():
        if config is not None:
            raise ConfigError(str(path), "config file not found", value=str(path))
        return HostConfig(workspace_dir=root)
    loaded = HostConfig.load(path)
    if workspace is not None or (config is None and "workspace_dir" not in _top_keys(path)):
        loaded = attrs.evolve(loaded, workspace_dir=root)
    return loaded


def _top_keys(path: Path) -> set[str]:
    # HostConfig.load parsed (and validated) this file already; this only asks which
    # keys it sets, so that a missing workspace_dir means the folder it sits in.
    return set(tomllib.loads(path.read_text(encoding="utf-8")))


def parse_reference(provider_id: str, reference: str | MemoryReference) -> MemoryReference:
    """A reference from its text form: ``path``, ``path#L<a>-L<b>`` (a citation), or
    either with ``@<revision>`` after it (``MEMORY.md#L9-L9@3f9a2c1d``: the revision the
    lines had when cited, so that a forget of lines that changed since is refused)."""
    if isinstance(reference, MemoryReference):
        return reference
    cited, _, revision = reference.rpartition("@")
    if not _REVISION.fullmatch(revision):
        cited, revision = reference, ""  # no revision (an @ in a path is part of the path)
    path, _, fragment = cited.partition("#")
    if not path:
        raise ValueError(f"reference {reference!r} names no path")
    if fragment:
        parse_line_fragment(fragment)
    return MemoryReference(
        provider_id=provider_id, id=path, fragment=fragment or None, revision=revision or None
    )


@final
@attrs.define(eq=False)
class LocalMemory:
    """The memory of one workspace, for a local operator (see :func:`open_memory`)."""

    host: Host
    caller: MemoryCallerContext
    agent_id: str | None = None

    @property
    def provider_id(self) -> str:
        """The selected memory provider (``memory-core`` by default)."""
        return self.host.slots.memory_plugin or ""

    async def search(
        self,
        query: str,
        *,
        max_results: int = 6,
        min_score: float | None = None,
        sources: Iterable[Source] | None = None,
        cursor: str | None = None,
    ) -> MemorySearchResult:
        """Search memory; hits carry a reference, an excerpt, a score and a citation."""
        request = MemorySearchRequest(
            query=query,
            max_results=max_results,
            min_score=min_score,
            sources=None if sources is None else tuple(sources),
            cursor=cursor,
        )
        answer = await self.host.memory.search(self.caller, request, agent_id=self.agent_id)
        return answer.result

    async def get(
        self,
        reference: str | MemoryReference,
        *,
        from_line: int | None = None,
        lines: int | None = None,
    ) -> MemoryGetResult:
        """Read what a reference (or a path, or ``path#L<a>-L<b>``) names."""
        ref = parse_reference(self.provider_id, reference)
        request = MemoryGetRequest(reference=ref, from_line=from_line, lines=lines)
        return (await self.host.memory.get(self.caller, request, agent_id=self.agent_id)).result

    async def add(
        self, text: str, *, path: str | None = None, section: str | None = None
    ) -> MemoryAddResult:
        """Write a memory (Memory Core: appended, stamped, to today's note by default)."""
        return await self.host.memory.add(
            self.caller, text, path=path, section=section, agent_id=self.agent_id
        )

    async def forget(
        self,
        reference: str | MemoryReference,
        *,
        dry_run: bool = False,
        whole_range: bool = False,
    ) -> MemoryForgetResult:
        """Forget what a reference names: the one entry its lines lie in (``whole_range``:
        every line it names, several entries included), or a whole source's chunks. The
        result's ``removal_id`` undoes it (:meth:`restore`)."""
        ref = parse_reference(self.provider_id, reference)
        return await self.host.memory.forget(
            self.caller, ref, dry_run=dry_run, agent_id=self.agent_id, whole_range=whole_range
        )

    async def restore(self, removal_id: str, *, dry_run: bool = False) -> MemoryRestoreResult:
        """Put back what a forget removed (in place when unambiguous, else appended under
        a marked heading; never over anything)."""
        return await self.host.memory.restore(
            self.caller, removal_id, dry_run=dry_run, agent_id=self.agent_id
        )

    async def purge(
        self,
        *,
        text: str | None = None,
        reference: str | MemoryReference | None = None,
        removal_id: str | None = None,
        whole_range: bool = False,
        dry_run: bool = False,
    ) -> MemoryPurgeResult:
        """Delete memory for good (see ``host.memory.purge``); needs ``operator.admin``,
        which :func:`open_memory` grants only when asked for in ``scopes``."""
        ref = None if reference is None else parse_reference(self.provider_id, reference)
        return await self.host.memory.purge(
            self.caller,
            text=text,
            reference=ref,
            removal_id=removal_id,
            whole_range=whole_range,
            dry_run=dry_run,
            agent_id=self.agent_id,
        )

    async def removals(self, *, limit: int = 50) -> tuple[MemoryRemoval, ...]:
        """The most recent removals, newest first, with what became of each."""
        return await self.host.memory.removals(self.caller, limit=limit, agent_id=self.agent_id)

    async def status(self) -> MemoryHealth:
        """The provider's health (index size, embedder, generation)."""
        return (await self.host.memory.status(self.caller, agent_id=self.agent_id)).result


@asynccontextmanager
async def open_memory(
    workspace: str | os.PathLike[str] | HostConfig | None = None,
    *,
    config: str | os.PathLike[str] | None = None,
    agent_id: str | None = None,
    scopes: Iterable[str] = LOCAL_SCOPES,
) -> AsyncIterator[LocalMemory]:
    """Open the memory of ``workspace`` (a directory, or a :class:`HostConfig`).

    The host lives for the ``async with`` block; ``scopes`` are the local operator's
    (pass ``("operator.read",)`` for a read-only handle, and add ``"operator.admin"``
    to :meth:`LocalMemory.purge`).
    """
    host_config = (
        workspace if isinstance(workspace, HostConfig) else load_workspace_config(workspace, config)
    )
    async with (
        open_host(host_config) as host,
        operator_memory(host, scopes=scopes, agent_id=agent_id) as memory,
    ):
        yield memory


@asynccontextmanager
async def operator_memory(
    host: Host, *, scopes: Iterable[str] = LOCAL_SCOPES, agent_id: str | None = None
) -> AsyncIterator[LocalMemory]:
    """A local operator's memory on an open ``host``, for the life of the block.

    The operator's capabilities are minted in a scope of their own and revoked when the
    block exits; the host stays open.
    """
    async with host.open_scope("local-memory") as scope:
        caller = scope.mint_caller_context(
            scope.mint_operator_authority(scopes, connection_id="local")
        )
        yield LocalMemory(host=host, caller=caller, agent_id=agent_id)
