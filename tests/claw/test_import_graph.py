"""The modules of ``claw`` import each other without a cycle.

The graph is read from the source with :mod:`ast`: one edge per module a module names in
an ``import`` or ``from ... import`` (those under ``if TYPE_CHECKING:`` included, since a
cycle there is still a knot a reader has to untie). ``from package import name`` is an
edge to the submodule ``package.name`` when there is one, else to the package. A cycle
means two parts that cannot be understood, built or tested one without the other; the
host's parts are built by ``open_host`` and receive their collaborators instead.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import claw

ROOT = Path(claw.__file__).resolve().parent


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def _imported(
    name: str, path: Path, is_package: bool, modules: dict[str, tuple[Path, bool]]
) -> Iterator[str]:
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    yield f"{target}.{alias.name}"
                elif target in modules:
                    yield target


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """``module -> the claw modules it imports`` for every module under ``root``."""
    modules = _modules(root)
    return {
        name: set(_imported(name, path, is_package, modules)) - {name}
        for name, (path, is_package) in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a deep graph cannot hit the recursion limit.
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_graph_is_read_from_the_source() -> None:
    """The walk sees the edges it should (it is not vacuous)."""
    graph = import_graph()
    assert "claw._host" in graph and len(graph) > 100
    assert "claw._capabilities" in graph["claw._runs"]
    assert "claw.turns._runner" in graph["claw._host"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_claw_package_has_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert found == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_nothing_the_host_imports_imports_the_host() -> None:
    """The host builds its parts; no part reaches back for it."""
    graph = import_graph()
    reached: set[str] = set()
    todo = list(graph["claw._host"])
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(graph[module])
    assert "claw._host" not in reached
