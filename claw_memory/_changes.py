"""A near-free "did any source directory change?" check, on Linux inotify.

Before every search Memory Core must know whether its memory files moved. Stat'ing every
file costs about 4 ms at a thousand files, which is a large part of a search. With
inotify the kernel tells us instead: :class:`DirectoryWatch` watches the workspace root,
``memory/`` and its subdirectories and the extra paths (creation, deletion, moves,
writes and attribute changes of their entries), and :meth:`DirectoryWatch.changed` is a
single non-blocking ``read`` of the event queue. Any event, or a queue overflow, means
"maybe": the caller then runs the full stat check, which decides. So a missed
optimisation can cost time but never freshness, and where inotify is unavailable (not
Linux, or out of watches) :func:`open_directory_watch` returns ``None`` and callers stat
every time, as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterable
from pathlib import Path

_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
# IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE |
# IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
_MASK = 0x002 | 0x004 | 0x008 | 0x040 | 0x080 | 0x100 | 0x200 | 0x400 | 0x800
_IN_DONT_FOLLOW = 0x02000000
_IN_ONLYDIR = 0x01000000


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):
        return None
    return libc


class DirectoryWatch:
    """inotify watches on a set of directories; see the module docstring."""

    def __init__(self, libc: ctypes.CDLL, fd: int) -> None:
        self._libc = libc
        self._fd = fd
        self._watched: set[str] = set()
        self._closed = False

    def watch(self, directories: Iterable[str]) -> None:
        """Add watches (idempotent); raise OSError when one cannot be added."""
        for directory in directories:
            if directory in self._watched:
                continue
            wd = self._libc.inotify_add_watch(
                self._fd, os.fsencode(directory), _MASK | _IN_DONT_FOLLOW | _IN_ONLYDIR
            )
            if wd < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"inotify_add_watch({directory!r}): {os.strerror(err)}")
            self._watched.add(directory)

    @property
    def count(self) -> int:
        """How many directories are watched (a new one means a check must stat)."""
        return len(self._watched)

    def changed(self) -> bool:
        """Whether any event arrived since the last call (the queue is drained)."""
        seen = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return seen
            if not data:
                return seen
            seen = True

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self._fd)


def source_directories(workspace: str, extra_dirs: Iterable[str]) -> list[str]:
    """The directories whose entries can hold memory sources (symlinked dirs not followed)."""
    dirs = [workspace]
    roots = [Path(workspace) / "memory", *(Path(d) for d in extra_dirs)]
    for root in roots:
        if not root.is_dir() or root.is_symlink():
            continue
        for dirpath, dirnames, _ in os.walk(root, followlinks=False):
            dirs.append(dirpath)
            dirnames[:] = [d for d in dirnames if not (Path(dirpath) / d).is_symlink()]
    return dirs


def open_directory_watch(directories: Iterable[str]) -> DirectoryWatch | None:
    """A watch on ``directories``, or ``None`` where inotify cannot serve (see module doc)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "inotify_init1"):
        return None
    fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
    if fd < 0:
        return None
    watch = DirectoryWatch(libc, fd)
    try:
        watch.watch(directories)
    except OSError:
        watch.close()
        return None
    return watch
