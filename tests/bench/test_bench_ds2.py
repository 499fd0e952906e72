"""The DS2 / Flink-autoscaler baseline on hand-computed cases: true processing rate from the busy fraction (MAX
over workers), target utilization 0.7, the ±0.3 band, the backlog catch-up and the stabilization interval."""

from __future__ import annotations

import numpy as np
import pytest

from daedalus.models.policies.ds2 import DS2

IDLE = 0.085


def cpu_at(busy: float) -> float:
    """The simulator's CPU for a worker busy this share of the time."""
    return IDLE + (1 - IDLE) * busy


def test_busy_fraction_is_cpu_above_idle():
    ds2 = DS2(12)
    assert ds2.busy_fraction(np.array([IDLE, cpu_at(0.5), 1.0, 0.0])) == pytest.approx([0.0, 0.5, 1.0, 0.0])


@pytest.mark.parametrize(
    ("current", "rate", "true_rate", "lag", "expected"),
    [
        # utilization 100k / 400k = 0.25 < 0.4 → ceil(100k / (100k per worker × 0.7)) = ceil(1.43) = 2
        (4, 100_000, 400_000, 0, 2),
        # utilization 0.75 inside [0.4, 1.0] → keep
        (4, 300_000, 400_000, 0, 4),
        # 380k + 12M / 600 s = 400k: utilization exactly 1.0, still inside → keep
        (4, 380_000, 400_000, 12_000_000, 4),
        # 380k + 24M / 600 s = 420k: utilization 1.05 → ceil(420k / 70k) = 6
        (4, 380_000, 400_000, 24_000_000, 6),
        # backlog of 600 s of input (> 300 s): never scale in; 100k + 60M / 600 = 200k on 400k: utilization 0.5,
        # which would be a scale-in without the backlog → keep
        (4, 100_000, 400_000, 60_000_000, 4),
        # the same backlog on a true rate of 150k (37.5k per worker): ceil(200k / 26.25k) = ceil(7.62) = 8
        (4, 100_000, 150_000, 60_000_000, 8),
        # capped at the maximum scale-out: ceil(1M / 70k) = 15 → 12
        (4, 1_000_000, 400_000, 0, 12),
    ],
)
def test_target(current, rate, true_rate, lag, expected):
    assert DS2(12).target(current, rate, true_rate, lag) == expected


def test_decide_from_observations(obs):
    ds2 = DS2(12)
    # 4 workers, each 25k tuples/s at busy 0.25: true rate 100k / 0.25 = 400k; workload 100k → 2 workers.
    settled = obs([cpu_at(0.25)] * 4, [25_000] * 4, workload=100_000, uptime_start=400, end=2_000)
    assert ds2.decide(settled, current=4, now=2_000) == 2


def test_true_rate_uses_the_busiest_worker(obs):
    ds2 = DS2(12)
    # Two workers: 50k at busy 0.5 and 25k at busy 0.25. MAX aggregator: 75k / 0.5 = 150k, not 200k.
    # Workload 100k → utilization 0.67, inside the band; with lag 18M: 100k + 30k = 130k → 0.87, still inside;
    # with lag 36M: 160k → 1.07 → ceil(160k / (75k × 0.7)) = ceil(3.05) = 4.
    skewed = obs([cpu_at(0.5), cpu_at(0.25)], [50_000, 25_000], workload=100_000, lag=36_000_000,
                 uptime_start=400, end=2_000)
    assert ds2.decide(skewed, current=2, now=2_000) == 4


def test_no_decision_during_stabilization(obs):
    ds2 = DS2(12)
    # Uptime 1 … 60 s: inside the 300 s stabilization interval, nothing is collected and nothing decided,
    # however low the utilization.
    early = obs([cpu_at(0.05)] * 4, [5_000] * 4, workload=20_000, uptime_start=1, end=60)
    assert ds2.decide(early, current=4, now=60) == 4
    assert not ds2.window_full


def test_a_restart_empties_the_window(obs):
    ds2 = DS2(12, window_s=120)
    settled = obs([cpu_at(0.5)] * 4, [50_000] * 4, workload=200_000, uptime_start=400, end=2_000)
    ds2.collect(settled)
    assert len(ds2._window) == 60
    ds2.collect(obs([cpu_at(0.5)] * 4, [50_000] * 4, workload=200_000, end=2_060, down_s=20))
    assert len(ds2._window) == 0  # the seconds after the restart are still within the stabilization interval


def test_nothing_processed_means_no_decision(obs):
    idle = obs([IDLE] * 4, [0.0] * 4, workload=0.0, uptime_start=400, end=2_000)
    assert DS2(12).decide(idle, current=4, now=2_000) == 4
