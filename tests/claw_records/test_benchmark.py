"""The records benchmark runs end to end on a tiny corpus (figures are not checked)."""

from __future__ import annotations

import json

import pytest

from benchmarks import records_latency

pytestmark = pytest.mark.slow


def test_records_latency_benchmark_runs_on_a_tiny_corpus(
    postgres_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    records_latency.main(
        ["--records", "300", "--queries", "5", "--passes", "1", "--probes", "2",
         "--dsn", postgres_dsn, "--json"]
    )
    result = json.loads(capsys.readouterr().out)
    assert [r["system"] for r in result["rows"]] == ["memory-core", "memory-records"]
    assert result["propagation_ms"]["probes"] == 2
