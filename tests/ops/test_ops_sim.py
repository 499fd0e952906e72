"""The simulated job of deployed runs: persisted between processes, caught up with the wall clock, and the same
simulated job as one long-lived simulator would be."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest

from daedalus.connectors.jobs import load_jobs
from daedalus.connectors.sim_persistent import WARM_S, PersistentSimulatedJob, local_root, peek_now, received
from daedalus.connectors.targets import build_target
from daedalus.models.errors import ConfigurationError, ConnectorError
from daedalus.sim.simulator import Simulator
from tests.ops.conftest import write_jobs

WALL0 = 1_800_000_000.0


class Wall:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.t = WALL0

    def __call__(self) -> float:
        return self.t


def _spec(tmp_path: Path, **sim):
    path = write_jobs(tmp_path / "jobs.yaml", [{"name": "wc", "sim": {"speedup": 10, **sim}}],
                      defaults={"scaleout": {"min": 1, "max": 12}})
    return load_jobs(path).job("wc")


def test_runs_in_separate_processes_see_one_continuous_simulated_job(tmp_path):
    """Reloading from the pickle every 61.25 s (×10 speedup), with rescales, gives exactly the observations of one
    simulator stepped straight through — the trimmed history loses nothing the loop can observe."""
    spec, wall = _spec(tmp_path), Wall()
    job = PersistentSimulatedJob(spec, tmp_path / "store", wall_clock=wall)
    reference = Simulator(np.tile(job.cycle(), 2), dataclasses.replace(job.state.sim.config), seed=0, job="wc")
    reference.advance(WARM_S)
    assert job.now() == reference.now == int(WALL0)
    for k in range(25):
        wall.t += 61.25
        job = PersistentSimulatedJob(spec, tmp_path / "store", wall_clock=wall)  # a new flow run
        reference.advance(int(job.now() - reference.now))
        assert job.now() - reference.now == 0
        since = job.now() - 650
        a, b = job.observe("wc", since, job.now()), reference.observe(since, job.now())
        np.testing.assert_array_equal(a.timestamps, b.timestamps)
        np.testing.assert_array_equal(a.workload, b.workload)
        np.testing.assert_array_equal(a.lag, b.lag)
        np.testing.assert_array_equal(a.uptime_s, b.uptime_s)
        for w in b.workers:
            np.testing.assert_array_equal(a.cpu[w], b.cpu[w])
            np.testing.assert_array_equal(a.throughput[w], b.throughput[w])
        if k in (4, 11):
            target = 7 if k == 4 else 3
            assert job.scale("wc", target, f"d{k}").startswith("scaled simulated job wc")
            reference.scale(target)
    assert job.current("wc") == reference.scaleout == 3
    # 612.5 simulated seconds per run at speedup 10 (61.25 s × 10): the carry keeps the half seconds.
    assert job.now() == int(WALL0) + 15_312  # 25 × 612.5, the last half second still to come


def test_the_pickle_stays_small_whatever_the_age(tmp_path):
    spec, wall = _spec(tmp_path), Wall()
    sizes = []
    for _ in range(12):
        wall.t += 60
        PersistentSimulatedJob(spec, tmp_path / "store", wall_clock=wall)
        sizes.append((tmp_path / "store" / "wc" / "sim.pickle").stat().st_size)
    # Bounded by the history it keeps (HISTORY_S), not by the job's age; the stages' load (a bottleneck) adds a little.
    assert max(sizes) < 450_000 and sizes[-1] <= 1.05 * sizes[2]


def test_dry_run_and_out_of_range_scale(tmp_path):
    spec, wall = _spec(tmp_path), Wall()
    job = PersistentSimulatedJob(spec, tmp_path / "store", wall_clock=wall)
    assert job.scale("wc", 5, "d", dry_run=True) == "dry run: would scale wc 12 → 5"
    assert PersistentSimulatedJob(spec, tmp_path / "store", wall_clock=wall).current("wc") == 12
    with pytest.raises(ConnectorError, match="has 1 … 12 workers, not 13"):
        job.scale("wc", 13, "d")


def test_the_job_records_every_rescale_it_received_with_the_rescale(tmp_path):
    """The known answer of `bench chaos`: each rescale, its decision id, from and to, saved in the same write; a dry
    run and a refused one are not received."""
    spec, wall = _spec(tmp_path), Wall()
    store = str(tmp_path / "store")
    job = PersistentSimulatedJob(spec, tmp_path / "store", wall_clock=wall)
    job.scale("wc", 5, "d", dry_run=True)
    with pytest.raises(ConnectorError):
        job.scale("wc", 13, "bad")
    wall.t += 60
    job.scale("wc", 6, "d1")
    wall.t += 60
    PersistentSimulatedJob(spec, tmp_path / "store", wall_clock=wall).scale("wc", 4, "d2")
    assert received("wc", store) == [("d1", 12, 6, WALL0 + 60), ("d2", 6, 4, WALL0 + 120)]
    assert received("other", store) == []


def test_a_changed_jobs_file_entry_starts_a_new_simulated_job(tmp_path):
    wall = Wall()
    job = PersistentSimulatedJob(_spec(tmp_path), tmp_path / "store", wall_clock=wall)
    job.scale("wc", 4, "d")
    wall.t += 60
    assert PersistentSimulatedJob(_spec(tmp_path), tmp_path / "store", wall_clock=wall).current("wc") == 4
    changed = PersistentSimulatedJob(_spec(tmp_path, seed=3), tmp_path / "store", wall_clock=wall)
    assert changed.current("wc") == 12 and changed.now() == int(wall.t)


def test_peek_reads_the_clock_without_advancing(tmp_path):
    spec, wall = _spec(tmp_path), Wall()
    PersistentSimulatedJob(spec, tmp_path / "store", wall_clock=wall)
    path = tmp_path / "store" / "wc" / "sim.pickle"
    before = path.read_bytes()
    assert peek_now(spec, str(tmp_path / "store"), wall_now=WALL0 + 30.05) == int(WALL0) + 300
    assert path.read_bytes() == before
    state = pickle.loads(before)
    assert state.sim.now == int(WALL0)


def test_the_target_builder_uses_it_and_refuses_remote_stores(tmp_path):
    spec = _spec(tmp_path)
    target = build_target(spec, str(tmp_path / "store"))
    assert isinstance(target.metrics, PersistentSimulatedJob) and target.scaler is target.metrics
    assert target.clock.now() == target.metrics.now()
    obs = target.metrics.observe("wc", None, target.clock.now())
    assert len(obs.timestamps) == WARM_S and obs.scaleout == 12
    assert local_root("file:///tmp/x") == Path("/tmp/x")
    with pytest.raises(ConfigurationError, match="local folder, not 's3://bucket/k'"):
        local_root("s3://bucket/k")


def test_a_corrupt_pickle_is_reported_not_replaced(tmp_path):
    spec, wall = _spec(tmp_path), Wall()
    PersistentSimulatedJob(spec, tmp_path / "store", wall_clock=wall)
    (tmp_path / "store" / "wc" / "sim.pickle").write_bytes(b"garbage")
    with pytest.raises(ConnectorError, match=r"unreadable simulated job .* delete it to start afresh"):
        PersistentSimulatedJob(spec, tmp_path / "store", wall_clock=wall)
