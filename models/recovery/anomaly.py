"""Observed recovery: when is a job back to normal after a rescale, and how long was it down?

The series watched is the residual r = workload − throughput (tuples/s). In normal operation it
hovers around a small mean; during the downtime of a rescale it jumps to the whole workload, and
while the job catches up on its backlog it turns strongly negative. The ``AnomalyDetector``
(``daedalus.models.recovery.detector``) learns r in normal operation and calls a point anomalous when it
lies more than one standard deviation from the mean (k = 1). After a rescale, recovery has ended when the
series is normal again: here, at the first of ``consecutive`` normal points in a row (one normal
point can be a crossing of the mean on the way from the downtime spike to the catch-up dip).

One implementation serves the loop (``models/loop/analyze.py``, an observation per loop, the tracker kept in
the knowledge) and the recovery-monitor flow (``tasks/recovery.py``, which only polls and sleeps):
``learn_normal`` teaches the detector, ``track_recovery`` feeds the samples after the rescale to a
``RecoveryTracker`` and reads the restart from the job's uptime, ``downtime_s`` turns it into the downtime.

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

from daedalus.models.capacity.model import BACKLOG_S
from daedalus.models.errors import KnowledgeError
from daedalus.models.recovery.detector import AnomalyDetector
from daedalus.models.stats import number, numbers
from daedalus.models.types import Observation

__all__ = ["AnomalyDetector", "RecoveryTracker", "downtime_s", "learn_normal", "observed_recovery_time", "residual",
           "total_throughput", "track_recovery"]


def total_throughput(obs: Observation) -> np.ndarray:
    """Tuples/s processed by all workers at each step (a worker that did not report counts 0)."""
    total = np.zeros(obs.timestamps.size)
    for series in obs.throughput.values():
        total += np.nan_to_num(series)
    return total


def residual(obs: Observation) -> np.ndarray:
    """The series watched: workload − total throughput."""
    return obs.workload - total_throughput(obs)


def learn_normal(detector: AnomalyDetector, obs: Observation, warmup_s: float) -> None:
    """Teach `detector` the residual of the observation's samples in normal operation: steady (past the warm-up after
    a restart) and keeping up, its backlog under `BACKLOG_S` seconds of arrivals.

    A saturated job's residual (workload − capacity, growing with the workload) is not the noise of a job that keeps
    up: learned as normal, it widens the band until the downtime of the next rescale, or the crossing from saturation
    to catch-up, reads as normal (on a real Flink the band grew to ±350 records/s and a backlog of 120,000 records
    "recovered" as its residual crossed zero).
    """
    steady = obs.uptime_s >= warmup_s
    with np.errstate(invalid="ignore"):
        keeping_up = np.isfinite(obs.lag) & (obs.lag <= BACKLOG_S * np.maximum(obs.workload, 0.0))
    detector.update_many(residual(obs)[steady & keeping_up])


def superseded_note(after_s: float, by: str | None = None) -> str:
    """Why a rescale's recovery was followed no further: the job was rescaled again first (what follows is the later
    one's recovery). The loop and the recovery monitor say it in the same words."""
    return f"superseded by the rescale {after_s:.0f} s after it{f' ({by})' if by else ''}, before it recovered"


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
        Count a run of normal points only after the rescale has disturbed the job: an anomalous point (the
        downtime), or its restart (``restarted``). Metrics lag the rescale by a scrape or two; without this, the
        normal points just before the downtime becomes visible would report a recovery time near zero. A rescale
        that never disturbs the series then never reports a recovery (``recovered_at`` stays None).
    window_s
        How far back each point's value reaches: a rate over the last `window_s` seconds (Prometheus'
        ``rate(…[w])``) is normal only once its whole window is, so recovery ended at the start of the first
        normal point's window, not at its stamp. 0 for values of their own instant.

    Points must arrive in time order; a point not later than the previous one is ignored (so
    overlapping metric windows can be fed twice). Recovery never ends before the restart.

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

    The same points as rates over 2 s: the first normal one, stamped 104, describes 102 to 104.

    >>> windowed = RecoveryTracker(rescale_time=100.0, detector=detector, window_s=2.0)
    >>> windowed.update_many([100, 101, 102, 103, 104, 105, 106], [0.0, 90.0, 0.2, -40.0, 0.5, -0.5, 0.1])
    >>> windowed.observed_recovery_s
    2.0
    """

    def __init__(
        self,
        rescale_time: float,
        detector: AnomalyDetector,
        consecutive: int = 3,
        require_anomaly: bool = True,
        window_s: float = 0.0,
    ) -> None:
        if not math.isfinite(rescale_time):
            raise ValueError(f"rescale_time must be a finite epoch time, got {rescale_time!r}")
        if int(consecutive) != consecutive or consecutive < 1:
            raise ValueError(f"consecutive must be a whole number ≥ 1, got {consecutive!r}")
        if not (math.isfinite(window_s) and window_s >= 0):
            raise ValueError(f"window_s must be a finite number of seconds ≥ 0, got {window_s!r}")
        self.rescale_time = float(rescale_time)
        self.consecutive = int(consecutive)
        self.require_anomaly = bool(require_anomaly)
        self.window_s = float(window_s)
        self._detector = AnomalyDetector.from_state(detector.to_state())
        self._seen_anomaly = False
        self._run_start: float | None = None
        self._run_length = 0
        self._last: float | None = None
        self._last_residual: float | None = None
        self._restart: float | None = None
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
        """When the job was normal again: the start of the window of the first of the ``consecutive`` normal
        points that end recovery, not before the restart."""
        return self._recovered_at

    @property
    def observed_recovery_s(self) -> float | None:
        if self._recovered_at is None:
            return None
        return self._recovered_at - self.rescale_time

    @property
    def status(self) -> str:
        """Where the recovery stands, in words: what a monitor that gives up says."""
        if self._recovered_at is not None:
            return f"recovered in {self.observed_recovery_s:.0f} s"
        if self._last is None:
            return "no metrics since the rescale"
        d = self._detector
        band = f"normal band {d.mean:,.0f} ± {d.band():,.0f}/s" if d.n >= 2 else "no normal band learned"
        seen = f"{self._last - self.rescale_time:.0f} s of metrics after the rescale"
        if self.require_anomaly and not self._seen_anomaly:
            return (f"the rescale never disturbed workload − throughput ({band}) and no restart was seen in {seen}: "
                    "nothing to recover from, or a disturbance too short for the metric's window")
        last = "missing" if self._last_residual is None or not math.isfinite(self._last_residual) else \
            f"{self._last_residual:,.0f}/s"
        return (f"still recovering after {seen}: the last workload − throughput was {last} ({band}); "
                f"{self._run_length} of {self.consecutive} normal points in a row")

    def restarted(self, restart_time: float) -> None:
        """The job restarted at `restart_time` (its uptime says so): the rescale disturbed it, even where the
        metric's window smooths a downtime of seconds into the normal band; recovery cannot end before it."""
        if self._recovered_at is None and math.isfinite(restart_time):
            self._restart = max(float(restart_time), self.rescale_time)
            self._seen_anomaly = True

    def update(self, timestamp: float, residual: float, workload: float = 0.0) -> None:
        """One point: `residual` (tuples/s) at `timestamp`, seen at `workload` (for the detector's noise floor)."""
        timestamp = float(timestamp)
        if self._recovered_at is not None or not math.isfinite(timestamp) or timestamp < self.rescale_time:
            return
        if self._last is not None and timestamp <= self._last:
            return
        self._last, self._last_residual = timestamp, float(residual)
        if self._detector.is_anomalous(residual, workload):
            self._seen_anomaly = True
            self._run_start, self._run_length = None, 0
            return
        if self.require_anomaly and not self._seen_anomaly:
            return
        if self._restart is not None and timestamp < self._restart:
            return
        if self._run_length == 0:
            self._run_start = timestamp
        self._run_length += 1
        if self._run_length >= self.consecutive and self._run_start is not None:
            self._recovered_at = max(self._run_start - self.window_s, self._restart or self.rescale_time)

    def update_many(self, timestamps: object, residuals: object, workloads: object = 0.0) -> None:
        timestamps = np.asarray(timestamps, dtype=float).ravel()
        residuals = np.asarray(residuals, dtype=float).ravel()
        workloads = np.broadcast_to(np.asarray(workloads, dtype=float), timestamps.shape) if timestamps.size else \
            np.asarray([], dtype=float)
        if timestamps.size != residuals.size:
            raise ValueError(
                f"timestamps and residuals must have the same length, got {timestamps.size} and {residuals.size}"
            )
        for timestamp, residual, workload in zip(timestamps.tolist(), residuals.tolist(), workloads.tolist(),
                                                 strict=True):
            self.update(timestamp, residual, workload)
            if self._recovered_at is not None:
                return

    def to_state(self) -> dict[str, float]:
        """Plain numbers; absent keys stand for None (JSON has no NaN)."""
        state = {
            "rescale_time": self.rescale_time,
            "consecutive": float(self.consecutive),
            "require_anomaly": float(self.require_anomaly),
            "window_s": self.window_s,
            "seen_anomaly": float(self._seen_anomaly),
            "run_length": float(self._run_length),
            **{f"detector_{key}": value for key, value in self._detector.to_state().items()},
        }
        for key, value in (("run_start", self._run_start), ("last", self._last), ("restart", self._restart),
                           ("recovered_at", self._recovered_at)):
            if value is not None:
                state[key] = value
        if self._last_residual is not None and math.isfinite(self._last_residual):
            state["last_residual"] = self._last_residual
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, float]) -> RecoveryTracker:
        keys = ("rescale_time", "consecutive", "require_anomaly", "seen_anomaly", "run_length")
        values = numbers(cls, state, keys)
        detector = AnomalyDetector.from_state(
            {key.removeprefix("detector_"): value for key, value in state.items() if key.startswith("detector_")}
        )
        try:
            tracker = cls(values["rescale_time"], detector, int(values["consecutive"]),
                          bool(values["require_anomaly"]), float(state.get("window_s", 0.0)))
        except (TypeError, ValueError) as error:
            raise KnowledgeError(f"{cls.__name__} state: {error}") from None
        tracker._seen_anomaly = bool(values["seen_anomaly"])
        tracker._run_length = int(values["run_length"])
        for key in ("run_start", "last", "restart", "recovered_at", "last_residual"):
            if key in state:
                setattr(tracker, f"_{key}", number(cls, state, key))
        return tracker

    def __repr__(self) -> str:
        return (
            f"RecoveryTracker(rescale_time={self.rescale_time!r}, recovered_at={self._recovered_at!r}, "
            f"consecutive={self.consecutive})"
        )


def track_recovery(tracker: RecoveryTracker, obs: Observation, restart_time: float | None = None) -> float | None:
    """Feed the observation's samples after the rescale to `tracker`, until it reports the end of recovery.

    Returns the job's restart time: that of the first sample after the rescale whose uptime starts after the
    rescale (its timestamp minus the uptime; up to one metric step earlier, for clocks that differ), or
    `restart_time`, already found in an earlier observation of the same recovery. Samples that still count the
    uptime from before are skipped: an engine may restart some seconds after the request (Flink at its next
    checkpoint). The restart tells the tracker the rescale disturbed the job (``RecoveryTracker.restarted``); the
    observation's rate window becomes the tracker's ``window_s``.

    Examples
    --------
    >>> detector = AnomalyDetector()
    >>> detector.update_many([-1.0, 1.0] * 10)
    >>> tracker = RecoveryTracker(rescale_time=100.0, detector=detector, consecutive=2)
    >>> t = np.arange(99.0, 107.0)
    >>> obs = Observation(job="j", timestamps=t, workload=np.full(8, 100.0),
    ...                   throughput={"w": np.array([100, 100, 0, 0, 150, 100, 100, 100.0])}, cpu={},
    ...                   lag=np.zeros(8), uptime_s=np.array([50, 51, 0, 0, 1, 2, 3, 4.0]), scaleout=1)
    >>> track_recovery(tracker, obs), tracker.recovered_at
    (102.0, 104.0)

    The old uptime still counting after the rescale (the restart came later) is not the restart:

    >>> late = RecoveryTracker(rescale_time=100.0, detector=detector, consecutive=2)
    >>> obs.uptime_s[:] = [50, 51, 52, 53, 1, 2, 3, 4.0]
    >>> track_recovery(late, obs)
    102.0
    """
    tracker.window_s = max(tracker.window_s, obs.window_s)  # what the metrics' rates average over
    after = obs.timestamps > tracker.rescale_time
    samples = zip(obs.timestamps[after].tolist(), residual(obs)[after].tolist(), obs.workload[after].tolist(),
                  obs.uptime_s[after].tolist(), strict=True)
    if restart_time is not None:
        tracker.restarted(restart_time)
    for t, r, w, up in samples:
        if restart_time is None and up > 0 and t - up >= tracker.rescale_time - obs.step_s:
            restart_time = t - up
            tracker.restarted(restart_time)
        tracker.update(t, r, w)
        if tracker.recovered:
            break
    return restart_time


def downtime_s(rescale_time: float, restart_time: float | None) -> float | None:
    """Seconds from the rescale to the restart; None while no restart after the rescale is known.

    A restart time before the rescale is the uptime of the job before it (metrics lag the rescale): no downtime.

    >>> downtime_s(100.0, 130.0), downtime_s(100.0, None), downtime_s(100.0, 40.0)
    (30.0, None, None)
    """
    if restart_time is None or not restart_time - rescale_time >= 0:
        return None
    return restart_time - rescale_time


def observed_recovery_time(
    timestamps: object,
    workload: object,
    throughput: object,
    rescale_time: float,
    baseline_until: float,
    k: float = 1.0,
    consecutive: int = 3,
    require_anomaly: bool = True,
    window_s: float = 0.0,
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
    detector = AnomalyDetector(k, noise_floor=0.0)
    detector.update_many(residual[timestamps < baseline_until])
    if detector.n < 2:
        raise ValueError(
            f"fewer than two finite points before baseline_until ({baseline_until}): nothing to learn "
            "normal operation from"
        )
    tracker = RecoveryTracker(rescale_time, detector, consecutive, require_anomaly, window_s)
    after = timestamps >= rescale_time
    tracker.update_many(timestamps[after], residual[after], workload[after])
    return tracker.observed_recovery_s
