"""Schemas in PostgreSQL, versioned by named migrations applied in order.

Each component that keeps tables in the database (``"state"``: sessions, transcripts
and the ledger; the record provider has its own) owns an ordered tuple of
:class:`Migration` steps. The ``claw_migrations`` table records, per component, which
names were applied and in what position. Opening a component's schema, in one
transaction under an advisory lock (so two hosts starting together do not both
migrate), does exactly one of:

* apply every migration (an empty database),
* apply the missing tail (the database is older: its names are a prefix of ours),
* accept it (the same names),
* refuse, naming the cause: a recorded name this build does not know (the database
  was migrated by a newer claw, or by another program), or names out of order.

Names are never reused and a migration's statements never change once released:
the name is the version.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import attrs
import psycopg

from ..._errors import SchemaVersionError

MIGRATIONS_TABLE = "claw_migrations"

_CREATE_TABLE = f"""
CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (
    component text NOT NULL,
    position integer NOT NULL CHECK (position > 0),
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (component, position),
    UNIQUE (component, name)
)
"""


@attrs.frozen
class Migration:
    """One named, immutable step of a component's schema."""

    name: str
    statements: tuple[str, ...]


def _lock_key(component: str) -> int:
    """The advisory lock serializing migrations of ``component`` across hosts."""
    return zlib.crc32(f"claw-migrations:{component}".encode())


def applied_migrations(conn: psycopg.Connection[Any], component: str) -> tuple[str, ...]:
    """The names recorded for ``component``, in the order they were applied."""
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (MIGRATIONS_TABLE,)).fetchone()
    if not exists or not exists[0]:
        return ()
    rows = conn.execute(
        f"SELECT name FROM {MIGRATIONS_TABLE} WHERE component = %s ORDER BY position",
        (component,),
    ).fetchall()
    return tuple(str(r[0]) for r in rows)


def migrate(
    conn: psycopg.Connection[Any],
    component: str,
    migrations: Sequence[Migration],
    *,
    where: str,
) -> tuple[str, ...]:
    """Bring ``component``'s schema to ``migrations`` or refuse; return the names applied now.

    Must run inside a transaction (the caller's), so a failure or a refusal leaves the
    database as it was. ``where`` names the database in messages (no secrets).
    """
    known = tuple(m.name for m in migrations)
    if len(set(known)) != len(known):
        raise ValueError(f"{component}: migration names repeat: {known!r}")
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(component),))
    conn.execute(_CREATE_TABLE)
    applied = applied_migrations(conn, component)
    unknown = [name for name in applied if name not in known]
    if unknown:
        raise SchemaVersionError(
            f"the {component} schema in {where} has migration {unknown[0]!r}, which this "
            f"build of claw does not know (it knows {', '.join(known)}); it was written by "
            "a newer claw or another program: upgrade claw on this host, or use another "
            "database"
        )
    if applied != known[: len(applied)]:
        raise SchemaVersionError(
            f"the {component} schema in {where} has migrations {list(applied)!r} in an order "
            f"this build does not ({list(known)!r}); refusing to guess"
        )
    todo = migrations[len(applied) :]
    for position, migration in enumerate(todo, start=len(applied) + 1):
        for statement in migration.statements:
            conn.execute(statement)
        conn.execute(
            f"INSERT INTO {MIGRATIONS_TABLE} (component, position, name) VALUES (%s, %s, %s)",
            (component, position, migration.name),
        )
    return tuple(m.name for m in todo)


def check_current(
    conn: psycopg.Connection[Any],
    component: str,
    migrations: Sequence[Migration],
    *,
    where: str,
) -> None:
    """Refuse (without changing anything) unless ``component`` is exactly at ``migrations``.

    For a process that must not migrate (a read-only tool): an older schema is refused
    naming the first missing migration, an unknown one naming the unknown name.
    """
    known = tuple(m.name for m in migrations)
    applied = applied_migrations(conn, component)
    if applied == known:
        return
    unknown = [name for name in applied if name not in known]
    if unknown:
        raise SchemaVersionError(
            f"the {component} schema in {where} has migration {unknown[0]!r}, which this "
            "build of claw does not know; upgrade claw on this host, or use another database"
        )
    missing = [name for name in known if name not in applied]
    raise SchemaVersionError(
        f"the {component} schema in {where} is older than this build: migration "
        f"{missing[0]!r} is not applied; open it once with migration allowed (a host start)"
    )
