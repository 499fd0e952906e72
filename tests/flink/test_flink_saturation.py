"""Which seconds of a run measure the job's capacity (`bench.flink.saturated`): hand-built samples."""

from __future__ import annotations

import numpy as np

from daedalus.runtime.flink_sampling import Sampled, record_cost, saturation_throughput


def _sampled(throughput, busy, lag, workload, scaleout, uptime) -> Sampled:
    a = [np.array(v, dtype=float) for v in (throughput, busy, lag, workload, scaleout, uptime)]
    n = a[0].size
    return Sampled(ts=np.arange(n, dtype=float), workload=a[3], throughput=a[0], busy_min=a[1], busy_max=a[1],
                   cpu_load=np.full(n, np.nan), lag=a[2], scaleout=a[4], uptime=a[5], workers={})


def test_a_backlog_marks_saturation_even_when_contended_cores_keep_the_busy_share_below_one():
    # Seconds 0-1 keep up (no backlog); 2-4 carry 50,000 records at p=3 with busy 0.85 (three one-slot workers on
    # two cores); 5 is 5 s after a restart; 6-7 at p=1 with a backlog of 1.5 s of arrivals only (not saturated).
    s = _sampled(throughput=[400, 410, 1600, 1650, 1700, 900, 500, 520],
                 busy=[0.4, 0.4, 0.85, 0.86, 0.84, 0.9, 1.0, 1.0],
                 lag=[0, 0, 50_000, 51_000, 50_500, 40_000, 750, 780],
                 workload=[400, 410, 2400, 2400, 2400, 2400, 500, 520],
                 scaleout=[1, 1, 3, 3, 3, 3, 1, 1],
                 uptime=[100, 101, 60, 61, 62, 5, 30, 31])
    got = saturation_throughput(s)
    assert list(got) == [3]
    assert got[3]["throughput"] == 1650.0 and got[3]["seconds"] == 3


def test_missing_samples_never_count():
    s = _sampled(throughput=[np.nan, 1600], busy=[1, 1], lag=[50_000, 50_000], workload=[2400, 2400],
                 scaleout=[3, np.nan], uptime=[60, 61])
    assert saturation_throughput(s) == {}


def test_the_cost_of_a_record_is_busy_time_over_throughput_below_and_at_saturation():
    # Two workers at p=2: seconds 0-1 below saturation, 0.25 + 0.27 busy for 200 + 200 records/s → 1.3 ms a record;
    # 2 is 5 s after the restart (left out); 3-4 saturated (a backlog of 50,000), 1.0 + 0.98 busy for 900 + 900 →
    # 1.1 ms. A worker without a busy share (second 1, worker b) counts in neither sum.
    n = 5
    s = Sampled(ts=np.arange(n, dtype=float), workload=np.array([400, 400, 400, 2000, 2000.0]),
                throughput=np.array([400, 200, 400, 1800, 1800.0]), busy_min=np.full(n, np.nan),
                busy_max=np.full(n, np.nan), cpu_load=np.full(n, np.nan),
                lag=np.array([0, 0, 0, 50_000, 50_000.0]), scaleout=np.full(n, 2.0),
                uptime=np.array([100, 101, 5, 60, 61.0]),
                workers={"a": (np.array([200, 200, 200, 900, 900.0]), np.array([0.25, 0.26, 0.3, 1.0, 1.0]),
                               np.full(n, np.nan)),
                         "b": (np.array([200, 200, 200, 900, 900.0]), np.array([0.27, np.nan, 0.3, 0.98, 0.98]),
                               np.full(n, np.nan))})
    got = record_cost(s)
    assert list(got) == [2]
    assert got[2]["below_saturation_s"] == 2 and got[2]["saturated_s"] == 2
    # second 0: 0.52 / 400 = 1.3 ms; second 1: worker a alone, 0.26 / 200 = 1.3 ms
    assert abs(got[2]["below_saturation_ms"] - 1.3) < 1e-12
    assert abs(got[2]["saturated_ms"] - 1.98 / 1800 * 1000) < 1e-12
