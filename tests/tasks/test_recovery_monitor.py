"""The recovery monitor's polling (tasks/recovery.follow) and its wait (flows/background.recovery_wait_s), without
Prefect: it survives unreadable metrics, stops when the ledger already has the recovery, and always ends with why."""

from __future__ import annotations

import numpy as np

from daedalus.flows.background import recovery_wait_s
from daedalus.models.config import LoopConfig
from daedalus.models.errors import ConnectorError
from daedalus.models.ports import Target
from daedalus.models.recovery import AnomalyDetector
from daedalus.models.types import Observation
from daedalus.runtime.flink_demo import compressed_config
from daedalus.tasks.recovery import follow, normal_detector

RESCALE = 1_000.0


class Job:
    """A job whose metrics fail at the first poll; then workload 100/s, down for 5 s after the rescale (restarted at
    1,005), catching up for 3 s, normal from 1,009 (throughput at 1 s steps: 0 for 1,001-1,005, 300 for 1,006-1,008,
    100 from 1,009 on)."""

    def __init__(self) -> None:
        self.t, self.polls = RESCALE + 2.0, 0

    def now(self) -> float:
        return self.t

    def observe(self, job: str, since: float | None, until: float) -> Observation:
        self.polls += 1
        if self.polls == 1:
            raise ConnectorError("prometheus http://p: job 'j': no current scaleout")
        ts = np.arange(np.floor(since or RESCALE) + 1, np.floor(until) + 1)
        thr = np.where(ts <= RESCALE + 5, 0.0, np.where(ts <= RESCALE + 8, 300.0, 100.0))
        uptime = np.where(ts <= RESCALE + 5, 500.0 + ts - RESCALE, ts - RESCALE - 5)
        return Observation(job=job, timestamps=ts, workload=np.full(ts.size, 100.0), throughput={"w": thr}, cpu={},
                           lag=np.zeros(ts.size), uptime_s=uptime, scaleout=1)

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def normal() -> AnomalyDetector:
    detector = AnomalyDetector()
    detector.update_many([-1.0, 1.0] * 10)
    return detector


def test_a_monitor_survives_unreadable_metrics_and_reports_recovery_and_downtime() -> None:
    job = Job()
    target = Target("j", metrics=job, scaler=None, clock=job)  # type: ignore[arg-type]
    r = follow(target, "d-1", RESCALE, 30.0, normal(), timeout_s=600.0, poll_s=5.0, sleep=job.sleep)
    assert job.polls >= 2 and r.recovered
    assert r.observed_recovery_s == 9.0 and r.downtime_s == 5.0 and r.reason == "recovered in 9 s" and not r.in_ledger


def test_a_monitor_stops_when_the_loop_settled_the_recovery_first() -> None:
    job = Job()
    target = Target("j", metrics=job, scaler=None, clock=job)  # type: ignore[arg-type]
    r = follow(target, "d-1", RESCALE, 30.0, normal(), timeout_s=600.0, poll_s=1.0, sleep=job.sleep,
               settled=lambda: 7.0)
    assert job.polls == 1 and r.observed_recovery_s == 7.0 and r.reason == "recovered in 7 s, noticed first by the loop"
    assert r.in_ledger


def test_a_later_rescale_ends_the_watch_at_its_time() -> None:
    # Rescaled again 4 s after the rescale followed, while the job is still down: the monitor reads up to 1,004 and
    # ends there, not recovered (the recovery at 9 s is the later rescale's to report).
    job = Job()
    target = Target("j", metrics=job, scaler=None, clock=job)  # type: ignore[arg-type]
    r = follow(target, "d-1", RESCALE, 30.0, normal(), timeout_s=600.0, poll_s=5.0, sleep=job.sleep,
               superseded=lambda: None if job.polls < 1 else RESCALE + 4.0)
    assert job.polls == 2 and job.t == RESCALE + 7.0 and r.observed_recovery_s is None and r.downtime_s is None
    assert r.reason.startswith("superseded by the rescale 4 s after it, before it recovered: "), r.reason


def test_a_recovery_before_the_later_rescale_is_reported() -> None:
    job = Job()
    target = Target("j", metrics=job, scaler=None, clock=job)  # type: ignore[arg-type]
    r = follow(target, "d-1", RESCALE, 30.0, normal(), timeout_s=600.0, poll_s=5.0, sleep=job.sleep,
               superseded=lambda: RESCALE + 30.0 if job.t >= RESCALE + 30.0 else None)
    assert r.observed_recovery_s == 9.0 and r.reason == "recovered in 9 s"


def test_a_monitor_gives_up_at_its_wait_and_says_why() -> None:
    class Down(Job):
        def observe(self, job: str, since: float | None, until: float) -> Observation:
            raise ConnectorError("prometheus http://p: job 'j': no current scaleout")

    job = Down()
    target = Target("j", metrics=job, scaler=None, clock=job)  # type: ignore[arg-type]
    r = follow(target, "d-1", RESCALE, None, normal(), timeout_s=60.0, poll_s=15.0, sleep=job.sleep)
    assert not r.recovered and r.waited_s == 62.0
    assert r.reason == ("gave up after 62 s (its wait is 60 s): no metrics since the rescale; the metrics could not be "
                        "read at the last poll (prometheus http://p: job 'j': no current scaleout)")


def test_the_wait_is_the_jobs_own_max_recovery_within_30_minutes_and_a_callers_limit() -> None:
    assert recovery_wait_s(LoopConfig()) == 1800.0  # max_recovery_s 3,600 s: the deadline's 30 minutes
    assert recovery_wait_s(compressed_config(4, 4.0)) == 900.0 and recovery_wait_s(compressed_config(4)) == 450.0
    assert recovery_wait_s(LoopConfig(), timeout_s=90.0) == 90.0 and recovery_wait_s(LoopConfig(), 5_000.0) == 1800.0


def test_without_normal_statistics_a_monitor_judges_by_the_noise_floor_instead_of_failing() -> None:
    class Unreadable(Job):
        def observe(self, job: str, since: float | None, until: float) -> Observation:
            if until <= RESCALE:  # the window before the rescale
                raise ConnectorError("prometheus http://p: job 'j': no current scaleout")
            return super().observe(job, since, until)

    job = Unreadable()
    target = Target("j", metrics=job, scaler=None, clock=job)  # type: ignore[arg-type]
    detector = normal_detector(None, target, RESCALE)
    assert detector.n == 0 and detector.is_anomalous(1.5, workload=100.0) and not detector.is_anomalous(0.5, 100.0)
    r = follow(target, "d-1", RESCALE, None, detector, timeout_s=600.0, poll_s=5.0, sleep=job.sleep)
    assert r.observed_recovery_s == 9.0
