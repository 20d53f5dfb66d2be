"""The workspace's memory journal: an append-only log of every change to memory files.

One JSON object per line in ``<workspace>/.claw/memory-writes/journal.jsonl``, each
appended with one ``O_APPEND`` write while the workspace's writer lock is held, so
records never interleave. Every record has ``id``, ``op``, ``at`` (wall-clock seconds),
``path`` and ``by`` (the writer's provenance, :meth:`MemoryProvenance.to_wire`):

* ``add``: an entry appended or inserted: ``start``/``end`` (its lines then) and
  ``entries`` (the hash of each entry it holds, :func:`lines_revision`), the key under
  which search hits find who wrote an entry;
* ``forget``: lines taken out of a file: ``start``/``end``, the removed ``text``,
  up to three lines ``before`` and ``after`` the gap, the file's hash after the removal
  (``fileAfter``), the removed entries' hashes and their writers (``provenance``);
* ``restore``: a forget put back (``of``: its id; ``mode``; ``start``/``end``);
* ``void``: a record whose change never happened (``of``; written by recovery when a
  writer died between its journal record and its rename);
* ``purge``: text deleted for good (no text; ``removals``: the forgets whose copies
  were scrubbed).

A purge is the one rewrite of this file: the purged text must not survive in it (see
:meth:`Journal.rewrite`). A last line without its newline was torn by a killed writer;
readers skip it and the next writer cuts it off.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ._errors import MemoryFileError

JOURNAL_NAME = "journal.jsonl"


def fsync_dir(directory: Path) -> None:
    """Make a rename or creation in ``directory`` durable (best effort where unsupported)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (one ``write`` unless the kernel takes less)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Journal:
    """The journal file of one workspace (blocking; call under the writer lock to write)."""

    def __init__(self, home: Path) -> None:
        self.path = home / JOURNAL_NAME

    def append(self, record: dict[str, Any], *, sync: bool) -> None:
        """Append ``record`` as one line; ``sync``: make it durable before returning."""
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            write_all(fd, line.encode("utf-8", "surrogatepass"))
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def read_from(self, offset: int) -> tuple[list[dict[str, Any]], int]:
        """The complete records from byte ``offset`` on, and the offset after the last one."""
        try:
            with self.path.open("rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return [], 0
        end = data.rfind(b"\n") + 1
        records: list[dict[str, Any]] = []
        for raw in data[:end].splitlines():
            try:
                record = json.loads(raw)
            except ValueError:
                continue  # a line someone edited by hand: not ours to guess at
            if isinstance(record, dict) and isinstance(record.get("id"), str):
                records.append(record)
        return records, offset + end

    def records(self) -> list[dict[str, Any]]:
        """Every complete record, oldest first."""
        return self.read_from(0)[0]

    def last_id(self) -> str | None:
        """The id of the last complete record (what recovery compares a pending op with)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return None
        with self.path.open("rb") as f:
            back = min(size, 1 << 16)
            while True:
                f.seek(size - back)
                data = f.read(back)
                end = data.rfind(b"\n")
                if end < 0:
                    if back == size:
                        return None
                    back = min(size, back * 4)
                    continue
                start = data.rfind(b"\n", 0, end) + 1
                if start == 0 and back < size:
                    back = min(size, back * 4)
                    continue
                try:
                    record = json.loads(data[start:end])
                except ValueError:
                    return None
                value = record.get("id") if isinstance(record, dict) else None
                return value if isinstance(value, str) else None

    def repair(self) -> None:
        """Cut off a last line a killed writer tore (it never completed, so never counted)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            size = os.fstat(fd).st_size
            if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
                return
            back = min(size, 1 << 16)
            while True:
                data = os.pread(fd, back, size - back)
                cut = data.rfind(b"\n")
                if cut >= 0 or back == size:
                    os.ftruncate(fd, size - back + cut + 1)
                    os.fsync(fd)
                    return
                back = min(size, back * 4)
        finally:
            os.close(fd)

    def rewrite(self, records: Iterable[dict[str, Any]]) -> None:
        """Replace the journal with ``records`` (temporary file, fsync, rename): purge only."""
        fd, name = tempfile.mkstemp(prefix=".journal.", suffix=".tmp", dir=self.path.parent)
        tmp = Path(name)
        try:
            with os.fdopen(fd, "wb") as f:
                for record in records:
                    line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
                    f.write(line.encode("utf-8", "surrogatepass") + b"\n")
                f.flush()
                os.fsync(f.fileno())
            tmp.replace(self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        fsync_dir(self.path.parent)


def iter_ops(records: Iterable[dict[str, Any]], op: str) -> Iterator[dict[str, Any]]:
    """The records of one ``op``."""
    return (r for r in records if r.get("op") == op)


def require_text(record: dict[str, Any], key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        raise MemoryFileError(f"the memory journal's record {record.get('id')!r} lacks {key}")
    return value
