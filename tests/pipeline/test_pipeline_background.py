"""The background flows: recovery monitoring over a simulated rescale, the WAPE trigger, one-job retraining,
the lake append from the loop, and the triggers and schedules declared for the deployments."""

from __future__ import annotations

import numpy as np
import pytest

from daedalus.connectors import targets
from daedalus.connectors.lake import Lake
from daedalus.connectors.store import Store
from daedalus.flows.mape_k import FORECAST_POOR, RESCALED, emit_loop_events
from daedalus.models.config import LoopConfig
from daedalus.models.forecast import Forecaster
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.analyze import total_throughput
from daedalus.models.loop.iteration import PLAIN, iterate
from daedalus.models.loop.messages import apply_messages
from daedalus.models.ports import Target
from daedalus.models.types import LedgerEntry
from daedalus.sim.job import SimulatedJob
from daedalus.sim.simulator import SimConfig, Simulator

pytestmark = pytest.mark.slow


@pytest.fixture
def registered():
    added: list[str] = []

    def register(sim: Simulator, cfg: LoopConfig) -> Target:
        job = SimulatedJob(sim)
        target = Target(sim.job, metrics=job, scaler=job, clock=job, config=cfg)
        targets.register(target)
        added.append(sim.job)
        return target

    yield register
    for job in added:
        targets.unregister(job)


def true_recovery_time(sim: Simulator, rescale_time: float) -> float:
    """From the simulator's history: seconds from the rescale until the backlog is back to its level before."""
    h = sim.history()
    before = float(h.lag[h.timestamps <= rescale_time][-1])
    after = h.timestamps > rescale_time
    restarted = after & ~h.down
    first_up = h.timestamps[restarted][0]
    settled = restarted & (h.timestamps >= first_up) & (h.lag <= before + 0.01 * h.workload)
    return float(h.timestamps[settled][0] - rescale_time)


def test_recovery_monitor_reports_the_simulators_recovery_time(prefect_harness, registered, tmp_path) -> None:
    from daedalus.flows.background import recovery_monitor

    rng = np.random.default_rng(7)
    workload = 150_000 * (1 + rng.normal(0, 0.02, 3600))
    sim = Simulator(workload, SimConfig(max_scaleout=6, throughput_noise=0.01), seed=3, initial_scaleout=2, job="rec")
    cfg = LoopConfig(max_scaleout=6)
    registered(sim, cfg)
    sim.advance(1800)
    rescale_time = sim.now
    # The loop's knowledge: normal workload − throughput learned before the rescale, the decision in the ledger.
    k = Knowledge.new("rec", cfg)
    obs = sim.observe(rescale_time - 1200, rescale_time)
    k.anomaly.update_many((obs.workload - total_throughput(obs))[obs.uptime_s >= cfg.warmup_s])
    k.record(LedgerEntry("d-1", rescale_time, 2, 3, "scale-out", ("test",), "executed", predicted_recovery_s=90.0))
    store = Store(str(tmp_path / "store"))
    store.job(k.job).save(k)
    sim.scale(3)
    sim.advance(1200)

    result = recovery_monitor(job="rec", decision="d-1", rescale_time=rescale_time, from_scaleout=2, to_scaleout=3,
                              predicted_recovery_s=90.0, store_url=store.url, poll_s=0.01, timeout_s=1200)
    truth = true_recovery_time(sim, rescale_time)
    assert result["observed_recovery_s"] == pytest.approx(truth, abs=10.0)
    downtime = result["downtime_s"]
    assert 27 <= downtime <= 33  # the simulator's scale-out downtime: 30 s ± 3 s

    (_, message), = store.job("rec").pending()
    assert message.kind == "recovered" and message.body["decision"] == "d-1"
    k = store.job("rec").load().knowledge
    apply_messages(k, [message], cfg, 3, sim.now)
    assert k.entry("d-1").observed_recovery_s == result["observed_recovery_s"]
    assert k.downtime.out_s != cfg.downtime_out_s  # the scale-out downtime estimate learned from it
    assert k.downtime.in_s == cfg.downtime_in_s


def test_the_wape_trigger_fires_at_the_15th_poor_loop_and_not_before(prefect_harness, registered, monkeypatch,
                                                                     tmp_path) -> None:
    from prefect.events.clients import AssertingEventsClient
    from prefect.events.worker import EventsWorker

    worker = EventsWorker.instance(AssertingEventsClient)
    monkeypatch.setattr(EventsWorker, "instance", lambda *_: worker)
    # 40 minutes of a smooth sine (the first model is fitted on it), then levels alternating every minute: the
    # model's forecasts (fixed parameters, refiltered each loop) miss by far every loop from then on.
    t = np.arange(40 * 60)
    smooth = 100_000 + 50_000 * np.sin(2 * np.pi * t / 1200)
    alternating = np.repeat(np.tile([10_000.0, 190_000.0], 15), 60)
    sim = Simulator(np.concatenate([smooth, alternating]), SimConfig(), seed=1, job="poor")
    cfg = LoopConfig(mode="dry-run")
    target = registered(sim, cfg)
    k = Knowledge.new("poor", cfg)
    poor_loops = []
    for _ in range(70):
        sim.advance(60)
        it = iterate(target, k, PLAIN)
        emit_loop_events("poor", it, k, str(tmp_path / "store"), None)
        poor_loops.append(k.forecaster.poor_loops)
    worker.drain()
    events = [e for e in worker._client.events if e.event == FORECAST_POOR]
    assert max(poor_loops) > 15, poor_loops
    assert [e.payload["poor_loops"] for e in events] == [p for p in poor_loops if p >= 15]
    assert events[0].payload["poor_loops"] == 15 and 14 in poor_loops  # the 14th poor loop emitted nothing
    assert events[0].resource.id == "daedalus.job.poor"


def test_the_one_job_retrain_promotes_a_better_model_and_the_loop_swaps_it_in(prefect_harness, registered,
                                                                              tmp_path) -> None:
    from daedalus.flows.background import retrain_forecaster
    from tests.pipeline.test_pipeline_retrain import _zero_model

    t = np.arange(3 * 3600)
    sim = Simulator(100_000 + 40_000 * np.sin(2 * np.pi * t / 5400), SimConfig(), seed=2, job="swap")
    cfg = LoopConfig(mode="dry-run")
    registered(sim, cfg)
    sim.advance(3 * 3600)
    store = Store(str(tmp_path / "store"))
    k = Knowledge.new("swap", cfg)
    k.forecaster = _zero_model()
    k.forecaster.poor_loops = 15
    store.job(k.job).save(k)

    result = retrain_forecaster(job="swap", store_url=store.url, history_s=3 * 3600)
    assert result["promoted"] and result["old_wape_pct"] > 99 and result["new_wape_pct"] < 5
    assert retrain_forecaster(job="swap", store_url=store.url)["status"] == "already-pending"
    (_, message), = store.job("swap").pending()
    apply_messages(k, [message], cfg, 12, sim.now)
    assert k.forecaster.order == tuple(message.body["state"]["model"]["spec"]["order"])
    assert k.forecaster.poor_loops == 0 and not k.forecaster.retrain_needed


def test_the_loop_appends_to_the_lake_and_a_failing_append_never_breaks_it(prefect_harness, registered,
                                                                          tmp_path) -> None:
    from daedalus.flows.mape_k import mape_k

    sim = Simulator(np.full(600, 50_000.0), SimConfig(max_scaleout=4), seed=0, initial_scaleout=2, job="lake-loop")
    registered(sim, LoopConfig(max_scaleout=4, mode="dry-run"))
    sim.advance(120)
    lake = Lake(str(tmp_path / "lake"))
    mape_k(job="lake-loop", store_url=str(tmp_path / "store"), lake_url=lake.url)
    frame = lake.read("lake-loop")
    assert len(frame) == 2 * 120 and set(frame["worker"]) == {"worker-0", "worker-1"}
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the lake should be")
    sim.advance(60)
    summary = mape_k(job="lake-loop", store_url=str(tmp_path / "store"), lake_url=str(blocked))
    assert summary["kind"] in ("hold", "no-change", "scale-out", "scale-in")


def test_triggers_and_schedules_are_declared_for_the_deployments() -> None:
    from daedalus.flows.background import triggers
    from daedalus.flows.pipeline import schedules

    declared = triggers(lake_url="s3://lake")
    (rescaled,), (poor,) = declared["recovery-monitor"], declared["retrain-forecaster"]
    assert rescaled.expect == {RESCALED} and poor.expect == {FORECAST_POOR}
    assert rescaled.parameters["rescale_time"] == "{{ event.payload.time }}"
    assert rescaled.parameters["from_scaleout"] == "{{ event.payload['from'] }}"
    assert poor.parameters == {"job": "{{ event.payload.job }}", "store_url": "{{ event.payload.store_url }}",
                               "jobs_file": "{{ event.payload.jobs_file }}", "lake_url": "s3://lake"}
    assert set(schedules()) == {"validate-metrics", "retrain-forecasters", "compact-lake"}
    assert Forecaster().poor_loops_to_retrain == 15
