"""`daedalus simulate` and `daedalus demo` alone: a policy on a workload trace, scored."""

from __future__ import annotations

import json

from daedalus.cli import simulate
from tests.cli.cli_support import flat, tiny_app

run = tiny_app(simulate.simulate, simulate.demo)


def test_simulate_scores_a_policy_on_a_trace(tmp_path):
    trace = tmp_path / "flat.csv"
    trace.write_text("second|count\n" + "".join(f"{s}|20000\n" for s in range(900)))
    out = tmp_path / "report" / "static.json"
    result = run("simulate", "--workload", trace, "--policy", "static", "--max-scaleout", 4, "--json", out)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["policy"] == "static" and report["workload"] == str(trace)
    assert report["worker_seconds"] == report["static_worker_seconds"] == 4 * 900
    assert "static over 0.2 simulated hours" in flat(result.output)


def test_simulate_names_the_known_policies(tmp_path):
    result = run("simulate", "--workload", tmp_path / "none.csv", "--policy", "magic", "--json", tmp_path / "x.json")
    assert result.exit_code == 1 and "no policy 'magic'; known:" in flat(result.output)


def test_demo_is_registered_with_its_options():
    result = run("demo", "--help")
    assert result.exit_code == 0 and "--hours" in result.output and "--out" in result.output
