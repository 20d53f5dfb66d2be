"""The claw command, run as a subprocess the way a user runs it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from claw._demo import copy_sample_workspace
from claw.gateway import open_gateway_client

from .._processes import reap

pytestmark = pytest.mark.slow


def claw(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "claw", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=False,
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return copy_sample_workspace(tmp_path / "ws")


def test_demo_runs_end_to_end() -> None:
    result = claw("demo")
    assert result.returncode == 0, result.stderr
    assert "From memory: - Alice prefers green tea" in result.stdout
    assert "I found nothing in memory that I may share" in result.stdout


def test_search_json_prints_the_v2_payload(workspace: Path) -> None:
    result = claw(
        "memory", "search", "release manager apollo", "--json", "--workspace", str(workspace)
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    payload = json.loads(lines[0])
    assert payload["version"] == 2
    assert payload["providerId"] == "memory-core"
    assert payload["hits"][0]["citation"]["path"] == "MEMORY.md"
    assert (workspace / ".claw").is_dir()


def test_search_table_defaults_to_the_current_directory(workspace: Path) -> None:
    result = claw("memory", "search", "storage budget", cwd=workspace)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^ 1  \d\.\d{3}  memory/2026-11-30\.md#L3-L3", result.stdout, re.MULTILINE)


def test_index_status_get_and_forget(workspace: Path) -> None:
    index = claw("memory", "index", "--json", "--workspace", str(workspace))
    assert index.returncode == 0, index.stderr
    first = json.loads(index.stdout)
    # A first index reports what it indexed (the work is not hidden in the open).
    assert "memory/2026-11-28.md" in first["indexed"] and first["chunksAdded"] > 0
    again = json.loads(claw("memory", "index", "--json", "--workspace", str(workspace)).stdout)
    assert again["indexed"] == [] and again["chunksAdded"] == 0
    status = json.loads(claw("memory", "status", "--json", "--workspace", str(workspace)).stdout)
    assert status["status"] == "ready"
    got = claw(
        "memory",
        "get",
        "memory/2026-11-28.md",
        "--from",
        "3",
        "--lines",
        "1",
        "--workspace",
        str(workspace),
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("- Apollo standup")
    dry = claw(
        "memory",
        "forget",
        "--path",
        "memory/2026-11-28.md",
        "--dry-run",
        "--json",
        "--workspace",
        str(workspace),
    )
    assert json.loads(dry.stdout)["dryRun"] is True
    forget = claw(
        "memory", "forget", "--path", "memory/2026-11-28.md", "--workspace", str(workspace)
    )
    assert forget.returncode == 0, forget.stderr
    assert "forgot" in forget.stdout
    after = json.loads(
        claw(
            "memory",
            "search",
            "flaky integration test rollback",
            "--json",
            "--workspace",
            str(workspace),
        ).stdout
    )
    assert "memory/2026-11-28.md" not in {h["reference"]["id"] for h in after["hits"]}


def test_index_and_forget_by_path_pass_the_memory_guard(workspace: Path) -> None:
    """Issue 24's residual: ``index`` and ``forget --path/--session/--source`` went to the
    provider's maintenance around the guard, which made an index for any agent name."""
    ws = ("--workspace", str(workspace))
    for command in (
        ("index", "--agent", "nobody"),
        ("forget", "--session", "s1", "--agent", "nobody"),
        ("forget", "--path", "MEMORY.md", "--agent", "nobody", "--json"),
    ):
        refused = claw("memory", *command, *ws)
        assert refused.returncode == 2, refused.stdout
        assert "'nobody' is not an agent of this host" in refused.stderr
    assert json.loads(refused.stdout)["error"]["code"] == "ERROR"
    assert not (workspace / ".claw" / "memory" / "nobody").exists()
    assert (workspace / "memory" / "2026-11-28.md").is_file()


def test_a_search_warm_up_makes_no_index_for_an_unknown_agent(workspace: Path) -> None:
    """The warm-up before a search called the provider around the guard: Memory Core made
    an index for any agent name before the search itself refused it (issue 27 section 2)."""
    for extra in ((), ("--json",)):
        refused = claw(
            "memory", "search", "rollback", "--agent", "nobody", *extra, "--workspace",
            str(workspace),
        )
        assert refused.returncode == 2, refused.stdout
        assert "'nobody' is not an agent of this host" in refused.stderr
    assert json.loads(refused.stdout)["error"]["code"] == "ERROR"
    assert not (workspace / ".claw" / "memory" / "nobody").exists()


def test_doctor_is_ok_on_a_clean_workspace_and_fails_on_skipped_files(workspace: Path) -> None:
    ok = claw("doctor", "--workspace", str(workspace))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.strip().endswith("ok")
    # The description (through the guard's read route) and the warm-up's index.
    assert re.search(r"^index: [1-9]\d* chunks from [1-9]\d* sources, embedder ", ok.stdout, re.M)
    (workspace / "memory" / "blob.md").write_bytes(b"\x00\x01\x02binary")
    bad = claw("doctor", "--json", "--workspace", str(workspace))
    assert bad.returncode == 1
    report = json.loads(bad.stdout)
    assert any("blob.md" in p for p in report["problems"])


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    result = claw("memory", "search", "x", "--workspace", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert result.stderr.startswith("claw: error: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_bad_config_key_is_one_line_naming_the_key(workspace: Path) -> None:
    (workspace / "claw.toml").write_text("[plugins.slots]\nmemmory = 'x'\n", encoding="utf-8")
    result = claw("memory", "status", "--workspace", str(workspace))
    assert result.returncode == 2
    assert "plugins.slots.memmory" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_prints_the_address_answers_and_stops_on_sigterm(workspace: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "claw", "serve", "--workspace", str(workspace), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CLAW_GATEWAY_TOKEN": "serve-token-1234"},
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().rstrip("\n")
        match = re.fullmatch(r"claw gateway listening on (ws://127\.0\.0\.1:(\d+))", first)
        assert match, first
        url = match.group(1)

        async def query() -> dict[str, object]:
            async with open_gateway_client(url, "serve-token-1234") as client:
                return await client.request(
                    "memory.search", {"version": 2, "query": "green tea", "minScore": 0}
                )

        payload = trio.run(query)
        assert payload["providerId"] == "memory-core"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        reap(proc)


def test_python_dash_m_and_console_script_agree() -> None:
    exe = shutil.which("claw", path=str(Path(sys.executable).parent))
    assert exe is not None
    result = subprocess.run([exe, "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert "serve" in result.stdout and "memory" in result.stdout and "doctor" in result.stdout


def test_memory_add_writes_todays_note_search_finds_it_and_forget_takes_it_out(
    workspace: Path,
) -> None:
    added = claw("memory", "add", "The boiler is serviced in March", "--workspace", str(workspace))
    assert added.returncode == 0, added.stderr
    match = re.match(r"added to (memory/\d{4}-\d\d-\d\d\.md#L(\d+)-L(\d+))$", added.stdout.strip())
    assert match, added.stdout
    reference = match.group(1)
    found = claw("memory", "search", "boiler serviced", "--json", "--workspace", str(workspace))
    top = json.loads(found.stdout)["hits"][0]
    assert f"{top['citation']['path']}#L{match.group(2)}" in reference
    gone = claw("memory", "forget", reference, "--json", "--workspace", str(workspace))
    assert gone.returncode == 0, gone.stderr
    assert "boiler is serviced" in json.loads(gone.stdout)["removedText"]
    after = claw("memory", "search", "boiler serviced", "--json", "--workspace", str(workspace))
    assert all("boiler" not in h["excerpt"] for h in json.loads(after.stdout)["hits"])


def test_memory_add_to_a_file_and_section_prints_json(workspace: Path) -> None:
    result = claw(
        "memory",
        "add",
        "Carol likes rooibos",
        "--file",
        "MEMORY.md",
        "--section",
        "Tea",
        "--json",
        "--workspace",
        str(workspace),
    )
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["citation"]["path"] == "MEMORY.md"
    assert payload["reference"]["providerId"] == "memory-core"
    assert "## Tea" in (workspace / "MEMORY.md").read_text(encoding="utf-8")


def test_memory_add_outside_the_memory_files_is_refused(workspace: Path) -> None:
    result = claw("memory", "add", "x", "--file", "../evil.md", "--workspace", str(workspace))
    assert result.returncode == 2
    assert "not a path inside the workspace" in result.stderr
    assert not (workspace.parent / "evil.md").exists()


def test_doctor_reports_a_degraded_worker_slot_of_a_running_gateway(workspace: Path) -> None:
    """``claw serve --workers N`` records its slots under the state directory; doctor reads
    them (here a record whose supervisor, this test process, is alive)."""
    state = workspace / ".claw"
    record = state / "gateway" / "8790.json"
    record.parent.mkdir(parents=True)
    record.write_text(
        json.dumps(
            {
                "supervisorPid": os.getpid(),
                "workers": [
                    {"index": 0, "state": "serving", "pid": 11, "restarts": 0, "recentDeaths": 0},
                    {
                        "index": 1,
                        "state": "degraded",
                        "pid": None,
                        "restarts": 5,
                        "recentDeaths": 5,
                        "lastExit": "exit code 3",
                        "retryIn": 60.0,
                    },
                ],
            }
        ),
        encoding="utf-8",
    )
    text = claw("doctor", "--workspace", str(workspace))
    assert text.returncode == 1
    assert "gateway on port 8790: workers 0 serving, 1 degraded" in text.stdout
    assert (
        "problem: gateway on port 8790: worker 1 is degraded (5 recent deaths, last exit: "
        "exit code 3; next start in 60 s)" in text.stdout
    )
    as_json = json.loads(claw("doctor", "--json", "--workspace", str(workspace)).stdout)
    assert as_json["gateways"][0]["port"] == 8790
    # A record whose supervisor is gone is not reported.
    record.write_text(json.dumps({"supervisorPid": 2**22 + 12345, "workers": []}), "utf-8")
    assert claw("doctor", "--workspace", str(workspace)).returncode == 0
