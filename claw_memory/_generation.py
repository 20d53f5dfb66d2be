"""Search generations: immutable snapshots that searches hold while they read.

A generation is a tantivy searcher (a snapshot of one commit), the row-ordered chunk
records, a map from chunk key to row, and a normalised float32 matrix of vectors
with per-row filter columns. Nothing in it is mutated after construction, so a
search that picked a generation keeps reading a consistent index while the next
one is built and swapped in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import numpy as np
import numpy.typing as npt
import tantivy

from ._records import ChunkRecord, dated_epoch


def normalise_rows(m: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Rows scaled to unit length (zero rows stay zero)."""
    m = np.asarray(m, dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: npt.NDArray[np.float32] = (m / norms).astype(np.float32, copy=False)
    return out


def _codes(values: Sequence[str | None]) -> tuple[npt.NDArray[np.int32], dict[str, int]]:
    index: dict[str, int] = {}
    codes = np.full(len(values), -1, dtype=np.int32)
    for i, v in enumerate(values):
        if v is not None:
            codes[i] = index.setdefault(v, len(index))
    return codes, index


@attrs.frozen(eq=False)
class Generation:
    """One immutable published state of the index."""

    number: int
    index_generation: int
    searcher: tantivy.Searcher | None
    records: tuple[ChunkRecord, ...]
    row_of_key: Mapping[int, int]
    matrix: npt.NDArray[np.float32] | None
    is_session: npt.NDArray[np.bool_]
    agent_codes: npt.NDArray[np.int32]
    agent_index: Mapping[str, int]
    skey_codes: npt.NDArray[np.int32]
    skey_index: Mapping[str, int]
    dated: npt.NDArray[np.float64]
    # What the rows hold, so that a search filter that excludes nothing here can be
    # dropped before ranking (a per-agent index answers agent filters trivially).
    sources_present: frozenset[str] = frozenset()
    session_agents: frozenset[str | None] = frozenset()
    session_keys: frozenset[str | None] = frozenset()

    @classmethod
    def build(
        cls,
        *,
        number: int,
        index_generation: int,
        searcher: tantivy.Searcher | None,
        records: Sequence[ChunkRecord],
        matrix: npt.NDArray[np.float32] | None,
    ) -> Generation:
        """Assemble a generation; ``matrix`` rows must already be normalised."""
        if matrix is not None and matrix.shape[0] != len(records):
            raise ValueError("one vector row per record is required")
        agent_codes, agent_index = _codes([r.agent_id for r in records])
        skey_codes, skey_index = _codes([r.session_key for r in records])
        dated = np.array(
            [
                np.nan if (d := dated_epoch(r.path)) is None or r.source != "memory" else d
                for r in records
            ],
            dtype=np.float64,
        )
        if matrix is not None:
            matrix.setflags(write=False)
        sessions = [r for r in records if r.source == "sessions"]
        return cls(
            number=number,
            index_generation=index_generation,
            searcher=searcher,
            records=tuple(records),
            row_of_key={r.key: i for i, r in enumerate(records)},
            matrix=matrix,
            is_session=np.array([r.source == "sessions" for r in records], dtype=np.bool_),
            agent_codes=agent_codes,
            agent_index=agent_index,
            skey_codes=skey_codes,
            skey_index=skey_index,
            dated=dated,
            sources_present=frozenset(r.source for r in records),
            session_agents=frozenset(r.agent_id for r in sessions),
            session_keys=frozenset(r.session_key for r in sessions),
        )

    @classmethod
    def empty(cls, number: int, index_generation: int, dims: int | None) -> Generation:
        matrix = None if dims is None else np.zeros((0, dims), dtype=np.float32)
        return cls.build(
            number=number,
            index_generation=index_generation,
            searcher=None,
            records=(),
            matrix=matrix,
        )

    def derive(
        self,
        *,
        number: int,
        searcher: tantivy.Searcher,
        replaced: frozenset[str] = frozenset(),
        removed_ids: frozenset[str] = frozenset(),
        added: Sequence[ChunkRecord] = (),
        added_vectors: npt.NDArray[np.float32] | None = None,
    ) -> Generation:
        """The next generation: rows of ``replaced`` provenances and of ``removed_ids``
        dropped, ``added`` appended.

        Unchanged records are shared with this generation, not copied.
        """
        keep = [
            i
            for i, r in enumerate(self.records)
            if r.provenance not in replaced and r.chunk_id not in removed_ids
        ]
        records = [self.records[i] for i in keep] + list(added)
        matrix = None
        if self.matrix is not None:
            parts = [self.matrix[keep]]
            if added_vectors is not None and len(added):
                parts.append(normalise_rows(added_vectors))
            matrix = np.ascontiguousarray(np.concatenate(parts, axis=0), dtype=np.float32)
        return Generation.build(
            number=number,
            index_generation=self.index_generation,
            searcher=searcher,
            records=records,
            matrix=matrix,
        )
