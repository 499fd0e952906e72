"""Analyze: learn from a sound observation, then estimate capacities, forecast and recovery times.

Pure: takes (config, observation, knowledge, now), updates the knowledge's models and returns an Analysis.
An observation that fails validation teaches nothing and yields an Analysis carrying hold reasons.
"""

from __future__ import annotations

import math

import numpy as np

from daedalus.models.config import LoopConfig
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.validation import validate_observation
from daedalus.models.recovery import recovery_times
from daedalus.models.recovery.anomaly import downtime_s, learn_normal, total_throughput, track_recovery
from daedalus.models.types import Analysis, Observation

__all__ = ["analyze", "follow_recovery", "total_throughput"]  # total_throughput: models.anomaly's


def follow_recovery(k: Knowledge, obs: Observation, warmup_s: float, max_recovery_s: float,
                    sound: bool = True) -> float | None:
    """Learn normal workload − throughput, or follow a rescale until recovered (``daedalus.models.recovery.anomaly``).

    Only a `sound` observation teaches what normal is; a rescale is followed through any observation with samples:
    around a rescale most are held (a worker missing, the scale-out in flux, a catch-up faster than the arrivals),
    and those are the points that show the downtime and the catch-up. Returns the observed recovery time when this
    observation ends a recovery.
    """
    watch = k.watch
    if watch is None:
        if sound:
            learn_normal(k.anomaly, obs, warmup_s)
        return None
    if not _aligned(obs):
        return None
    if obs.end - watch.rescale_time > max_recovery_s:
        entry = k.entry(watch.decision_id)
        if entry is not None:
            k.note(entry, obs.end, f"recovery not observed within {max_recovery_s:.0f} s: {watch.tracker.status}")
        k.watch = None
        return None
    watch.restart_time = track_recovery(watch.tracker, obs, watch.restart_time)
    observed, recovered_at = watch.tracker.observed_recovery_s, watch.tracker.recovered_at
    if observed is None or recovered_at is None:
        return None
    k.settle_recovery(watch.decision_id, observed, downtime_s(watch.rescale_time, watch.restart_time), recovered_at)
    return observed


def _aligned(obs: Observation) -> bool:
    """Whether the observation has samples and every series has one per timestamp (a held one may not)."""
    shape = obs.timestamps.shape
    series = (obs.workload, obs.uptime_s, *obs.throughput.values())
    return obs.timestamps.size > 0 and all(np.shape(s) == shape for s in series)


def quarantine_hold(job: str, quarantine: str, workload: float, capacity: float, scaleout: int) -> str:
    """The hold of a quarantined job: what validation found and how to lift it. Loud when the workload exceeds
    the capacity at the current scale-out, since holding then lets the backlog grow until someone releases it."""
    text = f"quarantined by metric validation: {quarantine}"
    if math.isfinite(capacity) and 0 < capacity < workload:
        text += (f". OVERLOADED while held: workload {workload:,.0f}/s exceeds the capacity of {capacity:,.0f}/s at "
                 f"scale-out {scaleout}, and the backlog grows")
    return text + (f". Release it when its metrics are sound: daedalus release {job} --reason WHY --jobs-file FILE "
                   "(or the release-job deployment)")


def analyze(cfg: LoopConfig, obs: Observation, k: Knowledge, now: float) -> Analysis:
    holds = validate_observation(obs, now, k.last_observation_end, cfg.warmup_s, cfg.stale_after_s)
    sound = not holds  # a quarantine holds the decisions, but its observations still teach
    if sound:
        k.capacity.update(obs)
        k.forecaster.observe(obs.timestamps, obs.workload)
    follow_recovery(k, obs, cfg.warmup_s, cfg.max_recovery_s, sound)
    if obs.timestamps.size and np.isfinite(obs.end) and (k.last_observation_end or -np.inf) < obs.end:
        k.last_observation_end = obs.end
    k.loops += 1
    current = max(obs.scaleout, 1)
    forecast = k.forecaster.forecast(now)
    capacities, observed = k.capacity.capacities(cfg.max_scaleout, current)
    loads = k.capacity.observed_load
    observed_load = tuple(loads.get(i, 0.0) if seen else 0.0 for i, seen in enumerate(observed, start=1))
    finite = obs.workload[np.isfinite(obs.workload)]
    avg_workload = float(finite.mean()) if finite.size else 0.0
    recent = finite[-int(cfg.checkpoint_interval):] if finite.size else finite
    recent_workload = float(recent.mean()) if recent.size else 0.0
    lag = float(obs.lag[-1]) if obs.lag.size and np.isfinite(obs.lag[-1]) else 0.0
    if k.quarantine:
        capacity = capacities[current - 1] if current <= len(capacities) else math.nan
        holds = (*holds, quarantine_hold(k.job, k.quarantine, avg_workload, capacity, current))
    return Analysis(
        now=now,
        scaleout=current,
        avg_workload=avg_workload,
        lag=lag,
        capacities=capacities,
        observed=observed,
        forecast=forecast,
        recovery_times=recovery_times(
            capacities, current, k.downtime, forecast.values, lag, recent_workload,
            cfg.checkpoint_interval, cfg.max_recovery_s,
        ),
        holds=holds,
        observed_load=observed_load,
        recent_minutes=recent_minutes(k),
    )


RECENT_MINUTES = 30  # minute means handed to the planner: its envelope looks back at most this far


def recent_minutes(k: Knowledge) -> tuple[float, ...]:
    """The last `RECENT_MINUTES` minute means of the workload the forecaster recorded (finite ones only)."""
    record = getattr(k.forecaster, "record", None)
    history = getattr(record, "history", None)
    if not history:
        return ()
    last = list(history)[-RECENT_MINUTES:]
    return tuple(float(v) for v in last if math.isfinite(v))
