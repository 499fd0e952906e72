"""Forecast scoring: WAPE of each loop's previous forecast on what arrived, and the count of poor loops.

The forecaster remembers two forecasts per loop: the ARIMA model's (computed even while the fallback line is
served) and the one it served. The next loop scores both on the seconds of them that arrived. The model is
judged on its own forecast, so the choice "ARIMA or line" and the poor-loop count always judge the model itself:
scoring the served forecast would flip-flop (a bad model makes the line be served, the line scores well, the bad
model is served again, and the count never reaches the retrain threshold). Pure.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

__all__ = ["WAPE_HISTORY_LEN", "ForecastScore", "Pending", "wape"]

WAPE_HISTORY_LEN = 240  # loops of WAPE history kept (4 h at one loop a minute)

Pending = tuple[float, np.ndarray]  # a remembered per-second forecast: (start, values)


def wape(actual: Any, predicted: Any) -> float:
    """Weighted absolute percentage error Σ|y − ŷ| / Σ|y| over the pairs where both are finite.

    No finite pair → nan (nothing to score). Σ|y| = 0: 0.0 if the prediction is exactly right (all zero),
    else inf (any error on a zero workload is infinitely poor, and compares as poor against any threshold).

    >>> wape([10, 20, 30, 40], [12, 18, 33, 40])
    0.07
    """
    y = np.asarray(actual, dtype=float).ravel()
    p = np.asarray(predicted, dtype=float).ravel()
    if y.shape != p.shape:
        raise ValueError(f"actual and predicted differ in length: {y.size} ≠ {p.size}")
    ok = np.isfinite(y) & np.isfinite(p)
    if not ok.any():
        return float("nan")
    num = float(np.abs(y[ok] - p[ok]).sum())
    den = float(np.abs(y[ok]).sum())
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den


def score_pending(pending: Pending | None, ts: np.ndarray, y: np.ndarray) -> float:
    """WAPE of a remembered per-second forecast over the seconds of it present in (ts, y); nan if none."""
    if pending is None:
        return math.nan
    start, values = pending
    idx = np.rint(ts - start).astype(np.int64)
    inside = (idx >= 0) & (idx < values.size)
    if not inside.any():
        return math.nan
    return wape(y[inside], values[idx[inside]])


class ForecastScore:
    """The previous forecasts' WAPE and the count of consecutive poor loops of the model.

    Attributes (read-only by convention): `previous_wape` (WAPE of the previous ARIMA forecast, or of the
    previous served forecast while no model exists; None if unknown), `served_wape` (of the previous served
    forecast, whatever its method), `poor_loops` (consecutive loops with `previous_wape` above `threshold`),
    `pending_model` and `pending_served` (the forecasts waiting for their score).

    Examples
    --------
    >>> score = ForecastScore(threshold=0.25, poor_loops_to_retrain=2)
    >>> for arrived in (150.0, 100.0, 150.0, 150.0):
    ...     score.remember(model=(0.0, np.array([100.0])), served=(0.0, np.array([100.0])))
    ...     score.update(np.array([0.0]), np.array([arrived]), judge_model=True)
    ...     print(round(score.previous_wape, 3), score.poor_loops, score.retrain_due)
    0.333 1 False
    0.0 0 False
    0.333 1 False
    0.333 2 True
    """

    def __init__(self, threshold: float, poor_loops_to_retrain: int) -> None:
        self.threshold = threshold
        self.poor_loops_to_retrain = poor_loops_to_retrain
        self.pending_model: Pending | None = None
        self.pending_served: Pending | None = None
        self.previous_wape: float | None = None
        self.served_wape: float | None = None
        self.poor_loops = 0
        self.history: deque[float] = deque(maxlen=WAPE_HISTORY_LEN)

    @property
    def poor(self) -> bool:
        """The previous forecast missed by more than the threshold: serve the fallback instead of the model."""
        return self.previous_wape is not None and self.previous_wape > self.threshold

    @property
    def retrain_due(self) -> bool:
        """Poor for `poor_loops_to_retrain` consecutive loops."""
        return self.poor_loops >= self.poor_loops_to_retrain

    def remember(self, model: Pending | None, served: Pending | None) -> None:
        """This loop's forecasts, to be scored by the next `update`."""
        self.pending_model, self.pending_served = model, served

    def update(self, ts: np.ndarray, y: np.ndarray, judge_model: bool) -> None:
        """Score the pending forecasts on the arrived seconds (ts, y); `judge_model`: a model exists to judge."""
        model_wape = score_pending(self.pending_model, ts, y)
        served_wape = score_pending(self.pending_served, ts, y)
        if not math.isnan(served_wape):
            self.served_wape = served_wape
        judged = model_wape if judge_model else served_wape
        if math.isnan(judged):
            return
        self.previous_wape = judged
        self.history.append(judged)
        if judge_model:
            self.poor_loops = self.poor_loops + 1 if judged > self.threshold else 0

    def restart(self) -> None:
        """A new model is in service: nothing of the old one's scores judges it."""
        self.poor_loops = 0
        self.previous_wape = None
        self.pending_model = None
