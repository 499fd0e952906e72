"""Online statistics against numpy's batch answers (known answers and properties)."""

from __future__ import annotations

import doctest
import json

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from daedalus.models import stats
from daedalus.models.capacity import OnlineRegression, regression
from daedalus.models.capacity import model as capacity
from daedalus.models.errors import KnowledgeError
from daedalus.models.forecast import fallback as forecast_fallback
from daedalus.models.forecast import score as wape
from daedalus.models.forecast import steps
from daedalus.models.forecast import window as forecast_window
from daedalus.models.recovery import anomaly
from daedalus.models.recovery import detector as anomaly_detector
from daedalus.models.stats import RunningMean, RunningVariance

RTOL = 1e-9


def _data(n: int = 500, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """CPU–throughput-like pairs: y ≈ 9,000 + 110,000 · x with noise."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.1, 0.95, n)
    y = 9_000 + 110_000 * x + rng.normal(0, 1_500, n)
    return x, y


def _assert_matches_batch(reg: OnlineRegression, x: np.ndarray, y: np.ndarray, rtol: float = RTOL) -> None:
    slope, intercept = np.polyfit(x, y, 1)
    cov = np.cov(x, y, bias=True)
    assert reg.n == len(x)
    assert reg.mean_x == pytest.approx(np.mean(x), rel=rtol)
    assert reg.mean_y == pytest.approx(np.mean(y), rel=rtol)
    assert reg.var_x == pytest.approx(cov[0, 0], rel=rtol)
    assert reg.var_y == pytest.approx(cov[1, 1], rel=rtol)
    assert reg.cov == pytest.approx(cov[0, 1], rel=rtol)
    assert reg.slope == pytest.approx(slope, rel=rtol)
    assert reg.intercept == pytest.approx(intercept, rel=rtol)
    assert reg.r2 == pytest.approx(np.corrcoef(x, y)[0, 1] ** 2, rel=rtol)
    assert reg.predict(0.5) == pytest.approx(intercept + slope * 0.5, rel=rtol)


def test_doctests() -> None:
    for module in (stats, regression, steps, capacity, anomaly_detector, anomaly, wape, forecast_window,
                   forecast_fallback):
        result = doctest.testmod(module, raise_on_error=False)
        assert result.attempted > 0, module.__name__
        assert result.failed == 0, module.__name__


# --- RunningMean / RunningVariance --------------------------------------------------------------


def test_running_mean_every_prefix_equals_numpy() -> None:
    x, _ = _data(200)
    mean = RunningMean()
    for i, value in enumerate(x, start=1):
        mean.update(value)
        assert mean.n == i
        assert mean.mean == pytest.approx(np.mean(x[:i]), rel=RTOL)
    assert mean.get() == mean.mean


def test_running_mean_batches_and_merge_are_exact() -> None:
    x, _ = _data(301)
    batched = RunningMean()
    for chunk in np.split(x, [1, 17, 18, 150]):
        batched.update_many(chunk)
    a, b = RunningMean(), RunningMean()
    a.update_many(x[:120])
    b.update_many(x[120:])
    for stat in (batched, a + b, b + a):
        assert stat.n == len(x)
        assert stat.mean == pytest.approx(np.mean(x), rel=RTOL)


def test_running_variance_every_prefix_equals_np_var() -> None:
    _, y = _data(200)
    var = RunningVariance()
    for i, value in enumerate(y, start=1):
        var.update(value)
        assert var.mean == pytest.approx(np.mean(y[:i]), rel=RTOL)
        assert var.variance == pytest.approx(np.var(y[:i]), rel=RTOL, abs=1e-12)
    assert var.std == pytest.approx(np.std(y), rel=RTOL)
    assert var.m2 == pytest.approx(np.var(y) * len(y), rel=RTOL)


def test_running_variance_merge_is_exact() -> None:
    _, y = _data(333)
    parts = np.split(y, [5, 6, 100, 250])
    stats = []
    for part in parts:
        stat = RunningVariance()
        for value in part:
            stat.update(value)
        stats.append(stat)
    total = RunningVariance()
    for stat in stats:
        total += stat
    reverse = RunningVariance()
    for stat in reversed(stats):
        reverse.merge(stat)
    batched = RunningVariance()
    batched.update_many(y)
    for stat in (total, reverse, batched):
        assert stat.n == len(y)
        assert stat.mean == pytest.approx(np.mean(y), rel=RTOL)
        assert stat.variance == pytest.approx(np.var(y), rel=RTOL)


def test_merging_an_empty_statistic_changes_nothing() -> None:
    var = RunningVariance()
    var.update_many([1.0, 2.0, 4.0])
    before = var.to_state()
    var += RunningVariance()
    assert var.to_state() == before
    empty = RunningVariance()
    empty.merge(var)
    assert empty.to_state() == before


def test_variance_before_two_values_is_zero() -> None:
    var = RunningVariance()
    assert (var.n, var.mean, var.variance, var.std) == (0, 0.0, 0.0, 0.0)
    var.update(5.0)
    assert (var.mean, var.variance) == (5.0, 0.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_values_are_rejected_without_poisoning_the_state(bad: float) -> None:
    var, reg, mean = RunningVariance(), OnlineRegression(), RunningMean()
    var.update(1.0)
    reg.update(1.0, 2.0)
    with pytest.raises(ValueError, match="finite"):
        var.update(bad)
    with pytest.raises(ValueError, match="finite"):
        mean.update_many([1.0, bad])
    with pytest.raises(ValueError, match="finite"):
        reg.update(0.5, bad)
    with pytest.raises(ValueError, match="finite"):
        reg.update_many([0.5, bad], [1.0, 2.0])
    assert var.to_state() == {"n": 1.0, "mean": 1.0, "m2": 0.0}
    assert reg.n == 1 and mean.n == 0


def test_state_round_trips_through_json() -> None:
    x, y = _data(50)
    mean, var, reg = RunningMean(), RunningVariance(), OnlineRegression()
    mean.update_many(x)
    var.update_many(y)
    reg.update_many(x, y)
    for stat in (mean, var, reg):
        state = stat.to_state()
        assert all(isinstance(v, float) for v in state.values())
        restored = type(stat).from_state(json.loads(json.dumps(state)))
        assert restored.to_state() == state
    # the restored regression keeps learning exactly
    restored = OnlineRegression.from_state(reg.to_state())
    x2, y2 = _data(30, seed=8)
    restored.update_many(x2, y2)
    _assert_matches_batch(restored, np.concatenate([x, x2]), np.concatenate([y, y2]))


@pytest.mark.parametrize(
    ("cls", "state", "message"),
    [
        (RunningMean, {"n": 3.0}, "lacks mean"),
        (RunningVariance, {"n": 2.5, "mean": 0.0, "m2": 1.0}, "whole number"),
        (RunningVariance, {"n": 2.0, "mean": 0.0, "m2": -1.0}, "m2 must be"),
        (OnlineRegression, {"n": 2.0, "mean_x": "a", "mean_y": 0, "m2_x": 0, "m2_y": 0, "c_xy": 0}, "number"),
        (OnlineRegression, {"n": 2.0, "mean_x": float("nan"), "mean_y": 0, "m2_x": 0, "m2_y": 0, "c_xy": 0}, "finite"),
    ],
)
def test_corrupt_state_is_a_knowledge_error(cls: type, state: dict, message: str) -> None:
    with pytest.raises(KnowledgeError, match=message):
        cls.from_state(state)


# --- OnlineRegression: known answers ------------------------------------------------------------


def test_regression_single_updates_equal_batch_least_squares() -> None:
    x, y = _data()
    reg = OnlineRegression()
    for xi, yi in zip(x, y, strict=True):
        reg.update(xi, yi)
    _assert_matches_batch(reg, x, y)


def test_regression_update_many_in_uneven_batches_equals_batch() -> None:
    x, y = _data()
    reg = OnlineRegression()
    cuts = [1, 2, 9, 10, 73, 300, 301, 499]
    for xs, ys in zip(np.split(x, cuts), np.split(y, cuts), strict=True):
        reg.update_many(xs, ys)  # includes batches of one sample
    reg.update_many([], [])
    _assert_matches_batch(reg, x, y)


def test_regression_merge_of_two_halves_equals_batch() -> None:
    x, y = _data()
    first, second = OnlineRegression(), OnlineRegression()
    for xi, yi in zip(x[:237], y[:237], strict=True):
        first.update(xi, yi)
    second.update_many(x[237:], y[237:])
    _assert_matches_batch(first + second, x, y)
    _assert_matches_batch(second + first, x, y)
    first += second
    _assert_matches_batch(first, x, y)


def test_regression_exact_line_and_degenerate_cases() -> None:
    reg = OnlineRegression()
    assert np.isnan(reg.slope) and np.isnan(reg.r2) and reg.var_x == 0.0
    reg.update(0.5, 10.0)
    reg.update(0.5, 12.0)  # no spread in x: slope not determined
    assert np.isnan(reg.slope) and np.isnan(reg.intercept) and np.isnan(reg.predict(1.0))
    flat = OnlineRegression()
    flat.update_many([0.1, 0.2, 0.3], [7.0, 7.0, 7.0])
    assert flat.slope == 0.0 and flat.intercept == pytest.approx(7.0) and flat.r2 == 1.0
    with pytest.raises(ValueError, match="same length"):
        flat.update_many([0.1, 0.2], [1.0])


# --- properties ---------------------------------------------------------------------------------

_value = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_infinity=False, allow_subnormal=False)
_pairs = st.lists(st.tuples(_value, _value), min_size=2, max_size=80)


def _well_spread(x: np.ndarray) -> bool:
    """At least two distinct x, far enough apart for the least-squares problem to be well posed."""
    return len(set(x.tolist())) >= 2 and np.std(x) > 1e-3 * (1.0 + np.max(np.abs(x)))


@settings(max_examples=300, deadline=None)
@given(_pairs, st.data())
def test_online_regression_equals_batch_for_any_finite_data(pairs: list, data: st.DataObject) -> None:
    x, y = (np.array(v, dtype=float) for v in zip(*pairs, strict=True))
    assume(_well_spread(x))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(x)), max_size=4), label="cuts"))
    single, batched = OnlineRegression(), OnlineRegression()
    for xi, yi in zip(x, y, strict=True):
        single.update(xi, yi)
    for xs, ys in zip(np.split(x, cuts), np.split(y, cuts), strict=True):
        batched.update_many(xs, ys)
    scale = 1.0 + max(np.max(np.abs(x)), np.max(np.abs(y)))
    slope, intercept = np.polyfit(x, y, 1)
    for reg in (single, batched):
        assert reg.n == len(x)
        assert reg.mean_x == pytest.approx(np.mean(x), rel=1e-9, abs=1e-9 * scale)
        assert reg.mean_y == pytest.approx(np.mean(y), rel=1e-9, abs=1e-9 * scale)
        assert reg.cov == pytest.approx(np.cov(x, y, bias=True)[0, 1], rel=1e-9, abs=1e-9 * scale**2)
        assert reg.var_x == pytest.approx(np.var(x), rel=1e-9, abs=1e-9 * scale**2)
        slope_scale = 1.0 + np.std(y) / np.std(x)
        assert reg.slope == pytest.approx(slope, rel=1e-7, abs=1e-7 * slope_scale)
        assert reg.intercept == pytest.approx(intercept, rel=1e-7, abs=1e-7 * slope_scale * scale)


@settings(max_examples=300, deadline=None)
@given(_pairs, _pairs, _pairs)
def test_merge_is_order_independent(a: list, b: list, c: list) -> None:
    regs = []
    for pairs in (a, b, c):
        reg = OnlineRegression()
        reg.update_many(*zip(*pairs, strict=True))
        regs.append(reg)
    ra, rb, rc = regs
    orders = [(ra + rb) + rc, ra + (rb + rc), (rc + ra) + rb, rb + (rc + ra)]
    everything = np.array(a + b + c, dtype=float)
    scale = 1.0 + np.max(np.abs(everything))
    reference = orders[0].to_state()
    for merged in orders[1:]:
        state = merged.to_state()
        assert state["n"] == reference["n"] == len(everything)
        for key in ("mean_x", "mean_y"):
            assert state[key] == pytest.approx(reference[key], rel=1e-9, abs=1e-9 * scale)
        for key in ("m2_x", "m2_y", "c_xy"):
            assert state[key] == pytest.approx(reference[key], rel=1e-9, abs=1e-9 * scale**2 * len(everything))
    assert orders[0].var_x == pytest.approx(np.var(everything[:, 0]), rel=1e-9, abs=1e-9 * scale**2)
    assert orders[0].cov == pytest.approx(
        np.cov(everything[:, 0], everything[:, 1], bias=True)[0, 1], rel=1e-9, abs=1e-9 * scale**2
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(_value, min_size=1, max_size=80), st.lists(_value, min_size=0, max_size=80))
def test_running_variance_merge_equals_np_var(a: list, b: list) -> None:
    left, right = RunningVariance(), RunningVariance()
    for value in a:
        left.update(value)
    right.update_many(b)
    scale = 1.0 + max(abs(v) for v in a + b)
    merged = left + right
    assert merged.n == len(a) + len(b)
    assert merged.mean == pytest.approx(np.mean(a + b), rel=1e-9, abs=1e-9 * scale)
    assert merged.variance == pytest.approx(np.var(a + b), rel=1e-9, abs=1e-9 * scale**2)
    assert (right + left).variance == pytest.approx(merged.variance, rel=1e-9, abs=1e-9 * scale**2)
