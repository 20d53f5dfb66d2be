"""The embedded default finds by meaning: paraphrases that share no word with the notes.

The queries are written for this test over the sample workspace the demo uses
(``claw/_data/sample_workspace``), not taken from a benchmark. Lexical search finds
nothing for them; the default embedder (``claw-static``), with the default settings
(``min_score`` included), ranks the note that says it first, while questions about
nothing in the notes still find nothing.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path

import pytest

from claw.plugin_sdk import InlineWorkerPool
from claw_memory import MemoryCoreSettings, MemoryIndex, open_memory_index
from claw_memory._plugin import DEFAULT_EMBEDDER, builtin_embedders

PARAPHRASES = [
    # "cloud spend is 12% over plan, mostly storage"
    ("money spent on servers is too high", "memory/2026-11-30.md"),
    ("expenses exceed the forecast", "memory/2026-11-30.md"),
    # "Writes in English and French"
    ("which languages do I speak", "USER.md"),
    # "Alice Moreau is the owner of this agent"
    ("who is the boss of this assistant", "MEMORY.md"),
    # "the on-call rotation switched from weekly to fortnightly"
    ("when does the shift schedule change", "MEMORY.md"),
]
UNRELATED = [
    "recipe for banana bread",
    "how tall is mount everest",
    "my cat is sick",
    "how to tune a guitar",
    "tell me a joke",
]


@pytest.fixture
async def index(tmp_path: Path) -> AsyncIterator[MemoryIndex]:
    workspace = tmp_path / "ws"
    sample = resources.files("claw").joinpath("_data/sample_workspace")
    with resources.as_file(sample) as source:
        shutil.copytree(source, workspace)
    workers = InlineWorkerPool()
    embedder = next(e for e in builtin_embedders(workers) if e.id == DEFAULT_EMBEDDER)
    async with open_memory_index(
        workspace_dir=workspace,
        index_dir=tmp_path / "index",
        workers=workers,
        settings=MemoryCoreSettings(),
        embedder=embedder,
    ) as opened:
        yield opened


@pytest.mark.parametrize(("query", "path"), PARAPHRASES)
async def test_the_default_finds_a_paraphrase_that_lexical_search_misses(
    index: MemoryIndex, query: str, path: str
) -> None:
    lexical = await index.search(query, mode="lexical", min_score=0.0)
    assert lexical.hits == ()
    hits = (await index.search(query)).hits
    assert hits and hits[0].path == path
    # Found by meaning alone, and kept by the default min_score on that strength.
    assert hits[0].text_score == 0.0
    assert hits[0].score >= MemoryCoreSettings().min_score


@pytest.mark.parametrize("query", UNRELATED)
async def test_a_question_about_nothing_in_the_notes_finds_nothing(
    index: MemoryIndex, query: str
) -> None:
    assert (await index.search(query)).hits == ()
    # Not for want of candidates: below the default min_score, the vector side ranks
    # every note, and none scores near what a paraphrase does.
    ranked = (await index.search(query, min_score=0.0)).hits
    assert ranked and ranked[0].score < MemoryCoreSettings().min_score
