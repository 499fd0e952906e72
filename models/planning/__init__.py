"""Planning (the paper's Algorithm 1 and its successors): the planners, the baseline policies and the limits."""

from daedalus.models.planning.planner import PlanContext, plan

__all__ = ["PlanContext", "plan"]
