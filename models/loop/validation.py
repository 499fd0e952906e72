"""Checks on an Observation before anything is learned or decided from it.

Each failed check is a hold reason the decision artifact shows; nothing here raises or scales.
"""

from __future__ import annotations

import numpy as np

from daedalus.models.types import Observation

CONSISTENCY_TOLERANCE = 0.05  # throughput may exceed workload + backlog per second by 5 % (scrape jitter)


def _bad(values: np.ndarray) -> bool:
    return bool(values.size) and not np.all(np.isfinite(values))


def validate_observation(
    obs: Observation, now: float, previous_end: float | None, warmup_s: float, stale_after_s: float
) -> tuple[str, ...]:
    """Every reason this observation must not drive learning or scaling; empty when it is sound."""
    reasons = list(obs.holds)
    ts = obs.timestamps
    if ts.size == 0:
        return (*reasons, "no samples since the previous loop")
    if obs.scaleout < 1:
        reasons.append(f"reported scale-out {obs.scaleout} is below 1")
    if np.any(np.diff(ts) <= 0) or (previous_end is not None and ts[0] <= previous_end):
        reasons.append(
            f"timestamps go backwards or repeat (first {ts[0]:.0f}, previous loop ended {previous_end})"
        )
    if now - ts[-1] > stale_after_s:
        reasons.append(f"metrics are stale: newest sample {now - ts[-1]:.0f} s old (> {stale_after_s:.0f} s)")
    for name, series in (("workload", obs.workload), ("lag", obs.lag), ("uptime", obs.uptime_s)):
        if series.shape != ts.shape:
            reasons.append(f"{name} has {series.size} samples for {ts.size} timestamps")
        elif _bad(series):
            reasons.append(f"{name} has missing or NaN samples")
        elif np.any(series < 0):
            reasons.append(f"{name} is negative (min {series.min():,.0f})")
    if reasons:
        return tuple(reasons)
    steady = obs.uptime_s >= warmup_s
    total = np.zeros(ts.size)
    reporting = 0
    for worker in obs.workers:
        thr, cpu = obs.throughput[worker], obs.cpu.get(worker)
        if cpu is None or cpu.shape != ts.shape or thr.shape != ts.shape:
            reasons.append(f"{worker}: CPU and throughput series do not align")
            continue
        if np.isfinite(thr[-1]) and np.isfinite(cpu[-1]):
            reporting += 1
        if np.any(steady & ~(np.isfinite(thr) & np.isfinite(cpu))) and np.isfinite(thr[-1]):
            reasons.append(f"{worker}: missing or NaN samples in steady state")
        if np.any(thr[np.isfinite(thr)] < 0):
            reasons.append(f"{worker}: negative throughput")
        c = cpu[np.isfinite(cpu)]
        if c.size and (c.min() < 0 or c.max() > 1):
            reasons.append(f"{worker}: CPU outside [0, 1] (min {c.min():.3f}, max {c.max():.3f})")
        total += np.nan_to_num(thr)
    if steady[-1] and reporting != obs.scaleout:
        reasons.append(f"{reporting} of {obs.scaleout} workers reporting: a worker is missing")
    if not reasons:
        reasons.extend(_consistency(obs, total))
    return tuple(reasons)


def _consistency(obs: Observation, total: np.ndarray) -> list[str]:
    """Like with like: a job processes at most what arrived plus the backlog it started with. A rate over a window
    longer than the step (Prometheus' `rate` over `window_s`) is bounded by the backlog at the window's start spread
    over the window: after a restart the job drains its backlog, its rate still counts the drained rows while the
    backlog one step back is already small (a user's Spark job: 4,667/s against 2,003/s arriving and 2,003 pending).
    A step whose window starts before the observation's first sample is not judged: that backlog is unknown."""
    back = max(1, int(np.ceil(obs.window_s / obs.step_s - 1e-9)))
    backlog_before = np.concatenate([[obs.lag[0]], obs.lag[:-1]])
    excused = backlog_before / obs.step_s  # the backlog one step back, spread over the step
    if back > 1:
        at_start = np.full(obs.lag.size, np.inf)  # unknown: not judged
        at_start[back:] = obs.lag[:-back] / obs.window_s
        excused = np.maximum(excused, at_start)
    allowed = (obs.workload + excused) * (1 + CONSISTENCY_TOLERANCE) + 1.0
    over = np.flatnonzero(total > allowed)
    if not over.size:
        return []
    i = over[0]
    return [f"throughput {total[i]:,.0f}/s above workload {obs.workload[i]:,.0f}/s plus what the backlog of "
            f"{backlog_before[i]:,.0f} tuples can add over a {obs.step_s:g} s step at {obs.timestamps[i]:.0f}"
            + (f" (or that of {obs.lag[i - back]:,.0f} at the start of its {obs.window_s:g} s rate window)"
               if back > 1 else "") + ": inconsistent metrics"]
