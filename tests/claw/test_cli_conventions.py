"""The claw command's conventions, each one a trap a new user fell into (issue 15)."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import claw
from claw._cli import Progress, build_parser
from claw._cli import main as claw_main
from claw._demo import copy_sample_workspace, matching_lines

from .test_cli import claw as run_claw

pytestmark = pytest.mark.slow


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return copy_sample_workspace(tmp_path / "ws")


def test_global_options_count_before_and_after_the_subcommand(
    workspace: Path, tmp_path: Path
) -> None:
    before = run_claw("--workspace", str(workspace), "doctor", "--json", cwd=tmp_path)
    after = run_claw("doctor", "--json", "--workspace", str(workspace), cwd=tmp_path)
    for result in (before, after):
        assert result.returncode == 0, result.stdout + result.stderr
        assert json.loads(result.stdout)["workspace"] == str(workspace)
    missing = run_claw("--config", "nope.toml", "doctor", cwd=workspace)
    assert missing.returncode == 2
    assert "nope.toml: config file not found" in missing.stderr
    searched = run_claw("--workspace", str(workspace), "memory", "search", "apollo", "--json")
    assert searched.returncode == 0, searched.stderr
    assert json.loads(searched.stdout)["hits"]


def test_environment_variables_name_the_workspace_and_config(
    workspace: Path, tmp_path: Path
) -> None:
    found = run_claw("doctor", "--json", cwd=tmp_path, env={"CLAW_WORKSPACE": str(workspace)})
    assert json.loads(found.stdout)["workspace"] == str(workspace)
    broken = tmp_path / "broken.toml"
    broken.write_text("[plugins\n", encoding="utf-8")
    result = run_claw(
        "memory", "status", cwd=tmp_path,
        env={"CLAW_WORKSPACE": str(workspace), "CLAW_CONFIG": str(broken)},
    )  # fmt: skip
    assert result.returncode == 2
    assert "broken.toml: invalid TOML: Expected ']'" in result.stderr


def test_version_and_help_texts() -> None:
    version = run_claw("--version")
    assert version.returncode == 0
    assert version.stdout.strip() == f"claw {claw.__version__}"
    serve = run_claw("serve", "--help")
    assert "Serve the claw gateway" in serve.stdout


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found.extend(_parsers(child))
    return found


def test_every_flag_and_command_has_help_text() -> None:
    for parser in _parsers(build_parser()):
        assert parser.description, parser.prog
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help and action.help != argparse.SUPPRESS, (parser.prog, action.dest)


def test_ports_outside_the_range_are_refused_and_a_busy_port_names_the_address(
    workspace: Path,
) -> None:
    for port in ("80000", "-1", "http"):
        result = run_claw("serve", "--workspace", str(workspace), "--port", port)
        assert result.returncode == 2
        assert "argument --port:" in result.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_claw(
            "serve", "--workspace", str(workspace), "--port", str(port),
            env={"CLAW_GATEWAY_TOKEN": "conventions-token-0123"},
        )
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}: the address is already in use" in result.stderr


def test_a_closed_pipe_ends_the_demo_quietly() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "claw", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what `| head -1` does
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 0
    assert first.startswith(b"claw demo:")
    assert stderr == ""


def test_exit_codes_do_not_depend_on_json_and_json_errors_are_json(workspace: Path) -> None:
    plain = run_claw("memory", "get", "NOPE.md", "--workspace", str(workspace))
    as_json = run_claw("memory", "get", "NOPE.md", "--json", "--workspace", str(workspace))
    assert plain.returncode == as_json.returncode == 2
    assert json.loads(as_json.stdout) == {
        "error": {"code": "NOT_FOUND", "message": "NOPE.md was not found in memory"}
    }
    usage = run_claw("memory", "search", "x", "--max-results", "0", "--json")
    assert usage.returncode == 2
    assert json.loads(usage.stdout)["error"]["code"] == "USAGE"
    missing = run_claw("doctor", "--json", "--workspace", str(workspace / "nope"))
    assert missing.returncode == 2
    message = json.loads(missing.stdout)["error"]["message"]
    assert message == f"--workspace {workspace / 'nope'}: not a directory"


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("search", "x", "--max-results", "0"), "--max-results"),
        (("search", "x", "--max-results", "500"), "--max-results"),
        (("search", "x", "--min-score", "nan"), "--min-score"),
        (("search", "x", "--sources", "files"), "--sources"),
        (("get", "MEMORY.md", "--from", "0"), "--from"),
        (("get", "MEMORY.md", "--lines", "x"), "--lines"),
    ],
)
def test_errors_name_the_flag_the_user_typed(
    workspace: Path, args: tuple[str, ...], flag: str
) -> None:
    result = run_claw("memory", *args, "--workspace", str(workspace))
    assert result.returncode == 2
    assert f"argument {flag}:" in result.stderr
    assert "maxResults" not in result.stderr and "minScore" not in result.stderr


def test_a_misspelt_plugin_id_is_a_warning_and_fails_doctor(workspace: Path) -> None:
    (workspace / "claw.toml").write_text("[plugins.entries.memroy-core]\n", encoding="utf-8")
    result = run_claw("doctor", "--workspace", str(workspace))
    assert result.returncode == 1
    assert result.stderr.startswith(
        "claw: warning: plugins.entries.memroy-core configures a plugin that is not loaded"
    )
    assert "did you mean 'memory-core'?" in result.stderr
    assert "problem: plugins.entries.memroy-core" in result.stdout


def test_a_memory_core_setting_error_has_no_stray_segment(workspace: Path) -> None:
    (workspace / "claw.toml").write_text(
        "[plugins.entries.memory-core.config]\nchunk_tokens = -1\n", encoding="utf-8"
    )
    result = run_claw("memory", "status", "--workspace", str(workspace))
    assert result.returncode == 2
    assert "config plugins.entries.memory-core.config.chunk_tokens: must be positive" in (
        result.stderr
    )
    assert "memory_core." not in result.stderr


def test_search_shows_the_matching_lines_of_a_hit(workspace: Path) -> None:
    result = run_claw("memory", "search", "release manager apollo", "--workspace", str(workspace))
    assert result.returncode == 0, result.stderr
    text = (workspace / "MEMORY.md").read_text(encoding="utf-8").splitlines()
    number = next(i for i, line in enumerate(text, 1) if "release manager" in line)
    assert f"    L{number}: {text[number - 1].strip()}" in result.stdout
    assert "# Memory" not in result.stdout  # not the start of the chunk


def test_matching_lines_ranks_by_shared_words_and_keeps_text_order() -> None:
    text = "# Notes\n\n- the deploy window is Friday\n- lunch\n- deploys need a window ticket\n"
    assert matching_lines(text, "deploy window", limit=2) == [
        (2, "- the deploy window is Friday"),
        (4, "- deploys need a window ticket"),
    ]
    assert matching_lines(text, "zebra") == [(0, "# Notes")]


def test_demo_on_an_empty_folder_copies_the_sample_and_ends_with_next_commands(
    tmp_path: Path,
) -> None:
    target = tmp_path / "fresh"
    result = run_claw("demo", "--workspace", str(target))
    assert result.returncode == 0, result.stderr
    assert (target / "MEMORY.md").is_file()
    assert f"copied the sample workspace into {target}" in result.stdout
    assert "From memory: - Alice prefers green tea" in result.stdout
    tail = result.stdout.strip().splitlines()[-5:]
    assert tail[0] == "next, try:"
    assert f'claw memory search "deploy window" --workspace {target}' in tail[1]


def test_init_copies_the_sample_and_refuses_to_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "mine"
    first = run_claw("init", str(target))
    assert first.returncode == 0, first.stderr
    assert (target / "MEMORY.md").is_file() and "next, try:" in first.stdout
    (target / "MEMORY.md").write_text("my own\n", encoding="utf-8")
    again = run_claw("init", str(target))
    assert again.returncode == 2 and "already has MEMORY.md" in again.stderr
    assert (target / "MEMORY.md").read_text(encoding="utf-8") == "my own\n"


def test_index_and_status_agree_on_the_generation(workspace: Path) -> None:
    index = json.loads(run_claw("memory", "index", "--json", "--workspace", str(workspace)).stdout)
    status = json.loads(
        run_claw("memory", "status", "--json", "--workspace", str(workspace)).stdout
    )
    assert index["generation"] == status["details"]["generation"]
    (workspace / "memory" / "new.md").write_text("- a new note\n", encoding="utf-8")
    again = json.loads(run_claw("memory", "index", "--json", "--workspace", str(workspace)).stdout)
    assert again["generation"] == index["generation"] + 1
    status = json.loads(
        run_claw("memory", "status", "--json", "--workspace", str(workspace)).stdout
    )
    assert status["details"]["generation"] == again["generation"]


def test_skipped_files_are_reported_on_every_run_with_their_reason(workspace: Path) -> None:
    (workspace / "memory" / "latin1.md").write_bytes("caf\xe9 notes".encode("latin-1"))
    (workspace / "claw.toml").write_text(
        "[plugins.entries.memory-core.config]\nmax_file_bytes = 200\n", encoding="utf-8"
    )
    (workspace / "memory" / "big.md").write_text("x" * 300, encoding="utf-8")
    for _ in range(2):
        result = run_claw("memory", "index", "--workspace", str(workspace))
        assert result.returncode == 0, result.stderr
        assert "skipped memory/latin1.md: not UTF-8 text" in result.stdout
        assert "skipped memory/big.md: too large (300 bytes > max_file_bytes = 200)" in (
            result.stdout
        )


def test_progress_draws_every_stage_of_a_first_index_and_nothing_for_a_quiet_sync() -> None:
    stream = io.StringIO()
    progress = Progress(stream, enabled=True)
    progress("scan", 3, 3)
    progress.close()
    assert stream.getvalue() == ""  # only scanned: nothing changed, nothing drawn
    for event in [("scan", 3, 3), ("chunk", 3, 3), ("embed", 5, 10), ("embed", 10, 10)]:
        progress(*event)
    progress("publish", 3, 3)
    progress.close()
    drawn = stream.getvalue()
    for label in ("scanning", "chunking", "embedding", "publishing"):
        assert label in drawn
    assert "10/10" in drawn
    silent = io.StringIO()
    quiet = Progress(silent)  # not a terminal
    quiet("chunk", 1, 1)
    quiet.close()
    assert silent.getvalue() == ""


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_first_search_draws_its_warm_up_on_a_terminal(workspace: Path) -> None:
    """The warm-up goes through the guard (host.memory.warm) and still draws its stages."""
    search = ["memory", "search", "apollo", "--workspace", str(workspace)]
    err = _Terminal()
    assert claw_main(search, out=io.StringIO(), err=err) == 0, err.getvalue()
    for label in ("scanning", "chunking", "embedding", "publishing"):
        assert label in err.getvalue()
    again = _Terminal()
    assert claw_main(search, out=io.StringIO(), err=again) == 0
    assert again.getvalue() == ""  # up to date: nothing to draw


def _in_process(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = claw_main(list(args), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_json_works_before_and_after_every_subcommand(workspace: Path, tmp_path: Path) -> None:
    for where in ("before", "after"):
        for argv in (
            ["memory", "search", "apollo"],
            ["memory", "status"],
            ["sessions", "list"],
            ["doctor"],
            ["init", str(tmp_path / f"init-{where}")],
        ):
            args = ["--json", *argv] if where == "before" else [*argv, "--json"]
            code, out, err = _in_process(*args, "--workspace", str(workspace))
            assert code == 0, (args, err)
            assert len(out.splitlines()) == 1, out
            payload = json.loads(out)
            if argv[0] == "init":
                assert payload["workspace"] == argv[1] and "MEMORY.md" in payload["files"]
    code, out, err = _in_process("demo", "--json")
    assert code == 0, err
    assert [turn["session"] for turn in json.loads(out)["turns"]] == ["dm:alice", "grp:team"]
    for command in ("serve", "mcp"):  # both accept it (serve's output: the next test)
        assert "--json" in run_claw(command, "--help").stdout


def test_serve_json_prints_the_listening_address_as_json(workspace: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "claw", "--json", "serve", "--workspace", str(workspace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert ready["listening"]["url"].startswith("ws://127.0.0.1:")
        assert ready["listening"]["generatedToken"]  # none configured: generated, and given
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert json.loads(out.strip().splitlines()[-1]) == {"stopped": {"signal": signal.SIGTERM}}


def test_memory_add_dash_reads_the_memory_from_stdin(workspace: Path) -> None:
    note = "The spare key is under the blue flowerpot."
    added = subprocess.run(
        [
            sys.executable,
            "-m",
            "claw",
            "memory",
            "add",
            "-",
            "--json",
            "--workspace",
            str(workspace),
        ],
        input=note + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert added.returncode == 0, added.stderr
    path = json.loads(added.stdout)["citation"]["path"]
    text = (workspace / path).read_text(encoding="utf-8")
    assert note in text and "] -\n" not in text and not text.rstrip().endswith("-")
    empty = subprocess.run(
        [sys.executable, "-m", "claw", "memory", "add", "-", "--workspace", str(workspace)],
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert empty.returncode == 2
    assert "stdin was empty" in empty.stderr


def test_the_next_page_numbers_its_hits_on_from_the_last_page(workspace: Path) -> None:
    args = ["memory", "search", "release deploy budget", "--max-results", "3", "--min-score", "0"]
    first = run_claw(*args, "--workspace", str(workspace))
    assert first.returncode == 0, first.stderr
    ranks = [
        int(line.split()[0]) for line in first.stdout.splitlines() if re.match(r"^ *\d+  ", line)
    ]
    assert ranks == [1, 2, 3]
    cursor = re.search(r"^more: --cursor (\S+)$", first.stdout, re.MULTILINE)
    assert cursor is not None and cursor.group(1).startswith("4@")
    second = run_claw(*args, "--cursor", cursor.group(1), "--workspace", str(workspace))
    assert second.returncode == 0, second.stderr
    ranks = [
        int(line.split()[0]) for line in second.stdout.splitlines() if re.match(r"^ *\d+  ", line)
    ]
    assert ranks and ranks[0] == 4 and ranks == list(range(4, 4 + len(ranks)))
    # The provider's own cursor (JSON's nextCursor) still works, numbered from 1.
    raw = json.loads(run_claw(*args, "--json", "--workspace", str(workspace)).stdout)["nextCursor"]
    again = run_claw(*args, "--cursor", raw, "--workspace", str(workspace))
    assert again.returncode == 0 and re.search(r"^ 1  ", again.stdout, re.MULTILINE)


def test_the_scan_bar_shows_the_rate_of_the_scan_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan is reported once it is over; its rate counts from its first report."""
    import tqdm.std

    now = [1000.0]
    monkeypatch.setattr(tqdm.std, "time", lambda: now[0])
    stream = io.StringIO()
    progress = Progress(stream, enabled=True, clock=lambda: now[0])
    progress("scan", 0, 2000)
    now[0] += 4.0  # scanning 2,000 sources took 4 s
    progress("scan", 2000, 2000)
    progress("chunk", 1, 10)  # something changed: the scan is drawn now
    progress.close()
    scanned = [line for line in stream.getvalue().split("\r") if "scanning" in line][-1]
    rate = re.search(r"([\d.]+) sources/s", scanned)
    assert rate is not None, scanned
    assert float(rate.group(1)) == pytest.approx(500.0, rel=0.01)


@pytest.mark.parametrize("token", ["given", "generated"])
def test_mcp_over_http_with_json_prints_the_listening_address_as_json(
    workspace: Path, token: str
) -> None:
    """As ``claw serve --json``: the ready line (with the token it generated, if it did)
    and a last line saying which signal stopped it."""
    env = {k: v for k, v in os.environ.items() if k != "CLAW_GATEWAY_TOKEN"}
    given = ["--token", "json-http-token-16"] if token == "given" else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "claw", "mcp", "--http", "127.0.0.1:0", *given,
         "--workspace", str(workspace), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/mcp", ready["listening"]["url"])
        if token == "given":
            assert "generatedToken" not in ready["listening"]
        else:
            assert len(ready["listening"]["generatedToken"]) >= 16
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert json.loads(out.strip().splitlines()[-1]) == {"stopped": {"signal": signal.SIGTERM}}
