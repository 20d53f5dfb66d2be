"""Search generations: derived ones append and mark rows dead, yet read exactly like a
fresh build of their live rows, and never disturb generations searches still hold."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from claw.plugin_sdk import InlineWorkerPool
from claw.plugin_sdk.search import HashEmbedder
from claw_memory._generation import Generation, normalise_rows
from claw_memory._index import open_memory_index
from claw_memory._records import ChunkRecord
from claw_memory._settings import MemoryCoreSettings

DIMS = 8
_keys = itertools.count(1)


def _record(prov: str, i: int, session: bool = False) -> ChunkRecord:
    key = next(_keys)
    return ChunkRecord(
        chunk_id=f"c{key}",
        key=key,
        source="sessions" if session else "memory",
        provenance=prov,
        path=prov,
        start_line=i,
        end_line=i,
        content_hash=f"h{key}",
        revision="r",
        # An assistant's turn, then two users'; every other one asks a question.
        text=("assistant: ", "user: ", "user: ")[key % 3] + f"chunk {key}" + "?" * (key % 2),
        agent_id="main" if session else None,
        session_key=f"agent:main:{prov}" if session else None,
        timestamp=1_700_000_000.0 + 3_600.0 * key if session else None,
    )


def _vectors(records: list[ChunkRecord]) -> npt.NDArray[np.float32]:
    # A record's vector is a function of its key, so the expected row is known.
    return np.stack(
        [np.random.default_rng(r.key).standard_normal(DIMS).astype(np.float32) for r in records]
    )


def _built(records: list[ChunkRecord]) -> Generation:
    return Generation.build(
        number=1,
        index_generation=1,
        searcher=None,
        records=records,
        matrix=normalise_rows(_vectors(records)),
    )


def _check(gen: Generation, live: dict[int, ChunkRecord]) -> None:
    assert gen.live_count == len(live)
    assert set(gen.row_of_key) == set(live)
    assert gen.matrix is not None and gen.matrix.shape == (len(gen.records), DIMS)
    assert not gen.matrix.flags.writeable
    expected = normalise_rows(_vectors(list(live.values()))) if live else None
    for j, (key, rec) in enumerate(live.items()):
        row = gen.row_of_key[key]
        assert gen.records[row] is rec
        assert gen.alive is None or gen.alive[row]
        assert expected is not None
        np.testing.assert_allclose(gen.matrix[row], expected[j], rtol=1e-6)
        assert gen.is_session[row] == (rec.source == "sessions")
    by_prov: dict[str, list[int]] = {}
    for key, rec in live.items():
        by_prov.setdefault(rec.provenance, []).append(gen.row_of_key[key])
    assert {p: sorted(r) for p, r in gen.rows_of_provenance.items()} == {
        p: sorted(r) for p, r in by_prov.items()
    }
    # The columns a search reads instead of records: each row's first line and time,
    # and so each live row's neighbours, are what its record says.
    for key, rec in live.items():
        row = gen.row_of_key[key]
        assert int(gen.start_lines[row]) == rec.start_line
        stamp = float(gen.stamps[row])
        assert (rec.timestamp is None and np.isnan(stamp)) or stamp == rec.timestamp
        assert list(gen.prov_index)[gen.prov_codes[row]] == rec.provenance
        turn = rec.source == "sessions"
        assert gen.assistant_turns[row] == (turn and rec.text.startswith("assistant: "))
        assert gen.states_time[row] == rec.states_time
        assert gen.question_terms[row] == rec.question_terms
        ordered = sorted(
            gen.rows_of_provenance[rec.provenance], key=lambda r: (gen.records[r].start_line, r)
        )
        p = ordered.index(row)
        assert gen.adjacent_rows(row) == (
            tuple(ordered[i] for i in (p - 1, p + 1) if 0 <= i < len(ordered)),
            tuple(ordered[i] for i in (p - 2, p + 2) if 0 <= i < len(ordered)),
        )
    dead = len(gen.records) - len(live)
    assert (gen.alive is None) == (dead == 0)
    assert dead <= 0.125 * len(gen.records)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["replace", "remove_ids", "drop"]),
            st.integers(min_value=0, max_value=39),
            st.integers(min_value=0, max_value=6),
        ),
        max_size=25,
    )
)
def test_derived_generations_equal_their_live_rows_and_leave_older_ones_intact(
    steps: list[tuple[str, int, int]],
) -> None:
    provs = [f"memory/f{i}.md" for i in range(40)]
    # Start lines out of row order, some equal: neighbours follow lines, then rows.
    records = [
        _record(p, i, session=n % 5 == 0) for n, p in enumerate(provs) for i in (2, 0, 2, 1)
    ]
    gen = _built(records)
    live = {r.key: r for r in records}
    held: list[tuple[Generation, npt.NDArray[np.float32]]] = []
    for number, (op, which, size) in enumerate(steps, start=2):
        prov = provs[which]
        if op == "replace":
            added = [_record(prov, (i * 5) % 3, session=which % 3 == 0) for i in range(size)]
            gen = gen.derive(
                number=number,
                searcher=None,  # type: ignore[arg-type]
                replaced=frozenset({prov}),
                added=added,
                added_vectors=_vectors(added) if added else None,
            )
            live = {k: r for k, r in live.items() if r.provenance != prov}
            live.update((r.key, r) for r in added)
        elif op == "remove_ids":
            ids = {r.chunk_id for r in live.values() if r.provenance == prov}
            ids = set(sorted(ids)[: max(1, size // 2)])
            gen = gen.derive(
                number=number,
                searcher=None,  # type: ignore[arg-type]
                removed_ids=frozenset(ids),
            )
            live = {k: r for k, r in live.items() if r.chunk_id not in ids}
        else:
            gen = gen.derive(
                number=number,
                searcher=None,  # type: ignore[arg-type]
                replaced=frozenset({prov}),
            )
            live = {k: r for k, r in live.items() if r.provenance != prov}
        _check(gen, live)
        assert gen.matrix is not None
        held.append((gen, gen.matrix.copy()))
    for old, snapshot in held:
        assert old.matrix is not None
        np.testing.assert_array_equal(old.matrix, snapshot)


def test_a_small_change_appends_instead_of_copying_the_matrix() -> None:
    records = [_record(f"memory/f{i}.md", 0) for i in range(1000)]
    gen = _built(records)
    first = gen.derive(
        number=2,
        searcher=None,  # type: ignore[arg-type]
        replaced=frozenset({"memory/f0.md"}),
        added=[a := _record("memory/f0.md", 0)],
        added_vectors=_vectors([a]),
    )
    second = first.derive(
        number=3,
        searcher=None,  # type: ignore[arg-type]
        replaced=frozenset({"memory/f1.md"}),
        added=[b := _record("memory/f1.md", 0)],
        added_vectors=_vectors([b]),
    )
    assert first.matrix is not None and second.matrix is not None
    # The second change wrote one row after the first's rows, in the same storage.
    assert np.shares_memory(first.matrix, second.matrix)
    assert second.live_count == 1000 and len(second.records) == 1002
    assert second.alive is not None and not second.alive[0] and not second.alive[1]


def test_a_generation_compacts_once_dead_rows_pass_an_eighth() -> None:
    records = [_record(f"memory/f{i}.md", 0) for i in range(16)]
    gen = _built(records)
    gen = gen.derive(
        number=2,
        searcher=None,  # type: ignore[arg-type]
        replaced=frozenset({"memory/f0.md", "memory/f1.md"}),
    )
    assert len(gen.records) == 16 and gen.live_count == 14
    gen = gen.derive(
        number=3,
        searcher=None,  # type: ignore[arg-type]
        replaced=frozenset({"memory/f2.md"}),
    )
    assert len(gen.records) == 13 and gen.live_count == 13 and gen.alive is None


async def test_searches_never_return_rows_a_change_left_dead(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i in range(20):
        (ws / "memory" / f"n{i}.md").write_text(f"note {i} about badgers and setts\n", "utf-8")
    (ws / "memory" / "otter.md").write_text("the otter holt by the river\n", "utf-8")
    async with open_memory_index(
        workspace_dir=ws,
        index_dir=tmp_path / "idx",
        workers=InlineWorkerPool(),
        settings=MemoryCoreSettings(min_score=0.0),
        embedder=HashEmbedder(),
    ) as index:
        assert (await index.search("otter holt")).hits[0].path == "memory/otter.md"
        (ws / "memory" / "otter.md").write_text("the heron stands in the shallows\n", "utf-8")
        await index.sync()
        gen = index._view.generation
        assert gen.alive is not None, "one file of 21 changed: its old row is dead, not copied"
        for mode in ("hybrid", "vector", "lexical"):
            hits = (await index.search("otter holt", mode=mode, max_results=50)).hits  # type: ignore[arg-type]
            assert all("otter" not in h.excerpt for h in hits), mode
        assert (await index.search("heron shallows")).hits[0].path == "memory/otter.md"
        status = index.status()
        assert status.chunks == 21 and status.memory_chunks == 21


async def test_concurrent_searches_and_changes_on_real_threads_stay_consistent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every path at once: worker ranking with split products, appended generations and
    # compactions, while searches run on two real threads.
    from claw.plugin_sdk import ThreadWorkerPool
    from claw_memory import _schedule

    monkeypatch.setattr(_schedule, "_INLINE_RANK_WORK", -1)
    monkeypatch.setattr(_schedule, "_PARALLEL_PRODUCT_WORK", 1)
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i in range(40):
        (ws / "memory" / f"n{i}.md").write_text(f"note {i} about badgers\n", "utf-8")
    async with open_memory_index(
        workspace_dir=ws,
        index_dir=tmp_path / "idx",
        workers=ThreadWorkerPool(max_workers=2),
        settings=MemoryCoreSettings(min_score=0.0),
        embedder=HashEmbedder(),
    ) as index:

        async def searcher() -> None:
            for _ in range(30):
                hits = (await index.search("badgers note", max_results=10)).hits
                assert len(hits) == 10
                assert all("badgers" in h.excerpt or "otters" in h.excerpt for h in hits)

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(searcher)
                for round_ in range(12):
                    path = ws / "memory" / f"n{round_ % 5}.md"
                    path.write_text(f"note {round_} about otters and badgers\n", "utf-8")
                    await index.sync()
        for i in range(5):
            text = (ws / "memory" / f"n{i}.md").read_text("utf-8").strip()
            hits = (await index.search(text, mode="lexical", max_results=3)).hits
            assert hits[0].excerpt.strip() == text
        assert index.status().chunks == 40


def test_adjacent_rows_follow_start_lines_within_a_provenance() -> None:
    records = [_record("s", i, session=True) for i in (3, 1, 2, 5, 4)] + [_record("t", 1, True)]
    gen = _built(records)
    by_line = {r.start_line: i for i, r in enumerate(records[:5])}
    one, two = gen.adjacent_rows(by_line[3])
    assert set(one) == {by_line[2], by_line[4]}
    assert set(two) == {by_line[1], by_line[5]}
    assert gen.adjacent_rows(by_line[1]) == ((by_line[2],), (by_line[3],))
    assert gen.adjacent_rows(5) == ((), ())  # alone in its provenance


def test_the_term_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import claw_memory._generation as generation

    monkeypatch.setattr(generation, "MAX_TERM_ROWS", 4)
    gen = _built([_record("p", i) for i in range(10)])
    calls: list[int] = []

    def analyse(row: int) -> list[str]:
        calls.append(row)
        return [f"t{row}"]

    assert gen.rows_terms([0, 1, 2], analyse) == [frozenset({f"t{r}"}) for r in (0, 1, 2)]
    gen.rows_terms([0, 1], analyse)
    assert calls == [0, 1, 2]  # remembered
    gen.rows_terms([3, 4], analyse)  # a fifth row passes the bound: the memo starts over
    gen.rows_terms([0], analyse)
    assert calls == [0, 1, 2, 3, 4, 0]
    assert len(gen._memo["terms"]) <= 4


def test_a_record_read_back_from_the_log_equals_the_one_written() -> None:
    from claw_memory._published import _decode, _encode

    record = ChunkRecord(
        chunk_id="c1",
        key=2**62 + 5,
        source="sessions",
        provenance="sessions:agent/s1",
        path="sessions/agent/s1.jsonl",
        start_line=3,
        end_line=4,
        content_hash="h",
        revision="r",
        text='Zoë said "ça va?" \\ 東京 \u2028 tab\\t',
        agent_id="agent",
        session_key=None,
        session_id="s1",
        entry_ids=("e1", "e2"),
        timestamp=1.5e9 + 0.25,
    )
    line = _encode(record)
    assert line.endswith(b"\n")
    assert _decode(line) == record
