"""Monitor: read the job's metrics since the previous loop. The only phase that retries (it does I/O)."""

from __future__ import annotations

import numpy as np
from prefect import task
from prefect.cache_policies import NO_CACHE

from connectors.targets import MetricsSource
from models.errors import ConnectorError
from models.types import Observation


def unavailable(job: str, parallelism: int, reason: str) -> Observation:
    """An empty observation that carries why nothing could be read: the loop holds on it."""
    empty = np.array([], dtype=float)
    return Observation(job=job, timestamps=empty, workload=empty, throughput={}, cpu={}, lag=empty,
                       uptime_s=empty, parallelism=max(parallelism, 1), holds=(reason,))


@task(name="monitor", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5])
def monitor(job: str, source: MetricsSource, since: float | None, until: float) -> Observation:
    return source.observe(job, since, until)


def observe_or_hold(job: str, source: MetricsSource, since: float | None, until: float, parallelism: int,
                    call=monitor) -> Observation:
    """Run monitor; a source that still fails after its retries becomes a hold, never a crash."""
    try:
        return call(job, source, since, until)
    except ConnectorError as exc:
        return unavailable(job, parallelism, f"metrics unavailable: {exc}")
