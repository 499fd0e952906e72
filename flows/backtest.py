"""The `backtest` flow: what other policies would have done on one job's own history, run from the Prefect UI with
the job and the window as parameters; the table and the Pareto plot are published as the `backtest-<job>`
artifact."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prefect import flow, get_run_logger

from daedalus.connectors.lake import DEFAULT_URL as DEFAULT_LAKE
from daedalus.connectors.replay import default_policies
from daedalus.connectors.spark import SparkSettings
from daedalus.tasks import backtest as backtest_tasks


@flow(name="backtest", description="Replay other policies on a job's own history from the lake (Spark) and compare "
      "worker-hours, seconds over the SLO, p95 latency and rescales with what actually ran.")
def backtest(
    job: str,
    start: datetime | None = None,
    end: datetime | None = None,
    policies: list[str] | None = None,
    lake_url: str = DEFAULT_LAKE,
    store_url: str | None = None,
    max_scaleout: int | None = None,
    spark_master: str | None = None,
) -> dict[str, Any]:
    """The window [start, end] defaults to the job's whole history; the policies to the loop's planner, DS2, the
    Flink autoscaler and static; the downtimes to those the job's knowledge in `store_url` learned."""
    names = policies or default_policies()
    report = backtest_tasks.backtest_job_task(
        lake_url, job, names, None if start is None else start.timestamp(), None if end is None else end.timestamp(),
        store_url, max_scaleout, SparkSettings.from_env(spark_master))
    backtest_tasks.publish(report)
    actual = report["actual"]["worker_hours"]
    logger = get_run_logger()
    for name, p in report["policies"].items():
        logger.info("%s: %s would have used %.1f worker-hours (%.0f %% of the %.1f that ran), %d s over the SLO",
                    job, name, p["worker_hours"], 100 * p["worker_hours"] / actual if actual else float("nan"),
                    actual, p["seconds_over_slo"])
    return report
