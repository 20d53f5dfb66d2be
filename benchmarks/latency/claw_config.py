"""claw's side of the corpus: the workspace files, the host and Memory Core settings,
the search request, and the mapping of a hit back to its corpus row."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks._corpus import CHUNK_TOKENS

from ._shared import CHUNKS_PER_FILE, OPTIONS, RESULTS, TEXT_WEIGHT, VECTOR_WEIGHT


def _write_workspace(ws: Path, texts: Iterable[str]) -> list[Path]:
    files = []
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    it = iter(texts)
    for f in itertools.count():
        part = list(itertools.islice(it, CHUNKS_PER_FILE))
        if not part:
            break
        path = ws / "memory" / f"notes-{f:05d}.md"
        path.write_text("\n".join(part) + "\n", encoding="utf-8")
        files.append(path)
    return files


def _claw_config(ws: Path, state: Path, candidates: int | None, shipped: bool = False) -> Any:
    """claw's configuration: the first ranking stage alone (what the floor and the
    exhaustive reference compute), or with ``shipped`` every ranking default as shipped
    (the second, coverage stage included); ``candidates`` fixes the candidate count."""
    import claw

    return claw.HostConfig(
        workspace_dir=ws,
        state_dir=state,
        plugins=claw.PluginsConfig(
            discover=False,
            entries={
                "memory-core": claw.PluginEntryConfig(
                    config=_memory_core_config(candidates, shipped)
                )
            },
        ),
    )


def _memory_core_config(candidates: int | None, shipped: bool = False) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "embedder": "bench-vectors",
        "sources": ["memory"],
        "chunk_tokens": CHUNK_TOKENS,
        "chunk_overlap": 0,
        "vector_weight": VECTOR_WEIGHT,
        "text_weight": TEXT_WEIGHT,
    }
    if not shipped:
        # The second, coverage stage re-scores the head of the ranking.
        settings.update(coverage_weight=0.0, near_coverage_weight=0.0, far_coverage_weight=0.0)
    if OPTIONS["approximate_rows"]:
        settings["approximate_rows"] = OPTIONS["approximate_rows"]
    if candidates is not None:
        if candidates % RESULTS:
            raise SystemExit(f"--sweep: candidate counts must be multiples of {RESULTS}")
        settings["candidate_multiplier"] = candidates // RESULTS
        settings["candidate_growth"] = 0.0
    return settings


def _hit_row(hit: Any) -> int:
    """The corpus row of a claw hit: files hold ``CHUNKS_PER_FILE`` rows, one a line."""
    citation = hit.citation
    number = int(Path(citation.path).stem.rsplit("-", 1)[1])
    return number * CHUNKS_PER_FILE + citation.start_line - 1


def _request(query: str, lexical: bool = False, results: int = RESULTS) -> Any:
    from claw.memory import MemorySearchRequest

    return MemorySearchRequest(
        query=query, max_results=results, min_score=0.0, lexical_only=lexical
    )
