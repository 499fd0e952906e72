"""`daedalus step`: one iteration through the real `mape-k` flow, its decision as JSON, exit 0 whatever it is."""

from __future__ import annotations

import json

import pytest
import yaml

from daedalus.cli.step import step
from daedalus.connectors.store import Store
from tests.cli.cli_support import flat, tiny_app

pytestmark = pytest.mark.slow  # a Prefect API starts for the flow runs


@pytest.fixture()
def sim_jobs(tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump({"jobs": [
        {"name": "wc", "engine": "sim", "scale_target": {"kind": "sim", "name": "wc"}, "mode": "dry-run",
         # The paper's planner: its first decision is a scale-in. The model-predictive default keeps 12 for the
         # sine's peak within its 30-minute horizon (tests/models/test_planner_mpc.py has its decisions).
         "planner": "daedalus-paper", "sim": {"speedup": 60}},
    ]}))
    return path


def test_one_step_decides_through_the_flow_and_writes_its_json(prefect_harness, sim_jobs, tmp_path):
    store, out = tmp_path / "store", tmp_path / "step.json"
    run = tiny_app(step)
    result = run("step", "wc", "--jobs-file", sim_jobs, "--store", store, "--json", out)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["job"] == "wc" and set(report["decision"]) == {"id", "kind", "current", "target", "reasons"}
    # The simulated job starts at its maximum with the workload well below it: the loop wants to scale in,
    # and in dry-run mode it only reports.
    assert report["decision"]["kind"] == "scale-in" and report["decision"]["current"] == 12
    assert report["executed"] is False and report["action"] == "dry-run"
    assert f"wc: scale-in 12 → {report['decision']['target']} (dry-run)" in flat(result.output)
    assert Store(str(store)).job("wc").versions() == [report["knowledge_version"]]


def test_an_unknown_job_or_a_past_moment_on_the_simulator_fail_with_a_reason(prefect_harness, sim_jobs, tmp_path):
    run = tiny_app(step)
    unknown = run("step", "nosuch", "--jobs-file", sim_jobs, "--store", tmp_path / "store")
    assert unknown.exit_code == 1 and "no job 'nosuch'; known: wc" in flat(unknown.output)
    at = run("step", "wc", "--jobs-file", sim_jobs, "--store", tmp_path / "store", "--at", "1767225600")
    assert at.exit_code == 1 and "runs on its own clock" in flat(at.output)
    assert Store(str(tmp_path / "store")).jobs() == []  # nothing was created for either
