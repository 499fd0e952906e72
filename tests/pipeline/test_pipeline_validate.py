"""Metric validation with real Spark (local) and real Great Expectations: a lake with known defects yields
exactly those failures, with the jobs, expectations and rows named; failing jobs are quarantined."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from daedalus.connectors.inbox import Inbox
from daedalus.connectors.lake import Lake
from daedalus.models.expectations import SuiteSettings, checks
from tests.pipeline.conftest import T0, rows, write

pytestmark = pytest.mark.slow
SECONDS = 300
UNTIL = T0 + 600

# job → {check: rows (or job-seconds, for the steps frame) that break it}
EXPECTED = {
    "clean": {},
    "hot-cpu": {"cpu_in_range": 3},
    "null-workload": {"workload_not_null": 2},
    "negative-lag": {"lag_non_negative": 2},
    "duplicate": {"unique_rows": 1},
    "gap": {"no_gaps": 1},
    "worker-missing": {"workers_match_scaleout": 1},
    "overproducing": {"throughput_within_supply": 3},
    "foreign": {"schema": 100, "lag_not_null": 100},
    "corrupt": {"readable_files": 1},
}


def _defect_lake(root) -> Lake:
    lake = Lake(str(root / "lake"))
    base = {job: rows(job, SECONDS) for job in EXPECTED}
    base["hot-cpu"]["cpu"][[10, 12, 14]] = 1.3  # worker-0 at three seconds
    base["null-workload"]["workload"][[40, 41]] = np.nan  # both workers of one second
    base["negative-lag"]["lag"][[60, 61]] = -5.0
    base["overproducing"]["throughput"][100:106] *= 1.5  # both workers, three seconds
    for job, columns in base.items():
        if job == "duplicate":
            columns = {k: np.insert(v, 21, v[20]) for k, v in columns.items()}  # row 20 (worker-0) twice
        elif job == "gap":
            keep = np.ones(2 * SECONDS, dtype=bool)
            keep[200:220] = False  # ten seconds missing
            columns = {k: v[keep] for k, v in columns.items()}
        elif job == "worker-missing":
            columns = {k: np.delete(v, 51) for k, v in columns.items()}  # worker-1 silent for one second
        if job == "foreign":  # two loops: the second written by a foreign exporter (CPU as text, no lag)
            write(lake, {k: v[:500] for k, v in columns.items()})
            path = write(lake, {k: v[500:] for k, v in columns.items()})[0]
            t = pq.read_table(path).drop_columns(["lag"])
            t = t.set_column(t.schema.get_field_index("cpu"), "cpu",
                             pa.array([f"{x:.3f}" for x in t.column("cpu").to_pylist()]))
            pq.write_table(t, path)
        else:
            write(lake, columns)
    bad = root / "lake" / "job=corrupt" / "date=2026-01-01" / f"part-{int(T0) + 1}-{int(T0) + 99}-garbage.parquet"
    bad.write_bytes(b"not parquet at all")
    return lake


@pytest.fixture(scope="module")
def defect_lake(tmp_path_factory) -> Lake:
    return _defect_lake(tmp_path_factory.mktemp("defects"))


@pytest.fixture(scope="module")
def report(spark, spark_settings, defect_lake):
    from daedalus.tasks.validate import validate

    return validate(defect_lake, T0, UNTIL, SuiteSettings(), spark_settings)


def test_a_lake_with_known_defects_yields_exactly_those_failures(report) -> None:
    found = {job: {f.check: f.count for f in verdict.failures} for job, verdict in report.jobs.items()}
    assert found == EXPECTED
    assert report.failed_jobs == sorted(job for job, failures in EXPECTED.items() if failures)
    assert not report.passed
    by_check = {c.name: c for c in report.checks}
    assert set(by_check) == {c.name for c in checks()}
    broken = {check for failures in EXPECTED.values() for check in failures} - {"readable_files"}
    assert {name for name, c in by_check.items() if not c.success} == broken
    assert by_check["cpu_in_range"].unexpected_count == 3


def test_failures_name_the_rows(report) -> None:
    cpu = report.jobs["hot-cpu"].failures[0]
    assert [(e["worker"], e["cpu"]) for e in cpu.examples] == [("worker-0", 1.3)] * 3
    assert cpu.examples[0]["timestamp"].startswith("2026-01-01T00:00:06")  # row 10: the sixth second
    schema = next(f for f in report.jobs["foreign"].failures if f.check == "schema")
    assert "column cpu is string, expected double; column lag missing in file:" in schema.examples[0]["schema_error"]
    gap = report.jobs["gap"].failures[0]
    assert gap.examples[0]["missing_steps"] == 10.0
    assert report.jobs["corrupt"].failures[0].examples[0]["file"].endswith("garbage.parquet")


def test_the_flow_quarantines_failing_jobs_and_releases_one_that_passes_again(
        prefect_harness, spark, defect_lake, tmp_path) -> None:
    from daedalus.flows.pipeline import validate_metrics
    from daedalus.models.config import LoopConfig
    from daedalus.models.control import apply_messages
    from daedalus.models.knowledge import Knowledge
    from daedalus.tasks.analyze import analyze
    from daedalus.tasks.plan import plan
    from tests.helpers import observation

    store = str(tmp_path / "store")
    inbox = Inbox(store)
    inbox.post("clean", "quarantine", {"reason": "an earlier validation failed"})
    result = validate_metrics(lake_url=defect_lake.url, store_url=store, window_s=600, until=UNTIL,
                              spark_master="local[2]")
    assert result["quarantined"] == sorted(job for job, failures in EXPECTED.items() if failures)
    assert result["released"] == ["clean"]
    assert [m.kind for _, m in inbox.pending("clean")] == ["quarantine", "release"]
    (_, message), = inbox.pending("hot-cpu")
    assert message.kind == "quarantine" and "cpu_in_range (3 rows" in message.body["reason"]

    # The loop applies it: it holds and says why, until a later validation passes.
    cfg, k = LoopConfig(), Knowledge.new("hot-cpu", LoopConfig())
    apply_messages(k, [message], cfg, 2, T0)
    obs = observation(start=T0)
    a = analyze.fn(cfg, obs, k, obs.end)
    d = plan.fn(cfg, a, k, obs.end)
    assert d.kind == "hold" and any("cpu_in_range" in r for r in d.reasons)


def test_cli_validate_exits_nonzero_and_lists_job_expectation_and_rows(prefect_harness, spark, defect_lake,
                                                                       tmp_path) -> None:
    from daedalus.cli.main import app

    out = tmp_path / "report.json"
    result = CliRunner().invoke(app, ["validate", "--lake", defect_lake.url, "--until", str(UNTIL),
                                      "--window-s", "600", "--json", str(out), "--master", "local[2]"])
    assert result.exit_code == 1, result.output
    assert "hot-cpu" in result.output and "cpu_in_range" in result.output and "1.3" in result.output
    assert out.exists()


def test_cli_validate_passes_on_a_clean_lake(prefect_harness, spark, tmp_path) -> None:
    from daedalus.cli.main import app

    lake = Lake(str(tmp_path / "lake"))
    write(lake, rows("fine", 120))
    result = CliRunner().invoke(app, ["validate", "--lake", lake.url, "--until", str(T0 + 120),
                                      "--window-s", "120", "--master", "local[2]"])
    assert result.exit_code == 0, result.output
