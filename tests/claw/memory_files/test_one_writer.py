"""No second code path writes memory files: only :mod:`claw.memory_files` may.

Every module of ``claw``, ``claw_memory`` and ``claw_records`` is parsed, and every call
that can write or delete a file (``open`` in a writing mode, ``os.open`` with a writing
flag, ``write_text``/``write_bytes``, renames, links, truncation, temporary files,
``unlink``, ``rmtree``) is collected. The modules that have any must be exactly the
ones listed here, each with what it writes; a new write anywhere else fails this test
until someone decides (and writes down) that it never touches a workspace memory file.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("claw", "claw_memory", "claw_records")

WRITERS = {
    "claw/memory_files/_journal.py": "the workspace's memory journal (the writer's own)",
    "claw/memory_files/_writer.py": "THE writer of workspace memory files",
    "claw/state/sqlite/_owners.py": "owner lock files under <state_dir>/owners",
    "claw/state/sqlite/_session_locks.py": "session lock files under <state_dir>/session-locks",
    "claw/_demo.py": "claw init / demo: copies the sample workspace into an empty directory",
    "claw/_cli/_app.py": "stdout pointed at /dev/null after a closed pipe",
    "claw/gateway/_slots.py": "claw serve's worker-slot status under <state_dir>/gateway",
    "claw_memory/_repair.py": "sets a corrupt index aside and rebuilds it (state directory)",
    "claw_memory/_lease.py": "the index's writer-lease lock file (state directory)",
    "claw_memory/_published.py": "the published generations (state directory)",
}
# The modules that handle memory files and must never write one themselves.
MEMORY_ROUTES = (
    "claw/flush/_file_arm.py",
    "claw/flush/_coordinator.py",
    "claw_memory/_writes.py",
    "claw_memory/_tools.py",
    "claw_memory/_runtime.py",
    "claw/mcp/_tools.py",
    "claw/_local.py",
    "claw/memory/_writes.py",
)

_WRITE_MODE = set("wax+")
_MODE_CHARS = set("rwxabt+")
_WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_APPEND", "O_CREAT", "O_TRUNC"}
_ALWAYS = {
    "write_text",
    "write_bytes",
    "mkstemp",
    "NamedTemporaryFile",
    "ftruncate",
    "truncate",
    "link",
    "symlink",
    "copyfile",
    "copy",
    "copy2",
    "copytree",
    "move",
    "rmtree",
    "unlink",
}


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _mode(call: ast.Call, position: int) -> str | None:
    for kw in call.keywords:
        if kw.arg == "mode" and isinstance(kw.value, ast.Constant):
            return str(kw.value.value)
    if len(call.args) > position and isinstance(call.args[position], ast.Constant):
        return str(call.args[position].value)  # type: ignore[attr-defined]
    return None


def writes_in(path: Path) -> list[tuple[int, str]]:
    """The calls in ``path`` that can write a file: ``(line, what)``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        receiver = _name(node.func.value) if isinstance(node.func, ast.Attribute) else ""
        if name in _ALWAYS and (
            name not in ("copy", "move", "link") or receiver in ("shutil", "os")
        ):
            found.append((node.lineno, name))
        elif name in ("replace", "rename") and len(node.args) == 1 and not node.keywords:
            found.append((node.lineno, name))  # Path.replace/rename (str.replace takes two)
        elif name in ("replace", "rename") and receiver == "os":
            found.append((node.lineno, f"os.{name}"))
        elif name == "open" and receiver == "os":
            flags = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            if flags & _WRITE_FLAGS:
                found.append((node.lineno, "os.open for writing"))
        elif name in ("open", "fdopen"):
            mode = _mode(node, 1 if name == "fdopen" or receiver == "" else 0)
            # A mode is made of mode letters (``scopes.open("a-name")`` opens no file).
            if mode is not None and set(mode) <= _MODE_CHARS and set(mode) & _WRITE_MODE:
                found.append((node.lineno, f"open({mode!r})"))
    return found


def test_only_the_listed_modules_write_files_and_no_memory_route_does() -> None:
    writers: dict[str, list[tuple[int, str]]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found = writes_in(path)
            if found:
                writers[path.relative_to(ROOT).as_posix()] = found
    assert [m for m in MEMORY_ROUTES if m in writers] == []
    unexpected = {m: w for m, w in writers.items() if m not in WRITERS}
    assert unexpected == {}, "a new file write: route memory files through claw.memory_files"
    assert sorted(WRITERS) == sorted(writers)  # and no stale entry hides a future one


def test_the_detector_sees_each_kind_of_write(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os, shutil\n"
        "open(p, 'a')\n"
        "p.open('w')\n"
        "os.open(p, os.O_WRONLY | os.O_APPEND)\n"
        "p.write_text('x')\n"
        "tmp.replace(p)\n"
        "os.replace(a, b)\n"
        "shutil.move(a, b)\n"
        "os.fdopen(fd, 'wb')\n"
        "text.replace('a', 'b')\n"
        "open(p)\n"
        "os.open(p, os.O_RDONLY)\n"
        "scopes.open('post-compaction-refresh')\n",
        encoding="utf-8",
    )
    assert [line for line, _ in writes_in(sample)] == [2, 3, 4, 5, 6, 7, 8, 9]
