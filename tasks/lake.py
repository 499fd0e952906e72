"""Lake tasks: the monitor's append of each loop's metrics, and compaction of small files."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from connectors.lake import CompactionReport, Lake
from models.types import Observation


@task(name="append-history", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=[2])
def append_history(lake_url: str, obs: Observation) -> int:
    """Append the loop's raw per-worker metrics to the lake; returns the rows written."""
    written = Lake(lake_url).append(obs)
    return len(written)


def record_history(lake_url: str, obs: Observation) -> None:
    """Append, and only log a failure: the metric history must never break the control loop."""
    if obs.timestamps.size == 0:
        return
    try:
        append_history(lake_url, obs)
    except Exception as exc:
        get_run_logger().warning("%s: could not append the loop's metrics to the lake %s (%s: %s); the loop goes on",
                                 obs.job, lake_url, type(exc).__name__, exc)


@task(name="compact-lake", cache_policy=NO_CACHE)
def compact(lake_url: str, min_age_s: float, jobs: list[str] | None = None,
            now: float | None = None) -> CompactionReport:
    return Lake(lake_url).compact(jobs, min_age_s=min_age_s, now=now)
