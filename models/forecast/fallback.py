"""The forecaster's fallback: a least-squares line over the last seconds of the workload.

Served while no ARIMA model exists, or while the model's previous forecast was poor. It keeps only the last
`window_s` per-second samples. Pure.
"""

from __future__ import annotations

from collections import deque

import numpy as np

__all__ = ["LinearFallback"]


class LinearFallback:
    """A line fitted to the last `window_s` seconds, projected over a horizon and clipped at 0.

    Examples
    --------
    >>> line = LinearFallback(window_s=60)
    >>> line.update(np.arange(10.0), 100.0 + 2.0 * np.arange(10.0))
    >>> line.values(now=10.0, horizon_s=3)
    array([120., 122., 124.])
    """

    def __init__(self, window_s: int) -> None:
        self.window_s = window_s
        self.t: deque[float] = deque(maxlen=window_s)
        self.y: deque[float] = deque(maxlen=window_s)

    def update(self, ts: np.ndarray, y: np.ndarray) -> None:
        """Keep the newest `window_s` of clean per-second samples (increasing timestamps)."""
        self.t.extend(ts[-self.window_s :].tolist())
        self.y.extend(y[-self.window_s :].tolist())

    def values(self, now: float, horizon_s: int) -> np.ndarray | None:
        """`horizon_s` per-second values from `now`; None without a finite sample in the window."""
        if not self.t:
            return None
        last_t = self.t[-1]
        t = np.asarray(self.t, dtype=float)
        y = np.asarray(self.y, dtype=float)
        ok = np.isfinite(y) & (t > last_t - self.window_s)
        if not ok.any():
            return None
        t, y = t[ok] - last_t, y[ok]  # centred on the newest second: well-conditioned
        seconds = now - last_t + np.arange(horizon_s, dtype=float)
        if t.size == 1 or np.ptp(t) == 0:
            values = np.full(horizon_s, float(y.mean()))
        else:
            design = np.column_stack((t, np.ones_like(t)))
            (slope, intercept), *_ = np.linalg.lstsq(design, y, rcond=None)
            values = intercept + slope * seconds
        return np.clip(values, 0.0, None)
