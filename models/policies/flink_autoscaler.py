"""The Flink Kubernetes Operator's autoscaler (flink-autoscaler, release-1.15.0) at its defaults: the peer a Flink
user already runs.

Read from the operator's source at tag `release-1.15.0` (`JobVertexScaler`, `ScalingExecutor`,
`ScalingMetricEvaluator`, `ScalingMetricCollector`, `DelayedScaleDown`, `AutoScalerUtils`, `AutoScalerOptions`).

Kept, with the defaults of `AutoScalerOptions`:

- metrics window 15 min (`metrics.window`), collected only after the stabilisation interval of 5 min after the job
  (re)starts (`stabilization.interval`): after a rescale, no decision for 20 minutes;
- true processing rate from busy time, busy-time aggregator MAX (`metrics.busy-time.aggregator`): mean processed
  rate over the window / mean busy fraction of the busiest worker;
- target capacity = lag / catch-up + input rate × restart time / catch-up + input rate / utilisation target, with
  catch-up 30 min (`catch-up.duration`), restart time 5 min (`restart.time`, tracking off), target 0.7
  (`utilization.target`); input rate = the window's mean ingestion rate (arrivals);
- the band (`target.utilization.boundary` 0.3): no rescale while the true processing rate lies between the
  scale-up threshold (lag / catch-up + input / 1.0, no restart term) and the scale-down threshold (the target
  capacity at utilisation 0.4, restart term included); while processing a backlog (lag above 5 min of the
  processed rate, `backlog-processing.lag-threshold`) the band is [0, 1]: no scale-down from under-utilisation;
- new parallelism = ceil(current × scale factor), the factor = target capacity / true processing rate, at least
  1 − 0.6 (`scale-down.max-factor`), at most 1 + 100000 (`scale-up.max-factor`);
- alignment to the key groups (`scaling.key-group.partitions.adjust.mode` EVENLY_SPREAD, Flink's default 128 key
  groups, which are the simulator's partitions): up to the next divisor, else down to where a worker's share of
  key groups would grow, never against the direction of the change;
- delayed scale-down (`scale-down.interval` 1 h): a scale-down is recommended each decision but applied only once
  the first recommendation is an hour old, to the highest parallelism recommended in the last hour; a
  recommendation at or above the current parallelism cancels it; every rescale clears it.

Simplified: one decision per minute on the simulator's per-second samples (the operator's reconcile interval is
also a minute); the busy fraction is CPU above the idle level, (cpu − idle) / (1 − idle), as for DS2 (exact in the
simulator up to noise); one vertex (the simulated job has one stage).

Left out, off by default in the operator or without a counterpart here: the observed true processing rate (used
only when the busy-time rate is 15 % above it; the simulator's busy time is exact), observed scalability,
ineffective scale-up detection, memory tuning and pressure checks, resource quotas, excluded periods, restart-time
tracking.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from daedalus.models.policies.ds2 import DS2
from daedalus.models.types import Observation

KEY_GROUPS = 128  # Flink's default maximum parallelism for parallelism ≤ 128: the number of key groups


def align(new: int, current: int, key_groups: int, upper: int, lower: int = 1) -> int:
    """`JobVertexScaler.scale`'s alignment (EVENLY_SPREAD) of `new` to the key groups, capped at `upper`."""
    if new == current:
        return new
    up = new > current
    for p in range(new, (upper if up else min(current, upper)) + 1):
        if key_groups % p == 0:
            return p
    p = new
    while p > 0:
        if key_groups // p > key_groups // new:
            if key_groups % p != 0:
                p += 1
            break
        p -= 1
    p = max(p, lower)
    if (up and p <= current) or (not up and p >= current):
        return current  # the alignment would invert the direction: blocked
    return p


class FlinkAutoscaler(DS2):
    """flink-autoscaler at release-1.15.0's defaults; see the module docstring. The window, its stabilisation and
    the busy fraction are DS2's collection with the operator's durations."""

    name = "flink-autoscaler"

    def __init__(
        self,
        max_scaleout: int,
        min_scaleout: int = 1,
        target_utilization: float = 0.7,
        utilization_boundary: float = 0.3,
        catch_up_s: float = 1800.0,
        restart_s: float = 300.0,
        window_s: float = 900.0,
        stabilization_s: float = 300.0,
        backlog_threshold_s: float = 300.0,
        max_scale_down_factor: float = 0.6,
        max_scale_up_factor: float = 100000.0,
        scale_down_interval_s: float = 3600.0,
        key_groups: int | None = KEY_GROUPS,
        idle_cpu: float = 0.085,
    ) -> None:
        super().__init__(max_scaleout, min_scaleout, target_utilization, utilization_boundary, catch_up_s,
                         window_s, stabilization_s, backlog_threshold_s, idle_cpu)
        if not 0 <= max_scale_down_factor < 1 or max_scale_up_factor <= 0 or restart_s < 0:
            raise ValueError("flink-autoscaler needs max_scale_down_factor in [0, 1), max_scale_up_factor > 0 and "
                             "restart_s ≥ 0")
        self.restart_s = restart_s
        self.max_scale_down_factor = max_scale_down_factor
        self.max_scale_up_factor = max_scale_up_factor
        self.scale_down_interval_s = scale_down_interval_s
        self.key_groups = key_groups
        # DelayedScaleDown: when the first scale-down was recommended, and the recommendations since, each
        # (time, parallelism, outside the band) with parallelisms decreasing from the head.
        self._first_trigger: float | None = None
        self._recommended: deque[tuple[float, int, bool]] = deque()

    def capacity(self, rate: float, lag: float, utilization: float, with_restart: bool) -> float:
        """`AutoScalerUtils.getTargetProcessingCapacity`: the processing rate needed at `utilization`."""
        if utilization <= 0:
            return math.inf
        restart = rate * self.restart_s / self.catch_up_s if with_restart else 0.0
        return float(round(lag / self.catch_up_s + restart + rate / min(utilization, 1.0)))

    def recommend(self, current: int, rate: float, true_rate: float, lag: float, processed: float
                  ) -> tuple[int, bool]:
        """The parallelism `JobVertexScaler` computes, and whether the true rate lies outside the band."""
        backlogged = processed > 0 and lag / processed > self.backlog_threshold_s
        upper = 1.0 if backlogged else self.target_utilization + self.utilization_boundary
        lower = 0.0 if backlogged else self.target_utilization - self.utilization_boundary
        outside = not (self.capacity(rate, lag, upper, False) <= true_rate
                       <= self.capacity(rate, lag, lower, True))
        factor = self.capacity(rate, lag, self.target_utilization, True) / true_rate
        factor = min(max(factor, 1.0 - self.max_scale_down_factor), 1.0 + self.max_scale_up_factor)
        new = min(max(math.ceil(factor * current - 1e-9), min(current, self.min_scaleout)),
                  max(current, self.max_scaleout))
        if self.key_groups is not None:
            new = align(new, current, self.key_groups, max(current, self.max_scaleout), self.min_scaleout)
        return new, outside

    def delay(self, now: float, new: int, current: int, outside: bool) -> tuple[int, bool]:
        """`applyScaleDownInterval`: hold a scale-down until its first recommendation is `scale_down_interval_s`
        old, then go to the highest parallelism recommended since `now − scale_down_interval_s`."""
        if new >= current:
            self.clear()
            return new, outside
        if self.scale_down_interval_s <= 0:
            return new, outside
        if self._first_trigger is None:
            self._first_trigger = now
        while self._recommended and self._recommended[-1][1] <= new:
            self._recommended.pop()
        self._recommended.append((now, new, outside))
        start = now - self.scale_down_interval_s
        if start < self._first_trigger:
            return current, False
        while self._recommended[0][0] < start:
            self._recommended.popleft()
        _, highest, highest_outside = self._recommended[0]
        return highest, highest_outside

    def clear(self) -> None:
        self._first_trigger = None
        self._recommended.clear()

    def decide(self, obs: Observation, current: int, now: float) -> int:
        self.collect(obs)
        if not self.window_full:
            return current
        data = np.array(self._window)
        rate, processed, busy = data[:, 1].mean(), data[:, 2].mean(), data[:, 3].mean()
        if processed > 0 and busy > 0:
            true_rate = processed / busy
        elif rate <= 0:
            true_rate = math.inf  # nothing arrives: infinite processing power assumed, as the operator does
        else:
            return current  # the true rate is unknown (NaN in the operator): no scaling
        lag = float(obs.lag[-1]) if obs.lag.size and np.isfinite(obs.lag[-1]) else 0.0
        new, outside = self.recommend(current, rate, true_rate, lag, processed)
        new, outside = self.delay(now, new, current, outside)
        new = min(max(new, self.min_scaleout), self.max_scaleout)
        if new == current or not outside:
            return current  # "All vertex processing rates are within target."
        self.clear()  # the rescale clears every delayed scale-down …
        self._window.clear()  # … and the job restarts: metrics again after the stabilisation interval
        return new
