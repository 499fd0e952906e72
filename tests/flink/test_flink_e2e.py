"""The whole loop on a real Flink job (`daedalus demo --engine flink`): the `mape-k` flow through Prefect scales the
trace job out and back in, and nothing is lost or duplicated.

The demo's own trace, 7 minutes long, on its loop clock compressed 8× (7.5 s loops, scale-ins at most every 75 s) on
a local session cluster: a JobManager and three one-slot TaskManagers, a real Prometheus, a Prefect server; about 8
minutes on 2 cores. The planner holds the load's envelope after a burst before it scales in: 15 paper minutes here
(112 s), half the loop's default, so that the scale-in falls within 56 paper minutes; with the default's 30 (225 s) a
5-minute trace ended before it could and a 10-minute one made this test 11 minutes (CI, 2026-11-28). Before the
planner simulated a switch at the next loop on its 5-second grid (`models.planning.mpc._on_bin`: 7.5 s loops fall
between two bins), this trace failed once: "3 → 1 in 8 s" priced less latency than a switch now at every loop of its
last three minutes, and the loop never scaled in (CI of 29136d1). No saturation
floods after the trace (the demo's report runs one per parallelism, about 1½ minutes): the capacity assertion below is
judged against the run's own saturation. The trace falls to a fifth of one worker's capacity, not the demo's 0.4, so one
worker holds what is left with room to spare.
The assertions are the issue's:

- every record the trace generated is in the sink's committed output exactly once;
- at least one scale-out and one scale-in were executed;
- at the parallelism where the job ran saturated longest (over 2 s of arrivals pending: `bench.flink.saturated`;
  the plateau at 2.5× one worker's capacity saturates three), the loop's capacity estimate is within 15 % of the
  throughput measured there (the errors at the other parallelisms,
  extrapolated from a busy share below 1 on shared cores, are printed and reported, not asserted: docs/engines.md);
- every rescale shows in the JobManager's log, and the downtime the recovery monitor observed (from the job's
  uptime) is within 3 s of the restart the log shows. A monitor whose first sample after the rescale predates
  Flink's restart (it comes at the next checkpoint, 1–4 s after the request) reports no downtime at all
  (`models.anomaly.track_recovery` keeps the job's previous start): those are printed, not compared;
- every executed rescale has an observed recovery time (the paper's anomaly detector on workload − throughput, in
  the ledger) within 20 % or 10 s of the time its backlog (the source's pending records) took to return to its
  level before the rescale, unless the job was rescaled again before it recovered (its monitor then ends, saying
  so) or before its backlog came back (the backlog then measures what followed), or ran saturated for
  `MIN_SATURATED_S` or more after its backlog came back (the monitor then counts the saturation: it must only not
  end before the backlog), and no recovery monitor ended otherwise than recovered, superseded or given up with its
  reason;
- no JVM is left running, and the cluster stayed under 3 GiB resident.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from flink_support import flink_jvms, needs_flink, needs_prometheus

from daedalus.runtime.flink_demo import DemoPlan, run_demo
from daedalus.runtime.flink_demo_report import MIN_SATURATED_S

pytestmark = [needs_flink, needs_prometheus, pytest.mark.slow]


def test_the_loop_scales_a_real_flink_job_out_and_in_exactly_once(tmp_path):
    marker = str(tmp_path / "work")
    try:
        plan = DemoPlan(minutes=7, taskmanagers=3, probe_s=30.0, flood_s=0.0, end=0.2, envelope_s=900.0)
        report = run_demo(tmp_path / "out", plan, workdir=tmp_path / "work")
    finally:  # even when the run failed: no JVM of this cluster may outlive the test
        left = flink_jvms(marker)
        for line in left:
            os.kill(int(line.split()[0]), signal.SIGKILL)
    assert left == [], left
    summary = {k: v for k, v in report.items() if k != "decisions"}
    print("\n" + json.dumps(summary, indent=1))
    assert (tmp_path / "out" / "report.json").is_file() and (tmp_path / "out" / "report.png").is_file()

    assert report["records_generated"] > 0
    assert report["records_committed"] == report["records_distinct"] == report["records_generated"]

    executed = [(d["current"], d["target"]) for d in report["decisions"] if d["action"] == "executed"]
    assert any(t > c for c, t in executed), executed
    assert any(t < c for c, t in executed), executed

    saturated = report["capacity_error_where_saturated_pct"]
    print("capacity error by parallelism:", report["capacity_error_pct"]["by_parallelism"])
    assert saturated, f"the job never saturated for long: {report['saturated_in_run']}"
    # Judged where the job ran saturated longest, the plateau. Where it never saturated, the estimate is extrapolated
    # from busy time below saturation, which on these shared cores cannot see the contention saturation brings
    # (docs/engines.md): printed above and in the report.
    longest = max(saturated, key=lambda p: report["saturated_in_run"][p]["seconds"])
    assert saturated[longest]["median"] <= 15.0, saturated

    for rescale in report["downtime_s"]:
        log = rescale["jobmanager_log"]
        assert log is not None and log["job_running_after_s"] is not None, rescale
        if rescale["downtime_s"] is None:
            print("recovery monitor saw no restart:", rescale)
            continue
        assert abs(rescale["downtime_s"] - log["job_running_after_s"]) <= 3.0, rescale

    for rescale in report["downtime_s"]:  # issue 27: the observed recovery, checked against the backlog
        observed, backlog = rescale["observed_recovery_s"], rescale["backlog_recovery_s"]
        if observed is None and (rescale["monitor"] or "").startswith("superseded by the rescale"):
            # Rescaled again before it recovered (1 → 2, then 2 → 3 while still behind on the rise): what follows is
            # the later rescale's recovery, checked in its turn (CI, 2026-11-27: counted as the first one's, 143 s).
            assert any(r["time"] > rescale["time"] for r in report["downtime_s"]), rescale
            continue
        assert observed is not None and backlog is not None, rescale
        later = [r["time"] for r in report["downtime_s"] if r["time"] > rescale["time"]]
        if later and rescale["time"] + backlog > min(later):
            # The backlog came back to its level only after the next rescale: what it measured is no longer this
            # rescale's recovery (1 → 2 on the rise, 2 → 3 22 s later, then the plateau above what the machine's
            # two cores process: 262 s, the saturation's; CI, 2026-11-28). Printed, not compared.
            print("backlog reference spans a later rescale:", rescale)
            continue
        if rescale["saturated_after_backlog_s"] >= MIN_SATURATED_S:
            # The load outran the new scale-out after its backlog was back to its level: 1 → 3 on the rise, then the
            # plateau above what three workers process on two cores (179 s observed against a backlog back in 7 s,
            # 152 s of it saturated; 2026-11-29). Workload − throughput is no recovery until the load falls; the
            # backlog's level before the rescale was reached. Only the order is checked: the monitor did not end
            # before the backlog came back.
            print("saturated after its backlog came back:", rescale)
            assert observed >= backlog - max(10.0, 0.2 * backlog), rescale
            continue
        assert abs(observed - backlog) <= max(10.0, 0.2 * backlog), rescale
        assert rescale["monitor"] and "Error" not in rescale["monitor"], rescale

    assert report["jvms_left"] == []
    assert report["peak_rss_bytes"] < 3 * 2**30
