"""DSNs without their secrets: what claw may print, log or put in an error.

A libpq DSN comes as ``key=value`` pairs or as a ``postgresql://user:pw@host/db`` URL,
and libpq's own errors quote a malformed DSN verbatim. Everything claw says about a
database goes through :func:`redact_dsn` or :func:`scrub` first.
"""

from __future__ import annotations

import re
import urllib.parse

import psycopg.conninfo

from ..._errors import ConfigError

_HIDDEN = "***"
# key=value form: password='quoted \' value' or password=bare
_KV_PASSWORD = re.compile(r"""(?<![?&\w])(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)""", re.IGNORECASE)
# URL form: scheme://user:password@
_URL_PASSWORD = re.compile(r"(postgres(?:ql)?://[^:/@\s]*:)([^@\s]*)(@)", re.IGNORECASE)
# URL query form: ?password=...
_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&\s]*)", re.IGNORECASE)


def password_of(dsn: str) -> str | None:
    try:
        password = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
    except psycopg.Error:
        return None
    return str(password) if password else None


def redact_dsn(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***`` (also when ``dsn`` is malformed)."""
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + _HIDDEN + m.group(3), dsn)
    text = _QUERY_PASSWORD.sub(lambda m: m.group(1) + _HIDDEN, text)
    return _KV_PASSWORD.sub(lambda m: m.group(1) + _HIDDEN, text)


def scrub(text: str, dsn: str) -> str:
    """``text`` (an error message, a log line) with ``dsn``'s password nowhere in it."""
    text = redact_dsn(text)
    password = password_of(dsn)
    if password:
        for form in {password, urllib.parse.quote(password, safe="")}:
            text = text.replace(form, _HIDDEN)
    return text


def describe(dsn: str) -> str:
    """A short, secret-free name of the server ``dsn`` reaches, for messages."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "a PostgreSQL server (malformed DSN)"
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or "5432"
    db = params.get("dbname") or params.get("user") or "(default)"
    return f"PostgreSQL {host}:{port}/{db}"


def check_dsn(dsn: str, *, key: str = "state.dsn") -> None:
    """Refuse a malformed ``dsn`` with a :class:`~claw.ConfigError` naming ``key``.

    The message carries libpq's reason with any password masked, never the value.
    """
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        raise ConfigError(key, f"not a PostgreSQL DSN: {scrub(str(exc), dsn)}") from None
