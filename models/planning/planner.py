"""Plan: a planner (the configured one), then the guardrails users expect.

Two planners decide inside the same guardrails, chosen by `LoopConfig.planner`:

- `daedalus` (the default): model-predictive control over the forecast horizon (`daedalus.models.planning.mpc`);
- `daedalus-paper`: the paper's Algorithm 1, unchanged (`algorithm_1` below).

Algorithm 1, as the paper states it (docs/design.md, "Algorithm 1 (plan)"):
1. Within `recent_rescale_s` of the last rescale: keep the current scale-out if its capacity exceeds both the
   average workload of the last loop and the maximum forecast until the next loop.
2. Else, for i = 1 … max: skip i unless C_i > average workload; skip if its predicted recovery time exceeds
   the target; skip if C_i is below the maximum forecast over that recovery time; return i if it is the
   current scale-out; when scaling in, skip i while the consumer lag exceeds what i processes in one second;
   return i if C_i exceeds the maximum of the whole forecast.
3. Nothing qualified → the maximum scale-out.
Guardrails: holds for bad data or a pause, no action within `grace_s` of the previous one (except the
model-predictive planner's scale-out for a breach of the SLO after an executed rescale: a spike does not wait out
the grace period), min/max scaleout, a maximum step and partition-aware rounding. Every clamp adds a reason with
before and after.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from daedalus.models.config import LoopConfig
from daedalus.models.planning import mpc as planner_mpc
from daedalus.models.text import duration
from daedalus.models.types import Analysis, Decision, kind_of


@dataclass(frozen=True)
class PlanContext:
    """What the planner needs from knowledge besides the analysis."""

    job: str
    last_rescale: float | None  # time of the last executed rescale
    last_action: float | None  # time of the last executed action (grace period)
    pending_proposal: str | None = None  # id of a proposal awaiting approval
    paused: bool = False
    # The learned downtime estimates (knowledge.downtime); None: the configured initial ones.
    downtime_out_s: float | None = None
    downtime_in_s: float | None = None
    # (scale-out, why): no scale-out above it, since a larger one bought nothing (models/capacity/verification.py)
    ceiling: tuple[int, str] | None = None
    recent_rescales: int = 0  # rescales executed in the last `RESCALE_WINDOW_S` (the rescale budget's count)


def _window_max(values: tuple[float, ...], seconds: float) -> float:
    if not values:
        return 0.0
    n = len(values) if math.isinf(seconds) else max(1, min(len(values), math.ceil(seconds)))
    return max(values[:n])


PAPER_HORIZON_S = 900  # Algorithm 1 reads the next 15 minutes of the forecast, however long it is


def algorithm_1(cfg: LoopConfig, a: Analysis, since_rescale: float | None) -> tuple[int, tuple[str, ...]]:
    """The paper's Algorithm 1 over scale-outs min … max; returns the scale-out and why."""
    cur = a.scaleout
    forecast = a.forecast.values[:PAPER_HORIZON_S]
    f_all = max(forecast) if forecast else a.avg_workload
    if since_rescale is not None and since_rescale < cfg.recent_rescale_s and 1 <= cur <= len(a.capacities):
        c = a.capacity(cur)
        f_next = _window_max(forecast, cfg.loop_interval_s)
        if c > a.avg_workload and c > f_next:
            return cur, (
                f"rescaled {since_rescale:.0f} s ago (< {cfg.recent_rescale_s:.0f} s) and C_{cur} = {c:,.0f}/s "
                f"exceeds the average workload {a.avg_workload:,.0f}/s and the next loop's forecast peak "
                f"{f_next:,.0f}/s: keep {cur}",
            )
    if a.avg_workload <= 0 and f_all <= 0 and a.lag <= 0:
        return cfg.min_scaleout, ("idle: no workload, no forecast workload and no backlog: "
                                  f"the minimum scale-out {cfg.min_scaleout} suffices",)
    skipped: list[str] = []
    for i in range(cfg.min_scaleout, cfg.max_scaleout + 1):
        c = a.capacity(i)
        if c <= a.avg_workload:
            continue
        r = a.recovery_time(i)
        if r > cfg.target_recovery_time:
            skipped.append(f"{i}: never recovers" if math.isinf(r) else
                           f"{i}: recovery {duration(r)} > target {duration(cfg.target_recovery_time)}")
            continue
        f_rec = _window_max(forecast, r)
        if c < f_rec:
            skipped.append(f"{i}: C_{i} {c:,.0f}/s below forecast peak {f_rec:,.0f}/s during recovery")
            continue
        if i == cur:
            return i, (*skipped[-3:], f"C_{i} = {c:,.0f}/s covers the workload {a.avg_workload:,.0f}/s and the "
                       f"forecast during recovery ({r:.0f} s ≤ {cfg.target_recovery_time:.0f} s): keep {i}")
        if i < cur and a.lag > c * 1.0:
            skipped.append(f"{i}: scale-in deferred, lag {a.lag:,.0f} > one second of C_{i} ({c:,.0f})")
            continue
        if c > f_all:
            return i, (*skipped[-3:], f"C_{i} = {c:,.0f}/s exceeds the whole 15-minute forecast peak "
                       f"{f_all:,.0f}/s and recovers in {r:.0f} s: {i} is long-lived")
        skipped.append(f"{i}: C_{i} {c:,.0f}/s below the 15-minute forecast peak {f_all:,.0f}/s")
    return cfg.max_scaleout, (*skipped[-3:], "no scale-out qualified: the maximum")


def _round_to_partitions(target: int, current: int, cfg: LoopConfig) -> int:
    """Smallest divisor of the partition count ≥ target (even partitions per worker), within max."""
    if cfg.partitions is None or target == current:
        return target
    for p in range(target, cfg.max_scaleout + 1):
        if cfg.partitions % p == 0:
            return p
    return target


def plan(cfg: LoopConfig, a: Analysis, ctx: PlanContext, now: float) -> Decision:
    """One planning step: a hold, no change, or a target scale-out, with every reason."""
    cur = a.scaleout
    did = f"{ctx.job}-{int(now)}"

    def hold(*reasons: str) -> Decision:
        return Decision(id=did, time=now, kind="hold", current=cur, target=cur, reasons=reasons)

    if ctx.paused:
        return hold("paused by an operator (kill switch): not scaling")
    if a.holds:
        return hold(*a.holds)
    if ctx.pending_proposal is not None:
        return hold(f"proposal {ctx.pending_proposal} awaits an operator: not stacking another")
    if not any(math.isfinite(c) and c > 0 for c in a.capacities) and a.avg_workload > 0:
        return hold(f"no capacity learned yet (every estimate is 0 against a workload of {a.avg_workload:,.0f}/s): "
                    "nothing to size the job by")
    since_rescale = None if ctx.last_rescale is None else now - ctx.last_rescale
    early = False
    if cfg.planner == "daedalus-paper":
        target, reasons = algorithm_1(cfg, a, since_rescale)
    else:
        target, reasons, early = planner_mpc.decide(cfg, a, now, ctx.last_rescale, ctx.last_action,
                                                    ctx.downtime_out_s, ctx.downtime_in_s, ctx.recent_rescales)
    notes = list(reasons)
    if cfg.partitions is not None and target > max(cfg.partitions, cur):
        notes.append(f"the source has {cfg.partitions} partitions, so more workers would idle: {target} → "
                     f"{max(cfg.partitions, cur)}")
        target = max(cfg.partitions, cur)
    if ctx.ceiling is not None and target > max(ctx.ceiling[0], cur):
        notes.append(f"{ctx.ceiling[1]}: {target} → {max(ctx.ceiling[0], cur)}")
        target = max(ctx.ceiling[0], cur)
    if target != cur:
        rounded = _round_to_partitions(target, cur, cfg)
        if rounded != target:
            notes.append(f"partition-aware rounding ({cfg.partitions} partitions): {target} → {rounded}")
            target = rounded
        if cfg.max_step is not None and abs(target - cur) > cfg.max_step:
            stepped = cur + cfg.max_step if target > cur else cur - cfg.max_step
            notes.append(f"maximum step {cfg.max_step}: {target} → {stepped}")
            target = stepped
        clamped = min(max(target, cfg.min_scaleout), cfg.max_scaleout)
        if clamped != target:
            notes.append(f"clamped to [{cfg.min_scaleout}, {cfg.max_scaleout}]: {target} → {clamped}")
            target = clamped
    if target < cur and since_rescale is not None and since_rescale < cfg.scale_in_s:
        notes.append(f"scale-in stabilisation: last rescale {since_rescale:.0f} s ago "
                     f"(< {cfg.scale_in_s:.0f} s), keeping {cur} instead of {target}")
        target = cur
    if target == cur:
        return Decision(id=did, time=now, kind="no-change", current=cur, target=cur, reasons=tuple(notes))
    if ctx.last_action is not None and now - ctx.last_action < cfg.grace_s:
        if not (early and target > cur):
            return hold(*notes, f"grace period: last action {now - ctx.last_action:.0f} s ago "
                        f"(< {cfg.grace_s:.0f} s), not acting on {cur} → {target}")
        notes.append(f"inside the grace period (last action {now - ctx.last_action:.0f} s ago, < {cfg.grace_s:.0f} s): "
                     f"a scale-out, since keeping {cur} would break the {cfg.latency_slo:.0f} s SLO itself")
    return Decision(
        id=did, time=now, kind=kind_of(cur, target), current=cur, target=target,
        reasons=tuple(notes), predicted_recovery_s=_finite(a.recovery_time(target)),
    )


def _finite(seconds: float) -> float | None:
    """A recovery time for the ledger, events and reports; None when none is predictable within the horizon."""
    return seconds if math.isfinite(seconds) else None
