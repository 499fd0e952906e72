"""Small online statistics, in the style of river's ``stats`` module.

One statistic is one small class: parameters in ``__init__``, ``update`` returning ``None``, read-only
properties for the values, state in plain numbers (no stored samples). Two statistics over disjoint
parts of a stream combine exactly with ``merge`` / ``+=`` (Chan's parallel formulas), so batches,
loops and Spark partitions fold together without re-reading data. ``to_state`` / ``from_state``
persist a statistic as a ``dict[str, float]``, without pickle.

Non-finite inputs are rejected with a ``ValueError``: a single NaN folded into a running sum would
poison the statistic for good. Callers filter missing metrics before updating. Statistics compose by holding:
``RunningVariance`` holds a ``RunningMean``, ``daedalus.models.capacity.regression.OnlineRegression`` two
``RunningVariance``.

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
from typing import Any, Protocol, Self, TypeVar

import numpy as np

from daedalus.models.errors import KnowledgeError

__all__ = ["RunningMean", "RunningVariance", "combined", "finite", "finite_batch", "number", "numbers", "read_moments",
           "require_keys"]


# Checked numbers: the inputs of an online statistic's update, and the stored state it is rebuilt from. An update
# rejects NaN and inf (``ValueError``): one folded into a running sum would poison it for good. Every model persists
# as a ``dict[str, float]`` (``to_state``) and is rebuilt by ``from_state``; a stored version that lacks a key or
# holds a non-number fails with a ``KnowledgeError`` naming the class and the key, never with a bare KeyError deep
# inside a loop. One implementation, shared by the statistics and the anomaly models.


def require_keys(cls: type, state: Mapping[str, Any], keys: tuple[str, ...]) -> None:
    """Raise a KnowledgeError naming every key of `keys` that `state` lacks."""
    missing = [key for key in keys if key not in state]
    if missing:
        raise KnowledgeError(f"{cls.__name__} state lacks {', '.join(missing)}; got keys {sorted(state)}")


def number(cls: type, state: Mapping[str, Any], key: str) -> float:
    """`state[key]` as a finite float, else a KnowledgeError.

    >>> number(dict, {"n": "3"}, "n")
    3.0
    """
    try:
        value = float(state[key])
    except (TypeError, ValueError):
        raise KnowledgeError(f"{cls.__name__} state: {key} is not a number ({state[key]!r})") from None
    if not math.isfinite(value):
        raise KnowledgeError(f"{cls.__name__} state: {key} is not finite ({value!r})")
    return value


def numbers(cls: type, state: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, float]:
    """Every key of `keys` present and a finite number: their values."""
    require_keys(cls, state, keys)
    return {key: number(cls, state, key) for key in keys}


def finite(value: float, what: str) -> float:
    """An update's input as a float; NaN or inf is a ValueError (one would poison a running sum for good)."""
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}; drop missing samples first")
    return value


def finite_batch(values: object, what: str) -> np.ndarray:
    """A batch as a flat float array, all finite, else a ValueError."""
    array = np.asarray(values, dtype=float).ravel()
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what} must all be finite numbers; drop missing samples (NaN, inf) first")
    return array


class _Mergeable(Protocol):
    def merge(self, other: Self) -> None: ...
    def to_state(self) -> dict[str, float]: ...
    @classmethod
    def from_state(cls, state: Mapping[str, float]) -> Self: ...


M = TypeVar("M", bound=_Mergeable)


def combined(a: M, b: M) -> M:
    """``a + b``: a copy of ``a`` that absorbed ``b`` (both left as they are)."""
    result = type(a).from_state(a.to_state())
    result.merge(b)
    return result


def read_moments(cls: type, state: Mapping[str, float], keys: tuple[str, ...]) -> dict[str, float]:
    """A statistic's stored moments: every key a finite number, ``n`` a whole number ≥ 0, each ``m2…`` ≥ 0."""
    values = numbers(cls, state, keys)
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
        x = finite(x, "x")
        self._n += 1
        self._mean += (x - self._mean) / self._n

    def update_many(self, xs: object) -> None:
        """Fold in a batch exactly: the batch's mean by numpy, merged by Chan's formula."""
        xs = finite_batch(xs, "xs")
        if xs.size:
            self.merge_moments(xs.size, float(xs.mean()))

    def merge_moments(self, n_b: int, mean_b: float) -> None:
        """Absorb a disjoint part of the stream given by its count and mean (Chan et al.)."""
        if n_b == 0:
            return
        n = self._n + n_b
        self._mean += (mean_b - self._mean) * (n_b / n)
        self._n = n

    def merge(self, other: RunningMean) -> None:
        """Absorb the statistic of a disjoint part of the stream (Chan et al.)."""
        self.merge_moments(other._n, other._mean)

    def __iadd__(self, other: RunningMean) -> Self:
        self.merge(other)
        return self

    def __add__(self, other: RunningMean) -> RunningMean:
        return combined(self, other)

    def to_state(self) -> dict[str, float]:
        return {"n": float(self._n), "mean": self._mean}

    @classmethod
    def from_state(cls, state: Mapping[str, float]) -> RunningMean:
        values = read_moments(cls, state, ("n", "mean"))
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
        self._mean = RunningMean()  # the mean is a RunningMean's; this class adds the squared deviations
        self._m2 = 0.0

    @property
    def n(self) -> int:
        return self._mean.n

    @property
    def mean(self) -> float:
        return self._mean.mean

    @property
    def m2(self) -> float:
        return self._m2

    @property
    def variance(self) -> float:
        return self._m2 / self.n if self.n > 1 else 0.0

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)

    def get(self) -> float:
        return self.variance

    def update(self, x: float) -> None:
        x = finite(x, "x")
        before = self._mean.mean
        self._mean.update(x)
        self._m2 += (x - before) * (x - self._mean.mean)

    def update_many(self, xs: object) -> None:
        """Fold in a batch exactly: the batch's moments by numpy, merged by Chan's formula."""
        xs = finite_batch(xs, "xs")
        if xs.size:
            mean = float(xs.mean())
            self.merge_moments(xs.size, mean, float(np.sum((xs - mean) ** 2)))

    def merge_moments(self, n_b: int, mean_b: float, m2_b: float) -> None:
        """Absorb a disjoint part of the stream given by its count, mean and m2 (Chan et al.)."""
        if n_b == 0:
            return
        n_a = self.n
        delta = mean_b - self.mean
        self._mean.merge_moments(n_b, mean_b)
        self._m2 += m2_b + delta * delta * (n_a * n_b / self.n)

    def merge(self, other: RunningVariance) -> None:
        """Absorb the statistic of a disjoint part of the stream (Chan et al.)."""
        self.merge_moments(other.n, other.mean, other.m2)

    def __iadd__(self, other: RunningVariance) -> Self:
        self.merge(other)
        return self

    def __add__(self, other: RunningVariance) -> RunningVariance:
        return combined(self, other)

    def to_state(self) -> dict[str, float]:
        return {"n": float(self.n), "mean": self.mean, "m2": self._m2}

    @classmethod
    def from_state(cls, state: Mapping[str, float]) -> RunningVariance:
        values = read_moments(cls, state, ("n", "mean", "m2"))
        stat = cls()
        stat._mean = RunningMean.from_state(values)
        stat._m2 = values["m2"]
        return stat

    def __repr__(self) -> str:
        return f"RunningVariance(n={self.n}, mean={self.mean!r}, variance={self.variance!r})"
