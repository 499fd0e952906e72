"""The lake from the flows: the loop's append of each loop's metrics, and the compaction task."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from daedalus.connectors.lake import CompactionReport, Lake
from daedalus.models.types import Observation


def record_history(lake_url: str, obs: Observation) -> None:
    """Append the loop's raw per-worker metrics, and only log a failure: the history never breaks the loop.

    A plain call, not a task: every task of the loop costs the Prefect server events and a row, each minute
    for each job. The append is atomic, so a failure leaves nothing to clean up; the next loop appends again.
    """
    if obs.timestamps.size == 0:
        return
    try:
        Lake(lake_url).append(obs)
    except Exception as exc:
        get_run_logger().warning("%s: could not append the loop's metrics to the lake %s (%s: %s); the loop goes on",
                                 obs.job, lake_url, type(exc).__name__, exc)


@task(name="compact-lake", cache_policy=NO_CACHE)
def compact(lake_url: str, min_age_s: float, jobs: list[str] | None = None,
            now: float | None = None) -> CompactionReport:
    return Lake(lake_url).compact(jobs, min_age_s=min_age_s, now=now)
