"""Plan: a thin task over Algorithm 1 and its guardrails (models.loop.plan)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from daedalus.models import loop
from daedalus.models.config import LoopConfig
from daedalus.models.knowledge import Knowledge
from daedalus.models.types import Analysis, Decision


@task(name="plan", cache_policy=NO_CACHE)
def plan(cfg: LoopConfig, a: Analysis, knowledge: Knowledge, now: float) -> Decision:
    return loop.plan(cfg, a, knowledge, now)
