"""Every ```python block in README.md and docs/*.md runs, so the guide never rots.

Convention: the ``python`` blocks of one page run in order in one namespace (a later
block may use what an earlier one defined). When the page defines ``async def main()``,
it is then run with ``trio.run``; a page may define several ``main`` functions, one per
block, and each is run right after its block. Snippets that are not meant to run use
another fence (``text``, ``toml``, ``sh``, ``json``).
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest
import trio

import claw
import claw_memory

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def python_blocks(path: Path) -> list[str]:
    return FENCE.findall(path.read_text(encoding="utf-8"))


def test_the_guide_has_its_pages() -> None:
    names = {p.name for p in PAGES}
    assert names >= {
        "README.md",
        "concepts.md",
        "context-engines.md",
        "memory-providers.md",
        "configuration.md",
        "gateway.md",
        "threat-model.md",
        "testing.md",
        "jupyter.md",
    }


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_python_example_of_the_page_runs(path: Path, tmp_path: Path) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{path.stem.replace('-', '_')}"}
    for number, block in enumerate(python_blocks(path), 1):
        namespace.pop("main", None)
        code = compile(block, f"{path.name} block {number}", "exec")
        exec(code, namespace)
        main = namespace.get("main")
        if main is not None:
            trio.run(main)  # type: ignore[arg-type]


def test_the_configuration_reference_names_every_key() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    sections = {
        "": claw.HostConfig,
        "plugins.": claw.PluginsConfig,
        "plugins.slots.": claw.SlotsConfig,
        "agents.defaults.": claw.AgentDefaultsConfig,
        "agents.defaults.compaction.": claw.CompactionConfig,
        "agents.defaults.compaction.memory_flush.": claw.MemoryFlushConfig,
        "models.providers.<name>.": claw.ModelProviderConfig,
        "workers.": claw.WorkersConfig,
        "gateway.": claw.GatewayConfig,
        "mcp.": claw.McpConfig,
        "state.": claw.StateConfig,
    }
    missing = [
        f"{prefix}{field.name}"
        for prefix, cls in sections.items()
        for field in attrs.fields(cls)  # type: ignore[arg-type]
        if f"`{field.name}`" not in page
    ]
    missing += [
        f"memory-core.{field.name}"
        for field in attrs.fields(claw_memory.MemoryCoreSettings)
        if f"`{field.name}`" not in page
    ]
    missing += [
        key for key in ("embedder", "embedding", "deny_sandboxed") if f"`{key}`" not in page
    ]
    assert missing == []
