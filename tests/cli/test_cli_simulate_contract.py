"""Issue 22's contract: `daedalus simulate --workload FILE --policy P --max-scaleout 12 --peak-utilization 0.9
--seed 1 --json OUT` writes the same keys for the default planner, its two peers and their yardstick, on a shipped
trace (its first half hour, to keep the test short)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from daedalus.cli.main import app
from daedalus.data import WORKLOADS
from daedalus.models.planning.oracle import rescale_limit

POLICIES = ("daedalus", "ds2", "hpa-80", "flink-autoscaler", "oracle")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("contract")
    found = {}
    for policy in POLICIES:
        path = out / f"{policy}.json"
        result = CliRunner().invoke(app, ["simulate", "--workload", str(WORKLOADS / "paper" / "sine_60000_6h.csv"),
                                          "--policy", policy, "--max-scaleout", "12", "--peak-utilization", "0.9",
                                          "--seed", "1", "--hours", "0.5", "--json", str(path)])
        assert result.exit_code == 0, result.output
        found[policy] = json.loads(path.read_text())
    return found


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_writes_the_contract_keys(reports, policy):
    r = reports[policy]
    assert r["policy"] == policy and r["duration_s"] == 1800
    assert r["static_worker_seconds"] == 12 * 1800
    assert 0 < r["worker_seconds"] <= r["static_worker_seconds"]
    assert 0 < r["lower_bound_worker_seconds"] <= r["static_worker_seconds"]
    assert r["latency_s"]["p95"] >= 0.5  # the simulator's latency of a tuple processed in its own second
    assert isinstance(r["seconds_over_slo"], int) and isinstance(r["rescales"], int)
    assert isinstance(r["budget_exceeded"], int) and 0 <= r["budget_exceeded"] <= r["rescales"]
    assert r["loop_ms"]["median"] >= 0


def test_the_oracle_keeps_the_slo_and_no_peer_that_keeps_it_is_cheaper(reports):
    oracle = reports["oracle"]
    assert oracle["seconds_over_slo"] == 0 and oracle["rescales"] <= rescale_limit(1800) == 1
    for policy, r in reports.items():
        if r["seconds_over_slo"] == 0 and r["rescales"] <= 1:
            assert oracle["worker_seconds"] <= r["worker_seconds"], policy
