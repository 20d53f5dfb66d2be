"""What the checkout itself promises: no link out of it, one way to install an extra."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import claw._cli._mcp
from claw._extras import install_hint

ROOT = Path(__file__).parent.parent
# pip's form for a registry package: it fails, trio-claw is on no registry.
REGISTRY_INSTALL = re.compile(r"pip install ['\"]?trio-claw\[")


def tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return out.splitlines()


def test_no_tracked_link_leads_outside_the_checkout() -> None:
    links = [line.split("\t", 1)[1] for line in tracked() if line.startswith("120000 ")]
    outside = [
        path
        for path in links
        if not (ROOT / path).resolve().is_relative_to(ROOT.resolve())
        or (ROOT / path).readlink().is_absolute()
    ]
    assert outside == []


def test_every_install_hint_says_how_to_install_an_extra_that_works() -> None:
    offenders = []
    for line in tracked():
        path = line.split("\t", 1)[1]
        if not path.endswith((".md", ".py", ".toml", ".ipynb", "Makefile")):
            continue
        text = (ROOT / path).read_text(encoding="utf-8")
        for number, row in enumerate(text.splitlines(), 1):
            # The README and claw/_extras.py say that this form fails; nothing may offer it.
            if REGISTRY_INSTALL.search(row) and "not published" not in row:
                offenders.append(f"{path}:{number}: {row.strip()}")
    assert offenders == []
    hint = install_hint("mcp")
    assert "make extras EXTRAS=mcp" in hint and "'/path/to/claw[mcp]'" in hint
    source = Path(claw._cli._mcp.__file__).read_text(encoding="utf-8")
    assert "install_hint('mcp')" in source
