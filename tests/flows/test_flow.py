"""A simulated hour through the real `mape-k` Prefect flow: decisions, knowledge, artifacts."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest
from prefect.artifacts import Artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterStartTime,
)
from prefect.client.schemas.sorting import FlowRunSort

from daedalus.cli.simulate import FlowPolicy
from daedalus.connectors.store import Store
from daedalus.sim.runner import JOB, run
from daedalus.sim.scenario import scenario
from daedalus.sim.workloads import sine_workload


@pytest.mark.slow
def test_a_simulated_hour_through_the_prefect_flow(prefect_harness, tmp_path):
    sim_config, loop_config, workload = scenario(sine_workload(hours=1.0), 12, 0.9, seed=0)
    # The paper's planner, pinned: this test is about the flow, and needs a rescale within the hour. The
    # model-predictive one keeps 12 here, rightly: the sine's peak is back within its 30-minute horizon.
    loop_config = replace(loop_config, planner="daedalus-paper")
    store_url = str(tmp_path / "knowledge")
    started = datetime.now(UTC)
    result = run(workload, FlowPolicy(store_url), sim_config, loop_config, seed=0)

    # Every loop ran and the knowledge of the last one is persisted, older versions kept to fall back on.
    store = Store(store_url)
    # One version per loop, plus one per executed action: its intent is written before the target is touched.
    assert store.job(JOB).versions()[-1] == 60 + result.rescales
    assert len(store.job(JOB).versions()) == store.keep
    knowledge = store.job(JOB).load().knowledge
    assert knowledge.loops == 60 and knowledge.forecaster.fitted

    # The workload was served: what arrived was processed, but for the last seconds in flight.
    h = result.history
    arrived = float(h.workload.sum())
    assert h.processed[-1] >= 0.995 * arrived
    assert h.lag[-1] < 60 * h.workload[-1]

    # Starting at the maximum with a workload at ~50 % of it, the loop scales in, and says why.
    assert result.rescales >= 1 and h.scaleout[-1] < 12
    executed = [e for e in knowledge.ledger if e.state == "executed"]
    assert executed and all(e.reasons for e in executed)

    # The UI's artifacts, keyed per job.
    decision = Artifact.get(f"decision-{JOB}")
    capacity = Artifact.get(f"capacity-{JOB}")
    assert decision is not None and "## Reasons" in decision.data
    assert capacity is not None and '"scale-out": 12' in capacity.data
    assert Artifact.get(f"forecast-{JOB}") is not None
    assert np.isfinite(result.loop_ms[-1][1])

    # Five tasks per run, the four phases and publish: each task costs the server events and a row per minute.
    assert _task_names_of_first_run(started) == {"monitor", "analyze", "plan", "execute", "publish"}


def test_the_loops_tasks_get_their_arguments_unwalked(prefect_harness):
    # Prefect walks a task's arguments for futures and states to wait on; the loop's tasks take the job's whole
    # knowledge, and the walk was half a fleet run's CPU (docs/fleet.md). A state in a list shows whether it walked.
    from prefect import task
    from prefect.cache_policies import NO_CACHE
    from prefect.states import Completed

    from daedalus.tasks.unwalked import unwalked

    @task(cache_policy=NO_CACHE)
    def handed(x: list, *, y: list | None = None) -> tuple[list, list | None]:
        return x, y

    state = Completed(data=7)
    assert handed([state], y=[state]) == ([7], [7])  # walked: Prefect put the state's result in its place
    x, y = unwalked(handed)([state], y=[state])
    assert x[0] is state and y is not None and y[0] is state


def _task_names_of_first_run(since: datetime, timeout_s: float = 60.0) -> set[str]:
    """Task runs reach the API through events the server records asynchronously: wait for them."""
    with get_client(sync_client=True) as client:
        # This test's first run: other tests of the session run `mape-k` on the same server, hundreds of times.
        mine = FlowRunFilter(start_time=FlowRunFilterStartTime(after_=since))
        first = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["mape-k"])),
                                      flow_run_filter=mine, sort=FlowRunSort.START_TIME_ASC, limit=1)[0]
        runs = FlowRunFilter(id=FlowRunFilterId(any_=[first.id]))
        deadline, names = time.monotonic() + timeout_s, set()
        while time.monotonic() < deadline:
            names = {t.name.rsplit("-", 1)[0] for t in client.read_task_runs(flow_run_filter=runs)}
            if {"monitor", "analyze", "plan", "execute", "publish"} <= names:
                break
            time.sleep(1)
        return names
