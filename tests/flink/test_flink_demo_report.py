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
