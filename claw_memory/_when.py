"""The span of time a query points at with a relative date ("ten days ago", "last
Saturday"), measured from the moment the search is asked.

A memory answers "what did I buy ten days ago?" from what was said about ten days ago:
the words of the question ("buy") match every purchase in the transcripts, and only
the turn's date tells which one is meant. Ranking (:func:`claw_memory._ranking.rank`)
gives the transcript turns dated inside the span a bonus in its second stage.

Only precise phrasings count: a number of days, weeks, months or years "ago" (digits,
or the English number words up to twelve, "a", "an", "a couple of"), "yesterday",
"last <weekday>", "last weekend" and "last week". Vague ones ("a few months ago",
"recently", "last year") name no span a date could be checked against and give none.
Calendar arithmetic is in UTC, as the index stores turn timestamps.

A question asking when is answered by a turn that says when (:func:`says_when`: a
relative day, a weekday, a month, a year). That depends on the turn alone, so it is
found once, when the turn is indexed (:attr:`claw_memory._records.ChunkRecord.states_time`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

_DAY = 86_400.0
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "a couple of": 2,
    "couple of": 2,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_UNIT_DAYS = {"day": 1.0, "week": 7.0, "month": 30.44, "year": 365.25}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

_AGO = re.compile(
    r"\b(\d{1,3}|a\s+couple\s+of|couple\s+of|an?|one|two|three|four|five|six|seven|eight"
    r"|nine|ten|eleven|twelve)\s+(day|week|month|year)s?\s+ago\b",
    re.IGNORECASE,
)
_LAST = re.compile(
    r"\b(?:last|this\s+past)\s+(monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|weekend|week)\b|\b(yesterday)\b",
    re.IGNORECASE,
)
# How far around a count "ago" a date still matches: a fifth of the distance (people
# round: "two months ago" is 50 to 70 days back), and never under a day and a half.
_AGO_SLACK = 0.2
_AGO_MIN_SLACK_DAYS = 1.5
# A day named "last Saturday" is spoken of on that day or in the days after it: the
# span runs from the day before to two days after.
_BEFORE_DAYS = 1.0
_AFTER_DAYS = 2.0


def query_window(query: str, now: float) -> tuple[float, float] | None:
    """The ``(start, end)`` epoch seconds a relative date in ``query`` points at, asked
    at ``now``, or ``None`` when the query has no precise relative date (or ``now`` is
    no time a calendar holds: NaN, infinite, beyond year 9999)."""
    try:
        today = datetime.fromtimestamp(now, UTC).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
    except (OverflowError, OSError, ValueError):
        return None
    ago = _AGO.search(query)
    if ago is not None:
        count = ago.group(1).lower()
        n = int(count) if count.isdigit() else _NUMBERS[" ".join(count.split())]
        days = n * _UNIT_DAYS[ago.group(2).lower()]
        slack = max(_AGO_MIN_SLACK_DAYS, _AGO_SLACK * days)
        centre = now - days * _DAY
        return centre - slack * _DAY, centre + slack * _DAY
    last = _LAST.search(query)
    if last is None:
        return None
    word = (last.group(1) or last.group(2)).lower()
    # Whole days back from today's midnight, in epoch seconds (no calendar arithmetic,
    # so a date near the calendar's first day cannot overflow).
    midnight, weekday = today.timestamp(), today.weekday()
    if word == "yesterday":
        first_back = last_back = 1
    elif word == "week":
        # The calendar week (Monday to Sunday) before this one.
        first_back = weekday + 7
        last_back = first_back - 6
    elif word == "weekend":
        # The Saturday and Sunday before today (today's weekend does not count).
        first_back = (weekday - 5) % 7 or 7
        if first_back <= 1:
            first_back += 7
        last_back = first_back - 1
    else:
        first_back = last_back = (weekday - _WEEKDAYS.index(word)) % 7 or 7
    start = midnight - first_back * _DAY - _BEFORE_DAYS * _DAY
    end = midnight - last_back * _DAY + _DAY + _AFTER_DAYS * _DAY
    return start, min(end, now)


# A turn that says when something happened, relative to its own date or outright:
# what a question asking when is answered by ("I went there yesterday", "last Friday").
_SAYS_WHEN = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|ago|recently|lately|earlier|soon"
    r"|(?:last|next|this|past|coming) (?:\w+ )?(?:week|weekend|month|year|night|time|summer"
    r"|winter|spring|fall|autumn|mon|tue|wed|thu|fri|sat|sun)\w*"
    r"|(?:mon|tues|wednes|thurs|fri|satur|sun)day"
    r"|january|february|march|april|june|july|august|september|october|november|december"
    r"|(?:19|20)\d\d)\b",
    re.IGNORECASE,
)


# Where a match of _SAYS_WHEN can begin: every alternative starts with one of these.
_WHEN_ANCHORS = (
    "yesterday", "today", "tonight", "tomorrow", "ago", "recently", "lately", "earlier",
    "soon", "last", "next", "this", "past", "coming", "mon", "tues", "wednes", "thurs",
    "fri", "satur", "sun", "january", "february", "march", "april", "june", "july",
    "august", "september", "october", "november", "december", "19", "20",
)  # fmt: skip
# _SAYS_WHEN after its leading word boundary, for lower-case ASCII text (matched at a
# position where an anchor begins a word).
_SAYS_WHEN_AT = re.compile(_SAYS_WHEN.pattern.removeprefix(r"\b"))


def _word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def says_when(text: str) -> bool:
    """Whether ``text`` states a time: a relative day or period, a weekday, a month, a year.

    What ``_SAYS_WHEN.search`` says, found faster: Python's regular expressions try
    every alternative at every word start (about 0.3 ms for a 1,000-character chat
    turn, and a question asking when checks the head of its candidates). In ASCII
    text (most), a match can only begin at a word start where one of
    :data:`_WHEN_ANCHORS` lies; :meth:`str.find` locates those in the lower-cased
    text and the pattern is tried there alone (for ASCII, lower-casing is exactly
    what ``IGNORECASE`` matches, and a word character is a letter, digit or ``_``).
    Other text takes the pattern itself (case folding beyond ASCII: U+017F is ``s``).
    """
    if not text.isascii():
        return _SAYS_WHEN.search(text) is not None
    low = text.lower()
    match = _SAYS_WHEN_AT.match
    for anchor in _WHEN_ANCHORS:
        at = low.find(anchor)
        while at >= 0:
            if (at == 0 or not _word_char(low[at - 1])) and match(low, at) is not None:
                return True
            at = low.find(anchor, at + 1)
    return False
