"""Host configuration: typed, frozen, loadable from TOML, with errors that name the key path.

Every section is a frozen attrs class whose fields have working defaults, so a host
needs no file at all. :meth:`HostConfig.load` reads a TOML file and
:meth:`HostConfig.from_mapping` a parsed mapping; both refuse unknown keys and wrong
types with a :class:`~claw.ConfigError` that names the dotted key path and the bad
value, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs

from ._errors import ConfigError
from .models import InvalidModelRefError, ModelRef

T = TypeVar("T")

JSONValue = Any


def _positive(instance: object, attribute: attrs.Attribute[Any], value: int | float) -> None:
    if value <= 0:
        raise ConfigError(attribute.name, f"must be positive, got {value!r}", value=value)


def _non_negative(instance: object, attribute: attrs.Attribute[Any], value: int | float) -> None:
    if value < 0:
        raise ConfigError(attribute.name, f"must not be negative, got {value!r}", value=value)


#: The most connections one pool may open: PostgreSQL serves a few hundred in all.
POOL_MAX_LIMIT = 1000


def _pool_max(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if not 1 <= value <= POOL_MAX_LIMIT:
        raise ConfigError(
            attribute.name,
            f"must be 1 to {POOL_MAX_LIMIT} connections, got {value!r}",
            value=value,
        )


def _seconds(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not 0 < value < math.inf:  # also refuses nan
        raise ConfigError(
            attribute.name, f"must be a positive number of seconds, got {value!r}", value=value
        )


def _trim(value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value


def _trim_all(values: Any) -> Any:
    if isinstance(values, list | tuple):
        return tuple(_trim(v) for v in values)
    return values


def _model_refs(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Validate ``provider/model`` references at load, so a bad one names its key."""
    many = isinstance(value, tuple)
    for i, ref in enumerate(value if many else (value,)):
        if ref is None:
            continue
        try:
            ModelRef.parse(ref)
        except InvalidModelRefError as exc:
            key = f"{attribute.name}[{i}]" if many else attribute.name
            raise ConfigError(key, str(exc), value=ref) from None


@attrs.frozen
class SlotsConfig:
    """Which plugin owns each exclusive slot.

    ``context_engine`` names a registered context engine id (``"legacy"`` is the
    built-in one). ``memory`` names the plugin whose memory capability owns the memory
    slot; ``None`` selects Memory Core when it is loaded and enabled, and no memory
    otherwise; ``"none"`` selects no memory plugin at all.
    """

    context_engine: str = "legacy"
    memory: str | None = None


@attrs.frozen
class PluginEntryConfig:
    """Per-plugin settings: ``enabled = false`` keeps the plugin from loading at all."""

    enabled: bool = True
    config: Mapping[str, JSONValue] = attrs.field(factory=dict)


@attrs.frozen
class PluginsConfig:
    """Plugin loading: slot selection, per-plugin entries, entry-point discovery."""

    slots: SlotsConfig = attrs.field(factory=SlotsConfig)
    entries: Mapping[str, PluginEntryConfig] = attrs.field(factory=dict)
    discover: bool = True

    def entry(self, plugin_id: str) -> PluginEntryConfig:
        """The entry for ``plugin_id``, or the default one."""
        return self.entries.get(plugin_id, PluginEntryConfig())


@attrs.frozen
class MemoryFlushConfig:
    """``[agents.defaults.compaction.memory_flush]``: timing of the pre-compaction flush.

    A flush is due when the session's token estimate, including the incoming turn,
    crosses ``context_window - reserve_tokens_floor - soft_threshold_tokens``, or the
    transcript reaches ``force_flush_transcript_bytes``. ``model`` is the default model
    of a tools-arm flush (a file-arm flush keeps the session's model).
    """

    enabled: bool = True
    soft_threshold_tokens: int = attrs.field(default=4000, validator=_non_negative)
    reserve_tokens_floor: int = attrs.field(default=20000, validator=_non_negative)
    force_flush_transcript_bytes: int = attrs.field(default=2 * 1024 * 1024, validator=_positive)
    model: str | None = attrs.field(default=None, converter=_trim, validator=_model_refs)


@attrs.frozen
class CompactionConfig:
    """``[agents.defaults.compaction]``: when and how the runtime compacts a session."""

    memory_flush: MemoryFlushConfig = attrs.field(factory=MemoryFlushConfig)
    keep_recent_tokens: int = attrs.field(default=8000, validator=_non_negative)


@attrs.frozen
class AgentDefaultsConfig:
    """``[agents.defaults]``: what every agent uses unless it says otherwise."""

    model: str | None = attrs.field(default=None, converter=_trim, validator=_model_refs)
    fallbacks: tuple[str, ...] = attrs.field(default=(), converter=_trim_all, validator=_model_refs)
    system_prompt: str | None = None
    context_window: int = attrs.field(default=128_000, validator=_positive)
    max_tool_rounds: int = attrs.field(default=8, validator=_positive)
    compaction: CompactionConfig = attrs.field(factory=CompactionConfig)


@attrs.frozen
class ModelProviderConfig:
    """``[models.providers.<name>]``: an OpenAI-compatible endpoint serving ``<name>/<model>``.

    ``api_key_env`` names the environment variable holding the key (keys never live in
    the config file).
    """

    base_url: str
    kind: str = "openai-compatible"
    api_key_env: str | None = None
    context_window: int = attrs.field(default=32768, validator=_positive)
    timeout: float = attrs.field(default=120.0, validator=_positive)


def provider_api_key(name: str, provider: ModelProviderConfig) -> str | None:
    """The API key of ``[models.providers.<name>]``, read from its ``api_key_env`` now.

    No ``api_key_env``: the server takes no key (Ollama, llama.cpp, a vLLM started
    without ``--api-key``), and none is sent. An ``api_key_env`` naming a variable that
    is unset or empty is a :class:`ConfigError` when the host opens, not a request sent
    without ``Authorization`` that fails later with a 401.
    """
    if provider.api_key_env is None:
        return None
    key = os.environ.get(provider.api_key_env, "")
    if not key.strip():
        raise ConfigError(
            f"models.providers.{name}.api_key_env",
            f"the environment variable {provider.api_key_env} is not set (or is empty); "
            f"export {provider.api_key_env}=<key>, or remove api_key_env if {name!r} "
            "takes no key (Ollama, llama.cpp, vLLM without --api-key)",
            value=provider.api_key_env,
        )
    return key.strip()


@attrs.frozen
class ModelsConfig:
    """``[models]``: model providers the host registers at start."""

    providers: Mapping[str, ModelProviderConfig] = attrs.field(factory=dict)


@attrs.frozen
class AgentsConfig:
    """``[agents]``."""

    defaults: AgentDefaultsConfig = attrs.field(factory=AgentDefaultsConfig)


@attrs.frozen
class WorkersConfig:
    """``[workers]``: the shared worker pool (``max_workers`` threads; ``inline`` for tests)."""

    max_workers: int = attrs.field(
        factory=lambda: max(2, min(8, os.cpu_count() or 2)), validator=_positive
    )
    inline: bool = False


@attrs.frozen
class GatewayConfig:
    """``[gateway]``: the WebSocket server.

    ``tokens`` maps each accepted token to the operator scopes it may be granted;
    ``token`` is a shorthand for one token allowed ``operator.read``. An authenticated
    connection that sends nothing and waits for no answer for ``idle_timeout`` seconds
    is closed (1001); at most ``max_connections`` authenticated connections are served
    at once (the next one is refused with ``UNAVAILABLE`` and closed with 1013).

    Connections that have not authenticated yet are counted apart: each has
    ``handshake_timeout`` seconds from its TCP accept to finish the WebSocket upgrade and
    send an accepted ``connect``, and at most ``max_pending_connections`` wait at once; a
    new one beyond that drops the one that has waited longest, so sockets that never
    authenticate cannot keep an authenticating client out.
    """

    host: str = "127.0.0.1"
    port: int = attrs.field(default=0, validator=_non_negative)
    token: str | None = None
    tokens: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    max_message_bytes: int = attrs.field(default=1024 * 1024, validator=_positive)
    max_in_flight: int = attrs.field(default=32, validator=_positive)
    max_queued_messages: int = attrs.field(default=64, validator=_positive)
    idle_timeout: float = attrs.field(default=300.0, validator=_positive)
    max_connections: int = attrs.field(default=256, validator=_positive)
    handshake_timeout: float = attrs.field(default=5.0, validator=_seconds)
    max_pending_connections: int = attrs.field(default=128, validator=_positive)


_HOST_VALUE = re.compile(r"[^\s/,@]+")
_ORIGIN_VALUE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/,@]+")


def _host_values(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    for item in value:
        if not _HOST_VALUE.fullmatch(item):
            raise ConfigError(
                attribute.name,
                f'expected a Host header value such as "mcp.example.com" or '
                f'"10.0.0.5:8765", got {item!r}',
                value=item,
            )


def _origin_values(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    for item in value:
        if not _ORIGIN_VALUE.fullmatch(item):
            raise ConfigError(
                attribute.name,
                f'expected an origin, scheme://host[:port] such as "https://mcp.example.com", '
                f"got {item!r}",
                value=item,
            )


@attrs.frozen
class McpConfig:
    """``[mcp]``: the MCP server's streamable HTTP transport (``claw mcp --http``).

    At most ``max_sessions`` HTTP sessions are open at once, and at most
    ``max_sessions_per_token`` of them per bearer token, so one token cannot hold the
    places the others need; a session with no request in flight for
    ``session_idle_timeout`` seconds is closed. Every request's ``Host`` header must be
    one of the names the server answers to exactly: the address the request arrived on
    with the listening port (and ``localhost:PORT`` on a loopback address), or one of
    ``allowed_hosts`` (written as clients send it: ``mcp.example.com``,
    ``mcp.example.com:8443``). A request with an ``Origin`` header must come from
    ``http://`` plus one of those default names, or from one of ``allowed_origins``.
    """

    max_sessions: int = attrs.field(default=256, validator=_positive)
    max_sessions_per_token: int = attrs.field(default=32, validator=_positive)
    session_idle_timeout: float = attrs.field(default=300.0, validator=_seconds)
    allowed_hosts: tuple[str, ...] = attrs.field(
        default=(), converter=_trim_all, validator=_host_values
    )
    allowed_origins: tuple[str, ...] = attrs.field(
        default=(), converter=_trim_all, validator=_origin_values
    )




@attrs.frozen
class StateConfig:
    """``[state]``: where sessions, transcripts and the turn ledger are kept.

    ``backend`` ``"sqlite"`` (the default) keeps them in ``state_dir``; another name is
    looked up in the ``claw.state_backends`` entry-point group (``"postgresql"`` ships
    with claw's ``postgres`` extra). ``dsn`` is that backend's database address (for
    ``"postgresql"`` a libpq DSN; unset, ``CLAW_POSTGRES_DSN`` is read; unused by
    ``"sqlite"``).

    ``pool_min`` and ``pool_max`` bound the connection pool of a database backend
    (``"postgresql"``: connections kept open, and opened at most, per host process, besides
    its LISTEN and owner-lock connections); ``pool_timeout`` is how many seconds a query
    waits for a free connection before it fails with
    :class:`~claw.DatabaseUnavailableError`. ``"sqlite"`` has no pool and ignores them.
    """

    backend: str = attrs.field(default="sqlite", converter=_trim)
    dsn: str | None = None
    pool_min: int = attrs.field(default=1, validator=_non_negative)
    pool_max: int = attrs.field(default=8, validator=_pool_max)
    pool_timeout: float = attrs.field(default=30.0, validator=_seconds)

    def __attrs_post_init__(self) -> None:
        if self.pool_min > self.pool_max:
            raise ConfigError(
                "pool_min",
                f"must not exceed pool_max ({self.pool_max}), got {self.pool_min}",
                value=self.pool_min,
            )


@attrs.frozen
class HostConfig:
    """Everything a host needs; every field has a default that works with no file.

    ``workspace_dir`` is where memory files live (default: the current directory);
    ``state_dir`` is where claw keeps its databases and indexes (default:
    ``<workspace_dir>/.claw``). ``default_agent_id`` is the agent that callers without
    an explicit agent address.
    """

    workspace_dir: Path = attrs.field(factory=Path.cwd, converter=Path)
    state_dir: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    default_agent_id: str = "main"
    plugins: PluginsConfig = attrs.field(factory=PluginsConfig)
    agents: AgentsConfig = attrs.field(factory=AgentsConfig)
    models: ModelsConfig = attrs.field(factory=ModelsConfig)
    workers: WorkersConfig = attrs.field(factory=WorkersConfig)
    gateway: GatewayConfig = attrs.field(factory=GatewayConfig)
    mcp: McpConfig = attrs.field(factory=McpConfig)
    state: StateConfig = attrs.field(factory=StateConfig)

    @property
    def resolved_state_dir(self) -> Path:
        """``state_dir``, or ``<workspace_dir>/.claw`` when it was not given."""
        return Path(self.state_dir) if self.state_dir is not None else self.workspace_dir / ".claw"

    @classmethod
    def load(cls, path: str | os.PathLike[str], **overrides: Any) -> HostConfig:
        """Read a TOML file; relative directories resolve against the file's folder."""
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(str(path), "config file not found", value=str(path)) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(str(path), f"invalid TOML: {exc}") from None
        for key in ("workspace_dir", "state_dir"):
            if isinstance(data.get(key), str) and not Path(data[key]).is_absolute():
                data[key] = str(path.parent / data[key])
        return cls.from_mapping(data, **overrides)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], **overrides: Any) -> HostConfig:
        """Build from a parsed mapping (TOML-shaped); ``overrides`` win over the mapping."""
        merged = dict(data)
        merged.update({k: v for k, v in overrides.items()})
        return _build(cls, merged, "")


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _build(cls: type[T], data: Any, path: str) -> T:
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(
            path or "<root>", f"expected a table, got {type(data).__name__}", value=data
        )
    # Public classes report module 'claw' (fixup_module_metadata), so resolve names here.
    hints = typing.get_type_hints(cls, globalns=globals())
    fields = {f.name: f for f in attrs.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        key_path = _join(path, str(key))
        if key not in fields or key.startswith("_"):
            known = ", ".join(sorted(fields))
            raise ConfigError(key_path, f"unknown key (known keys: {known})", value=value)
        kwargs[key] = _convert(hints[key], value, key_path)
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(
            _join(path, exc.key_path), str(exc).split(": ", 1)[-1], value=exc.value
        ) from None


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, path)
            except ConfigError as exc:
                errors.append(exc)
        raise errors[0]
    if tp is Any:
        return value
    if attrs.has(tp):
        return _build(tp, value, path)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"expected true or false, got {value!r}", value=value)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, f"expected an integer, got {value!r}", value=value)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(path, f"expected a number, got {value!r}", value=value)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(path, f"expected a string, got {value!r}", value=value)
        return value
    if tp is Path:
        if not isinstance(value, str | os.PathLike):
            raise ConfigError(path, f"expected a path string, got {value!r}", value=value)
        return Path(value)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(path, f"expected an array, got {value!r}", value=value)
        item_type = args[0] if args else Any
        return tuple(_convert(item_type, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict, typing.Mapping) or tp is Mapping:
        if not isinstance(value, Mapping):
            raise ConfigError(path, f"expected a table, got {value!r}", value=value)
        key_type, value_type = args if args else (str, Any)
        return {
            _convert(key_type, k, path): _convert(value_type, v, _join(path, str(k)))
            for k, v in value.items()
        }
    raise TypeError(f"config field {path} has an unsupported type {tp!r}")  # pragma: no cover
