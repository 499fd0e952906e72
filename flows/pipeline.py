"""The periodic Spark flows: validate the metric history, retrain the fleet's forecasters, compact the lake.

Schedules for the deployments are declared here (`schedules()`); the deployments themselves are built with
the others (prefect.yaml, `daedalus deploy`).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta
from typing import Any

from prefect import flow, get_run_logger
from prefect.schedules import Interval, Schedule

from daedalus.connectors.clock import WALL
from daedalus.connectors.lake import COMPACT_MIN_AGE_S
from daedalus.connectors.lake import DEFAULT_URL as DEFAULT_LAKE
from daedalus.connectors.spark import SparkSettings
from daedalus.connectors.store import DEFAULT_URL as DEFAULT_STORE
from daedalus.models.errors import ValidationError
from daedalus.models.expectations import SuiteSettings, ValidationReport
from daedalus.tasks import lake as lake_tasks
from daedalus.tasks import retrain as retrain_tasks
from daedalus.tasks import validate as validate_tasks


def schedules() -> dict[str, list[Schedule]]:
    """Deployment name → schedules of the periodic flows."""
    return {
        "validate-metrics": [Interval(timedelta(minutes=15))],
        "retrain-forecasters": [Interval(timedelta(hours=6))],
        "compact-lake": [Interval(timedelta(hours=1))],
    }


def summary(report: ValidationReport) -> dict[str, Any]:
    """JSON-safe summary: the fleet verdict, every check, and each failed job's failures with example rows."""
    return {
        "passed": report.passed,
        "since": report.since,
        "until": report.until,
        "jobs": len(report.jobs),
        "failed_jobs": report.failed_jobs,
        "checks": [asdict(c) for c in report.checks],
        "failures": {job: [asdict(f) for f in report.jobs[job].failures] for job in report.failed_jobs},
    }


@flow(name="validate-metrics", description="Great Expectations on Spark over the recent metric history; "
      "quarantines the jobs that fail and releases those that pass again.")
def validate_metrics(
    lake_url: str = DEFAULT_LAKE,
    store_url: str | None = DEFAULT_STORE,
    window_s: float = 900.0,
    until: float | None = None,
    max_gap_steps: int = 5,
    throughput_tolerance: float = 0.10,
    transition_s: float = SuiteSettings.transition_s,
    jobs: list[str] | None = None,
    spark_master: str | None = None,
) -> dict[str, Any]:
    """Validate the window (until − window_s, until]; `until` defaults to now. No store: report only.

    An empty window fails the run (ValidationError, which `daedalus validate` turns into exit 1): validation that
    saw nothing must not pass, and the message says where the lake's newest row is.
    """
    until = WALL.now() if until is None else until
    settings = SuiteSettings(max_gap_steps=max_gap_steps, throughput_tolerance=throughput_tolerance,
                             transition_s=transition_s)
    report = validate_tasks.validate_window(lake_url, until - window_s, until, settings,
                                            SparkSettings.from_env(spark_master), jobs)
    if report.empty:
        raise ValidationError(report.empty_reason())
    validate_tasks.publish(report)
    out = summary(report)
    if store_url:
        out.update(validate_tasks.quarantine_or_release(store_url, report))
    logger = get_run_logger()
    for job in report.failed_jobs:
        logger.warning("%s failed metric validation: %s", job, report.jobs[job].reason())
    logger.info("validated %d jobs: %d failed", len(report.jobs), len(report.failed_jobs))
    return out


@flow(name="retrain-forecasters", description="Fit one forecaster per job in parallel on Spark, backtest it "
      "against the current model and promote it only where it is better.")
def retrain_forecasters(
    lake_url: str = DEFAULT_LAKE,
    store_url: str | None = DEFAULT_STORE,
    history_s: float = retrain_tasks.HISTORY_S,
    holdout_s: float = retrain_tasks.HOLDOUT_S,
    until: float | None = None,
    jobs: list[str] | None = None,
    spark_master: str | None = None,
) -> dict[str, Any]:
    until = WALL.now() if until is None else until
    outcomes = retrain_tasks.retrain_fleet_task(lake_url, store_url, until, history_s, holdout_s, jobs,
                                                SparkSettings.from_env(spark_master))
    posted = retrain_tasks.promote_task(store_url, outcomes) if store_url else []
    retrain_tasks.publish(outcomes)
    logger = get_run_logger()
    for o in outcomes:
        if o.status in ("failed", "skipped"):
            logger.warning("%s: %s, its current model stays in place: %s", o.job, o.status, o.error)
    logger.info("retrained %d jobs: %d promoted", len(outcomes), len(posted))
    return {"outcomes": [o.row() for o in outcomes], "promoted": posted}


@flow(name="compact-lake", description="Merge each partition's small files older than min_age_s into one.")
def compact_lake(lake_url: str = DEFAULT_LAKE, min_age_s: float = COMPACT_MIN_AGE_S, jobs: list[str] | None = None,
                 now: float | None = None) -> dict[str, int]:
    report = lake_tasks.compact(lake_url, min_age_s, jobs, now)
    get_run_logger().info("compacted %d partitions: %d files → %d", report.partitions, report.files_before,
                          report.files_after)
    return asdict(report)
