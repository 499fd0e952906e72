"""report.json of `daedalus demo --engine flink [--bottleneck]`: the keys a check outside the repository reads, built by
the demo's own functions from a run's pieces (no cluster: the pieces are what a run hands them)."""

from __future__ import annotations

import json

import numpy as np

from daedalus.runtime.flink import Outage, Trace
from daedalus.runtime.flink_demo_report import build_report, verification_report
from daedalus.runtime.flink_sampling import Sampled

T0 = 1_795_733_500.0


def sampled(seconds: int = 300) -> Sampled:
    ts = T0 + np.arange(seconds, dtype=float)
    scaleout = np.where(ts < T0 + 130, 1.0, np.where(ts < T0 + 205, 4.0, 1.0))
    thr = np.full(seconds, 190.0)
    return Sampled(ts, np.full(seconds, 300.0), thr, np.full(seconds, 0.2), np.ones(seconds), np.full(seconds, 0.3),
                   np.linspace(0.0, 9000.0, seconds), scaleout, ts - T0, {"tm_0_1": (thr, np.ones(seconds), thr / 1e3)})


def test_the_bottleneck_demos_report_has_the_contracts_keys_and_types() -> None:
    trace = Trace.of([100, 300, 300], int(T0 * 1000))
    reasons = ["rescale 1 → 4 ineffective: capacity 194/s at 1, 188/s observed at 4 against 776/s predicted (24 %)",
               "rolled back: 4 → 1, where the job showed the same capacity",
               "no scale-out above 1 for 900 s (until the bottleneck has room)"]
    loops = [
        {"decision": "d-1", "kind": "scale-out", "current": 1, "target": 4, "action": "executed", "time": T0 + 131,
         "action_time": T0 + 131.5, "elapsed_s": 131.0, "capacity_current": 194.0, "reasons": ["forecast"],
         "verdict": None, "bottleneck": "aggregate", "bottleneck_scalable": True},
        {"decision": "d-2", "kind": "scale-in", "current": 4, "target": 1, "action": "executed", "time": T0 + 206,
         "action_time": T0 + 206.2, "elapsed_s": 206.0, "capacity_current": 188.0, "reasons": reasons,
         "verdict": "ineffective", "bottleneck": "aggregate", "bottleneck_scalable": False,
         "notes": ["the ceiling of 2 expired", reasons[0]]},
        {"decision": "d-3", "kind": "no-change", "current": 1, "target": 1, "action": None, "time": T0 + 281,
         "elapsed_s": 281.0, "capacity_current": 190.0, "reasons": ["keep 1"], "verdict": "effective",
         "bottleneck": "aggregate", "bottleneck_scalable": True},
    ]
    found = [Outage(T0 + 136.0, T0 + 136.2, T0 + 140.4, 4), Outage(T0 + 211.0, T0 + 211.4, T0 + 240.1, 1)]
    report = build_report(trace, loops, sampled(), found, [], None, trace.total,
                          trace.total, {1: [195.3], 4: [192.7]}, 2**31, 60.0, True, "file:///sp")
    report.update(**verification_report(loops, None, found, 900.0))
    report = json.loads(json.dumps(report))  # as written to report.json
    assert report["records_generated"] == report["records_committed"] == report["records_distinct"] == 700
    assert report["duplicates"] == report["lost"] == 0 and report["rescales"] == 2
    assert report["rollbacks"] == [{"from": 4, "to": 1, "time": T0 + 206.2, "reason": "; ".join(reasons)}]
    assert report["bottleneck"] == "aggregate"  # the stage seen saturated that could not scale (no ceiling known)
    [check] = report["rollback_checks"]
    assert check["undone"] == {"from": 1, "to": 4, "time": T0 + 131.5}
    assert check["after_restart_s"] == 70.0 and check["scale_outs_above_ceiling"] == []
    assert [d["verdict"] for d in report["decisions"]] == [None, "ineffective", "effective"]
    assert [d["verification"] for d in report["decisions"]] == [None, reasons[0], None]  # the evidence, where noted


def test_the_saturation_after_a_rescales_backlog_came_back_is_counted() -> None:
    # 300/s arriving. The backlog: 1,000 up to the rescale (T0 + 100), 5,000 while down, back under its level
    # (1,000 + 1 s of arrivals) at T0 + 110, at 500 for 20 s; from T0 + 130 it is over 2 s of arrivals (600) for 40 s,
    # then 0. The monitor saw the job normal at T0 + 180: 40 of the 70 s in between saturated.
    n = 300
    ts = T0 + np.arange(n, dtype=float)
    lag = np.where(ts <= T0 + 100, 1_000.0, np.where(ts < T0 + 110, 5_000.0, np.where(ts < T0 + 130, 500.0, np.where(
        ts < T0 + 170, 4_000.0, 0.0))))
    thr = np.full(n, 300.0)
    s = Sampled(ts, np.full(n, 300.0), thr, np.full(n, 0.9), np.ones(n), np.full(n, 0.9), lag, np.full(n, 3.0),
                ts - T0 + 60.0, {"tm_0_1": (thr, np.ones(n), thr / 1e3)})
    trace = Trace.of([300] * 3, int(T0 * 1000))
    run = ({"decision": "d-1", "from": 1, "to": 3, "time": T0 + 100.0}, None,
           {"downtime_s": 4.0, "observed_recovery_s": 80.0, "reason": "recovered in 80 s"})
    report = build_report(trace, [], s, [], [run], None, trace.total, trace.total, {}, 2**31, 60.0, True, "")
    [rescale] = report["downtime_s"]
    assert rescale["backlog_recovery_s"] == 10.0 and rescale["observed_recovery_s"] == 80.0
    assert rescale["saturated_after_backlog_s"] == 40


def test_a_restart_whose_backlog_stayed_within_its_level_recovers_no_sooner_than_its_tasks_run() -> None:
    # 300/s arriving, the backlog at 100 throughout: it never rose above its level (100 + 1 s of arrivals), which
    # alone reads as a recovery in 0 s. The JobManager's log: cancelled 2.2 s after the rescale, every task running
    # again 2.5 s after it (CI, 2026-11-30: 2 → 1 at a fifth of capacity). The reference is the restart's end.
    n = 300
    ts = T0 + np.arange(n, dtype=float)
    thr = np.full(n, 300.0)
    s = Sampled(ts, np.full(n, 300.0), thr, np.full(n, 0.2), np.ones(n), np.full(n, 0.2), np.full(n, 100.0),
                np.full(n, 1.0), ts - T0 + 60.0, {"tm_0_1": (thr, np.ones(n), thr / 1e3)})
    trace = Trace.of([300] * 3, int(T0 * 1000))
    run = ({"decision": "d-1", "from": 2, "to": 1, "time": T0 + 100.0}, None,
           {"downtime_s": 2.5, "observed_recovery_s": 10.7, "reason": "recovered in 11 s"})
    found = [Outage(T0 + 102.2, T0 + 102.4, T0 + 102.5, 1)]
    report = build_report(trace, [], s, found, [run], None, trace.total, trace.total, {}, 2**31, 60.0, True, "")
    [rescale] = report["downtime_s"]
    assert rescale["backlog_recovery_s"] == 2.5 and rescale["jobmanager_log"]["all_running_after_s"] == 2.5
    # Without the log (the rescale's outage not found in it), the backlog's own 0 s stands.
    report = build_report(trace, [], s, [], [run], None, trace.total, trace.total, {}, 2**31, 60.0, True, "")
    assert report["downtime_s"][0]["backlog_recovery_s"] == 0.0
