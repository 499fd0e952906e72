"""`daedalus validate | retrain | compact` alone: what they print and how they exit, around the pipeline's flows.

Compaction runs the flow's own body on a real lake (the benchmark's synthetic fleet); validation and retraining
need Spark, so their flows are stood in for here (tests/pipeline runs them for real).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from daedalus.bench.pipeline import BENCH_START, write_fleet
from daedalus.cli import pipeline
from daedalus.connectors.lake import Lake
from daedalus.flows import pipeline as flows
from daedalus.tasks import lake as lake_tasks
from tests.cli.cli_support import flat, tiny_app

run = tiny_app(pipeline.validate, pipeline.retrain, pipeline.compact)


def test_compact_merges_the_small_files_of_each_partition(monkeypatch, tmp_path):
    url = str(tmp_path / "lake")
    seen: list[tuple[str, int, int | None]] = []
    end, rows = write_fleet(url, jobs=2, hours=0.01, workers=2, on_progress=lambda *p: seen.append(p))
    write_fleet(url, jobs=2, hours=0.01, workers=2, start=end)  # a second file in each job's partition
    assert (end, rows) == (BENCH_START + 36, 2 * 36 * 2)
    assert seen == [("writing the lake", 0, 2), ("writing the lake", 1, 2), ("writing the lake", 2, 2)]
    assert len(Lake(url).files()) == 4
    # The flow's and the task's bodies, without a Prefect run (which would start a temporary server).
    monkeypatch.setattr(flows, "get_run_logger", lambda: logging.getLogger("test"))
    monkeypatch.setattr(flows, "compact_lake", flows.compact_lake.fn)
    monkeypatch.setattr(lake_tasks, "compact", lake_tasks.compact.fn)
    result = run("compact", "--lake", url, "--min-age-s", 0)
    assert result.exit_code == 0, result.output
    assert "compacted 2 partitions: 4 files → 2, 0 duplicate rows dropped" in flat(result.output)
    assert len(Lake(url).files()) == 2


FAILED = {"passed": False, "jobs": 2, "failed_jobs": ["hot-cpu"], "checks": [], "failures": {"hot-cpu": [
    {"check": "cpu_in_range", "meaning": "CPU load within [0, 1]", "count": 3, "examples": [{"cpu": 1.3}]}]}}


@pytest.fixture
def flow_calls(monkeypatch) -> list[dict[str, Any]]:
    """Stand-ins for the Spark flows: they record their parameters and answer as the flows do."""
    calls: list[dict[str, Any]] = []

    def validate_metrics(**kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs)
        return FAILED if "bad" in kwargs["lake_url"] else {"passed": True, "jobs": 2}

    def retrain_forecasters(**kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs)
        return {"outcomes": [{"job": "a", "old_wape_pct": 12.5, "new_wape_pct": 8.25, "promoted": True,
                              "fit_s": 1.5, "model": "ARIMA(1,0,1)", "note": ""}], "promoted": ["a"]}

    monkeypatch.setattr(flows, "validate_metrics", validate_metrics)
    monkeypatch.setattr(flows, "retrain_forecasters", retrain_forecasters)
    return calls


def test_validate_exits_1_listing_job_expectation_and_rows(flow_calls, tmp_path):
    out = tmp_path / "report" / "validation.json"
    result = run("validate", "--lake", "bad-lake", "--json", out, "--window-s", 600, "--master", "local[1]")
    assert result.exit_code == 1
    text = flat(result.output)
    assert "1 of 2 jobs failed" in text and "hot-cpu" in text and "cpu_in_range" in text and "1.3" in text
    assert json.loads(out.read_text())["failed_jobs"] == ["hot-cpu"]
    assert flow_calls[0]["window_s"] == 600 and flow_calls[0]["spark_master"] == "local[1]"


def test_validate_passes_quietly(flow_calls):
    result = run("validate", "--lake", "good-lake", "--store", "s")
    assert result.exit_code == 0, result.output
    assert "metric validation passed: 2 jobs" in flat(result.output) and flow_calls[0]["store_url"] == "s"


def test_retrain_takes_jobs_repeated_or_comma_separated(flow_calls):
    result = run("retrain", "--jobs", "a,b", "--jobs", "c", "--store", "s", "--history-s", 3600)
    assert result.exit_code == 0, result.output
    assert flow_calls[0]["jobs"] == ["a", "b", "c"] and flow_calls[0]["history_s"] == 3600
    assert "1 of 1 promoted" in flat(result.output) and "ARIMA(1,0,1)" in result.output
