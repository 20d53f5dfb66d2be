"""A real PostgreSQL server for the tests: started once per test session, stopped at the end.

The tests that need PostgreSQL use the ``postgres_server`` fixture (the running server) or
``postgres_dsn`` (a fresh, empty database on it, dropped after the test); both are exposed
by ``tests/conftest.py`` so every test directory can use them, and every test that uses
either is given the ``postgres`` marker (``pytest -m postgres`` selects them all).

The server is Debian's PostgreSQL (``/usr/lib/postgresql/<version>/bin``) or whatever
``CLAW_PG_BINDIR`` / ``pg_config --bindir`` / ``PATH`` names. ``initdb`` runs in a private
temporary directory, and ``pg_ctl start`` serves a unix socket in that directory and a TCP
port on 127.0.0.1 only (a free port; the TCP side requires the password so the tests can
check that a DSN's password never leaks). PostgreSQL refuses to run as root and CI runs
as root: then the server runs as the ``postgres`` system user the package creates.

Missing binaries skip the tests with the reason, except under ``CI=true``, where a
server that cannot start fails them: a CI run never passes by skipping PostgreSQL.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs

#: The role the tests connect as (the cluster's superuser) and its password (TCP only).
SUPERUSER = "claw"
PASSWORD = "claw-test-secret-7f3a"
#: The system user the server runs as when the tests run as root.
SYSTEM_USER = "postgres"


class PostgresUnavailable(Exception):
    """No PostgreSQL binaries on this machine: a reason to skip (outside CI)."""


def in_ci() -> bool:
    """Whether this run is CI, where PostgreSQL tests must run rather than skip."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def find_bindir() -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``.

    Raises :class:`PostgresUnavailable` naming where it looked when none is found.
    """
    looked: list[str] = []
    candidates: list[Path] = []
    env = os.environ.get("CLAW_PG_BINDIR")
    if env:
        candidates.append(Path(env))
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        versions = sorted(
            (p for p in debian.iterdir() if p.name.isdigit()),
            key=lambda p: int(p.name),
            reverse=True,
        )
        candidates.extend(v / "bin" for v in versions)
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()
            if out:
                candidates.append(Path(out))
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    for candidate in candidates:
        looked.append(str(candidate))
        if all((candidate / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return candidate
    raise PostgresUnavailable(
        "PostgreSQL is not installed (no initdb/pg_ctl/postgres in "
        + (", ".join(looked) or "CLAW_PG_BINDIR, /usr/lib/postgresql/*/bin, pg_config, PATH")
        + "); install it with `apt-get install -y postgresql` or set CLAW_PG_BINDIR"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@attrs.frozen
class PostgresServer:
    """A running test server: where it listens and how to reach it.

    ``dsn`` reaches the ``postgres`` maintenance database over the unix socket (no
    password needed); :meth:`dsn_for` names another database; :meth:`tcp_dsn_for` goes
    over TCP with the password, for tests about credentials.
    """

    socket_dir: Path
    port: int
    data_dir: Path
    log_file: Path
    user: str = SUPERUSER
    password: str = PASSWORD

    @property
    def dsn(self) -> str:
        return self.dsn_for("postgres")

    def dsn_for(self, dbname: str) -> str:
        """A libpq DSN reaching ``dbname`` over this server's unix socket."""
        return f"host={self.socket_dir} port={self.port} user={self.user} dbname={dbname}"

    def tcp_dsn_for(self, dbname: str) -> str:
        """A URL DSN reaching ``dbname`` over 127.0.0.1 with the password in it."""
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/{dbname}"

    def psql(self, sql: str, *, dbname: str = "postgres") -> str:
        """Run ``sql`` with ``psql`` (no Python driver needed) and return its output."""
        bindir = find_bindir()
        return subprocess.run(
            [str(bindir / "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
             "-d", self.dsn_for(dbname), "-c", sql],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout

    def create_database(self, name: str | None = None) -> str:
        """Create an empty database and return its name."""
        name = name or f"t_{uuid.uuid4().hex[:16]}"
        self.psql(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return name

    def drop_database(self, name: str) -> None:
        """Drop ``name``, ending whatever sessions a test left connected to it."""
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def log_tail(self, lines: int = 40) -> str:
        """The end of the server log, for a failure message."""
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError as exc:
            return f"(no server log: {exc})"
        return "\n".join(text.splitlines()[-lines:])


def _as_server_user(argv: Sequence[str]) -> list[str]:
    """``argv`` run as the server's user: ``postgres`` when we are root, else ourselves."""
    if os.geteuid() != 0:
        return list(argv)
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", SYSTEM_USER, "--", *argv]
    import shlex

    return ["su", SYSTEM_USER, "-s", "/bin/sh", "-c", shlex.join(argv)]


def _run(argv: Sequence[str], what: str, log: Path | None = None) -> None:
    proc = subprocess.run(
        _as_server_user(argv), capture_output=True, text=True, timeout=120, check=False,
        cwd="/",
    )
    if proc.returncode != 0:
        tail = ""
        if log is not None and log.exists():
            tail = "\n--- server log ---\n" + "\n".join(
                log.read_text(errors="replace").splitlines()[-30:]
            )
        raise RuntimeError(
            f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n"
            f"{proc.stdout}{proc.stderr}{tail}"
        )


@contextlib.contextmanager
def running_server() -> Iterator[PostgresServer]:
    """Start a private PostgreSQL server, yield it, stop it and remove its files.

    Raises :class:`PostgresUnavailable` when the binaries are absent, ``RuntimeError``
    (with the server's output) when they are present but the server does not start.
    """
    bindir = find_bindir()
    as_root = os.geteuid() == 0
    if as_root:
        try:
            owner = pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            raise RuntimeError(
                f"running as root, PostgreSQL needs the {SYSTEM_USER!r} system user "
                "(the postgresql package creates it)"
            ) from None
    # /tmp rather than pytest's tmp_path: the server's user must reach the directory,
    # and pytest's base directory is private to us; the short path also keeps the
    # socket path under the 107-byte limit of unix sockets.
    root = Path(tempfile.mkdtemp(prefix="claw-pg-"))
    try:
        if as_root:
            os.chown(root, owner.pw_uid, owner.pw_gid)
        root.chmod(0o755)
        data = root / "data"
        log = root / "server.log"
        pwfile = root / "pwfile"
        pwfile.write_text(PASSWORD + "\n")
        if as_root:
            os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        pwfile.chmod(0o600)
        _run(
            [str(bindir / "initdb"), "-D", str(data), "-U", SUPERUSER, "-E", "UTF8",
             "--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256",
             f"--pwfile={pwfile}", "--no-sync", "--no-instructions"],
            "initdb",
        )
        pwfile.unlink()
        attempts = 3
        for attempt in range(attempts):
            port = _free_port()
            options = " ".join([
                f"-p {port}",
                f"-k {root}",
                "-c listen_addresses=127.0.0.1",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c max_connections=300",
                "-c shared_buffers=32MB",
            ])
            try:
                _run(
                    [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w",
                     "-t", "60", "-o", options, "start"],
                    "pg_ctl start",
                    log,
                )
                break
            except RuntimeError:
                # Most likely another process took the port between our probe and the
                # server's bind; try another.
                if attempt == attempts - 1:
                    raise
        server = PostgresServer(socket_dir=root, port=port, data_dir=data, log_file=log)
        try:
            yield server
        finally:
            with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
                _run(
                    [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w",
                     "stop"],
                    "pg_ctl stop",
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
