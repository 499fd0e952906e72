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
from daedalus.models.stats import RunningVariance, numbers

__all__ = ["NOISE_FLOOR", "AnomalyDetector"]

# Residuals within this share of the workload are noise, whatever the learned std says: the std learned at one
# workload is not the noise at another (two counters' rates scraped moments apart differ in proportion to the rate).
NOISE_FLOOR = 0.01


class AnomalyDetector:
    """One-sigma anomaly detector on a residual series (Welford mean and variance).

    Parameters
    ----------
    k
        A point x is anomalous when |x − mean| > k · std (the paper: one standard deviation).
    noise_floor
        A floor under std, as a share of the workload at the point judged (``is_anomalous(x, workload)``). A
        noise-free series (a simulator, a very steady job) has std 0, and then every rounding error would be an
        anomaly and no recovery could ever end; and a std learned at a low workload is too narrow for the noise
        at a high one. With a floor, a detector that learned fewer than two values judges around mean 0.

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

    def __init__(self, k: float = 1.0, noise_floor: float = NOISE_FLOOR) -> None:
        if not (math.isfinite(k) and k > 0):
            raise ValueError(f"k (standard deviations) must be a positive number, got {k!r}")
        if not (math.isfinite(noise_floor) and noise_floor >= 0):
            raise ValueError(f"noise_floor must be a finite share ≥ 0 of the workload, got {noise_floor!r}")
        self.k = float(k)
        self.noise_floor = float(noise_floor)
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

    def band(self, workload: float = 0.0) -> float:
        """Half the width of the normal band at this workload: k · max(std, noise_floor · workload)."""
        floor = self.noise_floor * abs(workload) if math.isfinite(workload) else 0.0
        return self.k * max(self._stats.std if self._stats.n >= 2 else 0.0, floor)

    def is_anomalous(self, x: float, workload: float = 0.0) -> bool:
        """Whether residual `x`, seen at `workload` (tuples/s; 0: no floor), lies outside the normal band."""
        if not math.isfinite(x):
            return True
        if self._stats.n < 2:
            band = self.band(workload)
            return band > 0 and abs(x) > band
        return abs(x - self._stats.mean) > self.band(workload)

    def to_state(self) -> dict[str, float]:
        return {"k": self.k, "noise_floor": self.noise_floor, **self._stats.to_state()}

    @classmethod
    def from_state(cls, state: Mapping[str, float]) -> AnomalyDetector:
        k = numbers(cls, state, ("k",))["k"]
        if k <= 0:
            raise KnowledgeError(f"{cls.__name__} state: k must be positive, got {k!r}")
        detector = cls(k, float(state.get("noise_floor", NOISE_FLOOR)))  # states before it had an absolute min_std
        detector._stats = RunningVariance.from_state(
            {key: state[key] for key in state if key not in ("k", "noise_floor", "min_std")})
        return detector

    def __repr__(self) -> str:
        return f"AnomalyDetector(k={self.k!r}, n={self.n}, mean={self.mean!r}, std={self.std!r})"
