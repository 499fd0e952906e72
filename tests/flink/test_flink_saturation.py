"""Which seconds of a run measure the job's capacity (`bench.flink.saturated`): hand-built samples."""

from __future__ import annotations

import numpy as np

from daedalus.bench.flink import Sampled, saturation_throughput


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
