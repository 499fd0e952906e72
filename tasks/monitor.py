"""Monitor: read the job's metrics since the previous loop. The only phase that retries (it does I/O)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from daedalus.models import loop
from daedalus.models.ports import MetricsSource
from daedalus.models.types import Observation


@task(name="monitor", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5])
def monitor(job: str, source: MetricsSource, since: float | None, until: float) -> Observation:
    return loop.monitor(job, source, since, until)
