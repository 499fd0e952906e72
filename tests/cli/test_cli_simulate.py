"""`daedalus simulate` and `daedalus demo` alone: a policy on a workload trace, scored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

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


def test_a_negative_seed_is_refused_before_the_run(tmp_path):
    """numpy takes no negative seed: the option says so, not a traceback from inside the simulation."""
    trace = tmp_path / "flat.csv"
    trace.write_text("second|count\n" + "".join(f"{s}|20000\n" for s in range(900)))
    out = tmp_path / "x.json"
    result = run("simulate", "--workload", trace, "--policy", "static", "--seed", -1, "--json", out)
    assert result.exit_code == 2 and "Invalid value for '--seed'" in flat(result.output)
    assert not out.exists()


def test_demo_is_registered_with_its_options():
    result = run("demo", "--help")
    assert result.exit_code == 0 and "--hours" in result.output and "--out" in result.output


@pytest.mark.slow  # a Prefect server and 30 flow runs: about 40 s on 2 idle cores
def test_the_demo_prints_its_progress_a_short_summary_and_where_the_report_is(tmp_path):
    # Issue 14 item 1: ~3,000 lines of Prefect's INFO output, "database is locked" tracebacks, "WAPE 0.0 %".
    out = tmp_path / "demo"
    done = subprocess.run([str(Path(sys.executable).parent / "daedalus"), "demo", "--hours", "0.5", "--out", str(out)],
                          env={**os.environ, "COLUMNS": "120"}, capture_output=True, text=True, timeout=900)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    assert len(text.splitlines()) < 40, text
    assert "Traceback" not in text and "INFO" not in text and "locked" not in text, text
    assert "30/30 simulated loops" in text and "forecast WAPE median" in text and " 0.0 %" not in text
    assert f"Report: {out / 'report.json'} and {out / 'report.png'}" in flat(text)
    report = json.loads((out / "report.json").read_text())
    assert report["policy"] == "daedalus" and report["duration_s"] == 1800
    assert (out / "report.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    # Every loop went through the flow: the demo's own Prefect database holds its runs.
    assert (out / "prefect" / "prefect.db").is_file()


def test_the_summary_reads_for_people():
    report = {"policy": "daedalus", "duration_s": 21_600, "worker_seconds_pct_of_static": 58.31,
              "ratio_to_lower_bound": 1.1912, "latency_s": {"p50": 0.5, "p95": 14.04, "max": 36.4}, "slo_s": 60.0,
              "seconds_over_slo": 0, "rescales": 18, "downtime_s": 372,
              "capacity_error_pct": {"median": 0.7, "p95": 5.5}, "forecast_wape": {"median": 3e-5},
              "loop_ms": {"median": 74.9, "p95": 132.6}}
    console = Console(width=120, record=True)
    console.print(simulate._summary_table(report))
    text = flat(console.export_text())
    for row in ("worker-seconds, share of static 58.3 %", "ratio to the lower bound 1.19",
                "latency p50 / p95 / max 0.5 s / 14 s / 36 s", "seconds over the 60 s SLO 0", "rescales 18",
                "downtime 6 min 12 s", "capacity error median / p95 0.7 % / 5.5 %", "forecast WAPE median < 0.1 %",
                "loop cost: analyze + plan, median / p95 74.9 ms / 133 ms"):
        assert row in text, text


def test_simulate_runs_a_generated_family_by_its_benchmark_name(tmp_path):
    # `flat-0` is the benchmark's own draw (bench.families), of which --hours keeps the first quarter hour; no file
    # of that name exists.
    out = tmp_path / "flat.json"
    result = run("simulate", "--workload", "flat-0", "--policy", "static", "--max-scaleout", 4, "--hours", 0.25,
                 "--json", out)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["workload"] == "flat-0" and report["duration_s"] == 900
    # A name that is no family's draw is still read as a path, and a missing path says so.
    result = run("simulate", "--workload", "flat-x", "--policy", "static", "--json", tmp_path / "x.json")
    assert result.exit_code == 1 and "flat-x" in flat(result.output) and not (tmp_path / "x.json").exists()


def test_simulate_takes_the_settings_a_cross_validation_run_used(tmp_path):
    # The planner states its price and its band's width in every decision's reasons: with nothing spent of the
    # budget, the price itself.
    from daedalus.bench.explain import trace_path

    out = tmp_path / "flat.json"
    result = run("simulate", "--workload", "flat-0", "--policy", "daedalus", "--hours", 0.5, "--rescale-price", 300,
                 "--forecast-z", 1.5, "--json", out)
    assert result.exit_code == 0, result.output
    decisions = json.loads(trace_path(out).read_text())["decisions"]
    reasons = " ".join(" ".join(d["reasons"]) for d in decisions if "0 of 6 spent" in " ".join(d["reasons"]))
    assert "0 of 6 spent in the last 2 h (3 an hour): 300 worker-s per rescale" in reasons
    assert "600 worker-s per rescale" not in reasons
    assert "(z = 1.5)" in reasons and "(z = 1)" not in reasons


def test_simulate_sets_any_numeric_loop_setting_and_refuses_a_bad_one(tmp_path):
    # Every decision of the model-predictive planner names its latency budget: latency_budget_share × the SLO.
    from daedalus.bench.explain import trace_path

    out = tmp_path / "flat.json"
    result = run("simulate", "--workload", "flat-0", "--hours", 0.25, "--set", "latency_budget_share=0.5",
                 "--set", "envelope_s=0", "--json", out)
    assert result.exit_code == 0, result.output
    reasons = [r for d in json.loads(trace_path(out).read_text())["decisions"] for r in d["reasons"]]
    assert any("latency budget 30 s (0.5 × SLO 60 s)" in r for r in reasons)
    assert not any("latency budget 48 s" in r or r.startswith("envelope:") for r in reasons)
    for given, said in (("nonsense=1", "'nonsense' is not a numeric loop setting"),
                        ("forecast_z=1,2", "--set forecast_z: one value, not 2"),
                        ("grace_breach_band=2", "grace_breach_band must be in [0, 1], got 2.0"),
                        ("max_scaleout=6", "max_scaleout is the run's --max-scaleout, not a loop setting")):
        bad = tmp_path / "bad.json"
        result = run("simulate", "--workload", "flat-0", "--hours", 0.25, "--set", given, "--json", bad)
        assert result.exit_code == 1 and said in flat(result.output) and not bad.exists(), result.output
    # One setting given twice, as two --set or as --set and its own option: refused, whichever value was meant.
    for given, said in ((["--set", "forecast_z=1", "--set", "forecast_z=2"], "--set forecast_z is given twice"),
                        (["--forecast-z", "1", "--set", "forecast_z=2"],
                         "--set forecast_z and --forecast-z both set forecast_z: give it once")):
        bad = tmp_path / "bad.json"
        result = run("simulate", "--workload", "flat-0", "--hours", 0.25, *given, "--json", bad)
        assert result.exit_code == 1 and said in flat(result.output) and not bad.exists(), result.output
