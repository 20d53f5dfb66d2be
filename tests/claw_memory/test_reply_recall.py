"""A question about what the assistant said finds the reply, not the user's request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from claw_memory._ranking import recalls_reply
from claw_memory._transcripts import TranscriptTurn

from ._sessions import sessions_index

# The user asks for a restaurant in words the later question repeats; the reply names
# it in fewer of them. Each session is padded so that the two turns' neighbours differ.
_TURNS = [
    ("user", "we land in Rome on Friday, the kids are with their grandparents"),
    ("user", "can you recommend a romantic restaurant in Rome for a quiet dinner, just us two"),
    ("assistant", "for a romantic dinner in Rome the restaurant to try is Il Pagliaccio"),
    ("user", "thanks, we will book it"),
]


def _index(tmp_path: Path, **settings: Any) -> Any:
    turns = [
        TranscriptTurn(f"s1-{i}", role, role, text, 1_700_000_000.0 + i)
        for i, (role, text) in enumerate(_TURNS)
    ]
    return sessions_index(tmp_path, {"s1": turns}, **settings)


@pytest.mark.parametrize(
    "query",
    [
        "Can you remind me of the romantic restaurant in Rome you recommended for dinner?",
        "What was the romantic restaurant in Rome that you suggested for our dinner?",
        "In our previous chat, which romantic restaurant in Rome was it for dinner?",
    ],
)
async def test_a_question_about_the_assistants_reply_ranks_the_reply_first(
    tmp_path: Path, query: str
) -> None:
    async with _index(tmp_path) as index:
        hits = (await index.search(query, mode="lexical")).hits
    assert hits[0].entry_ids == ("s1-2",)


async def test_a_question_about_what_the_user_asked_still_prefers_the_users_turn(
    tmp_path: Path,
) -> None:
    async with _index(tmp_path) as index:
        hits = (
            await index.search("romantic restaurant in Rome for a quiet dinner", mode="lexical")
        ).hits
    assert hits[0].entry_ids == ("s1-1",)


async def test_without_a_speaker_prior_the_users_longer_match_wins_either_way(
    tmp_path: Path,
) -> None:
    # The fixture's premise: it is the prior, not the words, that puts the reply first.
    async with _index(tmp_path, assistant_weight=1.0) as index:
        hits = (
            await index.search(
                "Can you remind me of the romantic restaurant in Rome you recommended for dinner?",
                mode="lexical",
            )
        ).hits
    assert hits[0].entry_ids == ("s1-1",)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("I remember you told me to dilute tea tree oil. What was the ratio?", True),
        ("How many eggs did you say we need for the omelette?", True),
        ("I'm going back to our previous conversation about music theory.", True),
        ("Can you remind me what the chord progression was?", True),
        ("Can you recommend a show for me to watch tonight?", False),
        ("What do you think about buying a NAS now?", False),
        ("When did Ann go to the pottery class?", False),
        ("Where did I say I left my keys?", False),
    ],
)
def test_recalls_reply_tells_a_question_about_the_reply(query: str, expected: bool) -> None:
    assert recalls_reply(query) is expected
