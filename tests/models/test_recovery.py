"""Recovery-time prediction on hand-computed cases, and downtime learning."""

from __future__ import annotations

import math

import pytest

from daedalus.models.recovery import DowntimeEstimates, predict_recovery_time, recovery_times


def test_hand_computed_recovery_time():
    # backlog = checkpoint (10 s × 1,000/s) + downtime arrivals (30 s × 1,000/s) + lag 5,000 = 45,000 tuples.
    # spare = 2,500 − 1,000 = 1,500/s → 30 s after the downtime; recovery = 30 + 30 = 60 s.
    r = predict_recovery_time(2_500, 30, [1_000.0] * 900, lag=5_000, recent_workload=1_000, checkpoint_interval=10)
    assert r == 60.0


def test_downtime_is_counted_once_and_rising_forecast_slows_recovery():
    flat = predict_recovery_time(3_000, 20, [1_000.0] * 900, 0, 1_000, 10)
    # backlog 10k + 20k = 30k; spare 2,000/s → 15 s; total 35 s.
    assert flat == 35.0
    rising = predict_recovery_time(3_000, 20, [1_000.0] * 20 + [2_000.0] * 880, 0, 1_000, 10)
    # backlog 30k; spare 1,000/s → 30 s; total 50 s.
    assert rising == 50.0


def test_capacity_below_forecast_never_recovers():
    assert math.isinf(predict_recovery_time(900, 30, [1_000.0] * 900, 0, 1_000, 10))


def test_beyond_horizon_holds_the_last_forecast_value():
    # spare 10/s, backlog 10×100 + 5×100 = 1,500 → 150 s after a 5 s downtime, past a 60 s forecast.
    assert predict_recovery_time(110, 5, [100.0] * 60, 0, 100, 10) == 155.0


def test_per_scale_out_uses_direction_downtime():
    d = DowntimeEstimates(out_s=30, in_s=10)
    r = recovery_times([1_000, 2_000, 3_000], current=2, downtime=d, forecast=[500.0] * 900, lag=0,
                       recent_workload=500, checkpoint_interval=10)
    # i=1 (in, 10 s): backlog 5k + 5k = 10k, spare 500 → 20 s → 30 s
    # i=2 (restart, in 10 s): backlog 10k, spare 1,500 → 7 s → 17 s
    # i=3 (out, 30 s): backlog 5k + 15k = 20k, spare 2,500 → 8 s → 38 s
    assert r == (30.0, 17.0, 38.0)


def test_downtime_learning_by_smoothing():
    d = DowntimeEstimates()
    d.learn(scaled_out=True, observed_downtime_s=40)
    d.learn(scaled_out=False, observed_downtime_s=25)
    assert (d.out_s, d.in_s, d.observations) == (35.0, 20.0, 2)
    d.learn(scaled_out=True, observed_downtime_s=float("nan"))
    assert d.out_s == 35.0
    assert DowntimeEstimates.from_state(d.to_state()) == d


@pytest.mark.parametrize("lag", [0.0, 1e6])
def test_lag_adds_to_backlog(lag):
    r = predict_recovery_time(2_000, 10, [1_000.0] * 900, lag, 1_000, 10, max_recovery_s=10_000)
    assert r == 10 + math.ceil((20_000 + lag) / 1_000)
