"""The derived local index: changes applied in sequence order, partitions, hybrid ranking."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from claw.plugin_sdk.search import HashEmbedder
from claw_records._index import PartitionFilter, RankedRecord, RecordIndex
from claw_records._policy import OWNER, conversation_partition
from claw_records._store import Change

EMBEDDER = HashEmbedder()
IDENTITY = f"{EMBEDDER.id}/{EMBEDDER.model}/{EMBEDDER.dims}"
GROUP = conversation_partition("grp:1")
OTHER = conversation_partition("grp:2")
EVERYTHING = PartitionFilter(partitions=None)


def change(
    seq: int,
    ref: str,
    text: str,
    *,
    partition: str = OWNER,
    revision: int = 1,
    forgotten: bool = False,
    embedder: str | None = IDENTITY,
    metadata: Mapping[str, Any] | None = None,
) -> Change:
    vector = EMBEDDER.embed_sync([text])[0].astype(np.float32).tobytes()
    return Change(
        ref=ref,
        partition=partition,
        text="" if forgotten else text,
        metadata=dict(metadata or {}),
        revision=revision,
        forgotten=forgotten,
        seq=seq,
        created_at=1.0,
        updated_at=float(seq),
        embedder=None if forgotten else embedder,
        embedding=None if forgotten or embedder is None else vector,
    )


def ranked(
    index: RecordIndex,
    query: str,
    *,
    hybrid: bool = False,
    scope: PartitionFilter = EVERYTHING,
    **kw: Any,
) -> tuple[list[RankedRecord], bool]:
    """One search of ``index`` (lexical, or hybrid with the hash embedder's query vector)."""
    params: dict[str, Any] = {
        "offset": 0,
        "limit": 10,
        "min_score": 0.0,
        "vector_weight": 0.3,
        "text_weight": 0.7,
    }
    params.update(kw)
    qvec = EMBEDDER.embed_sync([query])[0] if hybrid else None
    return index.search(query, qvec, scope=scope, **params)


def search(index: RecordIndex, query: str, scope: PartitionFilter = EVERYTHING) -> list[str]:
    """The references a hybrid search finds, best first."""
    return [h.record.ref for h in ranked(index, query, hybrid=True, scope=scope)[0]]


def test_changes_apply_in_sequence_order_and_the_cursor_follows() -> None:
    index = RecordIndex(dims=EMBEDDER.dims, embedder=IDENTITY)
    assert (
        index.apply([change(1, "a", "alice prefers green tea"), change(2, "b", "bob likes coffee")])
        == 2
    )
    assert index.cursor == 2
    # A change already applied (an overlapping catch-up) is skipped.
    assert index.apply([change(2, "b", "bob likes coffee")]) == 0
    assert search(index, "green tea") == ["a"]


def test_an_update_replaces_the_text_and_a_forget_removes_the_record() -> None:
    index = RecordIndex(dims=EMBEDDER.dims, embedder=IDENTITY)
    index.apply([change(1, "a", "the deploy window is tuesday")])
    index.apply([change(2, "a", "the deploy window moved to thursday", revision=2)])
    assert search(index, "tuesday deploy window") == ["a"]
    hits, _ = ranked(index, "thursday", limit=5)
    assert [(h.record.ref, h.record.revision) for h in hits] == [("a", 2)]
    index.apply([change(3, "a", "", forgotten=True)])
    assert search(index, "deploy window thursday") == []
    assert index.live_count == 0


def test_a_search_sees_only_the_partitions_it_is_given() -> None:
    index = RecordIndex(dims=EMBEDDER.dims, embedder=IDENTITY)
    index.apply(
        [
            change(1, "owner", "launch code is owner only"),
            change(2, "group", "launch party on friday", partition=GROUP),
            change(3, "other", "launch retro notes", partition=OTHER),
        ]
    )
    assert sorted(search(index, "launch")) == ["group", "other", "owner"]
    assert search(index, "launch", PartitionFilter(partitions=frozenset({GROUP}))) == ["group"]
    assert search(index, "launch", PartitionFilter(partitions=None, sessions=False)) == ["owner"]
    assert sorted(search(index, "launch", PartitionFilter(partitions=None, memory=False))) == [
        "group",
        "other",
    ]
    # The vector side is filtered too: a query sharing no term still finds only its own.
    assert search(index, "launch", PartitionFilter(partitions=frozenset({"nobody"}))) == []


def test_lexical_only_search_ranks_by_bm25_alone() -> None:
    index = RecordIndex(dims=EMBEDDER.dims, embedder=IDENTITY)
    index.apply([change(1, "a", "tea tea tea"), change(2, "b", "tea and biscuits")])
    hits, _ = ranked(index, "tea", limit=5)
    assert hits[0].text_score == 1.0
    assert all(h.vector_score is None for h in hits)


def test_min_score_pagination_and_ties_by_reference() -> None:
    index = RecordIndex(dims=EMBEDDER.dims, embedder=IDENTITY)
    index.apply([change(i + 1, f"r{i:02d}", "same words here") for i in range(5)])
    first, more = ranked(index, "same words", limit=2)
    rest, done = ranked(index, "same words", offset=2)
    assert [h.record.ref for h in first] == ["r00", "r01"] and more
    assert [h.record.ref for h in rest] == ["r02", "r03", "r04"] and not done
    none, _ = ranked(index, "same words", min_score=1.01)
    assert none == []


def test_a_vector_of_another_embedder_is_not_used_and_is_counted() -> None:
    index = RecordIndex(dims=EMBEDDER.dims, embedder=IDENTITY)
    index.apply([change(1, "a", "alpine lakes", embedder="other/model/384")])
    assert index.foreign_vectors == 1
    hits, _ = ranked(index, "alpine lakes", hybrid=True, limit=5)
    assert [h.vector_score for h in hits] == [0.0]
    index.apply([change(2, "a", "alpine lakes", revision=2)])
    assert index.foreign_vectors == 0


def test_cjk_records_are_found_by_their_bigrams() -> None:
    index = RecordIndex(dims=None, embedder=None)
    index.apply([change(1, "zh", "我喜欢喝绿茶", embedder=None), change(2, "en", "green tea")])
    assert search_lexical(index, "绿茶") == ["zh"]


def search_lexical(index: RecordIndex, query: str) -> list[str]:
    return [h.record.ref for h in ranked(index, query)[0]]


@pytest.mark.parametrize("forget_every", [2, 3])
def test_compaction_keeps_exactly_the_live_records(forget_every: int) -> None:
    index = RecordIndex(dims=EMBEDDER.dims, embedder=IDENTITY)
    n = 1500
    index.apply([change(i + 1, f"r{i}", f"note number {i} about item{i}") for i in range(n)])
    seq = n
    gone = []
    for i in range(0, n, forget_every):
        seq += 1
        gone.append(change(seq, f"r{i}", "", forgotten=True))
    index.apply(gone)
    assert index.live_count == n - len(gone)
    for i in (1, 4, 7, 1499):
        found = search_lexical(index, f"item{i}")
        assert found == ([] if i % forget_every == 0 else [f"r{i}"])
    # After compaction new changes still land where they belong.
    index.apply([change(seq + 1, "late", "a late note about item9999")])
    assert search_lexical(index, "item9999") == ["late"]
