"""The Kubernetes Horizontal Pod Autoscaler on CPU utilization, as the benchmark's first baseline.

The algorithm of the Kubernetes documentation ("Algorithm details"), with its default behaviour:

- utilization = mean CPU over the workers, as a fraction of the requested CPU (one core here);
- desired = ceil(current × utilization / target); no change while |utilization / target − 1| ≤ tolerance (0.1);
- scale-down stabilization: a scale-in goes only to the highest desired replica count recommended in the last
  300 s (the current one included), so a short dip never removes workers; as the controller does, the first
  decision counts the current replica count as a recommendation made then;
- scale-up is not stabilized, but limited per period by the default policies (100 % or 4 pods, whichever is
  more): at most max(2 × current, current + 4).

Adapted to the simulator (the same for every policy): one decision per minute on the last minute's samples.
Seconds where the job was stopped for a rescale (uptime 0) are left out: a stopped worker reports CPU 0, which
is not a utilization, as Kubernetes leaves out pods that are not ready. Two consequences of the simulated CPU
model are kept on purpose, because they are what HPA really sees: an idle worker sits at about 8.5 % CPU (so
HPA never scales to zero load), and a worker with a backlog sits at full CPU whatever the backlog (so HPA sees
"100 %", never how far behind the job is).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from daedalus.models.policies.base import Baseline
from daedalus.models.types import Observation


def utilization(obs: Observation) -> float | None:
    """Mean CPU utilization over the workers while the job ran; None without a running sample."""
    running = np.asarray(obs.uptime_s, dtype=float) > 0
    if not running.any() or not obs.cpu:
        return None
    per_worker = []
    for series in obs.cpu.values():
        values = np.asarray(series, dtype=float)[running]
        values = values[np.isfinite(values)]
        if values.size:
            per_worker.append(float(values.mean()))
    return float(np.mean(per_worker)) if per_worker else None


class HPA(Baseline):
    """Kubernetes HPA on CPU with a target utilization (0.8 → "hpa-80")."""

    def __init__(
        self,
        target_utilization: float,
        max_scaleout: int,
        min_scaleout: int = 1,
        tolerance: float = 0.1,
        stabilization_s: float = 300.0,
        scale_up_percent: float = 100.0,
        scale_up_pods: int = 4,
    ) -> None:
        self.check_limits("HPA", target_utilization, min_scaleout, max_scaleout)
        if tolerance < 0 or stabilization_s < 0:
            raise ValueError("HPA tolerance and stabilization_s must be ≥ 0")
        self.name = f"hpa-{round(100 * target_utilization)}"
        self.target_utilization = target_utilization
        self.max_scaleout = max_scaleout
        self.min_scaleout = min_scaleout
        self.tolerance = tolerance
        self.stabilization_s = stabilization_s
        self.scale_up_percent = scale_up_percent
        self.scale_up_pods = scale_up_pods
        self._recommendations: deque[tuple[float, int]] = deque()

    def desired(self, current: int, cpu: float) -> int:
        """ceil(current × cpu / target), or `current` inside the tolerance band."""
        ratio = cpu / self.target_utilization
        if abs(ratio - 1.0) <= self.tolerance + 1e-12:  # the band's edges belong to it, despite rounding
            return current
        return max(math.ceil(current * ratio - 1e-9), self.min_scaleout)

    def decide(self, obs: Observation, current: int, now: float) -> int:
        cpu = utilization(obs)
        if cpu is None:
            return current
        raw = min(self.desired(current, cpu), self.max_scaleout)
        if not self._recommendations:
            self._recommendations.append((now, current))
        self._recommendations.append((now, raw))
        while self._recommendations and self._recommendations[0][0] <= now - self.stabilization_s:
            self._recommendations.popleft()
        if raw > current:
            limit = max(math.ceil(current * (1 + self.scale_up_percent / 100)), current + self.scale_up_pods)
            return min(raw, limit, self.max_scaleout)
        if raw < current:
            return min(current, max(r for _, r in self._recommendations))
        return current
