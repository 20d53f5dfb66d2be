"""``gateway_load --hosts N``: N ``claw serve`` hosts on one PostgreSQL, briefly."""

from __future__ import annotations

import json

import pytest

from benchmarks import gateway_load


def test_two_hosts_on_one_database_serve_the_same_answers(
    capsys: pytest.CaptureFixture[str], postgres_dsn: str
) -> None:
    gateway_load.main([
        "--json", "--hosts", "2", "--clients", "2", "--seconds", "0.5", "--chunks", "200",
        "--dsn", postgres_dsn,
    ])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["hosts"] == 2 and result["clients_per_host"] == 2
    # Both hosts were alive on the database while measured (their owner locks).
    assert result["hosts_seen_by_database"] == 2
    assert result["warm_up_answers_differing"] == 0
    for phase in ("distinct", "cycled"):
        hosts = result[phase]["hosts"]
        assert [h["host"] for h in hosts] == [1, 2]
        assert all(h["answered"] > 0 for h in hosts)
        assert result[phase]["all"]["wrong"] == 0 and result[phase]["all"]["lost"] == 0
        assert result[phase]["all"]["server_cpu_us_per_request"] > 0
