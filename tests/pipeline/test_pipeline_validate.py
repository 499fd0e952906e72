"""Metric validation with real Spark (local) and real Great Expectations: a lake with known defects yields
exactly those failures, with the jobs, expectations and rows named; failing jobs are quarantined. A rescale
settling is not a defect; an empty window is a failure that says where the data is."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from daedalus.connectors.lake import Lake
from daedalus.connectors.store import Store
from daedalus.models.errors import ValidationError
from daedalus.models.expectations import SuiteSettings, checks
from tests.helpers import observation
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
    # Rescales from 2 to 3 workers (SuiteSettings.transition_s = 180 s to settle):
    "rescaled": {},  # the third worker reports 20 s after the scale-out changed
    "rescaled-at-window-start": {},  # changed 10 s before the window, settled 15 s into it
    "stuck-rescale": {"workers_match_scaleout": 60},  # changed at second 61, never settled: 240 s, 180 excused
    "stuck-before-window": {"workers_match_scaleout": SECONDS + 1},  # changed 300 s before the window (since
    # included), never settled
}


def _rescale(job: str, changed: int, settled: int | None, start: float = T0, seconds: int = SECONDS
             ) -> dict[str, np.ndarray]:
    """2 workers, then a scale-out of 3 from second `changed + 1`, which the third worker joins at `settled + 1`."""
    settled = seconds if settled is None else settled
    parts = [rows(job, changed, 2, start=start), rows(job, settled - changed, 2, start=start + changed)]
    parts[1]["scaleout"][:] = 3
    if settled < seconds:
        parts.append(rows(job, seconds - settled, 3, start=start + settled))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _defect_lake(root) -> Lake:
    lake = Lake(str(root / "lake"))
    base = {job: rows(job, SECONDS) for job in EXPECTED}
    base["rescaled"] = _rescale("rescaled", 150, 170)
    base["rescaled-at-window-start"] = _rescale("rescaled-at-window-start", 90, 115, start=T0 - 100,
                                                seconds=SECONDS + 100)
    base["stuck-rescale"] = _rescale("stuck-rescale", 60, None)
    base["stuck-before-window"] = _rescale("stuck-before-window", 100, None, start=T0 - 400, seconds=SECONDS + 400)
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


def test_a_rescale_settling_is_not_a_defect_but_a_mismatch_beyond_the_transition_is(report) -> None:
    """The transition runs from the second the scale-out changed until the workers match it, at most 180 s; it
    is judged over the job's history, so a change just before the window still counts."""
    for job in ("rescaled", "rescaled-at-window-start"):
        assert report.jobs[job].passed and report.jobs[job].rows > 0
    stuck = report.jobs["stuck-rescale"].failures[0]
    assert stuck.examples[0]["timestamp"].startswith("2026-01-01T00:04:01")  # second 61 + 180 s
    assert (stuck.examples[0]["workers"], stuck.examples[0]["expected_workers"]) == (2, 3)
    before = report.jobs["stuck-before-window"].failures[0]
    assert before.examples[0]["timestamp"].startswith("2026-01-01T00:00:00")  # the window's first second


def test_a_file_pandas_wrote_with_int64_and_float32_columns_validates_clean(spark, spark_settings, tmp_path) -> None:
    from daedalus.tasks.validate import validate

    lake = Lake(str(tmp_path / "lake"))
    write(lake, rows("pandas", 60))
    frame = pd.DataFrame({k: v for k, v in rows("pandas", 60, start=T0 + 60).items() if k != "job"})
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], unit="s", utc=True).astype("datetime64[us, UTC]")
    frame["scaleout"] = frame["scaleout"].astype("int64")
    frame["cpu"] = frame["cpu"].astype("float32")
    folder = tmp_path / "lake" / "job=pandas" / "date=2026-01-01"
    frame.to_parquet(folder / f"part-{int(T0) + 61}-{int(T0) + 120}-pandas.parquet", index=False)
    assert pq.read_schema(folder / f"part-{int(T0) + 61}-{int(T0) + 120}-pandas.parquet").field(
        "scaleout").type == pa.int64()
    result = validate(lake, T0, T0 + 120, SuiteSettings(), spark_settings)
    assert result.passed, result.jobs["pandas"].reason()
    assert result.jobs["pandas"].rows == 2 * 120


def test_an_empty_window_fails_and_says_where_the_newest_row_is(prefect_harness, spark, tmp_path) -> None:
    from daedalus.cli.main import app
    from daedalus.flows.pipeline import validate_metrics

    lake = Lake(str(tmp_path / "lake"))
    assert lake.append(replace(observation(n=60, start=T0), job="quiet"))  # rows up to 00:01:00
    until = T0 + 60 + 4500  # the window (until − 900 s, until] starts an hour after the newest row
    with pytest.raises(ValidationError) as failed:
        validate_metrics(lake_url=lake.url, store_url=None, window_s=900, until=until, spark_master="local[2]")
    message = str(failed.value)
    assert "no rows" in message and "2026-01-01 01:01:00 UTC – 2026-01-01 01:16:00 UTC" in message
    assert "the lake's newest row is at 2026-01-01 00:01:00 UTC, 1 h 15 min before the window's end" in message

    result = CliRunner().invoke(app, ["validate", "--lake", lake.url, "--until", str(until), "--window-s", "900",
                                      "--master", "local[2]"])
    assert result.exit_code == 1 and isinstance(result.exception, ValidationError), result.output
    nothing = Lake(str(tmp_path / "empty"))
    with pytest.raises(ValidationError, match="the lake has no rows at all"):
        validate_metrics(lake_url=nothing.url, store_url=None, window_s=900, until=until, spark_master="local[2]")


def test_the_flow_quarantines_failing_jobs_and_releases_one_that_passes_again(
        prefect_harness, spark, defect_lake, tmp_path) -> None:
    from daedalus.flows.pipeline import validate_metrics
    from daedalus.models.config import LoopConfig
    from daedalus.models.knowledge import Knowledge
    from daedalus.models.loop.messages import apply_messages
    from daedalus.tasks.analyze import analyze
    from daedalus.tasks.plan import plan
    from tests.helpers import observation

    store = str(tmp_path / "store")
    inbox = Store(store)
    inbox.job("clean").post("quarantine", {"reason": "an earlier validation failed"})
    result = validate_metrics(lake_url=defect_lake.url, store_url=store, window_s=600, until=UNTIL,
                              spark_master="local[2]")
    assert result["quarantined"] == sorted(job for job, failures in EXPECTED.items() if failures)
    assert result["released"] == ["clean"]
    assert [m.kind for _, m in inbox.job("clean").pending()] == ["quarantine", "release"]
    (_, message), = inbox.job("hot-cpu").pending()
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
