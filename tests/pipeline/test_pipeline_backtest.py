"""`daedalus backtest` on real Spark: one job's history validated, read and replayed on the driver; the fleet
replayed inside the executors (`applyInPandas`), with the jobs that cannot be backtested refused and named.

The lake is what simulated loops appended: `loop` ran the Daedalus policy itself for 75 minutes (so its replay
must land near what actually ran), `gappy` lost 20 seconds of metrics in the middle (metric validation fails it),
`short` has 30 minutes (too short for the forecaster).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from daedalus.bench.backtest import record_history
from daedalus.cli import backtest as cli_backtest
from daedalus.connectors.lake import SCHEMA, Lake
from daedalus.sim.workloads import sine_workload
from tests.cli.cli_support import flat, tiny_app

pytestmark = pytest.mark.slow

run = tiny_app(cli_backtest.backtest)
T0 = 1_767_225_600.0


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    lake = Lake(str(tmp_path_factory.mktemp("backtest") / "lake"))
    record_history(lake, "loop", sine_workload(hours=1.25, period_s=3600), policy="daedalus", seed=0)
    record_history(lake, "short", sine_workload(hours=0.5), policy="ds2", seed=1)
    gappy = Lake(str(tmp_path_factory.mktemp("gappy")))
    record_history(gappy, "gappy", sine_workload(hours=1.25), policy="ds2", seed=2)
    table = gappy.read("gappy", columns=("job", "worker", "timestamp", "workload", "throughput", "cpu", "lag",
                                         "scaleout"))
    epoch = table["timestamp"].astype("int64").to_numpy() / 1e6
    hole = (epoch > T0 + 1800) & (epoch <= T0 + 1820)
    lake.append_table(pa.Table.from_pandas(table[~hole], schema=SCHEMA, preserve_index=False))
    return lake


def test_one_job_meets_the_contract(spark, lake, tmp_path) -> None:
    out, report_path = tmp_path / "out", tmp_path / "loop.json"
    result = run("backtest", "loop", "--lake", lake.url, "--policies", "daedalus,ds2,static", "--json", report_path,
                 "--out", out, "--master", "local[2]")
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    assert {"job", "window", "actual", "policies"} <= set(report)
    assert set(report["window"]) == {"start", "end"} and report["job"] == "loop"
    assert {"worker_hours", "rescales"} <= set(report["actual"])
    for p in report["policies"].values():
        assert {"worker_hours", "seconds_over_slo", "rescales", "latency_p95_s"} <= set(p)
    # the actual run is the rows' own: one row per worker and second
    rows = lake.read("loop", columns=("timestamp", "scaleout"))
    per_second = rows.groupby("timestamp")["scaleout"].max()
    assert report["actual"]["worker_hours"] == pytest.approx(per_second.sum() / 3600)
    assert report["policies"]["static"]["worker_hours"] == pytest.approx(12 * 4500 / 3600)
    assert report["policies"]["daedalus"]["worker_hours"] == pytest.approx(report["actual"]["worker_hours"], rel=0.10)
    assert list(out.glob("*.png")) == [out / "backtest-loop.png"]
    assert "never observed (extrapolated)" in flat(result.output)


def test_a_window_that_fails_validation_is_refused_in_one_line(spark, lake, tmp_path) -> None:
    result = run("backtest", "gappy", "--lake", lake.url, "--policies", "static", "--json", tmp_path / "g.json",
                 "--master", "local[2]")
    assert result.exit_code == 1
    assert "job 'gappy': metric validation of the window failed: no_gaps" in flat(result.output)
    assert "Traceback" not in result.output and not (tmp_path / "g.json").exists()


def test_the_fleet_replays_each_job_in_the_executors_and_names_the_refused(spark, lake, tmp_path) -> None:
    report_path = tmp_path / "fleet.json"
    result = run("backtest", "--all", "--lake", lake.url, "--policies", "static,ds2", "--json", report_path,
                 "--out", tmp_path / "out", "--master", "local[2]")
    assert result.exit_code == 0, result.output
    fleet = json.loads(report_path.read_text())
    assert sorted(fleet["jobs"]) == ["loop"]
    assert fleet["refused"]["gappy"].startswith("metric validation failed: no_gaps")
    assert "the window holds 30 min of history; the forecaster needs 60 min" in fleet["refused"]["short"]
    assert fleet["jobs"]["loop"]["policies"]["static"]["worker_hours"] == pytest.approx(12 * 4500 / 3600)
    table = (tmp_path / "out" / "backtest-fleet.csv").read_text().splitlines()
    assert table[0].startswith("job,policy,worker_hours") and len(table) == 1 + 3  # actual, static, ds2
    assert (tmp_path / "out" / "jobs" / "backtest-loop.csv").exists()


def test_the_flow_publishes_the_table_and_the_pareto_plot(prefect_harness, spark, lake) -> None:
    from prefect.artifacts import Artifact

    from daedalus.flows.backtest import backtest

    report = backtest(job="loop", policies=["static"], lake_url=lake.url, spark_master="local[2]")
    assert report["policies"]["static"]["worker_hours"] == pytest.approx(12 * 4500 / 3600)
    artifact = Artifact.get("backtest-loop")
    assert artifact is not None and artifact.type == "markdown"
    assert "| loop | static | 15.0 | " in artifact.data
    assert "![worker-hours against p95 latency](data:image/png;base64," in artifact.data
    assert "Never observed (extrapolated): " in artifact.data


def test_each_job_of_the_fleet_is_one_task(spark) -> None:
    from pyspark.sql import functions as F

    from daedalus.tasks.backtest import one_job_per_task

    jobs = [f"job-{j:04d}" for j in range(10)]
    rows = spark.createDataFrame([(job, i) for job in jobs for i in range(3)], "job string, i int")
    spread = one_job_per_task(rows, jobs, spark)
    assert spread.rdd.getNumPartitions() == 10
    per_task = spread.groupBy(F.spark_partition_id().alias("task")).agg(F.collect_set("job").alias("jobs")).collect()
    assert sorted(len(r["jobs"]) for r in per_task) == [1] * 10  # hashing the names put 2-3 jobs in some tasks
    # grouping by the key reuses the partitioning: the replay adds no second shuffle
    grouped = spread.groupBy("slot", "job").applyInPandas(lambda df: df.head(1), "job string, i int, slot bigint")
    assert grouped._jdf.queryExecution().executedPlan().toString().count("Exchange") == 1
