"""Host configuration: defaults, TOML loading, and errors that name the key path."""

from __future__ import annotations

from pathlib import Path

import pytest

import claw


def test_defaults_work_with_no_file(tmp_path: Path) -> None:
    config = claw.HostConfig(workspace_dir=tmp_path)
    assert config.resolved_state_dir == tmp_path / ".claw"
    assert config.plugins.slots.context_engine == "legacy"
    flush = config.agents.defaults.compaction.memory_flush
    assert (flush.soft_threshold_tokens, flush.reserve_tokens_floor) == (4000, 20000)
    assert flush.force_flush_transcript_bytes == 2 * 1024 * 1024


def test_keyword_fields_accept_strings_for_dirs(tmp_path: Path) -> None:
    config = claw.HostConfig(state_dir=str(tmp_path / "s"))  # type: ignore[arg-type]
    assert config.resolved_state_dir == tmp_path / "s"


def test_load_reads_toml_and_resolves_relative_dirs(tmp_path: Path) -> None:
    path = tmp_path / "claw.toml"
    path.write_text(
        """
workspace_dir = "ws"
[plugins.slots]
context_engine = "lossless"
memory = "memory-core"
[plugins.entries.memory-core]
enabled = true
config = { chunk_tokens = 200 }
[agents.defaults]
context_window = 32000
[agents.defaults.compaction.memory_flush]
enabled = false
model = "ollama/qwen3:8b"
""",
        encoding="utf-8",
    )
    config = claw.HostConfig.load(path)
    assert config.workspace_dir == tmp_path / "ws"
    assert config.plugins.slots.context_engine == "lossless"
    assert config.plugins.entry("memory-core").config == {"chunk_tokens": 200}
    assert config.agents.defaults.context_window == 32000
    assert config.agents.defaults.compaction.memory_flush.enabled is False
    assert config.agents.defaults.compaction.memory_flush.model == "ollama/qwen3:8b"


@pytest.mark.parametrize(
    ("data", "key_path"),
    [
        ({"plugins": {"slotz": {}}}, "plugins.slotz"),
        ({"plugins": {"slots": {"context_engin": "x"}}}, "plugins.slots.context_engin"),
        ({"agents": {"defaults": {"context_window": "big"}}}, "agents.defaults.context_window"),
        ({"agents": {"defaults": {"context_window": True}}}, "agents.defaults.context_window"),
        (
            {"agents": {"defaults": {"compaction": {"memory_flush": {"enabled": "yes"}}}}},
            "agents.defaults.compaction.memory_flush.enabled",
        ),
        (
            {
                "agents": {
                    "defaults": {"compaction": {"memory_flush": {"soft_threshold_tokens": -1}}}
                }
            },
            "agents.defaults.compaction.memory_flush.soft_threshold_tokens",
        ),
        ({"plugins": {"entries": {"x": {"enabled": 1}}}}, "plugins.entries.x.enabled"),
        ({"gateway": {"tokens": {"t": "operator.read"}}}, "gateway.tokens.t"),
        ({"workers": {"max_workers": 0}}, "workers.max_workers"),
        ({"plugins": "on"}, "plugins"),
    ],
)
def test_bad_keys_and_types_name_the_key_path(data: dict[str, object], key_path: str) -> None:
    with pytest.raises(claw.ConfigError) as info:
        claw.HostConfig.from_mapping(data)
    assert info.value.key_path == key_path
    assert key_path in str(info.value)


def test_unknown_key_error_lists_known_keys() -> None:
    with pytest.raises(claw.ConfigError, match="known keys: .*context_engine"):
        claw.HostConfig.from_mapping({"plugins": {"slots": {"engine": "x"}}})


def test_invalid_toml_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "claw.toml"
    path.write_text("[plugins\n", encoding="utf-8")
    with pytest.raises(claw.ConfigError, match="invalid TOML"):
        claw.HostConfig.load(path)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(claw.ConfigError, match="not found"):
        claw.HostConfig.load(tmp_path / "nope.toml")


def test_model_references_are_trimmed_at_load(tmp_path: Path) -> None:
    path = tmp_path / "claw.toml"
    path.write_text(
        """
[agents.defaults]
model = " ollama/qwen3:8b "
fallbacks = [" openai/gpt-4o-mini"]
[agents.defaults.compaction.memory_flush]
model = "\\tollama/qwen3:8b \\n"
"""
    )
    defaults = claw.HostConfig.load(path).agents.defaults
    assert defaults.model == "ollama/qwen3:8b"
    assert defaults.fallbacks == ("openai/gpt-4o-mini",)
    assert defaults.compaction.memory_flush.model == "ollama/qwen3:8b"


@pytest.mark.parametrize(
    ("data", "key_path"),
    [
        ({"agents": {"defaults": {"model": "qwen3"}}}, "agents.defaults.model"),
        ({"agents": {"defaults": {"model": "   "}}}, "agents.defaults.model"),
        (
            {"agents": {"defaults": {"fallbacks": ["ollama/a", "ollama/b c"]}}},
            "agents.defaults.fallbacks[1]",
        ),
        (
            {"agents": {"defaults": {"compaction": {"memory_flush": {"model": "ollama/"}}}}},
            "agents.defaults.compaction.memory_flush.model",
        ),
    ],
)
def test_an_invalid_model_reference_is_refused_at_load_naming_the_key(
    data: dict[str, object], key_path: str
) -> None:
    with pytest.raises(claw.ConfigError) as info:
        claw.HostConfig.from_mapping(data)
    assert info.value.key_path == key_path
    assert "provider/model" in str(info.value) or "model name" in str(info.value)


def test_the_mcp_section_loads_and_names_a_bad_value() -> None:
    loaded = claw.HostConfig.from_mapping(
        {
            "mcp": {
                "max_sessions": 10,
                "max_sessions_per_token": 2,
                "session_idle_timeout": 60,
                "allowed_hosts": ["mcp.example.com", "10.0.0.5:8765"],
                "allowed_origins": ["https://app.example.com"],
            }
        }
    )
    assert loaded.mcp.max_sessions_per_token == 2
    assert loaded.mcp.allowed_hosts == ("mcp.example.com", "10.0.0.5:8765")
    for bad, key in [
        ({"allowed_hosts": ["http://mcp.example.com"]}, "mcp.allowed_hosts"),
        ({"allowed_hosts": ["a b"]}, "mcp.allowed_hosts"),
        ({"allowed_origins": ["app.example.com"]}, "mcp.allowed_origins"),
        ({"allowed_origins": ["https://app.example.com/path"]}, "mcp.allowed_origins"),
        ({"max_sessions_per_token": 0}, "mcp.max_sessions_per_token"),
        ({"session_idle_timeout": float("nan")}, "mcp.session_idle_timeout"),
    ]:
        with pytest.raises(claw.ConfigError, match=key.replace(".", r"\.")):
            claw.HostConfig.from_mapping({"mcp": bad})


@pytest.mark.parametrize("value", [None, "", "   "])
async def test_an_api_key_env_naming_an_unset_variable_fails_when_the_host_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("CLAW_TEST_API_KEY", raising=False)
    else:
        monkeypatch.setenv("CLAW_TEST_API_KEY", value)
    config = claw.HostConfig.from_mapping(
        {
            "workspace_dir": str(tmp_path),
            "plugins": {"discover": False},
            "models": {
                "providers": {
                    "hosted": {
                        "base_url": "http://127.0.0.1:9/v1",
                        "api_key_env": "CLAW_TEST_API_KEY",
                    }
                }
            },
        }
    )
    with pytest.raises(claw.ConfigError) as info:
        async with claw.open_host(config):
            pass  # pragma: no cover
    assert info.value.key_path == "models.providers.hosted.api_key_env"
    assert "CLAW_TEST_API_KEY is not set" in str(info.value)
    monkeypatch.setenv("CLAW_TEST_API_KEY", "sk-x")
    async with claw.open_host(config) as host:
        assert host.models.resolve("hosted/m").api_key == "sk-x"  # type: ignore[attr-defined]
