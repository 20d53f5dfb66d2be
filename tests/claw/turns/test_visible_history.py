"""A store keeps the visible history it read last and reads only what came after it,
and still answers exactly what a rebuild reads: writes of another store on the same
database, compactions here or there, several sessions, a bounded budget."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from claw import InlineWorkerPool
from claw.models import AssistantMessage, ToolCall, ToolResult, UserMessage
from claw.turns import TranscriptCursor, TranscriptStore, open_transcript_store
from claw.turns._transcript_base import visible_histories


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def two_stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[TranscriptStore, TranscriptStore]]:
    """Two stores on one database, as two processes (or hosts) have."""
    async with AsyncExitStack() as stack:
        if request.param == "postgresql":
            from claw.state.postgres._stores import open_state

            dsn = request.getfixturevalue("postgres_dsn")
            states = [
                await stack.enter_async_context(open_state(dsn, workers=InlineWorkerPool()))
                for _ in range(2)
            ]
            yield states[0].transcripts, states[1].transcripts
            return
        path = tmp_path / "t.db"
        a = await stack.enter_async_context(open_transcript_store(path, workers=InlineWorkerPool()))
        b = await stack.enter_async_context(open_transcript_store(path, workers=InlineWorkerPool()))
        yield a, b


async def test_visible_history_is_read_past_what_was_kept_and_equals_a_rebuild(
    two_stores: tuple[TranscriptStore, TranscriptStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    here, there = two_stores
    rng = random.Random(3)
    cursors: list[TranscriptCursor | None] = []
    delta = here.read_session_transcript_visible_message_delta

    async def recording(session_id: str, cursor: TranscriptCursor | None = None) -> Any:
        cursors.append(cursor)
        return await delta(session_id, cursor)

    monkeypatch.setattr(here, "read_session_transcript_visible_message_delta", recording)
    compacted: dict[str, bool] = {}
    incremental = rebuilt = 0
    for step in range(80):
        sid = rng.choice(["s1", "s2"])
        key = f"agent:main:{sid}"
        writer = rng.choice([here, there])
        roll = rng.random()
        if roll < 0.55:
            await writer.append(key, sid, [UserMessage(f"q{step}"), AssistantMessage(f"a{step}")])
        elif roll < 0.8:
            call = ToolCall(id=f"c{step}", name="look")
            await writer.append(
                key,
                sid,
                [
                    AssistantMessage("", tool_calls=(call,)),
                    call,
                    ToolResult(call_id=f"c{step}", name="look", content=f"r{step}"),
                ],
            )
        elif roll < 0.9 and (await writer.stats(sid)).last_seq > 0:
            await writer.append_compaction(key, sid, f"summary {step}")
            compacted[sid] = True
        for s in ("s1", "s2"):
            cursors.clear()
            got = await here.visible_messages(s)
            assert got == (await delta(s, None)).messages, f"step {step}"
            if cursors[0] is not None:
                incremental += 1
            if compacted.pop(s, False) and cursors[0] is not None:
                rebuilt += 1  # the kept history was from before the compaction
    assert incremental >= 120 and rebuilt >= 3


def test_visible_histories_keep_their_budget_least_recently_read_first() -> None:
    kept = visible_histories(limit=5)
    messages = {
        s: tuple(UserMessage(f"{s}{i}") for i in range(n))
        for s, n in (("a", 2), ("b", 2), ("c", 6), ("d", 2))
    }
    for s, m in messages.items():
        kept.keep(s, (TranscriptCursor(s, 0, len(m)), m))
    assert kept.take("c") is None  # longer than the budget alone: never kept
    assert kept.take("a") is None  # the least recently read made room for d
    found = kept.take("b")
    assert found is not None and found[1] == messages["b"]
    assert kept.take("b") is None  # taken
    kept.keep("b", (TranscriptCursor("b", 0, 2), messages["b"]))
    assert kept.sizes() == {"d": 2, "b": 2}
    kept.keep("d", (TranscriptCursor("d", 0, 4), messages["a"] + messages["b"]))
    assert kept.sizes() == {"d": 4}  # grown: b, read less recently, made room
