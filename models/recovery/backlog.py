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


def backlog_recovery_time(timestamps: object, backlog: object, rescale_time: float,
                          baseline_s: float = 10.0) -> float | None:
    """Seconds from `rescale_time` until the backlog is back to its level before the rescale; None if it never is.

    The level before is the largest backlog in the `baseline_s` up to the rescale (a job that keeps up still holds
    a few records between polls; a saturated one, its growing backlog at the rescale). Recovery ends at the first
    sample, after the backlog rose above that level, where it is at or below it again. A rescale whose backlog never
    rose above it ended at once (0 s). Missing samples (NaN) are skipped.

    Examples
    --------
    >>> t = [98, 99, 100, 101, 102, 103, 104, 105, 106]
    >>> lag = [3, 5, 4, 300, 900, 600, 200, 4, 2]
    >>> backlog_recovery_time(t, lag, rescale_time=100.0)
    5.0
    """
    t = np.asarray(timestamps, dtype=float).ravel()
    lag = np.asarray(backlog, dtype=float).ravel()
    if t.size != lag.size:
        raise ValueError(f"timestamps and backlog must have the same length, got {t.size} and {lag.size}")
    known = np.isfinite(t) & np.isfinite(lag)
    t, lag = t[known], lag[known]
    before = lag[(t <= rescale_time) & (t > rescale_time - baseline_s)]
    if before.size == 0:
        raise ValueError(f"no backlog sample in the {baseline_s:g} s before the rescale at {rescale_time}: "
                         "its level before is unknown")
    level = float(before.max())
    after = t > rescale_time
    t, lag = t[after], lag[after]
    above = np.flatnonzero(lag > level)
    if above.size == 0:
        return 0.0
    back = np.flatnonzero(lag[above[0]:] <= level)
    return None if back.size == 0 else float(t[above[0] + back[0]] - rescale_time)
