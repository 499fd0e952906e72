"""The Kubernetes HPA baseline on hand-computed cases: desired = ceil(n · cpu / target), the 0.1 tolerance band,
the 300 s scale-down stabilization and the default scale-up limit."""

from __future__ import annotations

import pytest

from daedalus.models.policies.hpa import HPA, utilization


def test_desired_is_ceil_of_current_times_ratio(obs):
    hpa = HPA(0.8, max_scaleout=12)
    # 4 workers at 90 % CPU: ratio 1.125, desired ceil(4.5) = 5.
    assert hpa.decide(obs([0.9] * 4), current=4, now=60) == 5


def test_utilization_is_the_mean_over_workers(obs):
    hpa = HPA(0.8, max_scaleout=12)
    # CPU 1.0, 1.0, 0.9, 0.7 → mean 0.9, ratio 1.125 → ceil(4.5) = 5, although two workers are saturated.
    assert utilization(obs([1.0, 1.0, 0.9, 0.7])) == pytest.approx(0.9)
    assert hpa.decide(obs([1.0, 1.0, 0.9, 0.7]), current=4, now=60) == 5


@pytest.mark.parametrize(("cpu", "expected"), [(0.85, 4), (0.72, 4), (0.88, 4), (0.89, 5), (0.71, 4)])
def test_tolerance_band(obs, cpu, expected):
    # |cpu / 0.8 − 1| ≤ 0.1 ⇔ 0.72 ≤ cpu ≤ 0.88: no change. 0.89 → ratio 1.1125 → ceil(4.45) = 5.
    # 0.71 → ratio 0.8875 → ceil(3.55) = 4: a "scale-in" to the current count.
    assert HPA(0.8, max_scaleout=12).decide(obs([cpu] * 4), current=4, now=60) == expected


def test_scale_down_waits_for_the_stabilization_window(obs):
    hpa = HPA(0.8, max_scaleout=12)
    low = obs([0.4] * 10)  # ratio 0.5 → desired 5
    # The first decision counts the current 10 as recommended at t = 60 s; it leaves the window at 360 s.
    decisions = [hpa.decide(low, current=10, now=t) for t in (60, 120, 180, 240, 300)]
    assert decisions == [10] * 5
    assert hpa.decide(low, current=10, now=360) == 5


def test_scale_down_goes_to_the_highest_recent_recommendation(obs):
    hpa = HPA(0.8, max_scaleout=12)
    # current 10: cpu 0.4 → ratio 0.5 → 5; cpu 0.64 → 8.
    assert hpa.decide(obs([0.4] * 10), current=10, now=0) == 10  # window: 10 and 5 at t = 0
    assert hpa.decide(obs([0.64] * 10), current=10, now=120) == 10  # + 8
    assert hpa.decide(obs([0.4] * 10), current=10, now=240) == 10  # + 5
    # at t = 300 the two t = 0 entries leave the window (kept only if newer than now − 300): 8, 5, 5 → 8
    assert hpa.decide(obs([0.4] * 10), current=10, now=300) == 8
    # current 8 at 0.4: desired 4; window 5 (240), 5 (300), 4 (420) → 5
    assert hpa.decide(obs([0.4] * 8), current=8, now=420) == 5


def test_scale_up_is_immediate_and_limited(obs):
    hpa = HPA(0.25, max_scaleout=12)
    # current 2 at full CPU: ratio 4 → desired 8; limit max(2 × 2, 2 + 4) = 6.
    assert hpa.decide(obs([1.0, 1.0]), current=2, now=60) == 6
    # and never beyond the maximum scale-out
    assert HPA(0.5, max_scaleout=12).decide(obs([1.0] * 10), current=10, now=60) == 12


def test_downtime_seconds_are_left_out(obs):
    hpa = HPA(0.8, max_scaleout=12)
    # 30 s stopped (CPU 0), then 30 s at 0.9: utilization 0.9, not 0.45.
    o = obs([0.9] * 4, down_s=30)
    assert utilization(o) == pytest.approx(0.9)
    assert hpa.decide(o, current=4, now=60) == 5
    # a minute spent entirely in a rescale gives no utilization: keep the count
    assert hpa.decide(obs([0.9] * 4, down_s=60), current=4, now=120) == 4


def test_name_and_validation():
    assert HPA(0.85, 12).name == "hpa-85"
    with pytest.raises(ValueError, match="target_utilization"):
        HPA(0.0, 12)
