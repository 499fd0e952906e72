"""Small builders shared by the core tests."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from daedalus.models.config import LoopConfig
from daedalus.models.ports import Target
from daedalus.models.types import Observation
from daedalus.sim.job import SimulatedJob
from daedalus.sim.simulator import Simulator

T0 = 1_767_225_600.0
DAEDALUS = str(Path(sys.executable).parent / "daedalus")  # the console script of the environment under test
# JVM options for a test's short-lived JVM that reads no capacity (a pipeline test's Spark session, the Flink faults
# cluster): the JIT's C1 tier only and the serial collector. A JVM living minutes never pays back what C2 compiles,
# and 2 cores leave no room for parallel GC threads: the same work for half the CPU (11 pipeline tests: 99 -> 49
# CPU-s), where every CPU-second is the suite's wall time (`make test`'s second step keeps both cores busy).
SHORT_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def observation(n: int = 60, workers: int = 2, workload: float = 1_000.0, cpu: float = 0.5, lag: float = 0.0,
                uptime: float = 1_000.0, start: float = T0, scaleout: int | None = None) -> Observation:
    """A sound steady-state observation: throughput equals workload, shared evenly."""
    ts = start + np.arange(1, n + 1, dtype=float)
    names = [f"worker-{i}" for i in range(workers)]
    return Observation(
        job="j", timestamps=ts, workload=np.full(n, workload),
        throughput={w: np.full(n, workload / workers) for w in names},
        cpu={w: np.full(n, cpu) for w in names}, lag=np.full(n, lag), uptime_s=np.full(n, uptime),
        scaleout=workers if scaleout is None else scaleout,
    )


def simulated_target(sim: Simulator, cfg: LoopConfig) -> Target:
    """The loop's target on a simulated job, which is its metrics, its scaler and its clock at once."""
    job = SimulatedJob(sim)
    return Target("sim", job, job, job, cfg)
