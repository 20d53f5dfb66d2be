"""``examples/two_hosts``: the two-host example runs against the test server and says so.

The example is documentation (README, docs/postgres.md); running it here keeps it true.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent
EXAMPLE = ROOT / "examples" / "two_hosts" / "two_hosts.py"


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, env=env,
        timeout=600, check=False, cwd="/",
    )


def test_the_example_shares_a_memory_and_revokes_across_two_host_processes(
    postgres_dsn: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CLAW_POSTGRES_DSN"}
    done = _run("--dsn", postgres_dsn, "--keep", str(tmp_path), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    pids = lines[0].split(";")
    assert lines[0].startswith("host A: pid ") and "host B: pid " in lines[0]
    assert pids[0].split()[-1] != pids[1].split()[-1]  # two processes
    said = "\n".join(lines)
    assert "A: added memory rec_" in said
    assert "B: found A's memory after" in said
    assert "B: a run on dm:alice searches: 1 hit(s)" in said
    assert "A: reset dm:alice (revision 2)" in said
    assert "refused, StaleCapabilityError (audience revoked)" in said
    assert "B: a new run on the reset session searches: 1 hit(s)" in said
    assert lines[-1] == "ok"
    # Each host had its own workspace and state directory; the database was the one shared.
    assert {p.name for p in tmp_path.iterdir()} == {"a", "b"}


def test_the_example_without_a_dsn_names_both_ways_to_give_one() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CLAW_POSTGRES_DSN"}
    done = _run(env=env)
    assert done.returncode == 2
    assert "--dsn" in done.stderr and "CLAW_POSTGRES_DSN" in done.stderr
