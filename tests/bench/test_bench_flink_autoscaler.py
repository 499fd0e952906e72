"""The Flink operator's autoscaler (release-1.15.0 defaults) on hand-computed cases: the target-capacity formula
with its restart and catch-up terms, the 0.7 ± 0.3 band, the 0.6 maximum scale-down factor, the key-group
alignment and the one-hour delayed scale-down that keeps the hour's highest recommendation."""

from __future__ import annotations

import math

import pytest

from daedalus.models.policies.flink_autoscaler import FlinkAutoscaler, align

IDLE = 0.085


def cpu_at(busy: float) -> float:
    return IDLE + (1 - IDLE) * busy


def test_target_capacity_formula():
    fa = FlinkAutoscaler(12)
    # lag 18,000 / 1,800 s = 10; restart 1,000 × 300 / 1,800 = 166.67; 1,000 / 0.7 = 1,428.57 → round(1,605.24)
    assert fa.capacity(1_000, 18_000, 0.7, with_restart=True) == 1_605
    # the scale-up threshold: no restart term, utilisation 1.0 → 10 + 1,000
    assert fa.capacity(1_000, 18_000, 1.0, with_restart=False) == 1_010
    assert fa.capacity(1_000, 0, 0.0, with_restart=True) == math.inf  # utilisation 0: never a scale-down


@pytest.mark.parametrize(
    ("current", "rate", "true_rate", "lag", "expected"),
    [
        # thresholds 3,000 (up) and round(500 + 7,500) = 8,000 (down): 4,000 lies inside → no rescale, although
        # the target 4,786 / 4,000 = 1.197 → ceil(4.79) = 5 → the next divisor of 128 is 8
        (4, 3_000, 4_000, 0, (8, False)),
        # 3,500 on 3,000 > the scale-up threshold: factor round(583.3 + 5,000) / 3,000 = 1.861 → ceil(7.44) = 8
        (4, 3_500, 3_000, 0, (8, True)),
        # a backlog of 600 s of the processed rate (> 300 s): band [0, 1], so 10,000 on 1,000 stays inside
        (10, 1_000, 10_000, 600_000, (4, False)),
        # no backlog: 10,000 above round(166.7 + 2,500) = 2,667 → outside; factor 1,595 / 10,000 = 0.16 is capped
        # at 1 − 0.6 = 0.4 → ceil(4.0) = 4 (a divisor of 128)
        (10, 1_000, 10_000, 0, (4, True)),
    ],
)
def test_recommendation_and_band(current, rate, true_rate, lag, expected):
    processed = rate
    assert FlinkAutoscaler(12).recommend(current, rate, true_rate, lag, processed) == expected


def test_max_scale_down_factor():
    # factor 0.1595 from 10 workers: capped at 0.4 → 4; with a scale-down factor of 0.9 (cap 0.1) → ceil(1.595) = 2
    assert FlinkAutoscaler(12, key_groups=None).recommend(10, 1_000, 10_000, 0, 1_000) == (4, True)
    loose = FlinkAutoscaler(12, key_groups=None, max_scale_down_factor=0.9)
    assert loose.recommend(10, 1_000, 10_000, 0, 1_000) == (2, True)


@pytest.mark.parametrize(
    ("new", "current", "expected"),
    [
        (5, 4, 8),  # up to the next divisor of 128
        (9, 4, 8),  # none of 9…12 divides 128: down to 8, where a worker's share (16) first grows past 128 // 9
        (10, 12, 10),  # down, no divisor in 10…12: 128 // 9 = 14 > 12, 9 does not divide → 10
        (3, 4, 4),  # a scale-down whose next divisor is the current parallelism is blocked
        (6, 6, 6),
    ],
)
def test_key_group_alignment(new, current, expected):
    assert align(new, current, 128, 12) == expected


def test_delayed_scale_down_keeps_the_hours_highest_recommendation():
    fa = FlinkAutoscaler(12)
    assert fa.delay(0, 6, 10, True) == (10, False)  # first recommendation: delayed by an hour
    assert fa.delay(1_800, 4, 10, True) == (10, False)
    # an hour after the first: the highest recommended in [0, 3,600] is 6 (the 4 was evicted by the later 5)
    assert fa.delay(3_600, 5, 10, True) == (6, True)
    assert fa.delay(7_300, 5, 10, False) == (5, False)  # 6 was recommended before 7,300 − 3,600: it left the window


def test_a_recommendation_at_or_above_current_cancels_the_delay():
    fa = FlinkAutoscaler(12)
    fa.delay(0, 6, 10, True)
    assert fa.delay(1_800, 10, 10, False) == (10, False)
    assert fa.delay(3_600, 6, 10, True) == (10, False)  # a new delay starts here
    assert fa.delay(7_200, 6, 10, True) == (6, True)


def test_decide_waits_for_a_full_window_after_stabilisation_then_an_hour(obs):
    fa = FlinkAutoscaler(12)
    # 4 workers at busy 0.25, 25,000/s each: true rate 100,000 / 0.25 = 400,000; workload 100,000 → outside the
    # band (above round(16,667 + 250,000) = 266,667), factor round(16,667 + 142,857) / 400,000 = 0.40 → 2.
    # Samples count from uptime 301 (after the 5-minute stabilisation); the 15-minute window is full at 1,200,
    # the first scale-down recommendation, which is applied an hour later, at 4,800.
    for end in range(360, 4_800, 60):
        sample = obs([cpu_at(0.25)] * 4, [25_000] * 4, workload=100_000, end=end, uptime_start=end - 59)
        assert fa.decide(sample, current=4, now=end) == 4, end
    sample = obs([cpu_at(0.25)] * 4, [25_000] * 4, workload=100_000, end=4_800, uptime_start=4_741)
    assert fa.decide(sample, current=4, now=4_800) == 2
    assert not fa.window_full  # the rescale restarts the job: the window starts again
