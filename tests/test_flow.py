"""A simulated hour through the real `mape-k` Prefect flow: decisions, knowledge, artifacts."""

from __future__ import annotations

import numpy as np
import pytest
from prefect.artifacts import Artifact

from connectors.store import KnowledgeStore
from sim.runner import JOB, run
from sim.scenario import scenario
from sim.workloads import sine_workload


@pytest.mark.slow
def test_a_simulated_hour_through_the_prefect_flow(prefect_harness, tmp_path):
    sim_config, loop_config, workload = scenario(sine_workload(hours=1.0), 12, 0.9, seed=0)
    store_url = str(tmp_path / "knowledge")
    result = run(workload, "daedalus", sim_config, loop_config, seed=0, orchestrated=True, store_url=store_url)

    # Every loop ran and the knowledge of the last one is persisted, older versions kept to fall back on.
    store = KnowledgeStore(store_url)
    assert store.versions(JOB)[-1] == 60
    assert len(store.versions(JOB)) == store.keep
    knowledge = store.load(JOB).knowledge
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
    assert capacity is not None and '"scale_out": 12' in capacity.data
    assert Artifact.get(f"forecast-{JOB}") is not None
    assert np.isfinite(result.loop_ms[-1][1])
