"""Fleet retraining on real Spark (local): jobs built from data/workloads/multiday traces are retrained,
backtested against their current models, and only the improved models are promoted."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from daedalus.connectors.lake import Lake
from daedalus.connectors.store import Store
from daedalus.models.config import LoopConfig
from daedalus.models.forecast import Forecaster
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.messages import apply_messages
from daedalus.tasks.retrain import HOLDOUT_S, backtest, step_means
from tests.pipeline.conftest import T0, rows, write

pytestmark = pytest.mark.slow
HOURS = 3
UNTIL = T0 + HOURS * 3600


def _trace(data_dir, name: str, level: float, seed: int) -> np.ndarray:
    from daedalus.sim.workloads import load_workload

    y = load_workload(data_dir / "workloads" / "multiday" / f"{name}_5min.csv")
    window = y[86_400:86_400 + HOURS * 3600] / y.mean() * level
    return window * (1 + np.random.default_rng(seed).normal(0, 0.02, window.size))


def _zero_model() -> Forecaster:
    """A current model that forecasts 0 for everything: its held-out WAPE is exactly 1."""
    state = Forecaster().to_state()
    state["model"] = {"spec": {"order": [0, 0, 0], "seasonal_order": [0, 0, 0, 0], "trend": "c"},
                      "params": [0.0, 1.0], "param_names": ["intercept", "sigma2"], "fitted_at": T0,
                      "scale": 1.0}
    return Forecaster.from_state(state)


def _save(store: Store, job: str, forecaster: Forecaster) -> None:
    k = Knowledge.new(job, LoopConfig())
    k.forecaster = forecaster
    store.job(k.job).save(k)


@pytest.fixture(scope="module")
def fleet(data_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    lake, store = Lake(str(root / "lake")), Store(str(root / "store"))
    workloads = {"zero-model": _trace(data_dir, "wiki_en", 80_000, 1),
                 "same-model": _trace(data_dir, "taxi", 50_000, 2),
                 "no-model": _trace(data_dir, "IoT", 120_000, 3), "malformed": _trace(data_dir, "google", 60_000, 4)}
    for job, workload in workloads.items():
        columns = rows(job, workload.size, workload=workload)
        if job == "malformed":
            columns["workload"][777] = -1.0
        write(lake, columns)
    write(lake, rows("too-short", 1200, workload=5_000.0, start=UNTIL - 1200))
    _save(store, "zero-model", _zero_model())
    # The model the retrain will find itself: fitted on the same training steps, so not better by 1 %.
    ends, means = step_means(T0 + 1 + np.arange(workloads["same-model"].size), workloads["same-model"], 30.0)
    train = ends <= ends[-1] - HOLDOUT_S
    _save(store, "same-model", Forecaster.fit_from_history(ends[train], means[train], fit_steps=240,
                                                           **Forecaster().config()))
    _save(store, "too-short", _zero_model())
    return lake, store, workloads


@pytest.fixture(scope="module")
def retrained(prefect_harness, spark, fleet):
    from daedalus.flows.pipeline import retrain_forecasters

    lake, store, _ = fleet
    versions = {job: store.job(job).versions() for job in lake.jobs()}
    result = retrain_forecasters(lake_url=lake.url, store_url=store.url, history_s=HOURS * 3600, until=UNTIL,
                                 spark_master="local[2]")
    return result, versions


def test_only_improved_models_are_promoted(retrained, fleet) -> None:
    result, _ = retrained
    lake, store, _ = fleet
    by_job = {r["job"]: r for r in result["outcomes"]}
    status = {job: r["status"] for job, r in by_job.items()}
    assert status == {"zero-model": "promoted", "same-model": "kept", "no-model": "promoted",
                      "too-short": "failed", "malformed": "skipped"}
    # Forecasting 0 misses everything (WAPE 1), but for the first half step, interpolated from the last actual step.
    assert 99.0 < by_job["zero-model"]["old_wape_pct"] <= 100.0
    assert by_job["zero-model"]["new_wape_pct"] < 10.0
    same = by_job["same-model"]
    assert abs(same["new_wape_pct"] - same["old_wape_pct"]) <= 0.05  # percentage points: the same model found
    assert by_job["no-model"]["old_wape_pct"] is None
    assert "fewer than min_fit_steps" in by_job["too-short"]["note"]
    assert "1 malformed rows" in by_job["malformed"]["note"]
    assert sorted(result["promoted"]) == ["no-model", "zero-model"]
    assert {job: [m.kind for _, m in store.job(job).pending()] for job in lake.jobs()} == {
        "zero-model": ["forecaster"], "no-model": ["forecaster"], "same-model": [], "too-short": [], "malformed": []}


def test_the_store_changes_only_when_the_loop_swaps_the_promoted_model_in(retrained, fleet) -> None:
    result, versions = retrained
    lake, store, workloads = fleet
    assert {job: store.job(job).versions() for job in lake.jobs()} == versions  # nothing written by the retrain
    (_, message), = store.job("zero-model").pending()
    k = store.job("zero-model").load().knowledge
    apply_messages(k, [message], LoopConfig(), 2, UNTIL)
    assert k.forecaster.order != (0, 0, 0)
    # The swapped-in model is the backtested one: on the held-out data it scores what the flow reported.
    ends, means = step_means(T0 + 1 + np.arange(workloads["zero-model"].size), workloads["zero-model"], 30.0)
    promoted = {"config": Forecaster().config(), "model": message.body["state"]["model"]}
    again = backtest("zero-model", ends, means, promoted)
    reported = next(r for r in result["outcomes"] if r["job"] == "zero-model")["new_wape_pct"]
    assert again.old_wape == pytest.approx(reported / 100, abs=5e-4)


def test_an_interrupted_retrain_leaves_every_job_on_its_previous_version(prefect_harness, spark, fleet) -> None:
    from daedalus.flows.pipeline import retrain_forecasters

    lake, store, _ = fleet
    for job in lake.jobs():
        store.job(job).ack([path for path, _ in store.job(job).pending()])
    versions = {job: store.job(job).versions() for job in lake.jobs()}
    errors: list[BaseException] = []

    def run() -> None:
        try:
            retrain_forecasters(lake_url=lake.url, store_url=store.url, history_s=HOURS * 3600, until=UNTIL,
                                spark_master="local[2]")
        except BaseException as exc:  # the cancelled Spark job fails the flow
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 120
    while not tracker.getActiveJobsIds() and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    spark.sparkContext.cancelAllJobs()
    thread.join(timeout=300)
    assert errors, "the retrain finished before it could be interrupted"
    assert {job: store.job(job).versions() for job in lake.jobs()} == versions
    assert all(not store.job(job).pending() for job in lake.jobs())
