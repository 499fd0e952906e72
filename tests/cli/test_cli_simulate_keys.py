"""`daedalus simulate`: the JSON contract, known answers with the static policy, and bad input."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from daedalus.cli.main import app

runner = CliRunner()
KEYS = {"duration_s", "worker_seconds", "static_worker_seconds", "lower_bound_worker_seconds", "latency_s",
        "seconds_over_slo", "slo_s", "rescales", "downtime_s", "capacity_error_pct", "forecast_wape", "loop_ms"}


def simulate(*args: str):
    return runner.invoke(app, ["simulate", *args])


def test_static_policy_pays_for_the_maximum_all_the_time(data_dir, tmp_path):
    out = tmp_path / "static.json"
    res = simulate("--workload", str(data_dir / "workloads/paper/sine_60000_6h.csv"), "--policy", "static",
                   "--hours", "0.5", "--json", str(out))
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert set(report) >= KEYS
    assert report["duration_s"] == 1800
    assert report["worker_seconds"] == report["static_worker_seconds"] == 12 * 1800
    assert report["rescales"] == 0 and report["downtime_s"] == 0
    assert set(report["latency_s"]) == {"p50", "p95", "p99", "max"}
    # The sine peaks at 90 % of 12 workers' true capacity, so the lower bound needs fewer workers.
    assert report["lower_bound_worker_seconds"] < report["worker_seconds"]
    assert report["seconds_over_slo"] == 0 and report["slo_s"] == 60


def test_daedalus_policy_scales_in_from_the_maximum(data_dir, tmp_path):
    out = tmp_path / "d.json"
    res = simulate("--workload", str(data_dir / "workloads/paper/tm_6h_100K_max.csv"), "--policy", "daedalus",
                   "--hours", "1", "--json", str(out))
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert report["rescales"] >= 1
    assert report["lower_bound_worker_seconds"] <= report["worker_seconds"] < report["static_worker_seconds"]
    assert set(report["loop_ms"]) == {"median", "p95", "first_hour_median", "last_hour_median"}


def test_unknown_policy_lists_the_known_ones(data_dir, tmp_path):
    res = simulate("--workload", str(data_dir / "workloads/paper/sine_60000_6h.csv"), "--policy", "magic",
                   "--json", str(tmp_path / "x.json"))
    assert res.exit_code == 1
    assert "no policy 'magic'; known: daedalus, daedalus-paper, static" in res.output.replace("\n", " ")


def test_bad_workload_file_is_named_with_its_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("second|count\n0|10\n1|-5\n")
    res = simulate("--workload", str(bad), "--json", str(tmp_path / "x.json"))
    assert res.exit_code == 1
    text = res.output.replace("\n", "")
    assert "bad.csv" in text and "line 3" in text
    assert not (tmp_path / "x.json").exists()
