"""The file arm: ``read`` and an append-only ``write`` restricted to one workspace file.

Writable workspace access, decided by the host before the flush turn runs:

* a sandboxed source turn has read-only workspace access (claw has no read-write
  sandbox mount), so its file flush is skipped;
* otherwise the target, or its nearest existing ancestor directory, must pass
  ``os.access(..., W_OK)``;
* and the host must succeed in creating the target (parents included): an ``OSError``
  there (a read-only file system, a file where a directory should be, a permission the
  process lacks even as root) skips the flush with that reason.

Paths are relative to the workspace; absolute paths, ``..`` parts and symlinks that
lead outside the workspace are refused. ``read`` is read-only and bounded; the tools
arm gets it too.

``write`` goes through the host's memory-file writer (:mod:`claw.memory_files`), like
every other change to a memory file: one ``O_APPEND`` write of the whole note under the
workspace's writer lock, so a note is never lost to a concurrent rewrite of the same
file (a section insert, a forget) and the journal records it with the flush's id.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._plugins import RegisteredTool, Tool
from .._workers import WorkerPool
from ..memory_files import MemoryFiles
from ._errors import FlushPlanError, FlushToolError

HOST_TOOL_OWNER = "claw"
MAX_READ_CHARS = 64_000

_PATH_SCHEMA = {"type": "string", "description": "a path relative to the workspace"}


def resolve_in_workspace(workspace_dir: Path, relative_path: object) -> Path:
    """The absolute path of ``relative_path`` inside the workspace; raises FlushToolError."""
    if not isinstance(relative_path, str) or not relative_path.strip():
        raise FlushToolError(f"path must be a non-empty relative path, got {relative_path!r}")
    path = Path(relative_path)
    if path.is_absolute() or ".." in path.parts:
        raise FlushToolError(
            f"path {relative_path!r} must be relative to the workspace, without '..'"
        )
    root = workspace_dir.resolve()
    target = (root / path).resolve()
    if target == root or not target.is_relative_to(root):
        raise FlushToolError(f"path {relative_path!r} leads outside the workspace")
    return target


def resolve_target(workspace_dir: Path, relative_path: str) -> Path:
    """The flush target of a file plan; a bad ``relative_path`` is the plan's fault."""
    try:
        return resolve_in_workspace(workspace_dir, relative_path)
    except FlushToolError as exc:
        raise FlushPlanError(f"relative_path: {exc}") from None


def write_refusal(workspace_dir: Path, target: Path, *, sandboxed: bool) -> str | None:
    """Why the workspace is not writable for ``target``, or ``None`` (see the docstring)."""
    if sandboxed:
        return "the source turn is sandboxed, so its workspace access is read-only"
    if not workspace_dir.is_dir():
        return f"the workspace {workspace_dir} is not a directory"
    probe = target
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        return f"{probe} is not writable"
    return None


def workspace_path(workspace_dir: Path, target: Path) -> str:
    """``target`` (resolved, inside the workspace) as the workspace-relative path the
    memory-file writer takes."""
    return target.relative_to(workspace_dir.resolve()).as_posix()


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise FlushToolError(f"no file at {path.name!r}")
    with path.open(encoding="utf-8", errors="replace") as handle:
        text = handle.read(MAX_READ_CHARS + 1)
    if len(text) > MAX_READ_CHARS:
        text = text[:MAX_READ_CHARS] + f"\n[truncated at {MAX_READ_CHARS} characters]"
    return text


def read_tool(workspace_dir: Path, workers: WorkerPool) -> RegisteredTool:
    """The flush's read-only ``read`` tool over workspace files."""

    async def handler(context: Any, arguments: Mapping[str, Any]) -> str:
        path = resolve_in_workspace(workspace_dir, arguments.get("path"))
        return await workers.run_sync(_read_text, path)

    tool = Tool(
        name="read",
        description="Read a text file of the workspace (read-only).",
        handler=handler,
        parameters={"type": "object", "properties": {"path": _PATH_SCHEMA}, "required": ["path"]},
        read_only=True,
    )
    return RegisteredTool(plugin_id=HOST_TOOL_OWNER, tool=tool)


def append_only_write_tool(
    workspace_dir: Path, target: Path, relative_path: str, files: MemoryFiles, flush_id: str
) -> RegisteredTool:
    """The file arm's ``write``: appends text to ``target`` and refuses every other path.

    Each note is one append through the host's memory-file writer, recorded as written
    by this flush (``flush_id``) through the host's ``write`` tool.
    """
    vpath = workspace_path(workspace_dir, target)

    async def handler(context: Any, arguments: Mapping[str, Any]) -> str:
        path = resolve_in_workspace(workspace_dir, arguments.get("path"))
        if path != target:
            raise FlushToolError(f"write is limited to {relative_path!r} (append-only)")
        content = arguments.get("content")
        if not isinstance(content, str) or not content.strip():
            raise FlushToolError("content must be non-empty text to append")
        if "\x00" in content:
            raise FlushToolError("content must not contain NUL characters")
        context.caller.assert_current()
        await files.append(
            context.caller,
            vpath,
            content,
            flush_id=flush_id,
            tool="write",  # the host's view: recorded as HOST_TOOL_OWNER's tool
        )
        return f"appended {len(content)} characters to {relative_path}"

    tool = Tool(
        name="write",
        description=(
            f"Append text to {relative_path} (append-only; no other file can be written)."
        ),
        handler=handler,
        parameters={
            "type": "object",
            "properties": {
                "path": {"type": "string", "enum": [relative_path]},
                "content": {"type": "string", "description": "the text to append"},
            },
            "required": ["path", "content"],
        },
    )
    return RegisteredTool(plugin_id=HOST_TOOL_OWNER, tool=tool)
