"""Rescale verification (issue 23): verdicts, the bottleneck, the rollback target and the ceiling; on the simulator
with flattening capacity curves, partition caps and noise."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daedalus.cli.operate import job_detail
from daedalus.connectors.store import STATUS, Store
from daedalus.models.capacity import CapacityModel
from daedalus.models.capacity import verification as v
from daedalus.models.config import LoopConfig
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.iteration import PLAIN, Iteration, iterate
from daedalus.models.loop.messages import ControlMessage
from daedalus.models.planning import planner
from daedalus.models.types import StageLoad
from daedalus.runtime.exporter import StoreCollector
from daedalus.sim.simulator import SimConfig, Simulator
from daedalus.tasks.dashboards import ledger_rows, status_record
from tests.cli.cli_support import flat
from tests.helpers import simulated_target
from tests.models.test_planner import analysis


def pending(current: int = 2, target: int = 4, before: float = 1000.0, predicted: float = 2000.0
            ) -> v.PendingVerification:
    return v.PendingVerification("j-1", current, target, before, predicted, 0.0, {})


@pytest.mark.parametrize(("observed", "verdict"), [
    (1100.0, "ineffective"),  # ≤ (1 + 0.1) × 1000: bought nothing
    (1101.0, "partly effective"),
    (1799.0, "partly effective"),
    (1800.0, "effective"),  # ≥ (1 − 0.1) × 2000
    (2500.0, "effective"),
])
def test_scale_out_verdicts_at_the_tolerance(observed: float, verdict: str) -> None:
    assert v.judge(pending(), observed, overloaded=True, tolerance=0.1, saturated=True) == verdict


def test_a_scale_out_predicted_to_buy_no_more_than_the_noise_is_never_ineffective() -> None:
    # 11 → 12 workers: predicted +9 %, within twice the tolerance of what the job had
    small = pending(11, 12, 11_000.0, 12_000.0)
    assert v.judge(small, 10_000.0, overloaded=True, tolerance=0.1, saturated=True) == "partly effective"
    assert v.judge(small, 10_900.0, overloaded=True, tolerance=0.1, saturated=True) == "effective"  # ≥ 0.9 × 12,000


def test_a_scale_out_the_job_did_not_show_saturated_is_never_ineffective() -> None:
    # 2 → 4 predicted to double 1,000/s, read 1,100/s at 4 while keeping up with every stage to spare: an
    # extrapolation of its CPU, not a measurement of what it takes
    assert v.judge(pending(), 1100.0, overloaded=False, tolerance=0.1, saturated=False) == "partly effective"
    assert v.judge(pending(), 1100.0, overloaded=False, tolerance=0.1, saturated=True) == "ineffective"


@pytest.mark.parametrize(("observed", "overloaded", "verdict"), [
    (900.0, True, "effective"),  # ≥ 0.9 × 1000 predicted
    (800.0, False, "partly effective"),  # short of the prediction but keeps up
    (800.0, True, "ineffective"),  # saturated beyond the prediction, below what it had: roll forward
])
def test_scale_in_is_ineffective_only_when_it_overloads_the_job(observed, overloaded, verdict) -> None:
    assert v.judge(pending(4, 2, 2000.0, 1000.0), observed, overloaded, 0.1, saturated=overloaded) == verdict


def test_a_rollback_that_keeps_the_capacity_is_not_undone() -> None:
    # 8 → 2 predicted 1,646/s, observed 1,400/s: short of the prediction, but 8 had only 1,500/s
    assert v.judge(pending(8, 2, 1500.0, 1646.0), 1400.0, True, 0.1, saturated=True) == "partly effective"


def stage(name: str, busy: float, parallelism: int = 4, backpressured: float = 0.0, records: float = 1000.0,
          source: bool = False) -> StageLoad:
    return StageLoad(name, parallelism, busy, backpressured, records, source)


def test_the_saturated_stage_among_idle_ones_is_the_bottleneck_and_a_non_parallel_one_cannot_scale() -> None:
    stages = [stage("Source:_trace", 0.1, backpressured=0.8, source=True), stage("work", 0.3, backpressured=0.6),
              stage("aggregate", 0.97, parallelism=1)]
    b = v.locate_bottleneck(stages, scaleout=4)
    assert b is not None and (b.stage, b.scalable) == ("aggregate", False)
    assert "1 subtask at scale-out 4" in b.why
    # every stage with time to spare, or two saturated: no single bottleneck
    assert v.locate_bottleneck([stage("a", 0.5), stage("b", 0.6)], 4) is None
    assert v.locate_bottleneck([stage("a", 0.9), stage("b", 0.95)], 4) is None
    # a busy stage held back by its downstream is not the bottleneck
    assert v.locate_bottleneck([stage("a", 0.9, backpressured=0.5)], 4) is None


def test_a_source_reading_every_partition_cannot_scale_and_a_parallel_stage_can() -> None:
    src = v.locate_bottleneck([stage("Source:_in", 0.95, parallelism=4, source=True), stage("w", 0.2)], 4,
                              partitions=4)
    assert src is not None and not src.scalable and "all 4 partitions" in src.why
    work = v.locate_bottleneck([stage("w", 0.95)], 4, partitions=12)
    assert work is not None and work.scalable and work.why == ""


def test_observed_capacity_is_bounded_by_the_slowest_stage_records_per_busy_second() -> None:
    # aggregate: 1,200/s at busy 0.8 → 1,500 per busy second; work: 1,200/s at 0.3 → 4,000
    stages = [stage("work", 0.3, records=1200.0), stage("aggregate", 0.8, 1, records=1200.0)]
    assert v.observed_capacity(5000.0, stages) == pytest.approx(1500.0)
    assert v.observed_capacity(1400.0, stages) == 1400.0
    assert v.observed_capacity(1400.0, [stage("idle", 0.01, records=5.0)]) == 1400.0  # too idle to bound


def verification(current: int, target: int, observed: float) -> v.Verification:
    return v.Verification("j-1", current, target, 1000.0, 4000.0, observed, "ineffective", {}, {})


def test_rollback_goes_to_the_smallest_scale_out_that_shows_the_same_capacity() -> None:
    caps = (1000.0, 1450.0, 2000.0, 1500.0)
    assert v.rollback_target(verification(2, 4, 1500.0), caps, 1, 0.1) == 2  # 1,450 ≥ 0.9 × 1,500
    assert v.rollback_target(verification(1, 4, 1900.0), caps, 1, 0.1) == 3
    assert v.rollback_target(verification(1, 4, 2500.0), caps, 1, 0.1) == 1  # none below: back where it was
    assert v.rollback_target(verification(2, 4, 1500.0), caps, 3, 0.1) == 3  # never below the minimum
    assert v.rollback_target(verification(4, 2, 900.0), caps, 1, 0.1) == 4  # a scale-in rolls forward


def test_a_ceiling_is_lifted_when_its_stage_has_room_at_the_load_that_saturated_it() -> None:
    c = v.Ceiling(2, 100.0, 1500.0, "aggregate", "why")
    assert v.lifted(c, [stage("aggregate", 0.95, 1, records=1480.0)]) is None  # still saturated
    assert v.lifted(c, [stage("aggregate", 0.3, 1, records=500.0)]) is None  # idle because the load fell
    assert "lifted" in v.lifted(c, [stage("aggregate", 0.6, 1, records=1400.0)])
    assert c.active(99.0) and not c.active(100.0)


def test_the_planner_never_plans_above_the_ceiling_nor_the_partitions() -> None:
    a = analysis([1000.0 * i for i in range(1, 13)], scaleout=2, avg=5000.0, forecast=[5000.0] * 900)
    free = planner.plan(LoopConfig(), a, planner.PlanContext(job="j", last_rescale=None, last_action=None), 1e9)
    assert free.target > 4
    capped = planner.plan(LoopConfig(), a, planner.PlanContext(job="j", last_rescale=None, last_action=None,
                                                               ceiling=(3, "ceiling 3 until …")), 1e9)
    assert capped.target == 3 and any(r.startswith("ceiling 3 until …: ") for r in capped.reasons)
    parts = planner.plan(LoopConfig(partitions=4), a, planner.PlanContext("j", None, None), 1e9)
    assert parts.target == 4 and any("4 partitions" in r for r in parts.reasons)


def test_knowledge_keeps_the_ceiling_and_loads_versions_stored_before_it() -> None:
    k = Knowledge.new("j", LoopConfig())
    k.ceiling = v.Ceiling(2, 123.0, 1500.0, "aggregate", "bought nothing")
    k.bottleneck = v.Bottleneck("aggregate", 0.97, False, "non-parallel")
    k.verification = pending()
    again = Knowledge.from_bytes(k.to_bytes())
    assert (again.ceiling, again.bottleneck, again.verification) == (k.ceiling, k.bottleneck, k.verification)
    old = json.loads(k.to_bytes())
    for key in ("ceiling", "bottleneck", "verification"):
        del old[key]
    for e in old["ledger"]:
        e.pop("verdict", None)
    before = Knowledge.from_bytes(json.dumps(old).encode())
    assert before.ceiling is None and before.verification is None


# --- on the simulator --------------------------------------------------------------------------------------------

def measured(sim: Simulator, seconds: int) -> float:
    """The capacity the loop would observe at the current scale-out: the capacity model fed every minute, bounded by
    the stages' records per busy second."""
    model = CapacityModel(warmup_s=60.0)
    start = sim.now
    for _ in range(seconds // 60):
        sim.advance(60)
        model.update(sim.observe(sim.now - 60))
    return v.observed_capacity(model.capacity_current(), sim.observe(start + 120).stages)


def rescale_verdict(config: SimConfig, workload: float, current: int, target: int, seed: int) -> str:
    sim = Simulator(np.full(1800, workload), config, seed=seed, initial_scaleout=current)
    before = measured(sim, 600)
    predicted = before * target / current  # the paper's extrapolation: i × the mean worker capacity
    sim.scale(target)
    sim.advance(60)
    after = measured(sim, 600)
    return v.judge(v.PendingVerification("d", current, target, before, predicted, 0.0, {}), after,
                   workload > after, 0.1, saturated=workload > after)


NOISY = dict(max_scaleout=8, worker_capacity=1000.0, downtime_noise_s=0.0)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), cpu_noise=st.floats(0.0, 0.03), tp_noise=st.floats(0.0, 0.05),
       current=st.integers(1, 3), extra=st.integers(1, 4))
def test_a_scale_out_past_a_flattening_capacity_curve_is_ineffective(seed, cpu_noise, tp_noise, current, extra):
    # the non-parallel stage takes 90 % of what `current` workers could: it already binds there
    config = SimConfig(**NOISY, cpu_noise=cpu_noise, throughput_noise=tp_noise,
                       bottleneck_capacity=0.9 * 1000.0 * current * 0.9)
    assert rescale_verdict(config, 1000.0 * (current + extra), current, current + extra, seed) == "ineffective"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), cpu_noise=st.floats(0.0, 0.03), tp_noise=st.floats(0.0, 0.05),
       current=st.integers(1, 3), extra=st.integers(1, 4))
def test_a_scale_out_with_capacity_to_gain_is_never_judged_ineffective(seed, cpu_noise, tp_noise, current, extra):
    config = SimConfig(**NOISY, cpu_noise=cpu_noise, throughput_noise=tp_noise)
    target = current + extra
    assert rescale_verdict(config, 1000.0 * target * 1.3, current, target, seed) != "ineffective"


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), tp_noise=st.floats(0.0, 0.05), partitions=st.integers(1, 3))
def test_workers_beyond_the_partitions_buy_nothing(seed, tp_noise, partitions):
    config = SimConfig(**NOISY, throughput_noise=tp_noise, partitions=partitions, skew=0.0)
    assert rescale_verdict(config, 5000.0, partitions, partitions + 2, seed) == "ineffective"


CFG = LoopConfig(max_scaleout=8, scale_in_interval=0)


@pytest.fixture(scope="module")
def bottlenecked() -> tuple[Simulator, Knowledge, list[Iteration], Knowledge]:
    """Two workers of 1,000/s feed a non-parallel stage of 1,500/s and 2,500/s arrive, for two hours of loops; the
    knowledge at the end, and as it was after 50 minutes (within the ceiling's hour)."""
    import copy

    sim = Simulator(np.full(4 * 3600, 2500.0), SimConfig(**NOISY, bottleneck_capacity=1500.0), seed=3,
                    initial_scaleout=2)
    k = Knowledge.new("sim", CFG)
    target = simulated_target(sim, CFG)
    its = []
    for minute in range(120):
        sim.advance(60)
        its.append(iterate(target, k, PLAIN))
        if minute == 50:
            held = copy.deepcopy(k)
    return sim, k, its, held


def test_the_loop_rolls_back_an_ineffective_scale_out_names_the_stage_and_keeps_below_the_ceiling(bottlenecked):
    # The loop scales out, sees the scale-out buy nothing, goes back to 2 and stays there for the ceiling's hour.
    sim, k, its, held = bottlenecked
    cfg = CFG
    executed = [(it.action.current, it.action.target, it.action.time) for it in its
                if it.action is not None and it.action.state == "executed"]
    out = next(e for e in k.ledger if e.verdict == "ineffective")
    assert out.target > out.current >= 2 and out.capacity_ratio < 0.6
    back = next(e for e in executed if e[2] > out.time)
    assert back[:2] == (out.target, 2), executed
    assert back[2] - out.time <= 600  # rolled back within 10 minutes of the scale-out
    rollback = next(it for it in its if it.action is not None and it.action.time == back[2])
    assert "ineffective" in rollback.decision.reasons[0] and "aggregate 100 % → 100 %" in rollback.decision.reasons[0]
    assert "1 subtask at scale-out" in rollback.decision.reasons[0]  # the stage named, and why it cannot scale
    assert held.ceiling is not None and (held.ceiling.stage, held.ceiling.scaleout) == ("aggregate", 2)
    assert [e for e in executed if back[2] < e[2] < back[2] + cfg.ceiling] == []  # nothing in the ceiling's hour
    # Nor after it: the capacity observed at the larger scale-outs (no more than at 2) tells the planner that no
    # scale-out helps, so it spends no rescale on trying again once the ceiling has expired.
    assert k.ceiling is None and [e for e in executed if e[2] > back[2]] == []
    assert k.entry(rollback.decision.id).verdict == "effective"  # the rollback lost nothing
    assert k.bottleneck is not None and k.bottleneck.stage == "aggregate" and not k.bottleneck.scalable
    assert math.isclose(sim.true_capacity(8), 1500.0)


def test_without_a_bottleneck_the_loop_judges_no_rescale_ineffective() -> None:
    # A rise from 1,500/s to 5,000/s on workers of 1,000/s: every scale-out buys capacity.
    load = np.concatenate([np.full(1800, 1500.0), np.full(5400, 5000.0)])
    sim = Simulator(load, SimConfig(**NOISY, cpu_noise=0.02, throughput_noise=0.03), seed=5, initial_scaleout=2)
    cfg = LoopConfig(max_scaleout=8)
    k = Knowledge.new("sim", cfg)
    target = simulated_target(sim, cfg)
    for _ in range(120):
        sim.advance(60)
        iterate(target, k, PLAIN)
    verdicts = [e.verdict for e in k.ledger if e.state == "executed"]
    assert "ineffective" not in verdicts and any(verdicts), verdicts
    assert k.ceiling is None


def test_a_scale_out_that_raises_capacity_is_not_undone_while_its_hot_worker_catches_up() -> None:
    # The advertising trace's second hour (the benchmark's scenario, seed 0) at 3 workers, scaled to 4 by hand at
    # 294,000/s as the paper's planner did: 4 workers take 25 % more (317,714 → 397,664/s). Two minutes after, the
    # hottest worker was still catching up (CPU 0.95 against 0.81 later), the estimate read 338,996/s, within 10 %
    # of the 317,529/s before, and the scale-out was undone with an hour's ceiling at 3 (3,835 s over the SLO).
    from daedalus.data import WORKLOADS
    from daedalus.sim.scenario import scenario
    from daedalus.sim.workloads import load_workload

    sim_config, _, workload = scenario(load_workload(WORKLOADS / "paper" / "advertising_6h_400K_max.csv"), 12, 0.9, 0)
    sim = Simulator(workload[3600:7200], sim_config, seed=0, initial_scaleout=3)
    assert [round(c) for c in sim.true_capacities()[2:4]] == [317_714, 397_664]
    cfg = LoopConfig(planner="daedalus-paper", mode="dry-run")  # only the operator's scale acts
    k = Knowledge.new("sim", cfg)
    target = simulated_target(sim, cfg)
    verdicts = []
    for minute in range(40):
        sim.advance(60)
        scale = [ControlMessage("m", "sim", "scale", sim.now, {"scaleout": 4, "operator": "t"})] if minute == 34 else []
        it = iterate(target, k, PLAIN, messages=scale)
        verdicts += [it.verdict] if it.verdict is not None else []
    [verdict] = verdicts
    assert (verdict.current, verdict.target) == (3, 4) and verdict.verdict != "ineffective"
    assert k.ceiling is None and sim.scaleout == 4


def test_the_verdict_and_the_bottleneck_show_in_the_ledger_status_dashboard_and_exporter(bottlenecked, tmp_path,
                                                                                          capsys):
    _, _, its, k = bottlenecked  # within the ceiling's hour
    rows = ledger_rows(k, limit=120)
    assert any(r["verdict"].startswith("ineffective (") and r["verdict"].endswith("of the predicted capacity)")
               for r in rows)
    record = status_record(its[50], k, "auto", None, 0.0)
    assert record["bottleneck"]["stage"] == "aggregate" and record["bottleneck"]["scalable"] is False
    assert record["ceiling"]["scaleout"] == 2 and record["verdict"]["verdict"] in ("effective", "ineffective")
    url = str(tmp_path / "store")
    Store(url).job(k.job).save(k)
    Store(url).job("sim").write_json(STATUS, record)
    samples = {key: value for key, _, value in StoreCollector(url)._job("sim", 0.0)}
    assert samples["bottleneck"] == {"stage": "aggregate", "scalable": "false"}
    assert samples["ceiling"] == 2.0 and samples["verdict"]["verdict"] == record["verdict"]["verdict"]
    job_detail("sim", url)  # `daedalus status sim`
    text = flat(capsys.readouterr().out)
    assert "bottleneck: stage aggregate saturated" in text and "ceiling 2 until" in text and "ineffective" in text


def test_the_jobs_file_sets_the_ceiling_time() -> None:
    from daedalus.connectors.jobs import parse_jobs

    doc = {"jobs": [{"name": "j", "engine": "sim", "ceiling": "20m"}, {"name": "k", "engine": "sim"}]}
    jobs = parse_jobs(doc, "jobs.yaml")
    assert jobs.job("j").loop_config().ceiling == 1200.0 and jobs.job("k").loop_config().ceiling == 3600.0


def test_the_flink_demo_reports_the_rollback_and_the_stage_in_the_contracts_shape(bottlenecked) -> None:
    # report.json's `rollbacks` and `bottleneck`, built from the loop's own summaries as the demo builds them: the
    # shape a check outside the repository reads, and the values of the rollback the loop made.
    from daedalus.runtime.flink import Outage
    from daedalus.runtime.flink_demo_report import verification_report

    _, k, its, _ = bottlenecked
    loops = [{**it.summary(), "time": it.decision.time,
              **({"action_time": it.action.time} if it.action is not None and it.action.state == "executed" else {})}
             for it in its]
    out = next(e for e in k.ledger if e.verdict == "ineffective")
    back = next(it for it in its if it.verdict is not None and it.verdict.verdict == "ineffective")
    restart = out.time + 20.0  # the job RUNNING again after the ineffective scale-out, as the JobManager logged it
    report = json.loads(json.dumps(verification_report(loops, k, [Outage(out.time + 5.0, restart, restart + 1.0,
                                                                         out.target)], CFG.ceiling)))
    assert report["bottleneck"] == "aggregate"
    rollback = report["rollbacks"][0]  # the first of the two hours' (the loop tries again after the ceiling's hour)
    assert len(report["rollbacks"]) == sum(e.verdict == "ineffective" for e in k.ledger)
    assert all(set(r) == {"from", "to", "time", "reason"} for r in report["rollbacks"])
    assert set(rollback) == {"from", "to", "time", "reason"}
    assert (rollback["from"], rollback["to"], rollback["time"]) == (out.target, 2, back.action.time)
    assert isinstance(rollback["time"], float) and isinstance(rollback["reason"], str)
    assert "ineffective" in rollback["reason"] and "rolled back" in rollback["reason"]
    check = report["rollback_checks"][0]
    assert check["undone"] == {"from": out.current, "to": out.target, "time": out.time}
    assert check["after_restart_s"] == round(back.action.time - restart, 1) and check["ceiling"] == 2
    assert all(c["scale_outs_above_ceiling"] == [] for c in report["rollback_checks"])


def test_without_rollbacks_the_flink_demo_reports_empty_lists_and_no_stage() -> None:
    from daedalus.runtime.flink_demo_report import verification_report

    loops = [{"kind": "scale-out", "current": 1, "target": 4, "action": "executed", "time": 10.0,
              "verdict": None, "reasons": ["forecast above capacity"], "bottleneck": "work",
              "bottleneck_scalable": True},
             {"kind": "scale-in", "current": 4, "target": 1, "action": "executed", "time": 400.0,
              "verdict": "effective", "reasons": ["rescale 1 → 4 effective"], "bottleneck": None,
              "bottleneck_scalable": None}]
    assert verification_report(loops, None, [], 900.0) == {"rollbacks": [], "bottleneck": None,
                                                           "rollback_checks": []}
