"""Published generations on disk: what every process of an index reads.

The writer (the process holding the lease, :mod:`claw_memory._lease`) publishes each
generation into files that any number of processes map and follow:

``published/e<E>.f32``
    the epoch's vector matrix, normalised float32 rows, appended to in place. Every
    reader maps it read-only (``numpy.memmap``), so N processes share one copy in the
    page cache.
``published/e<E>.log``
    the epoch's publications in order: for each, a header line
    ``{"n": number, "dead": [rows], "added": k}`` and ``k`` record lines (one JSON
    array per chunk, in row order), so that replaying the log rebuilds the rows and
    which of them are dead.
``CURRENT``
    the pointer: the epoch, its published prefix (``rows`` matrix rows and
    ``log_bytes`` bytes of log), the publication number, the lexical generation,
    the index identity and the store version it reflects. It is replaced atomically
    (write a new file, ``fsync``, ``rename``): publication is that one rename.

Bytes past the pointer's prefix belong to nobody: a writer killed mid-publication
leaves them, readers never read them, and the next writer writes over them. The
published prefix is never written again, so a generation a search holds stays valid
while later ones are published. Compaction (dead rows past an eighth) starts a new
epoch; the old epoch's files are unlinked, and processes still mapping them keep
reading until they follow the pointer.

Every function here blocks; the index calls them on its worker pool.
"""

from __future__ import annotations

import contextlib
import json
import operator
import os
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import overload

import attrs
import numpy as np
import numpy.typing as npt
import tantivy

from ._generation import Generation, RowColumns
from ._records import ChunkRecord

POINTER = "CURRENT"
PUBLISHED = "published"
_FIELDS = tuple(f.name for f in attrs.fields(ChunkRecord))
_ENTRY_IDS = _FIELDS.index("entry_ids")
# Rows copied per step when an epoch is written, so that building one holds a bounded
# slice of the matrix in memory, not a second copy of all of it.
_BATCH_ROWS = 65_536


@attrs.frozen
class Pointer:
    """The published state of an index (the content of ``CURRENT``)."""

    epoch: int
    number: int
    index_generation: int
    identity: str
    store_version: int
    rows: int
    log_bytes: int
    dims: int | None


def _epoch_path(index_dir: Path, epoch: int, suffix: str) -> Path:
    return index_dir / PUBLISHED / f"e{epoch}.{suffix}"


def read_pointer(index_dir: Path) -> Pointer | None:
    """The published pointer, or ``None`` when nothing was published (or it is unreadable,
    which the next writer repairs by publishing again)."""
    try:
        data = json.loads((index_dir / POINTER).read_text(encoding="utf-8"))
        return Pointer(**data)
    except (OSError, ValueError, TypeError):
        return None


def _sync_epoch(index_dir: Path, pointer: Pointer) -> None:
    """Make the epoch files ``pointer`` publishes durable (``fdatasync`` each): the
    blocks are written without one, so a sync of many batches waits for the disk once."""
    suffixes = ("log",) if pointer.dims is None else ("f32", "log")
    for suffix in suffixes:
        fd = os.open(_epoch_path(index_dir, pointer.epoch, suffix), os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)


def flip_pointer(index_dir: Path, pointer: Pointer) -> None:
    """Publish ``pointer``: make its epoch's files durable, write it beside ``CURRENT``,
    make that durable, rename it over.

    Then unlink older epochs' files (processes mapping them keep their pages).
    """
    _sync_epoch(index_dir, pointer)
    tmp = index_dir / f"{POINTER}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, json.dumps(attrs.asdict(pointer), sort_keys=True).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    tmp.replace(index_dir / POINTER)
    for child in (index_dir / PUBLISHED).iterdir():
        stem = child.name.split(".", 1)[0]
        if stem.startswith("e") and stem[1:].isdigit() and int(stem[1:]) < pointer.epoch:
            with contextlib.suppress(OSError):
                child.unlink()


# One encoder for every log line (``json.dumps`` with an option builds one per call),
# and one C call for a record's fields: a first sync encodes a line per chunk.
_LINE_ENCODER = json.JSONEncoder(ensure_ascii=False)
_FIELD_VALUES = operator.attrgetter(*_FIELDS)


def _encode(record: ChunkRecord) -> bytes:
    return (_LINE_ENCODER.encode(_FIELD_VALUES(record)) + "\n").encode()


# The decoder's raw_decode, without json.loads around it: a line is UTF-8 we wrote (no
# encoding to detect) holding one array and its newline (no whitespace to skip, nothing
# after it to refuse). A search decodes the records of its page and of the head's ties,
# so the wrapper's work, 40% of a record's decoding, was per search.
_RAW_DECODE = json.JSONDecoder().raw_decode


def _decode(line: bytes) -> ChunkRecord:
    values = _RAW_DECODE(line.decode())[0]
    values[_ENTRY_IDS] = tuple(values[_ENTRY_IDS])
    return ChunkRecord(*values)


class _LogFile:
    """An epoch's publication log, open for reading: the descriptor keeps an epoch a
    compaction unlinked readable for the generations that still view it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        st = os.fstat(self.fd)
        self.identity = (st.st_dev, st.st_ino)

    def __del__(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            os.close(self.fd)


# Decoded records a log view keeps (the ones searches read again: the head of popular
# queries); then it starts over, so a long-lived generation stays bounded.
_DECODED_ROWS = 4096


class RowRecords(Sequence[ChunkRecord]):
    """The records of a generation's rows, read from the publication log by row.

    A generation keeps only where each row's line lies (12 bytes a row); a record is
    decoded when a search reads it (a page of hits, the head of a ranking), so a
    million-chunk index holds no million Python objects, and every process reads the
    same lines through the page cache.
    """

    def __init__(
        self, log: _LogFile, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int32]
    ) -> None:
        self._log = log
        self._starts = starts
        self._lengths = lengths
        self._decoded: dict[int, ChunkRecord] = {}

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, row: int) -> ChunkRecord: ...
    @overload
    def __getitem__(self, row: slice) -> Sequence[ChunkRecord]: ...
    def __getitem__(self, row: int | slice) -> ChunkRecord | Sequence[ChunkRecord]:
        if isinstance(row, slice):
            return self.select(np.arange(len(self))[row])
        found = self._decoded.get(row)
        if found is None:
            found = _decode(self.raw(row))
            if len(self._decoded) >= _DECODED_ROWS:
                self._decoded.clear()
            self._decoded[row] = found
        return found

    def raw(self, row: int) -> bytes:
        """The log line of ``row`` (its JSON, with the newline)."""
        if row < 0:
            row += len(self)
        if not 0 <= row < len(self):
            raise IndexError(row)
        return os.pread(self._log.fd, int(self._lengths[row]), int(self._starts[row]))

    def select(self, rows: npt.NDArray[np.intp]) -> RowRecords:
        """A view of ``rows`` of this one, in that order (a compaction's live rows)."""
        return RowRecords(self._log, self._starts[rows], self._lengths[rows])

    def joined(self, other: Sequence[ChunkRecord]) -> RowRecords | None:
        """This view followed by ``other`` when both view the same log, else ``None``."""
        if not isinstance(other, RowRecords) or other._log.identity != self._log.identity:
            return None
        return RowRecords(
            self._log,
            np.concatenate([self._starts, other._starts]),
            np.concatenate([self._lengths, other._lengths]),
        )


def _lines(records: Sequence[ChunkRecord]) -> Iterator[bytes]:
    if isinstance(records, RowRecords):
        for i in range(len(records)):
            yield records.raw(i)
    else:
        for r in records:
            yield _encode(r)


def _write_at(fd: int, offset: int, parts: Iterable[bytes]) -> int:
    for part in parts:
        view = memoryview(part)
        while view:
            n = os.pwrite(fd, view, offset)
            offset += n
            view = view[n:]
    return offset


@attrs.frozen(eq=False)
class Written:
    """What one write to an epoch's files left past the published prefix: the pointer
    that would publish it, and where the written records' lines lie in the log."""

    pointer: Pointer
    starts: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int32]

    def records(self, index_dir: Path) -> Sequence[ChunkRecord]:
        """The written records, as a view of the log (read back by row)."""
        if not len(self.starts):
            return ()
        log = _LogFile(_epoch_path(index_dir, self.pointer.epoch, "log"))
        return RowRecords(log, self.starts, self.lengths)


Part = tuple[Sequence[ChunkRecord], "npt.NDArray[np.float32] | None"]
"""A bounded batch of records with their normalised matrix rows (``None``: no matrix)."""


def _paired(
    records: Sequence[ChunkRecord], row_batches: Iterable[npt.NDArray[np.float32]]
) -> Iterator[Part]:
    """``records`` cut to match the row batches (or in bounded batches, without rows)."""
    done = 0
    for batch in row_batches:
        yield _slice(records, done, done + batch.shape[0]), batch
        done += batch.shape[0]
    while done < len(records):
        yield _slice(records, done, done + _BATCH_ROWS), None
        done += _BATCH_ROWS


def _slice(records: Sequence[ChunkRecord], start: int, stop: int) -> Sequence[ChunkRecord]:
    if start == 0 and stop >= len(records):
        return records
    return records[start:stop]


def _append(
    index_dir: Path,
    pointer: Pointer,
    *,
    fresh: bool,
    number: int,
    dead: Sequence[int],
    parts: Iterable[Part],
    store_version: int,
    added: int | None = None,
) -> Written:
    """Write one block (header, then the parts' records and rows) past ``pointer``'s
    prefix; the header's count is ``added`` (summed from the parts when not given, which
    then must be a sequence)."""
    (index_dir / PUBLISHED).mkdir(exist_ok=True)
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if fresh else 0)
    if added is None:
        parts = list(parts)
        added = sum(len(recs) for recs, _ in parts)
    rows = pointer.rows
    starts = np.empty(added, dtype=np.int64)
    lengths = np.empty(added, dtype=np.int32)
    dims = pointer.dims
    vfd = None
    if dims is not None:
        vfd = os.open(_epoch_path(index_dir, pointer.epoch, "f32"), flags, 0o644)
    fd = os.open(_epoch_path(index_dir, pointer.epoch, "log"), flags, 0o644)
    try:
        offset = rows * (dims or 0) * 4
        header = json.dumps({"n": number, "dead": list(dead), "added": added}) + "\n"
        end = _write_at(fd, pointer.log_bytes, [header.encode()])
        i = 0
        for recs, given in parts:
            if vfd is not None and dims is not None:
                if given is None:
                    raise ValueError("one matrix row per published record is required")
                block = np.ascontiguousarray(given, dtype=np.float32)
                if block.ndim != 2 or block.shape[1] != dims:
                    raise ValueError(f"matrix rows must have {dims} dimensions")
                if block.shape[0] != len(recs):
                    raise ValueError("one matrix row per published record is required")
                offset = _write_at(vfd, offset, [block.tobytes()])
            batch: list[bytes] = []
            for line in _lines(recs):
                if i + len(batch) >= added:
                    raise ValueError("more records than the block's header counts")
                batch.append(line)
                if len(batch) >= 1024:
                    end = _flush_lines(fd, end, batch, starts=starts, lengths=lengths, first=i)
                    i += len(batch)
                    batch = []
            if batch:
                end = _flush_lines(fd, end, batch, starts=starts, lengths=lengths, first=i)
                i += len(batch)
        if i != added:
            raise ValueError("fewer records than the block's header counts")
        rows += added
        # Made durable by the flip that publishes them (see flip_pointer), once for
        # every block of a publication.
        if vfd is not None:
            os.ftruncate(vfd, offset)
        os.ftruncate(fd, end)
    finally:
        os.close(fd)
        if vfd is not None:
            os.close(vfd)
    new = attrs.evolve(
        pointer, number=number, rows=rows, log_bytes=end, store_version=store_version
    )
    return Written(pointer=new, starts=starts, lengths=lengths)


def _flush_lines(
    fd: int,
    offset: int,
    batch: list[bytes],
    *,
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int32],
    first: int,
) -> int:
    pos = offset
    for j, line in enumerate(batch):
        starts[first + j] = pos
        lengths[first + j] = len(line)
        pos += len(line)
    return _write_at(fd, offset, [b"".join(batch)])


def write_publication(
    index_dir: Path,
    pointer: Pointer,
    *,
    number: int,
    dead: Sequence[int],
    added: Sequence[ChunkRecord],
    vectors: npt.NDArray[np.float32] | None,
    store_version: int,
) -> Written:
    """Append one publication block to the current epoch (not yet visible: see
    :func:`flip_pointer`); a sync writes one block per bounded batch of its changes."""
    return _append(
        index_dir,
        pointer,
        fresh=False,
        number=number,
        dead=dead,
        parts=[(added, vectors)],
        store_version=store_version,
    )


def write_epoch(
    index_dir: Path,
    *,
    epoch: int,
    number: int,
    index_generation: int,
    identity: str,
    store_version: int,
    dims: int | None,
    records: Sequence[ChunkRecord] | None = None,
    row_batches: Iterable[npt.NDArray[np.float32]] = (),
    parts: Iterable[Part] | None = None,
    count: int | None = None,
) -> Written:
    """Write a new epoch holding ``records`` (all live) and their normalised rows,
    given in bounded batches, or ``count`` records given as ``parts`` (bounded batches
    of records and rows, read once); not yet visible: see :func:`flip_pointer`."""
    empty = Pointer(
        epoch=epoch,
        number=number,
        index_generation=index_generation,
        identity=identity,
        store_version=store_version,
        rows=0,
        log_bytes=0,
        dims=dims,
    )
    return _append(
        index_dir,
        empty,
        fresh=True,
        number=number,
        dead=(),
        parts=_paired(records or (), row_batches) if parts is None else parts,
        store_version=store_version,
        added=len(records or ()) if parts is None else count,
    )


def live_row_batches(
    matrix: npt.NDArray[np.float32] | None,
    rows: npt.NDArray[np.intp],
    added: npt.NDArray[np.float32] | None,
) -> Iterator[npt.NDArray[np.float32]]:
    """``matrix[rows]`` followed by ``added``, in bounded batches (a compaction)."""
    if matrix is None:
        return
    for start in range(0, len(rows), _BATCH_ROWS):
        yield matrix[rows[start : start + _BATCH_ROWS]]
    if added is not None:
        yield added


def generation_after(
    old: Generation,
    index_dir: Path,
    written: Written,
    searcher: tantivy.Searcher,
    *,
    dead: Sequence[int],
    columns: RowColumns | None,
    epoch: bool,
) -> Generation:
    """The writer's own view of what it just published after ``old``: ``dead`` rows
    killed and the written records appended, or, for a new ``epoch``, those records
    whole. ``columns`` are the written records' metadata when the writer has them."""
    pointer = written.pointer
    matrix = mapped_matrix(index_dir, pointer)
    records = written.records(index_dir)
    if epoch:
        return Generation.build(
            number=pointer.number,
            index_generation=pointer.index_generation,
            searcher=searcher,
            records=records,
            matrix=matrix,
            columns=columns,
        )
    return old.appended(
        number=pointer.number,
        searcher=searcher,
        dead=dead,
        added=records,
        matrix=matrix,
        columns=columns,
    )


def pending_generation(
    old: Generation,
    index_dir: Path,
    written: Written,
    searcher: tantivy.Searcher,
    *,
    dead: Sequence[int],
    columns: RowColumns | None,
) -> Generation:
    """What ``written`` would publish after ``old``, before it is published (the rows
    a compaction then rewrites as a new epoch)."""
    return generation_after(
        old, index_dir, written, searcher, dead=dead, columns=columns, epoch=False
    )


def mapped_matrix(index_dir: Path, pointer: Pointer) -> npt.NDArray[np.float32] | None:
    """The published matrix, mapped read-only (shared by every process that maps it).

    A plain ``ndarray`` view of the mapping (which it keeps alive as its ``base``): a
    product with a ``numpy.memmap`` instance is about 1.6 times slower than the same
    product over a plain view of the same pages (10k x 384 rows: 1.2 against 0.77 ms),
    and every array derived from it would be a ``memmap`` too.
    """
    if pointer.dims is None:
        return None
    if pointer.rows == 0:
        return np.zeros((0, pointer.dims), dtype=np.float32)
    mapping = np.memmap(
        _epoch_path(index_dir, pointer.epoch, "f32"),
        dtype=np.float32,
        mode="r",
        shape=(pointer.rows, pointer.dims),
    )
    matrix: npt.NDArray[np.float32] = mapping.view(np.ndarray)
    return matrix


@attrs.frozen(eq=False)
class _Replayed:
    """The blocks of a stretch of log, read in one streaming pass: the dead rows, the
    added records (a view of the log) and their metadata; no record object is kept."""

    dead: list[int]
    records: Sequence[ChunkRecord]
    columns: RowColumns


def _read_blocks(index_dir: Path, epoch: int, start: int, stop: int) -> _Replayed:
    path = _epoch_path(index_dir, epoch, "log")
    log = _LogFile(path)
    dead: set[int] = set()
    columns = RowColumns()
    starts = array("q")
    lengths = array("i")
    with open(log.fd, "rb", closefd=False) as f:
        f.seek(start)
        pos = start
        while pos < stop:
            header = f.readline()
            pos += len(header)
            head = json.loads(header)
            for _ in range(int(head["added"])):
                line = f.readline()
                starts.append(pos)
                lengths.append(len(line))
                pos += len(line)
                columns.add(_decode(line))
            dead.update(int(r) for r in head["dead"])
    if pos != stop:
        raise ValueError(f"publication log of epoch {epoch} does not end at its pointer")
    records: Sequence[ChunkRecord] = ()
    if starts:
        records = RowRecords(
            log,
            np.frombuffer(starts, dtype=np.int64).copy(),
            np.frombuffer(lengths, dtype=np.int32).copy(),
        )
    return _Replayed(sorted(dead), records, columns)


def load_generation(index_dir: Path, pointer: Pointer, searcher: tantivy.Searcher) -> Generation:
    """The generation ``pointer`` publishes, read from its epoch's files."""
    replayed = _read_blocks(index_dir, pointer.epoch, 0, pointer.log_bytes)
    matrix = mapped_matrix(index_dir, pointer)
    gen = Generation.build(
        number=pointer.number,
        index_generation=pointer.index_generation,
        searcher=searcher,
        records=replayed.records,
        matrix=matrix,
        columns=replayed.columns,
    )
    if replayed.dead:
        gen = gen.appended(
            number=pointer.number, searcher=searcher, dead=replayed.dead, added=(), matrix=matrix
        )
    return gen


def follow_generation(
    gen: Generation,
    index_dir: Path,
    old: Pointer,
    new: Pointer,
    searcher: tantivy.Searcher,
) -> Generation:
    """The generation ``new`` publishes, from ``gen`` (published by ``old``): the log
    appended since ``old`` is replayed over it, or, for a new epoch, read whole."""
    if (
        new.epoch != old.epoch
        or new.index_generation != old.index_generation
        or new.log_bytes < old.log_bytes
        or new.rows < old.rows
    ):
        return load_generation(index_dir, new, searcher)
    matrix = mapped_matrix(index_dir, new)
    replayed = _read_blocks(index_dir, new.epoch, old.log_bytes, new.log_bytes)
    return gen.appended(
        number=new.number,
        searcher=searcher,
        dead=replayed.dead,
        added=replayed.records,
        matrix=matrix,
        columns=replayed.columns,
    )
