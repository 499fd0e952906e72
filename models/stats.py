"""Small online statistics, in the style of river's ``stats`` module.

One statistic is one small class: parameters in ``__init__``, ``update`` returning ``None``, read-only
properties for the values, state in plain numbers (no stored samples). Two statistics over disjoint
parts of a stream combine exactly with ``merge`` / ``+=`` (Chan's parallel formulas), so batches,
loops and Spark partitions fold together without re-reading data. ``to_state`` / ``from_state``
persist a statistic as a ``dict[str, float]``, without pickle.

Non-finite inputs are rejected with a ``ValueError``: a single NaN folded into a running sum would
poison the statistic for good. Callers filter missing metrics before updating.

References
----------
- Welford, B. P. (1962). Note on a method for calculating corrected sums of squares and products.
  Technometrics 4(3), 419–420.
- Chan, T. F., Golub, G. H., LeVeque, R. J. (1979). Updating formulae and a pairwise algorithm for
  computing sample variances. Stanford CS report STAN-CS-79-773.
- https://en.wikipedia.org/wiki/Algorithms_for_calculating_variance (Welford's online algorithm,
  parallel algorithm, online covariance).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Self

import numpy as np

from daedalus.models.errors import KnowledgeError

__all__ = ["OnlineRegression", "RunningMean", "RunningVariance"]


def _finite(value: float, what: str) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}; drop missing samples first")
    return value


def _batch(values: object, what: str) -> np.ndarray:
    array = np.asarray(values, dtype=float).ravel()
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what} must all be finite numbers; drop missing samples (NaN, inf) first")
    return array


def _read_state(cls: type, state: Mapping[str, float], keys: tuple[str, ...]) -> dict[str, float]:
    missing = [key for key in keys if key not in state]
    if missing:
        raise KnowledgeError(f"{cls.__name__} state lacks {', '.join(missing)}; got keys {sorted(state)}")
    values = {}
    for key in keys:
        try:
            values[key] = float(state[key])
        except (TypeError, ValueError):
            raise KnowledgeError(f"{cls.__name__} state: {key} is not a number ({state[key]!r})") from None
        if not math.isfinite(values[key]):
            raise KnowledgeError(f"{cls.__name__} state: {key} is not finite ({values[key]!r})")
    n = values["n"]
    if n < 0 or n != int(n):
        raise KnowledgeError(f"{cls.__name__} state: n must be a whole number ≥ 0, got {n!r}")
    for key in keys:
        if key.startswith("m2") and values[key] < 0:
            raise KnowledgeError(f"{cls.__name__} state: {key} must be ≥ 0, got {values[key]!r}")
    return values


class RunningMean:
    """Running mean of a stream (Welford's update).

    Attributes
    ----------
    n
        Number of values seen.
    mean
        Their mean (0.0 before the first value).

    Examples
    --------
    >>> m = RunningMean()
    >>> for x in [1.0, 2.0, 6.0]:
    ...     m.update(x)
    ...     print(m.n, m.mean)
    1 1.0
    2 1.5
    3 3.0
    >>> other = RunningMean()
    >>> other.update_many([3.0, 7.0])
    >>> m += other
    >>> m
    RunningMean(n=5, mean=3.8)

    References
    ----------
    Welford (1962); merge by Chan, Golub & LeVeque (1979):
    mean = mean_a + (mean_b − mean_a) · n_b / (n_a + n_b).
    """

    def __init__(self) -> None:
        self._n = 0
        self._mean = 0.0

    @property
    def n(self) -> int:
        return self._n

    @property
    def mean(self) -> float:
        return self._mean

    def get(self) -> float:
        return self._mean

    def update(self, x: float) -> None:
        x = _finite(x, "x")
        self._n += 1
        self._mean += (x - self._mean) / self._n

    def update_many(self, xs: object) -> None:
        """Fold in a batch exactly: the batch's mean by numpy, merged by Chan's formula."""
        xs = _batch(xs, "xs")
        if xs.size:
            self._merge(xs.size, float(xs.mean()))

    def _merge(self, n_b: int, mean_b: float) -> None:
        if n_b == 0:
            return
        n = self._n + n_b
        self._mean += (mean_b - self._mean) * (n_b / n)
        self._n = n

    def merge(self, other: RunningMean) -> None:
        """Absorb the statistic of a disjoint part of the stream (Chan et al.)."""
        self._merge(other._n, other._mean)

    def __iadd__(self, other: RunningMean) -> Self:
        self.merge(other)
        return self

    def __add__(self, other: RunningMean) -> RunningMean:
        result = type(self).from_state(self.to_state())
        result.merge(other)
        return result

    def to_state(self) -> dict[str, float]:
        return {"n": float(self._n), "mean": self._mean}

    @classmethod
    def from_state(cls, state: Mapping[str, float]) -> RunningMean:
        values = _read_state(cls, state, ("n", "mean"))
        stat = cls()
        stat._n, stat._mean = int(values["n"]), values["mean"]
        return stat

    def __repr__(self) -> str:
        return f"RunningMean(n={self._n}, mean={self._mean!r})"


class RunningVariance:
    """Running mean and population variance of a stream (Welford's algorithm).

    State: ``n``, ``mean`` and ``m2`` = Σ (x − mean)². ``variance`` = m2 / n (population, as
    ``np.var``); 0.0 before two values.

    Examples
    --------
    >>> v = RunningVariance()
    >>> for x in [2.0, 4.0, 4.0, 4.0]:
    ...     v.update(x)
    ...     print(v.n, round(v.mean, 12), round(v.variance, 12))
    1 2.0 0.0
    2 3.0 1.0
    3 3.333333333333 0.888888888889
    4 3.5 0.75
    >>> w = RunningVariance()
    >>> w.update_many([5.0, 5.0, 7.0, 9.0])
    >>> v += w
    >>> v.n, v.mean, v.variance, v.std
    (8, 5.0, 4.0, 2.0)

    References
    ----------
    Welford (1962): δ = x − mean; mean += δ / n; m2 += δ · (x − mean).
    Chan, Golub & LeVeque (1979): m2 = m2_a + m2_b + δ² · n_a · n_b / n, δ = mean_b − mean_a.
    """

    def __init__(self) -> None:
        self._n = 0
        self._mean = 0.0
        self._m2 = 0.0

    @property
    def n(self) -> int:
        return self._n

    @property
    def mean(self) -> float:
        return self._mean

    @property
    def m2(self) -> float:
        return self._m2

    @property
    def variance(self) -> float:
        return self._m2 / self._n if self._n > 1 else 0.0

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)

    def get(self) -> float:
        return self.variance

    def update(self, x: float) -> None:
        x = _finite(x, "x")
        self._n += 1
        delta = x - self._mean
        self._mean += delta / self._n
        self._m2 += delta * (x - self._mean)

    def update_many(self, xs: object) -> None:
        """Fold in a batch exactly: the batch's moments by numpy, merged by Chan's formula."""
        xs = _batch(xs, "xs")
        if xs.size:
            mean = float(xs.mean())
            self._merge(xs.size, mean, float(np.sum((xs - mean) ** 2)))

    def _merge(self, n_b: int, mean_b: float, m2_b: float) -> None:
        if n_b == 0:
            return
        n_a = self._n
        n = n_a + n_b
        delta = mean_b - self._mean
        self._mean += delta * (n_b / n)
        self._m2 += m2_b + delta * delta * (n_a * n_b / n)
        self._n = n

    def merge(self, other: RunningVariance) -> None:
        """Absorb the statistic of a disjoint part of the stream (Chan et al.)."""
        self._merge(other._n, other._mean, other._m2)

    def __iadd__(self, other: RunningVariance) -> Self:
        self.merge(other)
        return self

    def __add__(self, other: RunningVariance) -> RunningVariance:
        result = type(self).from_state(self.to_state())
        result.merge(other)
        return result

    def to_state(self) -> dict[str, float]:
        return {"n": float(self._n), "mean": self._mean, "m2": self._m2}

    @classmethod
    def from_state(cls, state: Mapping[str, float]) -> RunningVariance:
        values = _read_state(cls, state, ("n", "mean", "m2"))
        stat = cls()
        stat._n, stat._mean, stat._m2 = int(values["n"]), values["mean"], values["m2"]
        return stat

    def __repr__(self) -> str:
        return f"RunningVariance(n={self._n}, mean={self._mean!r}, variance={self.variance!r})"


class OnlineRegression:
    """Simple linear regression of y on x from running co-moments (one pass, no stored samples).

    State: ``n``, ``mean_x``, ``mean_y``, ``m2_x`` = Σ (x − x̄)², ``m2_y`` = Σ (y − ȳ)² and
    ``c_xy`` = Σ (x − x̄)(y − ȳ). Least squares: slope β = c_xy / m2_x, intercept α = ȳ − β · x̄,
    r² = c_xy² / (m2_x · m2_y). ``slope``, ``intercept`` and ``r2`` are NaN while x has no spread
    (fewer than two distinct x); r² is 1.0 when x varies and y is constant.

    Examples
    --------
    >>> reg = OnlineRegression()
    >>> for x, y in [(0.2, 25.0), (0.4, 45.0), (0.6, 65.0)]:
    ...     reg.update(x, y)
    >>> round(reg.slope, 9), round(reg.intercept, 9), round(reg.r2, 9)
    (100.0, 5.0, 1.0)
    >>> reg.update_many([0.8, 1.0], [85.0, 105.0])
    >>> reg.n, round(reg.predict(0.5), 9)
    (5, 55.0)

    References
    ----------
    Welford (1962) co-moment update: δx = x − x̄_old; x̄ += δx / n; ȳ += (y − ȳ_old) / n;
    c_xy += δx · (y − ȳ_new). Chan, Golub & LeVeque (1979) merge:
    c_xy = c_a + c_b + δx · δy · n_a · n_b / n with δx = x̄_b − x̄_a, δy = ȳ_b − ȳ_a.
    """

    def __init__(self) -> None:
        self._n = 0
        self._mean_x = 0.0
        self._mean_y = 0.0
        self._m2_x = 0.0
        self._m2_y = 0.0
        self._c_xy = 0.0

    # --- state -------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self._n

    @property
    def mean_x(self) -> float:
        return self._mean_x

    @property
    def mean_y(self) -> float:
        return self._mean_y

    @property
    def m2_x(self) -> float:
        return self._m2_x

    @property
    def m2_y(self) -> float:
        return self._m2_y

    @property
    def c_xy(self) -> float:
        return self._c_xy

    # --- derived values --------------------------------------------------------------------
    @property
    def var_x(self) -> float:
        """Population variance of x (``np.var``)."""
        return self._m2_x / self._n if self._n > 1 else 0.0

    @property
    def var_y(self) -> float:
        """Population variance of y (``np.var``)."""
        return self._m2_y / self._n if self._n > 1 else 0.0

    @property
    def cov(self) -> float:
        """Population covariance of x and y (``np.cov(x, y, bias=True)[0, 1]``)."""
        return self._c_xy / self._n if self._n > 1 else 0.0

    @property
    def slope(self) -> float:
        return self._c_xy / self._m2_x if self._m2_x > 0 else math.nan

    @property
    def intercept(self) -> float:
        return self._mean_y - self.slope * self._mean_x

    @property
    def r2(self) -> float:
        if self._m2_x <= 0:
            return math.nan
        if self._m2_y <= 0:
            return 1.0
        return min(1.0, self._c_xy * self._c_xy / (self._m2_x * self._m2_y))

    def predict(self, x: float) -> float:
        return self.intercept + self.slope * float(x)

    # --- updates -----------------------------------------------------------------------------
    def update(self, x: float, y: float) -> None:
        x, y = _finite(x, "x"), _finite(y, "y")
        self._n += 1
        dx = x - self._mean_x
        dy = y - self._mean_y
        self._mean_x += dx / self._n
        self._mean_y += dy / self._n
        self._m2_x += dx * (x - self._mean_x)
        self._m2_y += dy * (y - self._mean_y)
        self._c_xy += dx * (y - self._mean_y)

    def update_many(self, xs: object, ys: object) -> None:
        """Fold in a batch exactly: its co-moments by numpy (vectorised), merged by Chan's formula."""
        xs, ys = _batch(xs, "xs"), _batch(ys, "ys")
        if xs.size != ys.size:
            raise ValueError(f"xs and ys must have the same length, got {xs.size} and {ys.size}")
        if xs.size == 0:
            return
        mean_x, mean_y = float(xs.mean()), float(ys.mean())
        dx, dy = xs - mean_x, ys - mean_y
        self._merge(xs.size, mean_x, mean_y, float(dx @ dx), float(dy @ dy), float(dx @ dy))

    def _merge(self, n_b: int, mean_x: float, mean_y: float, m2_x: float, m2_y: float, c_xy: float) -> None:
        if n_b == 0:
            return
        n_a = self._n
        n = n_a + n_b
        dx = mean_x - self._mean_x
        dy = mean_y - self._mean_y
        weight = n_a * n_b / n
        self._mean_x += dx * (n_b / n)
        self._mean_y += dy * (n_b / n)
        self._m2_x += m2_x + dx * dx * weight
        self._m2_y += m2_y + dy * dy * weight
        self._c_xy += c_xy + dx * dy * weight
        self._n = n

    def merge(self, other: OnlineRegression) -> None:
        """Absorb the regression of a disjoint part of the data (Chan et al.)."""
        self._merge(other._n, other._mean_x, other._mean_y, other._m2_x, other._m2_y, other._c_xy)

    def __iadd__(self, other: OnlineRegression) -> Self:
        self.merge(other)
        return self

    def __add__(self, other: OnlineRegression) -> OnlineRegression:
        result = type(self).from_state(self.to_state())
        result.merge(other)
        return result

    # --- persistence -------------------------------------------------------------------------
    _KEYS = ("n", "mean_x", "mean_y", "m2_x", "m2_y", "c_xy")

    def to_state(self) -> dict[str, float]:
        return {
            "n": float(self._n),
            "mean_x": self._mean_x,
            "mean_y": self._mean_y,
            "m2_x": self._m2_x,
            "m2_y": self._m2_y,
            "c_xy": self._c_xy,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, float]) -> OnlineRegression:
        values = _read_state(cls, state, cls._KEYS)
        reg = cls()
        reg._n = int(values["n"])
        reg._mean_x, reg._mean_y = values["mean_x"], values["mean_y"]
        reg._m2_x, reg._m2_y, reg._c_xy = values["m2_x"], values["m2_y"], values["c_xy"]
        return reg

    def __repr__(self) -> str:
        return f"OnlineRegression(n={self._n}, slope={self.slope!r}, intercept={self.intercept!r}, r2={self.r2!r})"
