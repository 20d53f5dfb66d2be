"""README.md, "Installing extras", run: the wheel built from this checkout installs with
its extras into a fresh environment (the package is not on a registry, so this is how
claw reaches any other environment)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import claw

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")

pytestmark = pytest.mark.slow


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
    )
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_readme_wheel_installs_with_the_mcp_and_postgres_extras(tmp_path: Path) -> None:
    # The README's two commands, with dist/ in a temporary folder.
    assert ".venv/bin/python -m pip wheel --no-deps -w dist ." in README
    assert "pip install 'dist/trio_claw-0.1.0-py3-none-any.whl[mcp,postgres]'" in README
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", dist, ".", cwd=ROOT)
    wheels = list(dist.glob("trio_claw-*.whl"))
    assert [w.name for w in wheels] == [f"trio_claw-{claw.__version__}-py3-none-any.whl"]
    env = tmp_path / "elsewhere"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", f"{wheels[0]}[mcp,postgres]", cwd=tmp_path)
    # Installed, not borrowed from the checkout: run from elsewhere, the package's files.
    where = run(
        python,
        "-c",
        "import claw, claw.mcp, claw.state.postgres, claw_memory, mcp, psycopg, psycopg_pool; "
        "print(claw.__file__)",
        cwd=tmp_path,
    )
    assert str(env) in where.stdout and str(ROOT) not in where.stdout
    assert run(env / "bin" / "claw", "--version", cwd=tmp_path).stdout.strip() == (
        f"claw {claw.__version__}"
    )
    # The package data (the sample workspace) and the plugins' entry points came along.
    demo = run(env / "bin" / "claw", "demo", cwd=tmp_path)
    assert "From memory: - Alice prefers green tea" in demo.stdout
    assert re.search(r"claw mcp", run(env / "bin" / "claw", "mcp", "--help").stdout)
