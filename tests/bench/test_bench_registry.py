"""The policy registry: every name the benchmark and `daedalus simulate --policy` accept, and a clear error."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from daedalus.cli.main import app
from daedalus.models import policies
from daedalus.models.policies.daedalus import Daedalus
from daedalus.models.policies.ds2 import DS2
from daedalus.models.policies.flink_autoscaler import FlinkAutoscaler
from daedalus.models.policies.hpa import HPA


def test_names_and_instances():
    assert set(policies.names()) == {"static", "hpa-80", "hpa-85", "ds2", "flink-autoscaler", "daedalus",
                                     "daedalus-paper", "oracle"}
    hpa = policies.make("hpa-85", 12)
    assert isinstance(hpa, HPA) and hpa.target_utilization == 0.85 and hpa.name == "hpa-85"
    assert isinstance(policies.make("ds2", 12), DS2)
    assert isinstance(policies.make("flink-autoscaler", 12), FlinkAutoscaler)
    daedalus = policies.make("daedalus", 12)
    assert isinstance(daedalus, Daedalus) and daedalus.name == "daedalus"
    assert daedalus.config.max_scaleout == 12  # the LoopConfig defaults up to the job's maximum
    assert daedalus.config.planner == "daedalus"
    paper = policies.make("daedalus-paper", 12)
    assert isinstance(paper, Daedalus) and paper.name == "daedalus-paper" and paper.config.planner == "daedalus-paper"


def test_unknown_policy_lists_the_known_ones():
    known = "daedalus, daedalus-paper, static, hpa-80, hpa-85, ds2, flink-autoscaler, oracle"
    with pytest.raises(ValueError, match=rf"no policy 'hpa-90'; known: {known}"):
        policies.make("hpa-90", 12)


def test_bench_cli_rejects_an_unknown_policy(short_trace):
    result = CliRunner().invoke(app, ["bench", "policies", "--workloads", str(short_trace), "--policy", "static,k8s"])
    assert result.exit_code == 1
    known = "daedalus, daedalus-paper, static, hpa-80, hpa-85, ds2, flink-autoscaler, oracle"
    assert f"no policy 'k8s'; known: {known}" in " ".join(result.output.split())


def test_simulate_runs_a_baseline(short_trace, tmp_path):
    out = tmp_path / "hpa.json"
    result = CliRunner().invoke(app, ["simulate", "--workload", str(short_trace), "--json", str(out),
                                      "--policy", "hpa-80"])
    assert result.exit_code == 0, result.output
    assert '"policy": "hpa-80"' in out.read_text()


def test_the_two_daedalus_policies_run_their_own_planner_whatever_the_target_says(short_trace):
    # The runner's target carries the scenario's LoopConfig (default planner); each policy still decides with its
    # own: the paper's reasons are Algorithm 1's, the default's the MPC's.

    from daedalus.sim.runner import run
    from daedalus.sim.scenario import scenario
    from daedalus.sim.workloads import load_workload

    values = load_workload(short_trace)
    for name, mark in (("daedalus-paper", "Algorithm"), ("daedalus", "forecast over")):
        sim_config, loop_config, workload = scenario(values, 12, 0.9, 0)
        policy = policies.make(name, 12, loop_config)
        run(workload, policy, sim_config, loop_config)
        reasons = (" ".join(r for e in policy.knowledge.ledger for r in e.reasons)
                   + " ".join(policy.last.decision.reasons))
        assert (mark in reasons) if name == "daedalus" else ("forecast over" not in reasons), name
    assert len(values) == 1200  # the whole 20-minute trace was loaded and run
