"""Token authentication: which scopes a presented token may be granted.

Tokens come from :class:`~claw.GatewayConfig`: ``token`` is one token allowed
``operator.read``; ``tokens`` maps tokens to the scopes each may be granted. The
presented token is compared against every configured token with
:func:`hmac.compare_digest`, and the loop never stops early, so the time taken does not
say which token (or how much of one) matched.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

import attrs

from .._config import GatewayConfig
from .._errors import ConfigError

READ_SCOPE = "operator.read"
"""The scope every memory method needs, and the one the ``token`` shorthand allows."""


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
