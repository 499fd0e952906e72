"""Verify: judge the last executed rescale by the capacity it bought, and undo one that bought nothing.

Runs every loop between analyze and plan (``daedalus.models.loop.iteration.iterate``); the mathematics is in
``daedalus.models.capacity.verification``. Pure: it reads the observation and the analysis, updates the knowledge
(the ledger's verdict, the ceiling, the bottleneck) and returns the rollback's decision, if there is one, which the
loop executes in the job's mode in place of the planner's.
"""

from __future__ import annotations

from dataclasses import dataclass

from daedalus.models.capacity import verification as v
from daedalus.models.config import LoopConfig
from daedalus.models.knowledge import Knowledge
from daedalus.models.types import Analysis, Decision, Observation, ScalingAction, kind_of


def expect(k: Knowledge, action: ScalingAction | None, a: Analysis, stages: tuple[v.StageLoad, ...]) -> None:
    """After an executed rescale: remember what it was predicted to buy, to judge it once the job has recovered."""
    if action is None or action.state != "executed" or action.target == action.current:
        return
    top = len(a.capacities)
    if not (1 <= action.current <= top and 1 <= action.target <= top):
        return
    k.verification = v.PendingVerification(
        decision_id=action.decision_id, current=action.current, target=action.target,
        before=a.capacity(action.current), predicted=a.capacity(action.target), executed=action.time,
        busy_before=v.busy_shares(stages))


@dataclass(frozen=True)
class Verified:
    """What one loop's verification found: a verdict, the decision undoing it, what changed in the ceiling."""

    verification: v.Verification | None = None
    rollback: Decision | None = None
    notes: tuple[str, ...] = ()


def _ceiling_step(k: Knowledge, stages: tuple[v.StageLoad, ...], now: float) -> str | None:
    """Expire the ceiling at its time, or lift it early when its stage has room again; says which."""
    c = k.ceiling
    if c is None:
        return None
    why = None if c.active(now) else f"the ceiling of {c.scaleout} expired"
    why = why or v.lifted(c, stages)
    if why is not None:
        k.ceiling = None
    return why


def verify(cfg: LoopConfig, obs: Observation, a: Analysis, k: Knowledge, now: float) -> Verified:
    """One loop's verification: locate the bottleneck, keep the ceiling, judge a pending rescale, and the rollback
    (or roll-forward) an ineffective one calls for."""
    if obs.stages and not a.holds:
        k.bottleneck = v.locate_bottleneck(obs.stages, obs.scaleout, cfg.partitions)
    lifted = _ceiling_step(k, obs.stages, now)
    notes = () if lifted is None else (lifted,)
    p = k.verification
    if p is None or a.holds:
        return Verified(notes=notes)
    entry = k.entry(p.decision_id)
    if obs.scaleout != p.target or entry is None:  # moved on (an operator, another rescale): nothing to judge
        k.verification = None
        return Verified(notes=notes)
    if now - p.executed > v.VERIFY_WINDOW * cfg.verify_after_s:
        k.note(entry, now, f"not verified: no loaded, recovered observation at {p.target} within "
                           f"{v.VERIFY_WINDOW * cfg.verify_after_s:.0f} s")
        k.verification = None
        return Verified(notes=notes)
    recovered = k.watch is None or k.watch.decision_id != p.decision_id
    model = k.capacity
    loaded = max([model.load(), *(s.busy for s in obs.stages)])
    if not (model.ready and model.scaleout == p.target) or not v.ready_to_judge(
            p, now, recovered, cfg.verify_after_s, loaded, model.saturated_throughput is not None):
        return Verified(notes=notes)
    observed = v.observed_capacity(a.capacity(p.target), obs.stages)
    saturated = model.saturated_throughput is not None
    overloaded = saturated and a.avg_workload > observed
    stage_saturated = bool(obs.stages) and k.bottleneck is not None  # located in this window
    verdict = v.judge(p, observed, overloaded, cfg.verify_tolerance, saturated=saturated or stage_saturated)
    result = v.Verification(p.decision_id, p.current, p.target, p.before, p.predicted, observed, verdict,
                            p.busy_before, v.busy_shares(obs.stages), k.bottleneck)
    entry.verdict, entry.capacity_ratio = verdict, round(result.ratio, 4)
    k.note(entry, now, result.describe())
    k.verification = None
    undo = _undo(cfg, a, k, result, now) if verdict == "ineffective" else None
    return Verified(result, undo, (*notes, result.describe()))


def _undo(cfg: LoopConfig, a: Analysis, k: Knowledge, result: v.Verification, now: float) -> Decision | None:
    """The decision that undoes an ineffective rescale: back to where the capacity was the same (and a ceiling there),
    or forward to the scale-out a scale-in left, at once."""
    target = v.rollback_target(result, a.capacities, cfg.min_scaleout, cfg.verify_tolerance)
    target = min(max(target, cfg.min_scaleout), cfg.max_scaleout)
    scaled_out = result.target > result.current
    if scaled_out:
        stage = k.bottleneck.stage if k.bottleneck is not None else None
        k.ceiling = v.Ceiling(target, now + cfg.ceiling, result.observed, stage,
                              f"scale-out {result.current} → {result.target} bought nothing ({result.evidence()})")
    elif k.ceiling is not None and k.ceiling.scaleout < target:  # the rollback went too far: its ceiling rises
        k.ceiling.scaleout = target
    if target == a.scaleout or k.paused or k.pending is not None:
        return None
    what = "rolled back" if scaled_out else "rolled forward"
    reasons = (result.describe(), f"{what}: {a.scaleout} → {target}, where the job showed the same capacity"
               if scaled_out else f"{what} at once: {a.scaleout} → {target}, the scale-out it left")
    if scaled_out:
        reasons += (f"no scale-out above {target} for {cfg.ceiling:.0f} s (until the bottleneck has room)",)
    recovery = a.recovery_time(target)
    return Decision(id=f"{k.job}-{int(now)}", time=now, kind=kind_of(a.scaleout, target),
                    current=a.scaleout, target=target, reasons=reasons,
                    predicted_recovery_s=recovery if recovery < float("inf") else None)
