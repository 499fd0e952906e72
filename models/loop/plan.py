"""Plan: the configured planner and its guardrails, given what the knowledge remembers."""

from __future__ import annotations

from daedalus.models.config import RESCALE_WINDOW_S, LoopConfig
from daedalus.models.knowledge import Knowledge
from daedalus.models.planning import planner
from daedalus.models.types import Analysis, Decision


def plan(cfg: LoopConfig, a: Analysis, knowledge: Knowledge, now: float) -> Decision:
    """Plan: the configured planner and its guardrails, given what the knowledge remembers (the downtimes learned)."""
    ctx = planner.PlanContext(
        job=knowledge.job,
        last_rescale=knowledge.last_rescale,
        last_action=knowledge.last_action,
        pending_proposal=None if knowledge.pending is None else knowledge.pending.id,
        paused=knowledge.paused,
        downtime_out_s=knowledge.downtime.out_s,
        downtime_in_s=knowledge.downtime.in_s,
        ceiling=None if knowledge.ceiling is None or not knowledge.ceiling.active(now) else (
            knowledge.ceiling.scaleout, knowledge.ceiling.describe()),
        recent_rescales=sum(e.state == "executed" and e.target != e.current and now - e.time < RESCALE_WINDOW_S
                            for e in knowledge.ledger),
    )
    return planner.plan(cfg, a, ctx, now)
