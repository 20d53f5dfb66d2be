"""Relative dates in a query: the span they point at, and the turns ranked from it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from claw_memory._transcripts import TranscriptTurn
from claw_memory._when import query_window

from ._sessions import sessions_index

DAY = 86_400.0
# Thursday 25 May 2023, 14:00 UTC.
THURSDAY = datetime(2023, 5, 25, 14, 0, tzinfo=UTC).timestamp()


def _at(y: int, m: int, d: int, h: int = 12) -> float:
    return datetime(y, m, d, h, tzinfo=UTC).timestamp()


def _inside(window: tuple[float, float] | None, t: float) -> bool:
    assert window is not None
    return window[0] <= t <= window[1]


@pytest.mark.parametrize(
    ("query", "days", "too_far"),
    [
        ("What kitchen appliance did I buy 10 days ago?", 10, 13),
        ("Which book did I finish a week ago?", 7, 9),
        ("I mentioned cooking something a couple of days ago", 2, 4),
        ("What did I do with Rachel two months ago?", 61, 75),
        ("a year ago I moved", 365, 440),
        ("What charity event did I join a month ago?", 30, 37),
    ],
)
def test_a_count_ago_points_at_that_day_give_or_take_a_fifth(
    query: str, days: float, too_far: float
) -> None:
    window = query_window(query, THURSDAY)
    assert _inside(window, THURSDAY - days * DAY)
    assert not _inside(window, THURSDAY - too_far * DAY)
    assert not _inside(window, THURSDAY)


def test_last_weekday_is_the_latest_such_day_before_today() -> None:
    window = query_window("I received a piece of jewelry last Saturday", THURSDAY)
    assert _inside(window, _at(2023, 5, 20))  # the Saturday
    assert _inside(window, _at(2023, 5, 22))  # spoken of two days after
    assert not _inside(window, _at(2023, 5, 13))  # the Saturday before
    assert not _inside(window, _at(2023, 5, 24))
    # Asked on a Saturday, "last Saturday" is a week back, not today.
    saturday = _at(2023, 5, 27, 9)
    assert _inside(query_window("last Saturday", saturday), _at(2023, 5, 20))
    assert not _inside(query_window("last Saturday", saturday), _at(2023, 5, 27, 8))


def test_last_weekend_yesterday_and_last_week() -> None:
    assert _inside(query_window("what did I cook last weekend", THURSDAY), _at(2023, 5, 21))
    # On a Sunday, this weekend is not "last weekend".
    sunday = _at(2023, 5, 28, 18)
    weekend = query_window("last weekend", sunday)
    assert _inside(weekend, _at(2023, 5, 20)) and not _inside(weekend, _at(2023, 5, 27, 18))
    assert _inside(query_window("yesterday", THURSDAY), _at(2023, 5, 24))
    last_week = query_window("who did I meet last week", THURSDAY)
    assert _inside(last_week, _at(2023, 5, 15)) and _inside(last_week, _at(2023, 5, 21))
    assert not _inside(last_week, _at(2023, 5, 10))


@pytest.mark.parametrize(
    "query",
    [
        "How much more was my car getting a few months ago?",
        "What did I buy recently?",
        "Which shoes did I clean last month?",
        "When did I go to the museum?",
        "I went there days ago",
    ],
)
def test_a_vague_or_absent_relative_date_gives_no_window(query: str) -> None:
    assert query_window(query, THURSDAY) is None


def _index(tmp_path: Path, **settings: Any) -> Any:
    """Two sessions of one agent, a purchase in each: the older one said in more of
    the question's words."""
    sessions = {
        "early": (THURSDAY - 30 * DAY, "I got a kitchen appliance, a blender"),
        "late": (THURSDAY - 10 * DAY, "I got a kitchen appliance today, an air fryer"),
    }
    return sessions_index(
        tmp_path,
        {
            sid: [
                TranscriptTurn(f"{sid}-0", "user", "user", text, when),
                TranscriptTurn(f"{sid}-1", "assistant", "assistant", "enjoy it!", when + 60),
            ]
            for sid, (when, text) in sessions.items()
        },
        **settings,
    )


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
async def test_a_question_with_a_relative_date_prefers_the_turn_said_then(
    tmp_path: Path, mode: str
) -> None:
    query = "What kitchen appliance did I buy 10 days ago?"
    async with _index(tmp_path) as index:
        then = (await index.search(query, mode=mode, now=THURSDAY)).hits  # type: ignore[arg-type]
        # Asked twenty days earlier, "10 days ago" is the other purchase.
        before = (await index.search(query, mode=mode, now=THURSDAY - 20 * DAY)).hits  # type: ignore[arg-type]
    assert then[0].entry_ids == ("late-0",)
    assert before[0].entry_ids == ("early-0",)
    score = {h.entry_ids: h.score for h in then}
    assert {h.entry_ids: h.score for h in before}[("early-0",)] > score[("early-0",)]


async def test_without_the_window_the_better_worded_turn_wins(tmp_path: Path) -> None:
    # The fixture's premise: the date, not the words, puts the air fryer first.
    async with _index(tmp_path, window_weight=0.0) as index:
        hits = (
            await index.search(
                "What kitchen appliance did I buy 10 days ago?", mode="lexical", now=THURSDAY
            )
        ).hits
    assert hits[0].entry_ids == ("early-0",)


@pytest.mark.parametrize("now", [1e20, -1e20, float("nan"), float("inf")])
@pytest.mark.parametrize("query", ["last Saturday", "yesterday", "10 days ago", "last week"])
def test_a_time_no_calendar_holds_gives_no_window_rather_than_an_error(
    query: str, now: float
) -> None:
    # A caller's search time (MemoryIndex.search(now=...)) beyond any date: the query
    # still searches, only without a span.
    assert query_window(query, now) is None


def test_a_weekday_in_the_calendars_first_week_does_not_overflow() -> None:
    first_day = datetime(1, 1, 1, 12, tzinfo=UTC).timestamp()
    window = query_window("last Saturday", first_day)
    assert window is not None and window[0] < first_day
