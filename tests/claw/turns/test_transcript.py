import itertools
import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from claw import HostClosedError, InlineWorkerPool, ThreadWorkerPool
from claw.models import (
    AssistantMessage,
    CompactionSummary,
    Message,
    SystemMessage,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)
from claw.turns import (
    Appendable,
    CompactionInfo,
    TranscriptCursor,
    TranscriptEntryKind,
    TranscriptError,
    TranscriptStore,
    UnknownEntryError,
    open_transcript_store,
    parse_entry_id,
)

KEY, SID = "agent:main:chat", "sess-1"


def ticking_clock() -> Callable[[], float]:
    ticks = itertools.count(1000)
    return lambda: float(next(ticks))


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TranscriptStore]:
    """The transcript contract, run against both backends (PostgreSQL: the test server)."""
    if request.param == "postgresql":
        from claw.state.postgres._stores import open_state

        dsn = request.getfixturevalue("postgres_dsn")
        async with open_state(dsn, workers=InlineWorkerPool(), clock=ticking_clock()) as state:
            yield state.transcripts
        return
    async with open_transcript_store(
        tmp_path / "t.db", workers=InlineWorkerPool(), clock=ticking_clock()
    ) as opened:
        yield opened


CALL = ToolCall("c1", "search", {"q": "cats"})


async def append_exchange(store: TranscriptStore, text: str, session_id: str = SID) -> None:
    await store.append(KEY, session_id, [UserMessage(text)])
    await store.append(KEY, session_id, [AssistantMessage(f"re: {text}")])


async def test_append_assigns_stable_ids_seqs_kinds_and_round_trips_payloads(
    store: TranscriptStore,
) -> None:
    messages = [
        SystemMessage("note"),
        UserMessage("find cats"),
        AssistantMessage("", tool_calls=[CALL], usage=Usage(5, 1)),
        CALL,
        ToolResult("c1", "search", "3 cats"),
    ]
    written = await store.append(KEY, SID, messages, turn_id=None)
    assert [e.entry_id for e in written] == [f"{SID}:{n}" for n in range(1, 6)]
    assert [e.kind for e in written] == [
        TranscriptEntryKind.SYSTEM,
        TranscriptEntryKind.USER,
        TranscriptEntryKind.ASSISTANT,
        TranscriptEntryKind.TOOL_CALL,
        TranscriptEntryKind.TOOL_RESULT,
    ]
    assert len({e.created_at for e in written}) == 1, "a batch shares one timestamp"
    read = await store.read_entries(SID)
    assert read == written
    assert [e.payload for e in read] == messages
    assert read[3].message is None and read[4].message == messages[4]
    assert (await store.read_entry(f"{SID}:3")).payload == messages[2]
    assert parse_entry_id(f"{SID}:3") == (SID, 3)


async def test_read_range_is_after_exclusive_through_inclusive_and_limited(
    store: TranscriptStore,
) -> None:
    await store.append(KEY, SID, [UserMessage(str(n)) for n in range(1, 8)])
    assert [e.seq for e in await store.read_entries(SID, after_seq=2, through_seq=5)] == [3, 4, 5]
    assert [e.seq for e in await store.read_entries(SID, after_seq=2, limit=2)] == [3, 4]
    assert await store.read_entries("other") == ()
    with pytest.raises(UnknownEntryError, match="no transcript entry 'sess-1:9'"):
        await store.read_entry(f"{SID}:9")
    with pytest.raises(UnknownEntryError, match="not a transcript entry id"):
        await store.read_entry("nonsense")


async def test_entries_survive_closing_and_reopening_and_seqs_continue(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with open_transcript_store(path, workers=InlineWorkerPool()) as first:
        await first.append(KEY, SID, [UserMessage("one"), AssistantMessage("two")])
    async with open_transcript_store(path, workers=InlineWorkerPool()) as second:
        (third,) = await second.append(KEY, SID, [UserMessage("three")])
        assert third.entry_id == f"{SID}:3"
        texts = [m.text for m in await second.visible_messages(SID)]  # type: ignore[union-attr]
        assert texts == ["one", "two", "three"]


async def test_entries_written_before_a_hard_exit_are_on_disk(tmp_path: Path) -> None:
    """A child process appends, then dies without closing the database."""
    path = tmp_path / "t.db"
    child = f"""
import os, trio
from claw import InlineWorkerPool
from claw.models import UserMessage
from claw.turns import open_transcript_store
async def main():
    async with open_transcript_store({str(path)!r}, workers=InlineWorkerPool()) as store:
        await store.append("k", "s", [UserMessage("before the crash")])
        os._exit(0)
trio.run(main)
"""
    await trio.run_process([sys.executable, "-c", child])
    async with open_transcript_store(path, workers=InlineWorkerPool()) as store:
        assert await store.visible_messages("s") == (UserMessage("before the crash"),)


async def test_a_failing_batch_appends_nothing(store: TranscriptStore) -> None:
    await store.append(KEY, SID, [UserMessage("kept")])
    with pytest.raises(LookupError, match="no admitted turn 'ghost'"):
        await store.append(
            KEY, SID, [AssistantMessage("a"), AssistantMessage("b")], turn_id="ghost"
        )
    assert [e.seq for e in await store.read_entries(SID)] == [1]
    (next_entry,) = await store.append(KEY, SID, [AssistantMessage("c")])
    assert next_entry.seq == 2


async def test_append_refuses_bad_input(store: TranscriptStore) -> None:
    with pytest.raises(TranscriptError, match="at least one"):
        await store.append(KEY, SID, [])
    with pytest.raises(TranscriptError, match="use append_compaction"):
        await store.append(KEY, SID, [CompactionSummary("s")])  # type: ignore[list-item]
    with pytest.raises(TranscriptError, match="terminal=True needs the turn_id"):
        await store.append(KEY, SID, [AssistantMessage("x")], terminal=True)
    with pytest.raises(TranscriptError, match="session_id must be a non-empty"):
        await store.append(KEY, "", [UserMessage("x")])


async def test_a_session_id_stays_under_its_session_key(store: TranscriptStore) -> None:
    await store.append(KEY, SID, [UserMessage("x")])
    with pytest.raises(TranscriptError, match="under session key 'agent:main:chat'"):
        await store.append("agent:other", SID, [UserMessage("y")])


async def test_a_reset_session_with_a_new_id_has_a_separate_transcript(
    store: TranscriptStore,
) -> None:
    await append_exchange(store, "before reset", SID)
    await append_exchange(store, "after reset", "sess-2")
    assert await store.session_ids(KEY) == (SID, "sess-2")
    assert [e.entry_id for e in await store.read_entries("sess-2")] == ["sess-2:1", "sess-2:2"]
    delta = await store.read_session_transcript_visible_message_delta("sess-2")
    assert delta.messages == (UserMessage("after reset"), AssistantMessage("re: after reset"))
    old = await store.read_session_transcript_visible_message_delta(SID)
    with pytest.raises(TranscriptError, match="a reset session with a new id"):
        await store.read_session_transcript_visible_message_delta("sess-2", old.cursor)


async def test_stats_count_entries_bytes_and_compactions(store: TranscriptStore) -> None:
    empty = await store.stats(SID)
    assert (empty.entry_count, empty.byte_size, empty.last_seq) == (0, 0, 0)
    entries = await store.append(KEY, SID, [UserMessage("héllo"), AssistantMessage("ok")])
    await store.append_compaction(KEY, SID, "summary")
    stats = await store.stats(SID)
    payloads = [e.payload.to_dict() for e in entries] + [CompactionSummary("summary").to_dict()]
    expected = sum(
        len(json.dumps(p, ensure_ascii=False, separators=(",", ":")).encode()) for p in payloads
    )
    assert (stats.entry_count, stats.byte_size, stats.last_seq) == (3, expected, 3)
    assert (stats.compaction_count, stats.last_compaction_seq) == (1, 3)


async def test_a_session_listing_says_what_stats_and_session_ids_say_for_every_session(
    store: TranscriptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from claw.turns import _transcript_core

    # Two keys a statement, so that a listing of five keys takes the chunked path.
    monkeypatch.setattr(_transcript_core, "_KEYS_PER_STATEMENT", 2)
    await append_exchange(store, "first", SID)
    await append_exchange(store, "after a reset", "sess-2")  # a second id under KEY
    await store.append("agent:b", "sess-b", [UserMessage("b")])
    await store.append_compaction("agent:b", "sess-b", "summary")
    await store.record_admitted(
        "agent:c", "sess-c", UserMessage("in flight"), turn_id="t-c", advancement_key="adv-c"
    )
    await store.append("agent:d", "sess-d", [UserMessage("d")])
    keys = ["agent:d", KEY, "agent:none", "agent:c", "agent:b"]

    async def expected(among: list[str]) -> list[tuple[str, object]]:
        return [
            (key, await store.stats(session_id))
            for key in among
            for session_id in await store.session_ids(key)
        ]

    assert await store.session_listing(keys) == await expected(keys)
    assert await store.session_listing(["agent:c"]) == await expected(["agent:c"])
    assert await store.session_listing([]) == []
    everything = await store.session_listing()
    assert sorted(everything, key=lambda item: item[0]) == await expected(sorted(set(keys)))
    ((_, in_flight),) = await store.session_listing(["agent:c"])
    assert in_flight.open_turn_seqs == (1,)
    # What stats say is each session's summary row, kept by the database on insert:
    # always what counting the entries says.
    for _, found in everything:
        counted = await store._read(
            _transcript_core.counted_stats, sql=store._sql, session_id=found.session_id
        )
        assert found == counted


async def test_concurrent_appends_get_gapless_distinct_seqs() -> None:
    async with open_transcript_store(":memory:", workers=ThreadWorkerPool(4)) as store:
        async with trio.open_nursery() as nursery:
            for n in range(20):
                nursery.start_soon(
                    store.append, KEY, SID, [UserMessage(str(n)), AssistantMessage("")]
                )
        entries = await store.read_entries(SID)
        assert [e.seq for e in entries] == list(range(1, 41))
        for user, reply in zip(entries[::2], entries[1::2], strict=True):
            assert (user.kind, reply.kind) == ("user", "assistant"), "batches never interleave"
        stats = await store.stats(SID)
        assert (stats.entry_count, stats.last_seq) == (40, 40)


async def test_a_closed_store_refuses_calls(tmp_path: Path) -> None:
    async with open_transcript_store(tmp_path / "t.db", workers=InlineWorkerPool()) as store:
        pass
    with pytest.raises(HostClosedError, match="closed"):
        await store.stats(SID)


# -- the visible-message cursor ----------------------------------------------


async def test_bootstrap_then_delta_returns_exactly_the_new_visible_messages(
    store: TranscriptStore,
) -> None:
    await append_exchange(store, "one")
    first = await store.read_session_transcript_visible_message_delta(SID)
    assert first.rebuilt
    assert first.messages == (UserMessage("one"), AssistantMessage("re: one"))
    assert first.entry_ids == (f"{SID}:1", f"{SID}:2")
    assert first.cursor == TranscriptCursor(SID, epoch=0, seq=2)

    nothing = await store.read_session_transcript_visible_message_delta(SID, first.cursor)
    assert (nothing.messages, nothing.rebuilt, nothing.cursor) == ((), False, first.cursor)

    await store.append(
        KEY,
        SID,
        [
            UserMessage("two"),
            AssistantMessage("", tool_calls=[CALL]),
            CALL,
            ToolResult("c1", "search", "r"),
        ],
    )
    second = await store.read_session_transcript_visible_message_delta(SID, first.cursor)
    assert not second.rebuilt
    assert second.messages == (
        UserMessage("two"),
        AssistantMessage("", tool_calls=[CALL]),
        ToolResult("c1", "search", "r"),
    ), "tool_call records are not visible messages"
    assert second.entry_ids == (f"{SID}:3", f"{SID}:4", f"{SID}:6")
    assert second.cursor == TranscriptCursor(SID, epoch=0, seq=6)


async def test_a_compaction_replaces_what_it_summarised_and_keeps_the_tail(
    store: TranscriptStore,
) -> None:
    for text in ("one", "two", "three"):
        await append_exchange(store, text)
    entry = await store.append_compaction(
        KEY, SID, "they said one and two", first_kept_seq=5, tokens_before=900, tokens_after=200
    )
    assert entry.entry_id == f"{SID}:7"
    assert entry.compaction == CompactionInfo(5, 900, 200)
    assert (await store.read_entry(entry.entry_id)) == entry
    await append_exchange(store, "four")
    delta = await store.read_session_transcript_visible_message_delta(SID)
    assert delta.messages == (
        CompactionSummary("they said one and two"),
        UserMessage("three"),
        AssistantMessage("re: three"),
        UserMessage("four"),
        AssistantMessage("re: four"),
    )
    assert delta.entry_ids == (f"{SID}:7", f"{SID}:5", f"{SID}:6", f"{SID}:8", f"{SID}:9")
    assert delta.cursor == TranscriptCursor(SID, epoch=7, seq=9)
    assert len(await store.read_entries(SID)) == 9, "nothing is deleted"


async def test_a_compaction_after_the_cursor_makes_the_next_delta_a_rebuild(
    store: TranscriptStore,
) -> None:
    await append_exchange(store, "one")
    boot = await store.read_session_transcript_visible_message_delta(SID)
    await append_exchange(store, "two")
    await store.append_compaction(KEY, SID, "all of it")
    await append_exchange(store, "three")
    delta = await store.read_session_transcript_visible_message_delta(SID, boot.cursor)
    assert delta.rebuilt
    assert delta.messages == (
        CompactionSummary("all of it"),
        UserMessage("three"),
        AssistantMessage("re: three"),
    )
    assert delta.cursor == TranscriptCursor(SID, epoch=5, seq=7)
    await append_exchange(store, "four")
    after = await store.read_session_transcript_visible_message_delta(SID, delta.cursor)
    assert not after.rebuilt
    assert after.messages == (UserMessage("four"), AssistantMessage("re: four"))


async def test_only_the_latest_compaction_counts(store: TranscriptStore) -> None:
    for text in ("one", "two", "three"):
        await append_exchange(store, text)
    await store.append_compaction(KEY, SID, "first summary", first_kept_seq=3)
    await store.append_compaction(KEY, SID, "second summary", first_kept_seq=5)
    messages = await store.visible_messages(SID)
    assert messages == (
        CompactionSummary("second summary"),
        UserMessage("three"),
        AssistantMessage("re: three"),
    )
    with pytest.raises(TranscriptError, match="between 5 .* and 9"):
        await store.append_compaction(KEY, SID, "going back", first_kept_seq=4)
    with pytest.raises(TranscriptError, match="between 5 .* and 9"):
        await store.append_compaction(KEY, SID, "the future", first_kept_seq=10)
    assert (await store.stats(SID)).compaction_count == 2


async def test_a_cursor_past_the_end_rebuilds_and_a_cursor_survives_json(
    store: TranscriptStore,
) -> None:
    await append_exchange(store, "one")
    ahead = TranscriptCursor(SID, epoch=0, seq=50)
    delta = await store.read_session_transcript_visible_message_delta(SID, ahead)
    assert delta.rebuilt and len(delta.messages) == 2
    assert (
        TranscriptCursor.from_dict(json.loads(json.dumps(delta.cursor.to_dict()))) == delta.cursor
    )
    with pytest.raises(TranscriptError, match="bad transcript cursor"):
        TranscriptCursor.from_dict({"sessionId": SID, "epoch": -1, "seq": 0})
    with pytest.raises(TranscriptError, match="sessionId, epoch and seq"):
        TranscriptCursor.from_dict({"sessionId": SID})


async def test_delta_on_an_empty_transcript_is_an_empty_rebuild(store: TranscriptStore) -> None:
    delta = await store.read_session_transcript_visible_message_delta("nobody")
    assert (delta.messages, delta.rebuilt, delta.cursor) == (
        (),
        True,
        TranscriptCursor("nobody", 0, 0),
    )


# -- model-based: an engine that applies every delta always holds the visible history --

operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("append"),
            st.lists(st.sampled_from(["user", "assistant", "call"]), min_size=1, max_size=3),
        ),
        st.tuples(st.just("compact"), st.integers(0, 6)),
        st.tuples(st.just("read"), st.just(None)),
    ),
    max_size=14,
)


@given(operations)
@settings(deadline=None, max_examples=60)
async def test_applying_every_delta_reproduces_exactly_the_visible_history(
    ops: list[tuple[str, object]],
) -> None:
    async with open_transcript_store(":memory:", workers=InlineWorkerPool()) as store:
        held: list[Message] = []
        cursor: TranscriptCursor | None = None
        written: list[tuple[int, Message | None]] = []  # (seq, visible message or None)
        compaction: tuple[int, int, str] | None = None  # (seq, first_kept, summary)
        for n, (op, arg) in enumerate([*ops, ("read", None)]):
            if op == "append":
                assert isinstance(arg, list)
                batch: list[Appendable] = [
                    UserMessage(f"u{n}")
                    if k == "user"
                    else AssistantMessage(f"a{n}")
                    if k == "assistant"
                    else CALL
                    for k in arg
                ]
                entries = await store.append(KEY, SID, batch)
                written += [(e.seq, e.message) for e in entries]
            elif op == "compact":
                assert isinstance(arg, int)
                last = written[-1][0] if written else 0
                floor = 1 if compaction is None else compaction[1]
                kept = max(floor, last + 1 - arg)
                entry = await store.append_compaction(KEY, SID, f"s{n}", first_kept_seq=kept)
                written.append((entry.seq, None))
                compaction = (entry.seq, kept, f"s{n}")
            else:
                delta = await store.read_session_transcript_visible_message_delta(SID, cursor)
                held = list(delta.messages) if delta.rebuilt else held + list(delta.messages)
                cursor = delta.cursor
                expected: list[Message] = []
                if compaction is not None:
                    expected.append(CompactionSummary(compaction[2]))
                start = 1 if compaction is None else compaction[1]
                expected += [m for seq, m in written if seq >= start and m is not None]
                assert held == expected
                assert await store.visible_messages(SID) == tuple(expected)
