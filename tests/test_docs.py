"""Every ```python block in README.md and docs/*.md runs, so the guide never rots.

Convention: the ``python`` blocks of one page run in order in one namespace (a later
block may use what an earlier one defined), exactly as written, as a reader pasting them
would run them: a block that defines ``async def main()`` runs it itself
(``trio.run(main)``, ``asyncio.run(main())``), which is checked. A block whose first line
is ``# test_<name>.py`` or ``# conftest.py`` is a file of a pytest project instead: the
page's such files are written to a folder of their own and pytest runs there, outside
this repository's configuration, as in a user's project. Snippets that are not meant to
run use another fence (``text``, ``toml``, ``sh``, ``json``). The pages a newcomer copies
from first (``MYPY_PAGES``) also pass ``mypy --strict``, block by block.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

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


FILE_BLOCK = re.compile(r"^# ((?:test_\w+|conftest)\.py)\n")
RUNS_MAIN = re.compile(r"\b(trio\.run\(main|asyncio\.run\(main\(\))")
MYPY_PAGES = ["README.md", "asyncio.md", "models.md", "testing.md"]


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_python_example_of_the_page_runs(path: Path, tmp_path: Path) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{path.stem.replace('-', '_')}"}
    files: dict[str, str] = {}
    for number, block in enumerate(python_blocks(path), 1):
        if name := FILE_BLOCK.match(block):
            files[name.group(1)] = block
            continue
        if "async def main" in block:
            assert RUNS_MAIN.search(block), (
                f"{path.name} block {number} defines main, never runs it"
            )
        exec(compile(block, f"{path.name} block {number}", "exec"), namespace)
    if files:
        project = tmp_path / "project"
        project.mkdir()
        for name, text in files.items():
            (project / name).write_text(text, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert re.search(r"\b\d+ passed\b", done.stdout), done.stdout


@pytest.mark.slow
def test_the_pages_newcomers_copy_from_pass_mypy_strict(tmp_path: Path) -> None:
    """Each block is its own module, checked as a user's code is: outside the repository."""
    files = []
    for page in MYPY_PAGES:
        path = ROOT / page if page == "README.md" else ROOT / "docs" / page
        for number, block in enumerate(python_blocks(path), 1):
            name = FILE_BLOCK.match(block)
            stem = Path(path.stem).name.replace("-", "_").lower()
            module = (
                tmp_path / stem / str(number) / (name.group(1) if name else f"{stem}_{number}.py")
            )
            module.parent.mkdir(parents=True)
            module.write_text(block, encoding="utf-8")
            files.append(str(module))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / ".cache"), *files],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


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
