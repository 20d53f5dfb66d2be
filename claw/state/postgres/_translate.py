"""psycopg's errors translated into claw's hierarchy at the driver boundary.

Connection failures become :class:`~claw.DatabaseUnavailableError` (a
``ConnectionError``, retryable); anything the server refused becomes
:class:`~claw.DatabaseError` with its SQLSTATE. Messages name the operation, the
server and the driver's error class, and never the DSN's password; the driver's
exception stays chained as the cause unless its text carries the password.
"""

from __future__ import annotations

import psycopg
import psycopg_pool

from ..._errors import ClawError, DatabaseError, DatabaseUnavailableError
from ._dsn import describe, password_of, scrub


def translate(exc: BaseException, *, what: str, dsn: str) -> ClawError:
    """The claw error for driver error ``exc`` raised while doing ``what``."""
    raw = str(exc).strip() or type(exc).__name__
    message = scrub(raw, dsn)
    cause = f"{type(exc).__module__}.{type(exc).__qualname__}"
    where = describe(dsn)
    error: ClawError
    if isinstance(exc, psycopg_pool.PoolTimeout | psycopg.OperationalError) and not isinstance(
        exc, psycopg.errors.QueryCanceled | psycopg.errors.LockNotAvailable
    ):
        error = DatabaseUnavailableError(f"{what}: {where} unavailable ({cause}): {message}")
    else:
        sqlstate = getattr(exc, "sqlstate", None)
        code = f", SQLSTATE {sqlstate}" if sqlstate else ""
        error = DatabaseError(
            f"{what} on {where} failed ({cause}{code}): {message}", sqlstate=sqlstate
        )
    return error


def chainable(exc: BaseException, dsn: str) -> BaseException | None:
    """``exc`` if it may be chained as a claw error's cause, ``None`` if its text shows
    ``dsn``'s password (libpq quotes a malformed DSN verbatim): ``raise ... from`` this."""
    password = password_of(dsn)
    if password and any(password in str(e) for e in (exc, *exc.args)):
        return None
    return exc
