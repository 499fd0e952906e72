"""Recovery-time prediction per candidate scale-out (Daedalus, section on recovery time).

backlog = tuples since the last checkpoint (worst case: one checkpoint interval of workload)
        + forecast arrivals during the downtime + the current consumer lag.
After the downtime the job drains the backlog with its spare capacity C_i − F(t); recovery ends when the
cumulative spare capacity covers the backlog. The downtime is counted once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def _extend(forecast: Sequence[float], length: int, fallback: float) -> np.ndarray:
    """Per-second forecast over `length` s; beyond the horizon hold the last value."""
    f = np.asarray(forecast, dtype=float)
    if f.size == 0:
        return np.full(length, fallback)
    if f.size >= length:
        return f[:length]
    return np.concatenate([f, np.full(length - f.size, f[-1])])


def predict_recovery_time(
    capacity: float,
    downtime_s: float,
    forecast: Sequence[float],
    lag: float,
    recent_workload: float,
    checkpoint_interval: float,
    max_recovery_s: float = 3600.0,
) -> float:
    """Seconds from the rescale until the backlog is drained at `capacity`; inf if never within the limit.

    >>> predict_recovery_time(100.0, 10, [50.0] * 100, lag=0.0, recent_workload=50.0, checkpoint_interval=10)
    30.0
    """
    horizon = math.ceil(max_recovery_s)
    f = _extend(forecast, horizon, recent_workload)
    d = math.ceil(max(downtime_s, 0.0))
    if d >= horizon:
        return math.inf
    backlog = checkpoint_interval * recent_workload + float(f[:d].sum()) + max(lag, 0.0)
    if backlog <= 0:
        return float(d)
    drained = np.cumsum(capacity - f[d:])
    covered = np.flatnonzero(drained >= backlog)
    if covered.size == 0:
        return math.inf
    return float(d + covered[0] + 1)


@dataclass
class DowntimeEstimates:
    """Downtime per direction, starting from the paper's 30 s (out) and 15 s (in), learned by smoothing."""

    out_s: float = 30.0
    in_s: float = 15.0
    smoothing: float = 0.5  # weight of a new observation
    observations: int = 0

    def for_change(self, current: int, target: int) -> float:
        """Scale-out downtime for i > current, scale-in otherwise (i == current: a restart after failure)."""
        return self.out_s if target > current else self.in_s

    def learn(self, scaled_out: bool, observed_downtime_s: float) -> None:
        if not math.isfinite(observed_downtime_s) or observed_downtime_s < 0:
            return
        a = self.smoothing
        if scaled_out:
            self.out_s = (1 - a) * self.out_s + a * observed_downtime_s
        else:
            self.in_s = (1 - a) * self.in_s + a * observed_downtime_s
        self.observations += 1

    def learn_recovery(self, scaled_out: bool, downtime_s: float | None, observed_recovery_s: float,
                       predicted_recovery_s: float | None) -> None:
        """What one observed recovery teaches: the downtime the job's restart showed, by smoothing; where no restart
        was seen, the paper's rule (Pfister et al., ``adjust_downtime``): one second more downtime when the recovery
        took longer than predicted, one less when it took less (never below 0), so the predictions close in.

        >>> d = DowntimeEstimates()
        >>> d.learn_recovery(True, 4.0, 60.0, 90.0); d.out_s
        17.0
        >>> d.learn_recovery(True, None, 60.0, 90.0); d.out_s
        16.0
        >>> d.learn_recovery(False, None, 60.0, 20.0); d.in_s, d.observations
        (16.0, 3)
        >>> d.learn_recovery(False, None, 60.0, None); d.observations  # nothing predicted: nothing to compare
        3
        """
        if downtime_s is not None:
            self.learn(scaled_out, downtime_s)
            return
        if predicted_recovery_s is None or not (math.isfinite(predicted_recovery_s)
                                                and math.isfinite(observed_recovery_s)):
            return
        step = 1.0 if observed_recovery_s > predicted_recovery_s else -1.0
        if scaled_out:
            self.out_s = max(self.out_s + step, 0.0)
        else:
            self.in_s = max(self.in_s + step, 0.0)
        self.observations += 1

    def to_state(self) -> dict[str, float]:
        return {"out_s": self.out_s, "in_s": self.in_s, "smoothing": self.smoothing,
                "observations": self.observations}

    @classmethod
    def from_state(cls, state: dict[str, float]) -> DowntimeEstimates:
        return cls(out_s=float(state["out_s"]), in_s=float(state["in_s"]),
                   smoothing=float(state["smoothing"]), observations=int(state["observations"]))


def recovery_times(
    capacities: Sequence[float],
    current: int,
    downtime: DowntimeEstimates,
    forecast: Sequence[float],
    lag: float,
    recent_workload: float,
    checkpoint_interval: float,
    max_recovery_s: float = 3600.0,
) -> tuple[float, ...]:
    """Predicted recovery time for every scale-out i = 1 … len(capacities)."""
    return tuple(
        predict_recovery_time(
            c, downtime.for_change(current, i), forecast, lag, recent_workload, checkpoint_interval,
            max_recovery_s,
        )
        for i, c in enumerate(capacities, start=1)
    )
