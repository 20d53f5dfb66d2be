"""``claw memory add/search/forget`` with Memory Records in the memory slot (subprocesses)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def claw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "claw", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
        check=False,
    )


def test_claw_memory_add_search_and_forget_go_through_the_records_provider(
    tmp_path: Path, postgres_dsn: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "claw.toml").write_text(
        '[plugins.slots]\nmemory = "memory-records"\n\n'
        "[plugins.entries.memory-records.config]\n"
        f"dsn = {json.dumps(postgres_dsn)}\n",
        encoding="utf-8",
    )
    added = claw("memory", "add", "The boiler is serviced in March", "--workspace", str(ws))
    assert added.returncode == 0, added.stderr
    match = re.fullmatch(r"added to (rec_[0-9a-f]{32})#L1-L1", added.stdout.strip())
    assert match, added.stdout
    ref = match.group(1)
    found = claw("memory", "search", "boiler serviced", "--json", "--workspace", str(ws))
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)["hits"]
    assert [h["reference"]["id"] for h in hits] == [ref]
    partial = claw("memory", "forget", f"{ref}#L2-L3", "--workspace", str(ws))
    assert partial.returncode != 0 and "forgotten whole" in partial.stderr
    gone = claw("memory", "forget", f"{ref}#L1-L1", "--json", "--workspace", str(ws))
    assert gone.returncode == 0, gone.stderr
    assert json.loads(gone.stdout)["removedText"] == "The boiler is serviced in March"
    after = claw("memory", "search", "boiler serviced", "--json", "--workspace", str(ws))
    assert json.loads(after.stdout)["hits"] == []


def test_claw_doctor_describes_a_records_index(tmp_path: Path, postgres_dsn: str) -> None:
    """Memory Records describes its index in its own terms (no Memory Core identity):
    doctor prints them instead of failing with KeyError 'identity'."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "claw.toml").write_text(
        '[plugins.slots]\nmemory = "memory-records"\n\n'
        "[plugins.entries.memory-records.config]\n"
        f"dsn = {json.dumps(postgres_dsn)}\n",
        encoding="utf-8",
    )
    assert claw("memory", "add", "The boiler is serviced in March", "--workspace", str(ws))
    text = claw("doctor", "--workspace", str(ws))
    assert "error" not in text.stderr, text.stderr
    assert text.returncode in (0, 1), text.stderr
    assert "memory: memory-records" in text.stdout
    assert re.search(r"^index: .*records 1\b", text.stdout, re.MULTILINE), text.stdout
    as_json = claw("doctor", "--json", "--workspace", str(ws))
    assert json.loads(as_json.stdout)["index"]["records"] == 1
