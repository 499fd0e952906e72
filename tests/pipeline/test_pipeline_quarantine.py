"""A quarantine holds a job's scaling. Holding an overloaded job lets its backlog grow, so the hold says so loudly
and names the command that lifts it; the `release-job` flow posts the same release as `daedalus release`."""

from __future__ import annotations

import numpy as np
import pytest

from daedalus.connectors.store import Store
from daedalus.models.config import LoopConfig
from daedalus.models.errors import ConfigurationError
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.iteration import PLAIN, Iteration, iterate
from daedalus.models.ports import Target
from daedalus.sim.job import SimulatedJob
from daedalus.sim.simulator import SimConfig, Simulator
from tests.ops.conftest import write_jobs

FALSE_POSITIVE = ("metric validation of the window ending 2026-01-01 00:15:00Z failed: workers_match_scaleout "
                  "(1 rows: as many workers report as the scale-out says)")


def held_at_five(workload: float, loops: int = 3) -> Iteration:
    """A quarantined job at scale-out 5 (about 538,000/s of capacity), run for a few loops under `workload`."""
    sim = Simulator(np.full(3600, workload), SimConfig(), seed=1, initial_scaleout=5, job="ads")
    job = SimulatedJob(sim)
    cfg = LoopConfig(max_scaleout=10)
    target, k = Target("ads", job, job, job, cfg), Knowledge.new("ads", cfg)
    k.quarantine = FALSE_POSITIVE
    for _ in range(loops):
        sim.advance(60)
        it = iterate(target, k, PLAIN)
    return it


def quarantine_reason(it: Iteration) -> str:
    assert it.decision.kind == "hold"
    (reason,) = [r for r in it.decision.reasons if r.startswith("quarantined by metric validation: ")]
    return reason


def test_a_quarantine_holding_an_overloaded_job_says_so_and_how_to_release_it() -> None:
    it = held_at_five(943_540.0)
    a, reason = it.analysis, quarantine_reason(it)
    assert FALSE_POSITIVE in reason
    assert a.avg_workload > a.capacity(5) > 0
    assert (f"OVERLOADED while held: workload 943,540/s exceeds the capacity of {a.capacity(5):,.0f}/s at "
            "scale-out 5") in reason
    assert "daedalus release ads --reason" in reason


def test_a_quarantine_of_a_job_within_its_capacity_names_only_the_release() -> None:
    reason = quarantine_reason(held_at_five(300_000.0))
    assert "OVERLOADED" not in reason and "daedalus release ads --reason" in reason


@pytest.mark.slow
def test_the_release_job_flow_posts_the_release_the_command_posts(prefect_harness, tmp_path) -> None:
    from daedalus.flows.release import release_job

    jobs, store = write_jobs(tmp_path / "jobs.yaml", [{"name": "ads"}]), str(tmp_path / "store")
    k = Knowledge.new("ads", LoopConfig())
    k.quarantine = FALSE_POSITIVE
    Store(store).job(k.job).save(k)
    result = release_job(job="ads", reason="one row inside a rescale", operator="ana", store_url=store,
                         jobs_file=str(jobs))
    (_, msg), = Store(store).job("ads").pending()
    assert (msg.kind, msg.body) == ("release", {"operator": "ana", "reason": "one row inside a rescale"})
    assert result["message"] == msg.id
    with pytest.raises(ConfigurationError, match="no job 'ghost'"):
        release_job(job="ghost", reason="x", store_url=store, jobs_file=str(jobs))
