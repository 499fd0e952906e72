"""The forecaster's history: per-second workload folded into a bounded ring of step means.

A step is `step_s` seconds of the clock (it starts at a multiple of `step_s`); its mean is over the finite
seconds that arrived (``daedalus.models.forecast.steps``). A step still arriving carries over to the next chunk, a step
without any data is NaN (the Kalman filter skips it), and the ring keeps the newest `size` steps, so the
model's cost per loop stays bounded however long the job runs. Pure.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

from daedalus.models.forecast.steps import step_sums

__all__ = ["StepWindow"]


class StepWindow:
    """The last `size` step means of a per-second series, fed chunk by chunk.

    Attributes (read-only by convention): `end` (start time of the newest completed step), `last_t` (the
    newest second seen), `steps_seen` (completed steps ever), `completed` (the step means the last `update`
    completed, oldest first), and the partial step as `partial_start`, `partial_sum`, `partial_n`.

    Examples
    --------
    >>> w = StepWindow(step_s=10, size=4)
    >>> w.update(np.arange(25.0), np.arange(25.0))
    >>> w.values, w.completed, w.end, w.partial_n
    (array([ 4.5, 14.5]), [4.5, 14.5], 10.0, 5)
    >>> w.update(np.arange(25.0, 30.0), np.arange(25.0, 30.0))
    >>> w.completed, w.end
    ([24.5], 20.0)
    """

    def __init__(self, step_s: int, size: int) -> None:
        self.step_s = step_s
        self.size = size
        self.ring: deque[float] = deque(maxlen=size)
        self.end: float | None = None
        self.partial_start: float | None = None
        self.partial_sum = 0.0
        self.partial_n = 0
        self.last_t: float | None = None
        self.steps_seen = 0  # an int: paces the forecaster's fit retries
        self.completed: list[float] = []

    @property
    def values(self) -> np.ndarray:
        """The completed step means, oldest first (NaN for a step without data)."""
        return np.asarray(self.ring, dtype=float)

    @property
    def finite_steps(self) -> int:
        """Steps in the window with data."""
        return int(np.isfinite(self.values).sum())

    def clean(self, timestamps: Any, workload: Any) -> tuple[np.ndarray, np.ndarray]:
        """Per-second samples with finite timestamps, increasing, unique, newer than anything already seen."""
        ts = np.asarray(timestamps, dtype=float).ravel()
        y = np.asarray(workload, dtype=float).ravel()
        if ts.shape != y.shape:
            raise ValueError(f"timestamps and workload differ in length: {ts.size} ≠ {y.size}")
        keep = np.isfinite(ts)
        ts, y = ts[keep], y[keep]
        if ts.size > 1 and np.any(np.diff(ts) <= 0):
            ts, first = np.unique(ts, return_index=True)
            y = y[first]
        if self.last_t is not None:
            newer = ts > self.last_t
            ts, y = ts[newer], y[newer]
        return ts, y

    def update(self, ts: np.ndarray, y: np.ndarray) -> None:
        """Fold in clean per-second data (see `clean`); `completed` holds the steps it completed."""
        self.completed = []
        if ts.size == 0:
            return
        self.last_t = float(ts[-1])
        step = float(self.step_s)
        starts, sums, counts = step_sums(ts, y, step)
        for start, total, n in zip(starts.tolist(), sums.tolist(), counts.tolist(), strict=True):
            if self.partial_start is not None and start == self.partial_start:
                self.partial_sum += total
                self.partial_n += int(n)
                continue
            if self.partial_start is not None:  # a later step began: close the earlier one as it is
                self._close_partial()
            if self.end is not None:  # steps without any data: NaN (the Kalman filter skips them)
                missing = round((start - self.end) / step) - 1
                for _ in range(min(max(missing, 0), self.size)):
                    self._push(math.nan, self.end + step)
                if missing > 0:
                    self.end = start - step
            self.partial_start, self.partial_sum, self.partial_n = start, total, int(n)
        # Per-second samples: the step is complete once its last second arrived.
        if self.partial_start is not None and self.last_t >= self.partial_start + step - 1:
            self._close_partial()

    def _close_partial(self) -> None:
        assert self.partial_start is not None
        value = self.partial_sum / self.partial_n if self.partial_n else math.nan
        start = self.partial_start
        self.partial_start, self.partial_sum, self.partial_n = None, 0.0, 0
        self._push(value, start)

    def _push(self, value: float, start: float) -> None:
        self.ring.append(value)
        self.end = start
        self.steps_seen += 1
        self.completed.append(value)
