"""The offline optimum on tiny hand-solvable instances (3 loop intervals of 5 s, 2 scale-outs), and in the simulator:
the schedule it replays keeps the SLO, its relaxation is below it, and no baseline that keeps the SLO within the
rescale budget is cheaper."""

from __future__ import annotations

import numpy as np
import pytest

from daedalus.models.planning.oracle import Instance, rescale_limit, solve


def tiny(rate: float, max_rescales: int = 1, downtime_in: float = 1.0, slo_s: float = 4.0) -> Instance:
    """15 s of a constant `rate`, one worker 10/s, two 20/s; decisions every 5 s, starting at 2 workers."""
    return Instance(workload=np.full(15, rate), capacities=np.array([10.0, 20.0]), downtime_out=np.full(2, 2.0),
                    downtime_in=np.full(2, downtime_in), initial=2, max_rescales=max_rescales, loop_s=5,
                    checkpoint_s=5, slo_s=slo_s)


def test_scales_in_when_one_worker_keeps_up_after_the_downtime():
    # 8/s: 1 s down → backlog 8, drained by 2/s in 4 s; the limit is 4 − 1 = 3 s of arrivals (24). 2·5 + 1·5 + 1·5.
    plan = solve(tiny(8.0))
    assert plan.scaleouts == (2, 1, 1)
    assert plan.worker_seconds == 20.0 and plan.rescales == 1 and plan.seconds_over_slo == 0


def test_keeps_two_workers_when_one_cannot_keep_up():
    # 15/s on one worker: the backlog grows 5/s. With a 2 s SLO (limit 1 s of arrivals, 15) it breaks it in the
    # second second; with 4 s (limit 45) not before the run ends, and a backlog left at the end is no violation.
    assert solve(tiny(15.0, slo_s=2.0)).scaleouts == (2, 2, 2)
    assert solve(tiny(15.0, slo_s=2.0)).worker_seconds == 30.0
    assert solve(tiny(15.0)).scaleouts == (2, 2, 1)


def test_respects_the_rescale_budget():
    assert solve(tiny(8.0, max_rescales=0)).scaleouts == (2, 2, 2)


def test_the_downtime_can_make_a_scale_in_too_dear_but_not_in_the_relaxation():
    # 9.5/s and 4 s down: a backlog of 38 > 3 s of arrivals (28.5), and one worker drains only 0.5/s → stay at 2
    # (30 worker-seconds). The relaxation keeps the downtime but allows arrivals up to the SLO, 4 s (38 ≤ 38):
    # 2, 1, 1 (20), a bound below.
    inst = tiny(9.5, downtime_in=4.0)
    assert solve(inst).scaleouts == (2, 2, 2)
    lower = solve(inst, relaxed=True)
    assert lower.scaleouts == (2, 1, 1) and lower.worker_seconds == 20.0


def test_a_margin_tightens_the_latency_limit():
    # 8/s with 2 s down: backlog 16 ≤ 24 (limit 3 s) → scale in; a margin of 1.5 s leaves 1 s (8/s): stay.
    inst = tiny(8.0, downtime_in=2.0)
    assert solve(inst).scaleouts == (2, 1, 1)
    assert solve(inst, margin_s=1.5).scaleouts == (2, 2, 2)


def test_the_relaxation_forgets_the_backlog_at_a_rescale():
    # 21/s on two workers (20/s) for 5 s leaves a backlog of 5; then 9.5/s. Scaling in at 5 s with 3 s down:
    # 5 + 28.5 = 33.5 > 3 s of arrivals (28.5) → wait until the backlog is gone and scale in at 10 s (25).
    # The relaxation forgets the backlog at the rescale (another worker is the busiest) and allows 4 s: 2, 1, 1.
    inst = tiny(9.5, downtime_in=3.0)
    inst = Instance(np.r_[np.full(5, 21.0), np.full(10, 9.5)], inst.capacities, inst.downtime_out, inst.downtime_in,
                    inst.initial, inst.max_rescales, inst.loop_s, inst.checkpoint_s, inst.slo_s)
    upper = solve(inst)
    assert upper.scaleouts == (2, 2, 1) and upper.worker_seconds == 25.0
    lower = solve(inst, relaxed=True)
    assert lower.scaleouts == (2, 1, 1) and lower.worker_seconds == 20.0


def test_relaxation_without_any_schedule_that_keeps_the_slo():
    with pytest.raises(ValueError, match="no schedule keeps the SLO"):
        solve(tiny(50.0), relaxed=True)  # 30/s more than two workers: past 4 s of arrivals by 7 s, rescaled or not


def test_rescale_budget_is_18_in_six_hours():
    assert rescale_limit(6 * 3600) == 18 and rescale_limit(1199) == 0 and rescale_limit(3600) == 3


def test_a_run_longer_than_six_hours_gets_no_more_than_18_rescales():
    # the tm trace runs 25,000 s: at one rescale per 20 min it would get 20, and 19 of them could fall in 6 hours
    assert rescale_limit(25_000) == 18 and rescale_limit(48 * 3600) == 18


def test_in_the_simulator_no_baseline_keeping_the_slo_is_cheaper(short_trace):
    from daedalus.models import policies
    from daedalus.sim.report import score
    from daedalus.sim.runner import run
    from daedalus.sim.scenario import scenario
    from daedalus.sim.workloads import load_workload

    values = load_workload(short_trace)
    reports = {}
    for name in ("oracle", "static", "hpa-80", "ds2", "flink-autoscaler"):
        sim_config, loop_config, workload = scenario(values, 12, 0.9, 1)
        policy = policies.make(name, 12, loop_config)
        reports[name] = score(run(workload, policy, sim_config, loop_config, seed=1))
        if name == "oracle":
            oracle = policy
    best = reports["oracle"]
    assert best["seconds_over_slo"] == 0 and best["rescales"] <= rescale_limit(best["duration_s"])
    assert oracle.replayed_over_s == 0
    assert oracle.lower is not None and oracle.lower.worker_seconds <= best["worker_seconds"]
    assert best["worker_seconds"] < best["static_worker_seconds"]
    for name, r in reports.items():
        if r["seconds_over_slo"] == 0 and r["rescales"] <= rescale_limit(r["duration_s"]):
            assert best["worker_seconds"] <= r["worker_seconds"], name
