"""Naming a storage failure: a read-only directory or a full disk, and where."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest

import claw
from claw._storage import storage_error, storage_problem

from .._storage import fill, read_only, small_disk


def test_errno_and_sqlite_codes_name_the_directory(tmp_path: Path) -> None:
    db = tmp_path / "state" / "sessions.sqlite3"
    full = storage_problem(db, OSError(errno.ENOSPC, "No space left on device"))
    assert full == f"the disk holding {tmp_path} is full (no space left); free space there"
    sqlite_full = sqlite3.OperationalError("database or disk is full")
    assert "is full" in (storage_problem(db, sqlite_full) or "")
    assert storage_problem(db, sqlite3.OperationalError("no such table: x")) is None
    assert storage_problem(db, ValueError("x")) is None
    error = storage_error(db, sqlite_full, what="the session database")
    assert isinstance(error, claw.StorageFullError) and isinstance(error, OSError)
    assert str(error).startswith(f"the session database {db}: the disk holding {tmp_path}")
    assert error.path == str(db)


def test_a_read_only_directory_is_found_by_looking_at_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with read_only(state):
        cannot_open = sqlite3.OperationalError("unable to open database file")
        problem = storage_problem(state / "index.sqlite3", cannot_open)
        assert problem is not None and str(state) in problem
        assert "read-only file system" in problem or "not writable" in problem
        error = storage_error(state / "x", OSError(errno.EROFS, "Read-only"), what="x")
        assert isinstance(error, claw.StorageReadOnlyError)
        assert isinstance(error, PermissionError)
    assert storage_problem(state / "index.sqlite3", cannot_open) is None


def test_a_full_disk_is_found_by_looking_at_it(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "1m") as disk:
        fill(disk)
        io_error = sqlite3.OperationalError("disk I/O error")
        assert "is full" in (storage_problem(disk / "a.sqlite3", io_error) or "")


@pytest.mark.parametrize("code", [errno.EIO])
def test_an_unexplained_io_error_on_a_healthy_disk_is_not_guessed(
    tmp_path: Path, code: int
) -> None:
    assert storage_problem(tmp_path / "x", OSError(code, "I/O error")) is None
