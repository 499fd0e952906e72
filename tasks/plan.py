"""Plan: a thin task over models.loop.plan (the configured planner and its guardrails)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from daedalus.models.config import LoopConfig
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop import plan as phase
from daedalus.models.types import Analysis, Decision


@task(name="plan", cache_policy=NO_CACHE)
def plan(cfg: LoopConfig, a: Analysis, knowledge: Knowledge, now: float) -> Decision:
    return phase.plan(cfg, a, knowledge, now)
