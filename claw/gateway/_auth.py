"""Token authentication: which scopes a presented token may be granted.

Tokens come from :class:`~claw.GatewayConfig`: ``token`` is one token allowed
``operator.read``; ``tokens`` maps tokens to the scopes each may be granted. The
presented token is compared against every configured token with
:func:`hmac.compare_digest`, and the loop never stops early, so the time taken does not
say which token (or how much of one) matched.

A token shorter than :data:`MIN_TOKEN_CHARS` is refused when the table is built: the
gateway and the MCP endpoint answer as many guesses as a client sends, so a short token
is found by trying. :func:`choose_token` is where the commands take a token from: a
flag, a file (:func:`read_token_file`), or the environment, so that it need not appear
on a command line, which every user of the machine can read (``ps``).
"""

from __future__ import annotations

import hmac
import logging
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

from .._config import GatewayConfig
from .._errors import ClawError, ConfigError

READ_SCOPE = "operator.read"
"""The scope every memory method needs, and the one the ``token`` shorthand allows."""

MIN_TOKEN_CHARS = 16
"""The shortest token accepted (claw generates 32 characters, 192 random bits)."""

ENV_TOKEN = "CLAW_GATEWAY_TOKEN"
ENV_TOKEN_FILE = "CLAW_GATEWAY_TOKEN_FILE"
# A token file is one short line; anything much longer is not one.
_MAX_TOKEN_FILE_BYTES = 4096

logger = logging.getLogger("claw.gateway")


class TokenFileError(ClawError, OSError):
    """A token file could not be read, or holds no token (names the file, never the token)."""


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The token in ``path``: the file's text without surrounding whitespace.

    Warns when the file can be read by users other than its owner.
    """
    path = Path(path)
    try:
        with path.open("rb") as file:
            raw = file.read(_MAX_TOKEN_FILE_BYTES + 1)
            mode = os.fstat(file.fileno()).st_mode
    except OSError as exc:
        raise TokenFileError(f"token file {path}: {exc.strerror or exc}") from None
    if len(raw) > _MAX_TOKEN_FILE_BYTES:
        raise TokenFileError(
            f"token file {path}: larger than {_MAX_TOKEN_FILE_BYTES} bytes; it should hold "
            "one token"
        )
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise TokenFileError(f"token file {path}: not UTF-8 text") from None
    if not token or any(c in token for c in "\r\n"):
        raise TokenFileError(f"token file {path}: expected one token on one line")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        logger.warning(
            "token file %s can be read by other users (mode %o); chmod 600 it",
            path,
            stat.S_IMODE(mode),
        )
    return token


def choose_token(
    flag: str | None, file: str | None, environ: Mapping[str, str]
) -> str | None:
    """The token a command was given: ``--token``, else ``--token-file``, else
    ``$CLAW_GATEWAY_TOKEN``, else ``$CLAW_GATEWAY_TOKEN_FILE``; ``None`` when none was.

    A token on the command line is visible to every user of the machine, so it is
    accepted with a warning.
    """
    if flag:
        logger.warning(
            "--token puts the token in the process list, where every user of this machine "
            "can read it; use $%s or --token-file",
            ENV_TOKEN,
        )
        return flag
    if file:
        return read_token_file(file)
    if environ.get(ENV_TOKEN):
        return environ[ENV_TOKEN]
    if environ.get(ENV_TOKEN_FILE):
        return read_token_file(environ[ENV_TOKEN_FILE])
    return None


@attrs.frozen
class TokenTable:
    """The accepted tokens (as UTF-8 bytes) and the scopes each allows."""

    _entries: tuple[tuple[bytes, frozenset[str]], ...] = attrs.field(alias="entries")

    @classmethod
    def from_config(cls, config: GatewayConfig) -> TokenTable:
        """Build the table; refuses a config that accepts no token or an empty one."""
        merged: dict[str, set[str]] = {}
        if config.token is not None:
            merged.setdefault(config.token, set()).add(READ_SCOPE)
        for token, scopes in config.tokens.items():
            merged.setdefault(token, set()).update(scopes)
        if not merged:
            raise ConfigError(
                "gateway.token",
                "the gateway accepts no token; set gateway.token (or gateway.tokens) so that "
                "clients can connect",
            )
        if "" in merged:
            raise ConfigError("gateway.tokens", "a gateway token must not be empty", value="")
        for token in merged:
            if len(token) < MIN_TOKEN_CHARS:
                # The token itself is a secret: neither it nor its start is shown.
                key = "gateway.token" if token == config.token else "gateway.tokens"
                raise ConfigError(
                    key,
                    f"a token of {len(token)} character{'s' if len(token) > 1 else ''} is too "
                    "short to resist guessing; "
                    f"use at least {MIN_TOKEN_CHARS} random characters (with no token "
                    "configured, claw serve and claw mcp generate one of 32)",
                )
        for allowed in merged.values():
            if not all(isinstance(s, str) and s for s in allowed):
                # The token itself is a secret: it is not put into the message.
                raise ConfigError("gateway.tokens", "token scopes must be non-empty strings")
        return cls(entries=tuple((t.encode("utf-8"), frozenset(s)) for t, s in merged.items()))

    def allowed_scopes(self, presented: str) -> frozenset[str] | None:
        """The scopes ``presented`` may be granted, or ``None`` when it is not a valid token."""
        candidate = presented.encode("utf-8", errors="surrogatepass")
        found: set[str] | None = None
        for token, scopes in self._entries:
            if hmac.compare_digest(token, candidate):
                found = (found or set()) | scopes
        return frozenset(found) if found is not None else None

    def grant(self, presented: str, requested: Iterable[str]) -> frozenset[str] | None:
        """The requested scopes the token allows (possibly none); ``None`` for a bad token."""
        allowed = self.allowed_scopes(presented)
        if allowed is None:
            return None
        return allowed & frozenset(requested)
