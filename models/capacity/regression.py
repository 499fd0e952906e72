"""Online simple linear regression: the capacity model's throughput-on-CPU line per worker, one pass, exact.

It holds a ``RunningVariance`` of x and one of y (``daedalus.models.stats``) and adds their co-moment; merged
by Chan's formulas like them, persisted as plain numbers like them.

References
----------
Welford (1962); Chan, Golub & LeVeque (1979); https://en.wikipedia.org/wiki/Algorithms_for_calculating_variance
(online covariance).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Self

from daedalus.models.stats import RunningVariance, combined, finite, finite_batch, read_moments

__all__ = ["OnlineRegression"]


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

    _KEYS = ("n", "mean_x", "mean_y", "m2_x", "m2_y", "c_xy")

    def __init__(self) -> None:
        self._x = RunningVariance()
        self._y = RunningVariance()
        self._c_xy = 0.0

    # --- state -------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self._x.n

    @property
    def mean_x(self) -> float:
        return self._x.mean

    @property
    def mean_y(self) -> float:
        return self._y.mean

    @property
    def m2_x(self) -> float:
        return self._x.m2

    @property
    def m2_y(self) -> float:
        return self._y.m2

    @property
    def c_xy(self) -> float:
        return self._c_xy

    # --- derived values --------------------------------------------------------------------
    @property
    def var_x(self) -> float:
        """Population variance of x (``np.var``)."""
        return self._x.variance

    @property
    def var_y(self) -> float:
        """Population variance of y (``np.var``)."""
        return self._y.variance

    @property
    def cov(self) -> float:
        """Population covariance of x and y (``np.cov(x, y, bias=True)[0, 1]``)."""
        return self._c_xy / self.n if self.n > 1 else 0.0

    @property
    def slope(self) -> float:
        return self._c_xy / self.m2_x if self.m2_x > 0 else math.nan

    @property
    def intercept(self) -> float:
        return self.mean_y - self.slope * self.mean_x

    @property
    def r2(self) -> float:
        if self.m2_x <= 0:
            return math.nan
        if self.m2_y <= 0:
            return 1.0
        return min(1.0, self._c_xy * self._c_xy / (self.m2_x * self.m2_y))

    def predict(self, x: float) -> float:
        return self.intercept + self.slope * float(x)

    # --- updates -----------------------------------------------------------------------------
    def update(self, x: float, y: float) -> None:
        x, y = finite(x, "x"), finite(y, "y")
        dx = x - self.mean_x
        self._x.update(x)
        self._y.update(y)
        self._c_xy += dx * (y - self.mean_y)

    def update_many(self, xs: object, ys: object) -> None:
        """Fold in a batch exactly: its co-moments by numpy (vectorised), merged by Chan's formula."""
        xs, ys = finite_batch(xs, "xs"), finite_batch(ys, "ys")
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
        n_a = self.n
        dx = mean_x - self.mean_x
        dy = mean_y - self.mean_y
        self._x.merge_moments(n_b, mean_x, m2_x)
        self._y.merge_moments(n_b, mean_y, m2_y)
        self._c_xy += c_xy + dx * dy * (n_a * n_b / self.n)

    def merge(self, other: OnlineRegression) -> None:
        """Absorb the regression of a disjoint part of the data (Chan et al.)."""
        self._merge(other.n, other.mean_x, other.mean_y, other.m2_x, other.m2_y, other._c_xy)

    def __iadd__(self, other: OnlineRegression) -> Self:
        self.merge(other)
        return self

    def __add__(self, other: OnlineRegression) -> OnlineRegression:
        return combined(self, other)

    # --- persistence -------------------------------------------------------------------------
    def to_state(self) -> dict[str, float]:
        return {
            "n": float(self.n),
            "mean_x": self.mean_x,
            "mean_y": self.mean_y,
            "m2_x": self.m2_x,
            "m2_y": self.m2_y,
            "c_xy": self._c_xy,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, float]) -> OnlineRegression:
        values = read_moments(cls, state, cls._KEYS)
        reg = cls()
        reg._x = RunningVariance.from_state({"n": values["n"], "mean": values["mean_x"], "m2": values["m2_x"]})
        reg._y = RunningVariance.from_state({"n": values["n"], "mean": values["mean_y"], "m2": values["m2_y"]})
        reg._c_xy = values["c_xy"]
        return reg

    def __repr__(self) -> str:
        return f"OnlineRegression(n={self.n}, slope={self.slope!r}, intercept={self.intercept!r}, r2={self.r2!r})"
