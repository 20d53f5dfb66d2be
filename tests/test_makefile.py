"""The Makefile's two commands: ``make demo`` installs only what the demo needs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def _plan(target: str, tmp_path: Path) -> str:
    """The commands ``make`` would run for ``target`` on a fresh machine (nothing run)."""
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", target, f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        # Run from `make test` itself: the parent make's flags must not leak in.
        env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_installs_only_the_runtime_and_make_test_adds_the_dev_tools(
    tmp_path: Path,
) -> None:
    demo = _plan("demo", tmp_path)
    assert "pip install --quiet --config-settings editable_mode=compat -e ." in demo
    assert "[dev]" not in demo
    assert demo.strip().endswith("claw demo")
    test = _plan("test", tmp_path)
    assert "pip install --quiet --config-settings editable_mode=compat -e '.[dev]'" in test
    assert "ruff check" in test and "mypy" in test and "pytest" in test


@pytest.mark.slow
def test_mypy_outside_the_checkout_finds_claw_and_its_types(tmp_path: Path) -> None:
    """The editable install `make` creates is one static tools can follow (see Makefile)."""
    (tmp_path / "app.py").write_text(
        "import claw\n\n\n"
        "async def main() -> None:\n"
        "    async with claw.open_memory('.') as mem:\n"
        "        reveal_type(await mem.search('x'))\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "cache"),
            "app.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, (
        f"{done.stdout}\n(an older lenient editable install? run `make .venv/bin/.dev-installed`)"
    )
    assert 'Revealed type is "claw.memory._types.MemorySearchResult"' in done.stdout
