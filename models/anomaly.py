"""Observed recovery: when is a job back to normal after a rescale?

The series watched is the residual r = workload − throughput (tuples/s). In normal operation it
hovers around a small mean; during the downtime of a rescale it jumps to the whole workload, and
while the job catches up on its backlog it turns strongly negative. Daedalus keeps Welford's running
mean and variance of r learned in normal operation and calls a point anomalous when it lies more
than one standard deviation from the mean (k = 1). After a rescale, recovery has ended when the
series is normal again: here, at the first of ``consecutive`` normal points in a row (one normal
point can be a crossing of the mean on the way from the downtime spike to the catch-up dip).

References
----------
Pfister et al., "Daedalus: Self-Adaptive Horizontal Autoscaling for Resource Efficiency of
Distributed Stream Processing Systems", ICPE 2024 (recovery-time observation by anomaly detection).
Welford (1962) for the running statistics (see ``daedalus.models.stats``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from daedalus.models.errors import KnowledgeError
from daedalus.models.stats import RunningVariance

__all__ = ["AnomalyDetector", "RecoveryTracker", "observed_recovery_time"]


def _require_keys(cls: type, state: Mapping[str, float], keys: tuple[str, ...]) -> None:
    missing = [key for key in keys if key not in state]
    if missing:
        raise KnowledgeError(f"{cls.__name__} state lacks {', '.join(missing)}; got keys {sorted(state)}")


def _number(cls: type, state: Mapping[str, float], key: str) -> float:
    try:
        value = float(state[key])
    except (TypeError, ValueError):
        raise KnowledgeError(f"{cls.__name__} state: {key} is not a number ({state[key]!r})") from None
    if not math.isfinite(value):
        raise KnowledgeError(f"{cls.__name__} state: {key} is not finite ({value!r})")
    return value


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
        _require_keys(cls, state, ("k",))
        k = _number(cls, state, "k")
        if k <= 0:
            raise KnowledgeError(f"{cls.__name__} state: k must be positive, got {k!r}")
        detector = cls(k, float(state.get("min_std", 0.0)))
        detector._stats = RunningVariance.from_state({key: state[key] for key in state if key not in ("k", "min_std")})
        return detector

    def __repr__(self) -> str:
        return f"AnomalyDetector(k={self.k!r}, n={self.n}, mean={self.mean!r}, std={self.std!r})"


class RecoveryTracker:
    """Finds the end of recovery after one rescale, point by point.

    Parameters
    ----------
    rescale_time
        Epoch seconds of the rescale. Points stamped earlier are ignored.
    detector
        The detector with the statistics learned in normal operation, before the rescale. The
        tracker keeps a frozen copy: what happens during recovery never widens the normal band.
    consecutive
        Recovery ends at the first of this many normal points in a row.
    require_anomaly
        Count a run of normal points only after the rescale has shown at least one anomalous point
        (the downtime). Metrics lag the rescale by a scrape or two; without this, the normal points
        just before the downtime becomes visible would report a recovery time near zero. A rescale
        that never disturbs the series then never reports a recovery (``recovered_at`` stays None).

    Points must arrive in time order; a point not later than the previous one is ignored (so
    overlapping metric windows can be fed twice).

    Examples
    --------
    >>> detector = AnomalyDetector()
    >>> detector.update_many([-1.0, 1.0] * 10)
    >>> tracker = RecoveryTracker(rescale_time=100.0, detector=detector)
    >>> for t, r in [(100, 0.0), (101, 90.0), (102, 0.2), (103, -40.0), (104, 0.5), (105, -0.5),
    ...              (106, 0.1), (107, 50.0)]:
    ...     tracker.update(t, r)
    >>> tracker.recovered_at, tracker.observed_recovery_s
    (104.0, 4.0)
    """

    def __init__(
        self,
        rescale_time: float,
        detector: AnomalyDetector,
        consecutive: int = 3,
        require_anomaly: bool = True,
    ) -> None:
        if not math.isfinite(rescale_time):
            raise ValueError(f"rescale_time must be a finite epoch time, got {rescale_time!r}")
        if int(consecutive) != consecutive or consecutive < 1:
            raise ValueError(f"consecutive must be a whole number ≥ 1, got {consecutive!r}")
        self.rescale_time = float(rescale_time)
        self.consecutive = int(consecutive)
        self.require_anomaly = bool(require_anomaly)
        self._detector = AnomalyDetector.from_state(detector.to_state())
        self._seen_anomaly = False
        self._run_start: float | None = None
        self._run_length = 0
        self._last: float | None = None
        self._recovered_at: float | None = None

    @property
    def detector(self) -> AnomalyDetector:
        """A copy of the frozen normal-operation detector."""
        return AnomalyDetector.from_state(self._detector.to_state())

    @property
    def recovered(self) -> bool:
        return self._recovered_at is not None

    @property
    def recovered_at(self) -> float | None:
        """Timestamp of the first of the ``consecutive`` normal points that end recovery."""
        return self._recovered_at

    @property
    def observed_recovery_s(self) -> float | None:
        if self._recovered_at is None:
            return None
        return self._recovered_at - self.rescale_time

    def update(self, timestamp: float, residual: float) -> None:
        timestamp = float(timestamp)
        if self._recovered_at is not None or not math.isfinite(timestamp) or timestamp < self.rescale_time:
            return
        if self._last is not None and timestamp <= self._last:
            return
        self._last = timestamp
        if self._detector.is_anomalous(residual):
            self._seen_anomaly = True
            self._run_start, self._run_length = None, 0
            return
        if self.require_anomaly and not self._seen_anomaly:
            return
        if self._run_length == 0:
            self._run_start = timestamp
        self._run_length += 1
        if self._run_length >= self.consecutive:
            self._recovered_at = self._run_start

    def update_many(self, timestamps: object, residuals: object) -> None:
        timestamps = np.asarray(timestamps, dtype=float).ravel()
        residuals = np.asarray(residuals, dtype=float).ravel()
        if timestamps.size != residuals.size:
            raise ValueError(
                f"timestamps and residuals must have the same length, got {timestamps.size} and {residuals.size}"
            )
        for timestamp, residual in zip(timestamps.tolist(), residuals.tolist(), strict=True):
            self.update(timestamp, residual)
            if self._recovered_at is not None:
                return

    def to_state(self) -> dict[str, float]:
        """Plain numbers; absent keys stand for None (JSON has no NaN)."""
        state = {
            "rescale_time": self.rescale_time,
            "consecutive": float(self.consecutive),
            "require_anomaly": float(self.require_anomaly),
            "seen_anomaly": float(self._seen_anomaly),
            "run_length": float(self._run_length),
            **{f"detector_{key}": value for key, value in self._detector.to_state().items()},
        }
        for key, value in (("run_start", self._run_start), ("last", self._last), ("recovered_at", self._recovered_at)):
            if value is not None:
                state[key] = value
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, float]) -> RecoveryTracker:
        keys = ("rescale_time", "consecutive", "require_anomaly", "seen_anomaly", "run_length")
        _require_keys(cls, state, keys)
        numbers = {key: _number(cls, state, key) for key in keys}
        detector = AnomalyDetector.from_state(
            {key.removeprefix("detector_"): value for key, value in state.items() if key.startswith("detector_")}
        )
        try:
            tracker = cls(
                numbers["rescale_time"], detector, int(numbers["consecutive"]), bool(numbers["require_anomaly"])
            )
        except ValueError as error:
            raise KnowledgeError(f"{cls.__name__} state: {error}") from None
        tracker._seen_anomaly = bool(numbers["seen_anomaly"])
        tracker._run_length = int(numbers["run_length"])
        for key in ("run_start", "last", "recovered_at"):
            if key in state:
                setattr(tracker, f"_{key}", _number(cls, state, key))
        return tracker

    def __repr__(self) -> str:
        return (
            f"RecoveryTracker(rescale_time={self.rescale_time!r}, recovered_at={self._recovered_at!r}, "
            f"consecutive={self.consecutive})"
        )


def observed_recovery_time(
    timestamps: object,
    workload: object,
    throughput: object,
    rescale_time: float,
    baseline_until: float,
    k: float = 1.0,
    consecutive: int = 3,
    require_anomaly: bool = True,
) -> float | None:
    """Seconds from ``rescale_time`` to the end of recovery, or None if the series never recovers.

    Learns the normal statistics of workload − throughput on the points stamped before
    ``baseline_until`` (which must not be after the rescale), then feeds the points from
    ``rescale_time`` on to a ``RecoveryTracker``.

    Examples
    --------
    >>> t = np.arange(12.0)
    >>> workload = np.full(12, 100.0)
    >>> throughput = np.array([99, 101, 99, 101, 99, 101, 0, 0, 160, 100, 100.5, 99.5])
    >>> observed_recovery_time(t, workload, throughput, rescale_time=6.0, baseline_until=6.0)
    3.0
    """
    timestamps = np.asarray(timestamps, dtype=float).ravel()
    workload = np.asarray(workload, dtype=float).ravel()
    throughput = np.asarray(throughput, dtype=float).ravel()
    if not (timestamps.size == workload.size == throughput.size):
        raise ValueError(
            f"timestamps, workload and throughput must have the same length, got {timestamps.size}, "
            f"{workload.size} and {throughput.size}"
        )
    if baseline_until > rescale_time:
        raise ValueError(
            f"baseline_until ({baseline_until}) is after rescale_time ({rescale_time}): the normal "
            "statistics must be learned before the rescale"
        )
    residual = workload - throughput
    detector = AnomalyDetector(k)
    detector.update_many(residual[timestamps < baseline_until])
    if detector.n < 2:
        raise ValueError(
            f"fewer than two finite points before baseline_until ({baseline_until}): nothing to learn "
            "normal operation from"
        )
    tracker = RecoveryTracker(rescale_time, detector, consecutive, require_anomaly)
    after = timestamps >= rescale_time
    tracker.update_many(timestamps[after], residual[after])
    return tracker.observed_recovery_s
