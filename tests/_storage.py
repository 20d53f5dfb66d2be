"""Real read-only directories and real full disks for the storage-failure tests.

Root ignores permission bits, so a directory is made read-only the way root cannot get
around: a read-only bind mount of itself (Linux ``mount --bind`` then ``remount,ro``).
Any other user gets ``chmod a-w``, which binds them. A full disk is a small ``tmpfs``
mounted at the directory (root only; without it, a test that needs one is skipped
unless ``CI`` is set, where it fails).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=30)


def _mounted(path: Path) -> bool:
    return subprocess.run(["mountpoint", "-q", str(path)], check=False).returncode == 0


def _unmount(path: Path) -> None:
    # Retried: a process that just closed a file under the mount can leave it busy.
    for _ in range(50):
        if not _mounted(path):
            return
        result = subprocess.run(["umount", str(path)], check=False, capture_output=True)
        if result.returncode != 0:
            subprocess.run(["sleep", "0.1"], check=False)
    assert not _mounted(path), f"could not unmount {path}"


def can_mount() -> bool:
    """Whether this process may mount file systems (root, with mount and umount)."""
    return os.geteuid() == 0 and all(shutil.which(c) for c in ("mount", "umount", "mountpoint"))


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make the directory ``path`` read-only for this process while the block runs."""
    path.mkdir(parents=True, exist_ok=True)
    if can_mount():
        _run("mount", "--bind", str(path), str(path))
        try:
            _run("mount", "-o", "remount,bind,ro", str(path))
            yield
        finally:
            _unmount(path)
        return
    mode = stat.S_IMODE(path.stat().st_mode)
    path.chmod(mode & ~0o222)
    try:
        yield
    finally:
        path.chmod(mode)


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A ``tmpfs`` of ``size`` (``"2m"``) mounted at the new directory ``path``."""
    if not can_mount():
        if os.environ.get("CI"):
            pytest.fail("a full-disk test needs to mount a tmpfs (run as root)")
        pytest.skip("a full-disk test needs to mount a tmpfs (run as root)")
    path.mkdir(parents=True)
    _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path))
    try:
        yield path
    finally:
        _unmount(path)


def grow(path: Path, size: str) -> None:
    """Give the ``tmpfs`` mounted at ``path`` (by :func:`small_disk`) more room."""
    _run("mount", "-o", f"remount,size={size}", str(path))


def fill(path: Path) -> Path:
    """Fill the file system holding ``path`` with one file; returns it (delete to free)."""
    filler = path / "filler"
    with filler.open("wb", buffering=0) as file:
        for size in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    file.write(b"\0" * size)
    return filler
