"""Where the gateway's token comes from, and which tokens are refused.

A token on the command line is readable by every user of the machine (``ps``,
``/proc/<pid>/cmdline``), so ``claw serve`` and ``claw mcp`` also take it from a file or
the environment; a token short enough to find by guessing is refused.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import claw
from claw._demo import copy_sample_workspace
from claw.gateway import Gateway, open_gateway_client
from claw.gateway._auth import (
    MIN_TOKEN_CHARS,
    TokenFileError,
    TokenTable,
    choose_token,
    read_token_file,
)

from .._processes import reap

TOKEN = "a-token-from-a-file-0123456789"


def _token_file(tmp_path: Path, text: str = TOKEN + "\n", mode: int = 0o600) -> Path:
    path = tmp_path / "token"
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def test_a_short_token_is_refused_without_showing_it() -> None:
    for short in ("Zq", "Wv" * (MIN_TOKEN_CHARS // 2 - 1) + "W"):
        with pytest.raises(claw.ConfigError, match="too short to resist guessing") as info:
            TokenTable.from_config(claw.GatewayConfig(token=short))
        assert short not in str(info.value)
        assert info.value.key_path == "gateway.token"
        with pytest.raises(claw.ConfigError, match=r"gateway\.tokens"):
            TokenTable.from_config(
                claw.GatewayConfig(tokens={TOKEN: ("operator.read",), short: ("operator.read",)})
            )
    assert TokenTable.from_config(claw.GatewayConfig(token="Wv" * (MIN_TOKEN_CHARS // 2)))


async def test_a_gateway_with_a_short_token_does_not_start(host: claw.Host) -> None:
    with pytest.raises(claw.ConfigError, match="too short"):
        Gateway(host, config=claw.GatewayConfig(token="solo"))


def test_a_token_comes_from_the_flag_a_file_or_the_environment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _token_file(tmp_path)
    env = {"CLAW_GATEWAY_TOKEN": "from-the-environment-0", "CLAW_GATEWAY_TOKEN_FILE": str(path)}
    assert choose_token(None, str(path), {}) == TOKEN
    assert choose_token(None, None, env) == "from-the-environment-0"
    assert choose_token(None, None, {"CLAW_GATEWAY_TOKEN_FILE": str(path)}) == TOKEN
    assert choose_token(None, None, {}) is None
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="claw.gateway"):
        assert choose_token("on-the-command-line-0", str(path), env) == "on-the-command-line-0"
    assert "process list" in caplog.text


def test_a_token_file_is_one_line_and_errors_name_the_file_not_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert read_token_file(_token_file(tmp_path, f"  {TOKEN}\r\n")) == TOKEN
    for text in ("", "\n\n", f"{TOKEN}\nsecond line\n", "x" * 5000):
        with pytest.raises(TokenFileError, match="token file") as info:
            read_token_file(_token_file(tmp_path, text))
        assert TOKEN not in str(info.value)
    with pytest.raises(TokenFileError, match="No such file"):
        read_token_file(tmp_path / "missing")
    with caplog.at_level(logging.WARNING, logger="claw.gateway"):
        read_token_file(_token_file(tmp_path, mode=0o644))
    assert "can be read by other users (mode 644); chmod 600 it" in caplog.text


def _serve(workspace: Path, *flags: str, env: dict[str, str]) -> subprocess.Popen[str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("CLAW_GATEWAY")}
    command = ["serve", "--workspace", str(workspace), "--port", "0", *flags]
    return subprocess.Popen(
        [sys.executable, "-m", "claw", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**inherited, **env},
    )


async def _status(url: str, token: str) -> str:
    async with open_gateway_client(url, token) as client:
        return str((await client.request("memory.status", {}))["status"])


@pytest.mark.slow
@pytest.mark.parametrize("how", ["flag", "environment"])
def test_claw_serve_takes_its_token_from_a_file_and_not_the_command_line(
    tmp_path: Path, how: str
) -> None:
    workspace = copy_sample_workspace(tmp_path / "ws")
    path = _token_file(tmp_path)
    flags = ("--token-file", str(path)) if how == "flag" else ()
    env = {} if how == "flag" else {"CLAW_GATEWAY_TOKEN_FILE": str(path)}
    proc = _serve(workspace, *flags, env=env)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.search(r"listening on (ws://\S+)", first)
        assert match, first
        assert trio.run(_status, match.group(1), TOKEN) == "ready"
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert TOKEN.encode() not in cmdline
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        reap(proc)


@pytest.mark.slow
def test_claw_serve_refuses_a_short_token_and_warns_about_one_on_the_command_line(
    tmp_path: Path,
) -> None:
    workspace = copy_sample_workspace(tmp_path / "ws")
    short = _serve(workspace, "--token", "hunter2", env={})
    try:
        _, err = short.communicate(timeout=60)
    finally:
        reap(short)
    assert short.returncode == 2
    assert "too short to resist guessing" in err
    assert "hunter2" not in err
    both = _serve(workspace, "--token", TOKEN, "--token-file", "x", env={})
    try:
        _, err = both.communicate(timeout=60)
    finally:
        reap(both)
    assert both.returncode == 2 and "not allowed with argument" in err
    loud = _serve(workspace, "--token", TOKEN, env={})
    try:
        assert loud.stdout is not None and loud.stderr is not None
        assert "listening on" in loud.stdout.readline()
        loud.send_signal(signal.SIGTERM)
        _, err = loud.communicate(timeout=30)
    finally:
        reap(loud)
    assert "claw: warning: --token puts the token in the process list" in err
