"""What normal operation looks like: a one-sigma anomaly detector on workload − throughput.

Daedalus keeps Welford's running mean and variance of the residual r = workload − throughput learned in normal
operation, and calls a point anomalous when it lies more than k = 1 standard deviation from the mean. After a
rescale, ``daedalus.models.recovery.anomaly`` uses it to find the end of recovery.

References
----------
Pfister et al., "Daedalus: Self-Adaptive Horizontal Autoscaling for Resource Efficiency of Distributed Stream
Processing Systems", ICPE 2024 (recovery-time observation by anomaly detection); Welford (1962).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from daedalus.models.errors import KnowledgeError
from daedalus.models.state import numbers
from daedalus.models.stats import RunningVariance

__all__ = ["AnomalyDetector"]


class AnomalyDetector:
    """One-sigma anomaly detector on a residual series (Welford mean and variance).

    Parameters
    ----------
    k
        A point x is anomalous when |x − mean| > k · std (the paper: one standard deviation).
    min_std
        A floor under std. A noise-free series (a simulator, a very steady job) has std 0, and then every
        rounding error would be an anomaly and no recovery could ever end. The loop sets it to 1 % of the
        workload. With a floor, a detector that learned fewer than two values judges around mean 0.

    A missing (non-finite) value teaches nothing: ``update`` skips it, and ``is_anomalous`` calls it
    anomalous, because a job that does not report is not known to be normal. With fewer than two
    values learned nothing can be judged and every finite point counts as normal.

    Examples
    --------
    >>> detector = AnomalyDetector(k=1.0)
    >>> for residual in [-1.0, 1.0, -1.0, 1.0]:
    ...     detector.update(residual)
    >>> detector.mean, detector.std
    (0.0, 1.0)
    >>> detector.is_anomalous(0.5), detector.is_anomalous(-1.0), detector.is_anomalous(40.0)
    (False, False, True)

    References
    ----------
    Pfister et al. (ICPE 2024), observed recovery time; Welford (1962).
    """

    def __init__(self, k: float = 1.0, min_std: float = 0.0) -> None:
        if not (math.isfinite(k) and k > 0):
            raise ValueError(f"k (standard deviations) must be a positive number, got {k!r}")
        if not (math.isfinite(min_std) and min_std >= 0):
            raise ValueError(f"min_std must be a finite number ≥ 0, got {min_std!r}")
        self.k = float(k)
        self.min_std = float(min_std)
        self._stats = RunningVariance()

    @property
    def n(self) -> int:
        return self._stats.n

    @property
    def mean(self) -> float:
        return self._stats.mean

    @property
    def std(self) -> float:
        return self._stats.std

    @property
    def statistics(self) -> RunningVariance:
        """A copy of the running statistics."""
        return RunningVariance.from_state(self._stats.to_state())

    def update(self, x: float) -> None:
        if math.isfinite(x):
            self._stats.update(x)

    def update_many(self, xs: object) -> None:
        """Learn a batch at once (exact, Chan's formula); non-finite values are skipped."""
        xs = np.asarray(xs, dtype=float).ravel()
        self._stats.update_many(xs[np.isfinite(xs)])

    def merge(self, other: AnomalyDetector) -> None:
        self._stats.merge(other._stats)

    def is_anomalous(self, x: float) -> bool:
        if not math.isfinite(x):
            return True
        if self._stats.n < 2:
            return self.min_std > 0 and abs(x) > self.k * self.min_std
        return abs(x - self._stats.mean) > self.k * max(self._stats.std, self.min_std)

    def to_state(self) -> dict[str, float]:
        return {"k": self.k, "min_std": self.min_std, **self._stats.to_state()}

    @classmethod
    def from_state(cls, state: Mapping[str, float]) -> AnomalyDetector:
        k = numbers(cls, state, ("k",))["k"]
        if k <= 0:
            raise KnowledgeError(f"{cls.__name__} state: k must be positive, got {k!r}")
        detector = cls(k, float(state.get("min_std", 0.0)))
        detector._stats = RunningVariance.from_state({key: state[key] for key in state if key not in ("k", "min_std")})
        return detector

    def __repr__(self) -> str:
        return f"AnomalyDetector(k={self.k!r}, n={self.n}, mean={self.mean!r}, std={self.std!r})"
