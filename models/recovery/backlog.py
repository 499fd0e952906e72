"""Recovery seen in the backlog: the independent check of the anomaly detector's observed recovery time.

A rescale stops the job for its downtime; what arrives meanwhile (and what it replays from its last checkpoint)
waits in the source's backlog (Kafka consumer lag, Flink's ``pendingRecords``), and the job has recovered when that
backlog is back to where it was before the rescale. The backlog is a count, not a rate over a window, so it says
when recovery ended without the detector's statistics; it needs a source that reports one, which is why the
paper's loop watches workload − throughput instead.
"""

from __future__ import annotations

import numpy as np

__all__ = ["backlog_recovery_time"]


def backlog_recovery_time(timestamps: object, backlog: object, workload: object, rescale_time: float,
                          baseline_s: float = 10.0, slack_s: float = 1.0, hold_s: float = 10.0,
                          level_at: float | None = None) -> float | None:
    """Seconds from `rescale_time` until the backlog is back to its level before the rescale; None if it never is.

    The level before is the largest backlog in the `baseline_s` up to the rescale (a job that keeps up still holds
    a few records between polls; a saturated one, its growing backlog at the rescale), plus `slack_s` seconds of
    the workload then: a backlog cleared within a second is none. Recovery ends at the first sample, after the
    backlog rose above that level, from which it stays at or below it for `hold_s` (while a restarted job's readers
    come up one by one, their sum reads low for a few seconds). A rescale whose backlog never rose above the level
    ended at once (0 s). Missing samples (NaN) are skipped. `level_at` takes the level before an earlier moment: a
    rescale made before the previous one's backlog was back has not recovered until that one's level is reached
    (the paper's predicted recovery drains the whole backlog, the lag at the rescale included).

    Examples
    --------
    >>> t = np.arange(95.0, 125.0)
    >>> lag = np.array([3, 5, 4, 2, 4, 3, 300, 900, 10, 1200, 900, 600, 200, 4, 2] + [1] * 15)
    >>> backlog_recovery_time(t, lag, np.full(30, 10.0), rescale_time=100.0, hold_s=5.0)  # the dip at 103 is no end
    8.0
    """
    t = np.asarray(timestamps, dtype=float).ravel()
    lag = np.asarray(backlog, dtype=float).ravel()
    load = np.asarray(workload, dtype=float).ravel()
    if not t.size == lag.size == load.size:
        raise ValueError(f"timestamps, backlog and workload must have the same length, got {t.size}, {lag.size} "
                         f"and {load.size}")
    known = np.isfinite(t) & np.isfinite(lag)
    at = rescale_time if level_at is None else level_at
    window = known & (t <= at) & (t > at - baseline_s)
    if not window.any():
        raise ValueError(f"no backlog sample in the {baseline_s:g} s before {at}: the level before the rescale at "
                         f"{rescale_time} is unknown")
    arrivals = load[window & np.isfinite(load)]
    level = float(lag[window].max()) + slack_s * (float(arrivals.mean()) if arrivals.size else 0.0)
    after = known & (t > rescale_time)
    t, lag = t[after], lag[after]
    above = np.flatnonzero(lag > level)
    if above.size == 0:
        return 0.0
    for i in range(above[0], t.size):
        if lag[i] <= level and not np.any(lag[(t > t[i]) & (t <= t[i] + hold_s)] > level):
            if t[-1] >= t[i] + hold_s:
                return float(t[i] - rescale_time)
            return None  # not yet held long enough to tell
    return None
