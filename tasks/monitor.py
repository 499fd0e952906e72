"""Monitor: a thin task over models.loop.monitor. The only phase that retries (it does I/O)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from daedalus.models.loop import monitor as phase
from daedalus.models.ports import MetricsSource
from daedalus.models.types import Observation


@task(name="monitor", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5])
def monitor(job: str, source: MetricsSource, since: float | None, until: float) -> Observation:
    return phase.monitor(job, source, since, until)
