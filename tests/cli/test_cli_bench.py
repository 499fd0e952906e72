"""`daedalus bench …` alone: the commands draw the benchmarks' progress and print their figures; the measuring is
in `daedalus.bench`. The quick benchmarks run for real; those that need a Prometheus, a Prefect server or Spark
are stood in for by their report (their arithmetic is tested with the bench)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rich.progress import Progress

from daedalus.bench import cv as bench_cv
from daedalus.bench import monitor as bench_monitor
from daedalus.bench import pipeline as bench_pipeline
from daedalus.bench import schedule as bench_schedule
from daedalus.cli import bench
from daedalus.cli.common import phases
from daedalus.connectors.jobs import load_jobs
from tests.cli.cli_support import flat, tiny_app

run = tiny_app(bench.monitor, bench.deploy, bench.schedule, bench.retrain, bench.validate, bench.policies,
               bench.loop, bench.forecast, bench.capacity, bench.cv)


def test_capacity_runs_and_writes_its_figures(tmp_path):
    out = tmp_path / "figures" / "capacity.json"
    result = run("capacity", "--seeds", 1, "--max-scaleout", 2, "--hours", 0.1, "--json", out)
    assert result.exit_code == 0, result.output
    assert "skew=0: |error| median" in flat(result.output) and f"Wrote {out}" in flat(result.output)
    assert set(json.loads(out.read_text())["summary"]) == {"skew=0.15", "skew=0"}


def test_policies_refuses_an_unknown_policy(short_trace):
    result = run("policies", "--workloads", short_trace, "--policy", "static,k8s")
    assert result.exit_code == 1 and "no policy 'k8s'" in flat(result.output)


def test_phases_draw_one_bar_per_phase():
    bars = Progress()
    update = phases(bars)
    update("writing", 0, 4)
    update("writing", 3, 4)
    update("starting", 0, None)
    assert [(t.description, t.completed, t.total) for t in bars.tasks] == [("writing", 3, 4), ("starting", 0, None)]


def test_the_bench_jobs_file_holds_n_simulated_jobs(tmp_path):
    jobs = load_jobs(bench_schedule.bench_jobs_file(tmp_path / "jobs.yaml", 3, 2.0, mode="approve")).jobs
    assert [j.name for j in jobs] == ["bench-000", "bench-001", "bench-002"]
    assert {(j.engine, j.mode) for j in jobs} == {("sim", "approve")}


def reporting(report: dict[str, Any], phase: str = "working"):
    """A benchmark that reports one phase of progress and returns `report`, whatever it is asked."""
    def fake(*args: Any, on_progress=None, **kwargs: Any) -> dict[str, Any]:
        on_progress(phase, 0, 1)
        on_progress(phase, 1, 1)
        return report
    return fake


def test_monitor_prints_each_case(monkeypatch, tmp_path):
    figures = {"hours": 1.0, "workers": 12, "repeats": 3, "cases": [
        {"case": "one loop (60 s) at step 1 s", "steps": 60, "workers": 12, "median_ms": 12.34, "p95_ms": 20.0,
         "holds": []}]}
    monkeypatch.setattr(bench_monitor, "run_monitor_bench", reporting(figures))
    result = run("monitor", "--json", tmp_path / "m.json")
    assert result.exit_code == 0, result.output
    assert "one loop (60 s) at step 1 s 60 12.3 20.0" in flat(result.output)
    assert json.loads((tmp_path / "m.json").read_text()) == figures


def test_deploy_prints_both_times_and_rounds_them_in_json(monkeypatch, tmp_path):
    report = {"jobs": 5, "deployments": 8, "first_deploy_s": 4.26789, "redeploy_s": 1.04321}
    monkeypatch.setattr(bench_schedule, "run_deploy_bench", reporting(report, "deploying"))
    result = run("deploy", "--jobs", 5, "--json", tmp_path / "d.json")
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert "deploying 5 jobs (8 deployments)" in text
    assert "first deploy (create) 4.3 s" in text and "deploy again (update) 1.0 s" in text
    assert json.loads((tmp_path / "d.json").read_text()) == {**report, "first_deploy_s": 4.27, "redeploy_s": 1.04}


def test_schedule_passes_its_options_and_writes_the_report(monkeypatch, tmp_path):
    asked: list[tuple] = []

    def fake(*args: Any, on_progress=None) -> dict[str, Any]:
        asked.append(args)
        return {"jobs": 2}

    monkeypatch.setattr(bench_schedule, "run_schedule_bench", fake)
    monkeypatch.setattr(bench_schedule, "schedule_table", lambda report: f"table of {report['jobs']} jobs")
    result = run("schedule", "--jobs", 2, "--minutes", 3, "--no-prefork", "--worker-limit", 0,
                 "--json", tmp_path / "s.json")
    assert result.exit_code == 0, result.output
    (args,) = asked
    assert args[:4] == (2, 3.0, False, None) and args[5:] == (True, False, 0, bench_schedule.POLL_S)
    assert "table of 2 jobs" in result.output and json.loads((tmp_path / "s.json").read_text()) == {"jobs": 2}


def test_retrain_prints_times_per_master_and_the_speed_up(monkeypatch):
    per = {"fit_s_median": 0.5, "fit_s_p95": 0.9, "fitted": 3, "failed": 1, "skipped": 0}
    report = {"jobs": 4, "hours": 6.0, "workers": 2, "rows": 172_800,
              "masters": {"local[1]": {"seconds": 20.0, **per}, "local[2]": {"seconds": 12.5, **per}}}
    monkeypatch.setattr(bench_pipeline, "run_retrain_bench", reporting(report))
    result = run("retrain", "--jobs", 4)
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert "lake rows 172,800" in text and "local[2]: per job 3.125 s" in text
    assert "local[1]: fit time per job, median / p95 0.50 / 0.90 s" in text and "3 / 1 / 0" in text
    assert "speed-up local[2] vs local[1] 1.60×" in text
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "jobs": 4, "hours": 6.0, "workers": 2, "seconds": {"local[1]": 20.0, "local[2]": 12.5}}


def test_validate_prints_rows_checks_and_time(monkeypatch):
    report = {"jobs": 3, "hours": 1.0, "workers": 4, "master": "local[2]", "rows": 43_200, "checks": 19,
              "failed_jobs": 0, "seconds": 7.25}
    monkeypatch.setattr(bench_pipeline, "run_validate_bench", reporting(report))
    result = run("validate", "--jobs", 3)
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert "rows validated 43,200" in text and "checks 19" in text and "local[2]: wall time 7.2 s" in text
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"jobs": 3, "hours": 1.0, "workers": 4,
                                                                  "rows": 43_200, "seconds": 7.25}


@pytest.fixture
def short_trace(tmp_path):
    """Ten minutes of a flat per-second trace."""
    path = tmp_path / "flat.csv"
    path.write_text("second|count\n" + "".join(f"{s}|20000\n" for s in range(600)))
    return path


def test_cv_runs_the_seed_it_is_given(monkeypatch, tmp_path):
    # The cross-validation of the twenty-second session ran seed 0 of the simulation only; `--seed` runs another.
    asked: list[dict[str, Any]] = []

    def fake(out, **kw: Any) -> dict[str, Any]:
        asked.append(kw)
        out.mkdir(parents=True, exist_ok=True)
        (out / "cv.md").write_text("folds")
        return {"chosen": "envelope_s=1800"}

    monkeypatch.setattr(bench_cv, "run_cv", fake)
    result = run("cv", "--seed", 2, "--seeds", 3, "--out", tmp_path / "cv")
    assert result.exit_code == 0, result.output
    (kw,) = asked
    assert kw["seed"] == 2 and list(kw["family_seeds"]) == [0, 1, 2]
    assert "Chosen: envelope_s=1800" in flat(result.output)
