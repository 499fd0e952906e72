"""Plan: a thin task over Algorithm 1 and its guardrails."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from models import planner
from models.config import LoopConfig
from models.knowledge import Knowledge
from models.types import Analysis, Decision


def context(knowledge: Knowledge) -> planner.PlanContext:
    return planner.PlanContext(
        job=knowledge.job,
        last_rescale=knowledge.last_rescale,
        last_action=knowledge.last_action,
        pending_proposal=None if knowledge.pending is None else knowledge.pending.id,
        paused=knowledge.paused,
    )


@task(name="plan", cache_policy=NO_CACHE)
def plan(cfg: LoopConfig, a: Analysis, knowledge: Knowledge, now: float) -> Decision:
    return planner.plan(cfg, a, context(knowledge), now)
