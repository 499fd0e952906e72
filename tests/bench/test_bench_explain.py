"""`daedalus explain` and its record (sim.report.trace), and the cross-validation's choice, on hand-made runs."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from daedalus.bench.cv import cross_validate, parse_grid, run_score, settings_grid
from daedalus.bench.explain import explain_file, ledger_blocks, trace_blocks, trace_path
from daedalus.cli.main import app
from daedalus.models.errors import ConfigurationError
from daedalus.models.types import LedgerEntry
from daedalus.sim.report import breaches, costliest


def test_a_breach_is_a_contiguous_run_of_seconds_over_the_slo():
    latency = np.array([0.5, 70, 70, 1, 61, np.nan, 65, 60])
    assert breaches(latency, 60.0) == [(1, 2), (4, 4), (6, 6)]  # a second without arrivals ends one; 60 is not over
    assert breaches(np.array([1.0, 2.0]), 60.0) == []


def decision(t, a, b, reasons=(), executed=True):
    return {"t": t, "kind": "scale-out" if b > a else "scale-in" if b < a else "no-change", "from": a, "to": b,
            "executed": executed, "reasons": list(reasons), "forecast_peak": 300_000.0, "capacity_estimate": 200_000.0,
            "capacity_estimate_target": 400_000.0, "true_capacity": 190_000.0, "true_capacity_target": 380_000.0}


TRACE = {
    "policy": "daedalus", "slo_s": 60.0, "duration_s": 3600,
    "decisions": [
        decision(600, 4, 2, ["cheapest: 4 → 2 now: 1 worker-s", "keep 4: 2 worker-s"]),
        decision(1140, 2, 2, ["forecast over the next 30 min (arima): peak 300,000/s", "cheapest: keep 2"], False),
        decision(1260, 2, 4, ["scale-out set by the forecast: 300,000/s needs 4", "other"]),
    ],
    "breaches": [{"start": 1190, "end": 1219, "seconds": 30, "peak_latency_s": 75.0, "scaleout": [2],
                  "workload_peak": 350_000.0, "true_capacity": 190_000.0, "decision_before": 1}],
}


def test_one_block_per_rescale_and_per_breach_in_time_order():
    head, blank, *blocks = trace_blocks(TRACE)
    assert head == "daedalus: 2 rescale(s), 1 SLO breach(es) (30 s over 60 s) in 1 h" and blank == ""
    assert [b.splitlines()[0] for b in blocks] == [
        "rescale 1 at 10 min (600 s): 4 → 2 (scale-in)",
        "SLO breach 1 at 19 min 50 s (1,190 s) – 20 min 19 s (1,219 s): 30 s over 60 s, latency up to 75 s, at 2 "
        "worker(s)",
        "rescale 2 at 21 min (1,260 s): 2 → 4 (scale-out)"]
    first = blocks[0].splitlines()
    assert first[1] == ("  forecast peak 300,000/s; capacity estimated 200,000/s at 4 → 400,000/s at 2; true "
                        "190,000/s → 380,000/s")
    assert first[2:] == ["  priced:  cheapest: 4 → 2 now: 1 worker-s", "  priced:  keep 4: 2 worker-s"]
    # A minute after a rescale the model knows no worker of the new scale-out yet: its estimate is 0, not a figure.
    just_after = {**decision(660, 4, 6), "capacity_estimate": 0.0}
    settling = trace_blocks({**TRACE, "decisions": [just_after], "breaches": []})[2]
    assert settling.splitlines()[1] == ("  forecast peak 300,000/s; capacity estimated none yet (no worker measured "
                                        "since the rescale) at 4 → 400,000/s at 6; true 190,000/s → 380,000/s")
    breach = blocks[1].splitlines()
    assert breach[1] == "  workload peak 350,000/s (from 2 min before) against a true capacity of 190,000/s"
    assert breach[2].startswith("  last decision before it, at 19 min (1,140 s): no-change 2 → 2")
    assert breach[3:] == ["  why:     forecast over the next 30 min (arima): peak 300,000/s",
                          "  priced:  cheapest: keep 2"]
    assert blocks[2].splitlines()[2:] == ["  why:     scale-out set by the forecast: 300,000/s needs 4",
                                          "  note:    other"]


def test_the_costliest_stretches_are_the_scale_outs_held_longest_above_the_lower_bound():
    # Three stretches: 4 for 3 s against 2 (6 worker-s above), 2 for 2 s against 2 (none), 3 for 4 s against 1 (8).
    scaleout = np.array([4, 4, 4, 2, 2, 3, 3, 3, 3])
    lower = np.array([2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1])  # longer than the run: cut to it
    assert costliest(scaleout, lower) == [(5, 8, 8.0), (0, 2, 6.0)]  # costliest first; the one at the bound is none
    assert costliest(scaleout, lower, n=1) == [(5, 8, 8.0)] and costliest(np.array([]), lower) == []


def test_a_costliest_stretch_shows_the_loop_halfway_through_it():
    stretch = {"start": 600, "end": 1259, "scaleout": 2, "worker_seconds_above_lower_bound": 420.0,
               "lower_bound_min": 1, "lower_bound_max": 2, "lower_bound_mean": 1.36, "decision_middle": 1}
    trace = {**TRACE, "costliest": [stretch]}
    blocks = trace_blocks(trace)[2:]
    assert [b.splitlines()[0] for b in blocks][:2] == [
        "rescale 1 at 10 min (600 s): 4 → 2 (scale-in)",
        "costliest stretch 1 at 10 min (600 s) – 20 min 59 s (1,259 s): 2 worker(s) where 1–2 would do (1.4 on "
        "average, the lower bound): 420 worker-s above it"]
    assert blocks[1].splitlines()[1:] == [
        "  the loop halfway through, at 19 min (1,140 s): no-change 2 → 2; forecast peak 300,000/s, capacity "
        "estimated 200,000/s, true 190,000/s",
        "  why:     forecast over the next 30 min (arima): peak 300,000/s",
        "  priced:  cheapest: keep 2"]


def test_a_simulated_run_records_its_costliest_stretches_with_the_loop_halfway_through(tmp_path):
    # Static at 12 for half an hour: one stretch, the whole run, and what it paid above the lower bound is static's
    # worker-seconds less the lower bound's, as the report counts them. Halfway through (899.5 s): the last loop by
    # then, at 840 s (one a minute).
    report = tmp_path / "static.json"
    result = CliRunner().invoke(app, ["simulate", "--workload", "flat-0", "--policy", "static", "--hours", "0.5",
                                      "--json", str(report)])
    assert result.exit_code == 0, result.output
    scores, trace = json.loads(report.read_text()), json.loads(trace_path(report).read_text())
    [stretch] = trace["costliest"]
    assert (stretch["start"], stretch["end"], stretch["scaleout"]) == (0, 1799, 12)
    assert stretch["worker_seconds_above_lower_bound"] == pytest.approx(
        scores["static_worker_seconds"] - scores["lower_bound_worker_seconds"])
    assert trace["decisions"][stretch["decision_middle"]]["t"] == 840
    assert "costliest stretch 1 at 0 s (0 s) – 29 min 59 s (1,799 s): 12 worker(s)" in "\n".join(explain_file(report))


def test_explain_reads_a_simulate_report_with_its_trace_beside_it(tmp_path):
    report = tmp_path / "run.json"
    report.write_text(json.dumps({"policy": "daedalus", "duration_s": 3600}))
    missing = CliRunner().invoke(app, ["explain", str(report)])
    assert missing.exit_code == 1 and "no trace beside it (run.trace.json)" in missing.output
    assert trace_path(report) == tmp_path / "run.trace.json"
    trace_path(report).write_text(json.dumps(TRACE))
    shown = CliRunner().invoke(app, ["explain", str(report)])
    assert shown.exit_code == 0 and shown.output.count("\nrescale ") == 2 and shown.output.count("\nSLO breach ") == 1
    backtest = tmp_path / "backtest.json"
    backtest.write_text(json.dumps({"actual": {}, "policies": {"daedalus": {"trace": TRACE}, "ds2": {}}}))
    lines = explain_file(backtest)
    assert lines[0].startswith("daedalus: 2 rescale(s)") and lines[-1] == ("ds2: no trace in this report (written "
                                                                          "before `explain` existed)")
    assert CliRunner().invoke(app, ["explain"]).exit_code == 1


@pytest.mark.parametrize(("report", "trace", "message"), [
    ("{not json", None, "run.json: not a JSON report (Expecting property name"),
    ("[1, 2]", None, "run.json: not a report: a JSON object was expected, not list"),
    ("{}", '{"decisions": 5}', "run.trace.json: not a trace written by `daedalus simulate` or `backtest`"),
])
def test_a_report_or_trace_that_is_not_one_is_named_with_no_traceback(tmp_path, report, trace, message):
    (tmp_path / "run.json").write_text(report)
    if trace is not None:
        (tmp_path / "run.trace.json").write_text(trace)
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        explain_file(tmp_path / "run.json")
    shown = CliRunner().invoke(app, ["explain", str(tmp_path / "run.json")])
    assert shown.exit_code == 1 and "Traceback" not in shown.output
    assert "ConfigurationError:" in shown.output


def test_a_ledger_gives_one_block_per_executed_rescale():
    entries = [LedgerEntry("j-1", 0.0, 4, 6, "scale-out", ("scale-out set by the envelope",), "executed",
                           predicted_recovery_s=90.0, observed_recovery_s=120.0),
               LedgerEntry("j-2", 60.0, 6, 6, "no-change", (), "decided"),
               LedgerEntry("j-3", 120.0, 6, 3, "scale-in", (), "rejected"),
               LedgerEntry("j-4", 3600.0, 6, 5, "scale-in", ("cheapest: 6 → 5 now",), "executed")]
    head, _, first, second = ledger_blocks("j", entries)
    assert head.startswith("j: 2 executed rescale(s) in the ledger; SLO breaches: none can be told from a ledger")
    assert first.splitlines() == ["rescale 1 at 1970-01-01 00:00:00 UTC: 4 → 6 (scale-out)",
                                  "  recovery: predicted 90 s, observed 2 min",
                                  "  why:     scale-out set by the envelope"]
    assert second.splitlines()[0] == "rescale 2 at 1970-01-01 01:00:00 UTC: 6 → 5 (scale-in)"


def test_explain_reads_a_live_jobs_ledger_from_the_store(tmp_path):
    from daedalus.connectors.store import Store
    from daedalus.models.config import LoopConfig
    from daedalus.models.knowledge import Knowledge

    url = f"file://{tmp_path}/store"
    k = Knowledge.new("j", LoopConfig())
    k.record(LedgerEntry("j-1", 0.0, 4, 6, "scale-out", ("scale-out set by the envelope",), "executed",
                         predicted_recovery_s=float("inf")))  # an older loop stored an unpredictable recovery
    Store(url).job("j").save(k)
    shown = CliRunner().invoke(app, ["explain", "--store", url, "--job", "j"])
    assert shown.exit_code == 0, shown.output
    assert "rescale 1 at 1970-01-01 00:00:00 UTC: 4 → 6 (scale-out)" in shown.output and "recovery" not in shown.output
    missing = CliRunner().invoke(app, ["explain", "--store", url, "--job", "other"])
    assert missing.exit_code == 1 and "nothing stored for job 'other'" in missing.output


def test_leave_one_family_out_chooses_on_the_rest_and_judges_on_the_held_out_family():
    # Two settings, a paper trace and two families. "a" is best on the paper trace and on f1, "b" on f2.
    scores = {"a": {"paper-1": 10.0, "f1-0": 20.0, "f2-0": 100.0}, "b": {"paper-1": 30.0, "f1-0": 50.0, "f2-0": 40.0}}
    folds = {"paper-1": "paper", "f1-0": "f1", "f2-0": "f2"}
    cv = cross_validate(scores, folds)
    # Holding out f1: a = 10 + 100 = 110, b = 30 + 40 = 70: b chosen, and scores 50 on f1 (a would have had 20).
    assert cv["folds"]["f1"] == {"chosen": "b", "held_out_score": 50.0, "best_in_hindsight": "a", "best_score": 20.0}
    # Holding out f2: a = 30, b = 80: a chosen, 100 on f2.
    assert cv["folds"]["f2"]["chosen"] == "a" and cv["folds"]["f2"]["held_out_score"] == 100.0
    assert cv["chosen"] == "b" and cv["totals"] == {"a": 130.0, "b": 120.0}


def test_a_run_is_scored_calm_first():
    calm = {"duration_s": 21_600, "seconds_over_slo": 0, "budget_exceeded": 0, "rescales": 18,
            "worker_seconds_pct_of_static": 60.0}
    assert run_score(calm) == 60.0
    assert run_score({**calm, "seconds_over_slo": 2, "rescales": 20}) == 2_000 + 200 + 60.0
    assert run_score({**calm, "duration_s": 10_800, "rescales": 10}) == 100.0 + 60.0  # 9 allowed in 3 hours


def test_a_grid_names_loop_settings_and_values_the_loop_accepts():
    grid = parse_grid(["forecast_z=0.5,1,2", "rescale_price=300,600"])
    assert grid == {"forecast_z": (0.5, 1.0, 2.0), "rescale_price": (300.0, 600.0)}
    assert settings_grid(grid)[:2] == [{"forecast_z": 0.5, "rescale_price": 300.0},
                                       {"forecast_z": 0.5, "rescale_price": 600.0}]
    with pytest.raises(ConfigurationError, match="'forecast_zz' is not a numeric loop setting"):
        parse_grid(["forecast_zz=1"])
    with pytest.raises(ConfigurationError, match="must be ≥ 0"):
        parse_grid(["forecast_z=1,-1"])
    with pytest.raises(ConfigurationError, match="could not convert"):
        parse_grid(["forecast_z=one"])
    with pytest.raises(ConfigurationError, match="--grid forecast_z is given twice: give it once, with its values"):
        parse_grid(["forecast_z=1", "forecast_z=2"])  # not the last of the two, silently
