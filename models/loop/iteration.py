"""The iteration: one MAPE-K run over the ports (metrics source, scaler, clock) and the job's knowledge.

Prefect-free: the `mape-k` flow runs it with its phases as Prefect tasks, the simulator and the benchmarks with
the plain functions below (`PLAIN`). Either way the same code decides.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from daedalus.models.capacity.verification import Bottleneck, Verification
from daedalus.models.errors import ConnectorError
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.analyze import analyze
from daedalus.models.loop.execute import Journal, execute, reconcile
from daedalus.models.loop.messages import ANSWER_GRACE_S, ControlMessage, apply_messages, hold, start_hold
from daedalus.models.loop.monitor import agree, monitor, observe_or_hold
from daedalus.models.loop.plan import plan
from daedalus.models.loop.verify import expect, verify
from daedalus.models.ports import Target
from daedalus.models.text import utc
from daedalus.models.types import Analysis, Decision, Observation, ScalingAction


@dataclass(frozen=True)
class Phases:
    """The four phases as callables: Prefect tasks in a flow run, the plain functions in a fast simulation."""

    monitor: Callable[..., Observation]
    analyze: Callable[..., Analysis]
    plan: Callable[..., Decision]
    execute: Callable[..., ScalingAction | None]


PLAIN = Phases(monitor, analyze, plan, execute)


@dataclass(frozen=True)
class Iteration:
    observation: Observation
    analysis: Analysis
    decision: Decision
    action: ScalingAction | None
    loop_ms: float  # analyze + plan, the loop's own cost
    notes: tuple[str, ...] = ()  # what the inbox changed
    closed: tuple[tuple[str, str], ...] = ()  # proposals that expired or were superseded: (id, outcome)
    verdict: Verification | None = None  # the verdict this loop reached on the last executed rescale
    bottleneck: Bottleneck | None = None  # the stage seen limiting the job in this loop's window

    def summary(self) -> dict[str, Any]:
        d, a = self.decision, self.analysis
        return {"decision": d.id, "kind": d.kind, "current": d.current, "target": d.target,
                "reasons": list(d.reasons), "action": None if self.action is None else self.action.state,
                "loop_ms": round(self.loop_ms, 3), "capacity_current": a.capacity(a.scaleout),
                "forecast_peak": a.forecast.peak, "forecast_method": a.forecast.method,
                "forecast_wape": a.forecast.previous_wape, "notes": list(self.notes),
                "verdict": None if self.verdict is None else self.verdict.verdict,
                "bottleneck": None if self.bottleneck is None else self.bottleneck.stage,
                "bottleneck_scalable": None if self.bottleneck is None else self.bottleneck.scalable}


def expire_proposal(knowledge: Knowledge, now: float, wall_now: float) -> str | None:
    """An unanswered proposal expires at its wall-clock deadline: nothing happens, and the loop may propose
    again. The loop waits `ANSWER_GRACE_S` past the deadline for answers given before it to land in the inbox; the
    ledger dates the expiry at the deadline itself. Returns the id of the proposal that expired."""
    p = knowledge.pending
    if p is None or wall_now < p.expires + ANSWER_GRACE_S:
        return None
    entry = knowledge.entry(p.id)
    if entry is not None:
        knowledge.move(entry, "expired", p.expires, now, f"expired unanswered at {utc(p.expires)}: nothing was done")
    knowledge.pending = None
    return p.id


def iterate(target: Target, knowledge: Knowledge, phases: Phases = PLAIN,
            messages: list[ControlMessage] | None = None, stop: str | None = None,
            journal: Journal | None = None) -> Iteration:
    """Settle what a dead run left, apply the inbox, then monitor → analyze → verify → plan → execute, once.

    Verify judges the last executed rescale; when it bought nothing, its rollback is the decision, in place of the
    plan's (``daedalus.models.loop.verify``).
    An approved proposal or a manual action from the inbox is executed in place of the plan's decision;
    the plan is still made and reported. `stop` (kill switch for all jobs, blackout window) makes the plan's
    own action a dry run that names it; an operator's action still applies. `journal` writes the knowledge
    durably before any action touches the target (write-ahead).
    """
    cfg, job = target.config, target.job
    now, wall_now = target.clock.now(), target.wall_now()
    try:
        reported: int | None = target.scaler.current(job)
    except ConnectorError:
        reported = None
    obs = observe_or_hold(job, target.metrics, knowledge.last_observation_end, now, reported or 1,
                          call=phases.monitor)
    obs = agree(obs, reported)
    settled = reconcile(knowledge, reported, now, wall_now)
    # The answers first: one given before the deadline counts even when this run starts after it.
    applied = apply_messages(knowledge, messages or [], cfg, obs.scaleout, now, wall_now)
    expired = expire_proposal(knowledge, now, wall_now)
    started = time.perf_counter()
    a = phases.analyze(cfg, obs, knowledge, now)
    checked = verify(cfg, obs, a, knowledge, now)
    d = checked.rollback or phases.plan(cfg, a, knowledge, now)  # undoing what bought nothing comes first
    d, hold_ended = hold(cfg, knowledge, d, now, wall_now)  # an operator's manual scale stands for a while
    loop_ms = 1000 * (time.perf_counter() - started)
    operator = applied.decision
    if operator is not None and operator.changes:
        action = phases.execute(cfg, operator, knowledge, target.scaler, now, operator=True, journal=journal,
                                wall_now=wall_now)
        start_hold(cfg, knowledge, applied, action, now, wall_now)
        d = operator  # what this run did; the plan above started from the scale-out before it
    else:
        action = phases.execute(cfg, d, knowledge, target.scaler, now, stop=stop, journal=journal,
                                wall_now=wall_now)
    expect(knowledge, action, a, obs.stages)
    closed = ((expired, "expired"),) if expired else ()
    bottleneck = knowledge.bottleneck if obs.stages else None
    notes = (*settled, *applied.notes, *checked.notes, *((hold_ended,) if hold_ended else ()))
    return Iteration(obs, a, d, action, loop_ms, notes,
                     (*closed, *applied.closed), checked.verification, bottleneck)
