"""Per-second values averaged into steps: the forecaster's window, the dashboards, the benchmark series.

A step's mean is over the finite values that fall in it (a missing second is skipped, a step without any
value is NaN). Two groupings, one policy: `step_sums` by the clock (irregular timestamps, a step starting at
a multiple of `step`: the forecaster's window), `step_means` by position (a regular per-second series: a
forecast, a simulated run). Pure numpy.
"""

from __future__ import annotations

import numpy as np

__all__ = ["step_means", "step_sums"]


def step_sums(timestamps: object, values: object, step: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step that holds samples: its start (⌊t / step⌋ · step), the sum and the count of its finite values.

    Timestamps must be increasing. Sums and counts, not means: a step split over two chunks of a stream (the
    forecaster's partial step) is completed by adding them.

    >>> step_sums([0, 1, 2, 4, 5], [1.0, 3.0, np.nan, 4.0, 8.0], 3)
    (array([0., 3.]), array([ 4., 12.]), array([2, 2]))
    """
    ts = np.asarray(timestamps, dtype=float).ravel()
    y = np.asarray(values, dtype=float).ravel()
    if ts.shape != y.shape:
        raise ValueError(f"timestamps and values differ in length: {ts.size} ≠ {y.size}")
    if ts.size == 0:
        return np.array([]), np.array([]), np.array([], dtype=np.int64)
    step = float(step)
    starts = np.floor(ts / step) * step
    first = np.concatenate(([0], np.flatnonzero(np.diff(starts)) + 1))
    finite = np.isfinite(y)
    sums = np.add.reduceat(np.where(finite, y, 0.0), first)
    counts = np.add.reduceat(finite.astype(np.int64), first)
    return starts[first], sums, counts


def step_means(values: object, step: int, partial: bool = False) -> np.ndarray:
    """Means of consecutive `step`-long runs of per-second values; a shorter last run is dropped unless `partial`.

    The runs are positional (the values are one per second from a step start): a reshape, summed as numpy
    sums a row, so the means equal ``np.nanmean`` over the rows bit for bit.

    >>> step_means([1.0] * 3 + [3.0, np.nan, 5.0] + [7.0], 3)
    array([1., 4.])
    >>> step_means([1.0] * 3 + [3.0, np.nan, 5.0] + [7.0], 3, partial=True)
    array([1., 4., 7.])
    """
    y = np.asarray(values, dtype=float).ravel()
    if int(step) != step or step < 1:
        raise ValueError(f"step must be a whole number of values ≥ 1, got {step!r}")
    step = int(step)
    n = -(-y.size // step) if partial else y.size // step
    rows = np.full(n * step, np.nan)
    rows[: min(y.size, n * step)] = y[: n * step]
    rows = rows.reshape(n, step)
    finite = np.isfinite(rows)
    sums = np.where(finite, rows, 0.0).sum(axis=1)
    counts = finite.sum(axis=1)
    means = np.full(n, np.nan)
    np.divide(sums, counts, out=means, where=counts > 0)
    return means
