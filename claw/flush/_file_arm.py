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
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._plugins import RegisteredTool, Tool
from .._workers import WorkerPool
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


def create_target(target: Path) -> None:
    """Create the flush target (and its parents) if missing, without truncating it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.close(fd)


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise FlushToolError(f"no file at {path.name!r}")
    with path.open(encoding="utf-8", errors="replace") as handle:
        text = handle.read(MAX_READ_CHARS + 1)
    if len(text) > MAX_READ_CHARS:
        text = text[:MAX_READ_CHARS] + f"\n[truncated at {MAX_READ_CHARS} characters]"
    return text


def _append_text(path: Path, content: str) -> int:
    with path.open("a+", encoding="utf-8") as handle:
        handle.seek(0, os.SEEK_END)
        separator = ""
        if handle.tell() > 0:
            handle.seek(handle.tell() - 1)
            if handle.read(1) != "\n":
                separator = "\n"
        handle.write(separator + content if content.endswith("\n") else separator + content + "\n")
    return len(content)


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
    workspace_dir: Path, target: Path, relative_path: str, workers: WorkerPool
) -> RegisteredTool:
    """The file arm's ``write``: appends text to ``target`` and refuses every other path."""

    async def handler(context: Any, arguments: Mapping[str, Any]) -> str:
        path = resolve_in_workspace(workspace_dir, arguments.get("path"))
        if path != target:
            raise FlushToolError(f"write is limited to {relative_path!r} (append-only)")
        content = arguments.get("content")
        if not isinstance(content, str) or not content.strip():
            raise FlushToolError("content must be non-empty text to append")
        context.caller.assert_current()
        written = await workers.run_sync(_append_text, target, content)
        return f"appended {written} characters to {relative_path}"

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
