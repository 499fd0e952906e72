"""`daedalus bench loop`: the cost of one MAPE-K iteration, and how many jobs one process serves per minute.

Each job is a Simulator with its own Knowledge, driven through models.loop.iteration.iterate with the PLAIN phases (the
task functions without Prefect), exactly as the simulation runner drives the Daedalus policy. Every simulated
minute all N jobs advance by 60 s, then each runs one iteration. Two costs are recorded per iteration:

- `loop_ms`: analyze + plan (the loop's own cost, forecaster update included), as Iteration.loop_ms measures it;
- the wall time of the whole iteration (monitor, analyze, plan, execute), which is what bounds how many jobs one
  process can serve: jobs_per_minute = 60,000 ms / mean iteration ms. The simulator's own stepping is timed
  apart: it stands in for the streaming job, not for the autoscaler.

A single job runs from a cold start (the forecaster fits auto-ARIMA once its window holds enough data, inside
the loop, as in production). For N > 1 jobs, fitting N models would measure auto-ARIMA, not the loop, so one
template job is warmed up first (default 2 h: forecaster fitted, its window full) and each of the N jobs starts
from a deep copy of its knowledge, with a simulator of its own (its own seed, so its own noise and worker
capacities) that continues the same workload at the same scale-out from the end of the warm-up. A fresh
simulator holds only the measured hours of history, which keeps 1,000 jobs within a few GB.
"""

from __future__ import annotations

import copy
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from daedalus.models.config import LoopConfig
from daedalus.models.knowledge import Knowledge
from daedalus.models.ports import Target
from daedalus.sim.job import SimulatedJob
from daedalus.sim.scenario import scenario
from daedalus.sim.simulator import SimConfig, Simulator
from daedalus.sim.workloads import sine_workload

STEP_S = 60


@dataclass
class _Job:
    sim: Simulator
    target: Target
    knowledge: Knowledge
    workload: np.ndarray


def _job(workload: np.ndarray, sim_config: SimConfig, loop_config: LoopConfig, knowledge: Knowledge, seed: int,
         initial_scaleout: int | None = None) -> _Job:
    sim = Simulator(workload, sim_config, seed=seed, initial_scaleout=initial_scaleout, job="bench")
    adapter = SimulatedJob(sim)
    target = Target("bench", metrics=adapter, scaler=adapter, clock=adapter, config=loop_config)
    return _Job(sim, target, knowledge, workload)


def _template(hours: float, seed: int) -> _Job:
    """A fresh job on the paper's sine workload (two periods in 6 h), peak at 90 % of 12 workers' capacity."""
    sim_config, loop_config, workload = scenario(sine_workload(hours=hours), 12, 0.9, seed)
    return _job(workload, sim_config, loop_config, Knowledge.new("bench", loop_config), seed)


def _continue(template: _Job, seed: int) -> _Job:
    """A job with a copy of the template's knowledge and a new simulator that starts where the template is."""
    offset = int(template.sim.now - template.sim.config.start)
    config = replace(template.sim.config, start=template.sim.now)
    return _job(template.workload[offset:], config, template.target.config, copy.deepcopy(template.knowledge), seed,
                template.sim.scaleout)


def _step(jobs: list[_Job], elapsed: float, loop_ms: list[tuple[float, float]], iter_ms: list[float]) -> float:
    """Advance every job one minute and run its iteration; returns the simulator's share in ms."""
    from daedalus.models.loop.iteration import PLAIN, iterate

    started = time.perf_counter()
    for job in jobs:
        job.sim.advance(STEP_S)
    sim_ms = 1000 * (time.perf_counter() - started)
    for job in jobs:
        t0 = time.perf_counter()
        it = iterate(job.target, job.knowledge, PLAIN)
        iter_ms.append(1000 * (time.perf_counter() - t0))
        loop_ms.append((elapsed, it.loop_ms))
    return sim_ms


def run_loop_bench(jobs: int = 1, hours: float = 6.0, warmup_hours: float | None = None, seed: int = 0,
                   on_minute: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Step `jobs` jobs together for `hours` simulated hours (after `warmup_hours`); the figures as a dict."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if not hours > 0:
        raise ValueError(f"hours must be positive, got {hours}")
    warmup = (0.0 if jobs == 1 else 2.0) if warmup_hours is None else warmup_hours
    if warmup < 0:
        raise ValueError(f"warmup_hours must be ≥ 0, got {warmup}")
    warm_minutes, minutes = round(warmup * 60), round(hours * 60)
    template = _template((warm_minutes + minutes) * STEP_S / 3600, seed)
    scratch_loop: list[tuple[float, float]] = []
    scratch_iter: list[float] = []
    for m in range(warm_minutes):
        _step([template], (m + 1) * STEP_S, scratch_loop, scratch_iter)
        if on_minute:
            on_minute(m + 1, warm_minutes + minutes)
    fleet = [template] if jobs == 1 else [_continue(template, seed + 1 + i) for i in range(jobs)]
    loop_ms: list[tuple[float, float]] = []
    iter_ms: list[float] = []
    sim_ms = 0.0
    started = time.perf_counter()
    for m in range(minutes):
        sim_ms += _step(fleet, (m + 1) * STEP_S, loop_ms, iter_ms)
        if on_minute:
            on_minute(warm_minutes + m + 1, warm_minutes + minutes)
    wall_s = time.perf_counter() - started
    return summarize(loop_ms, iter_ms, jobs, hours, warmup, wall_s, sim_ms)


def summarize(loop_ms: list[tuple[float, float]], iter_ms: list[float], jobs: int, hours: float, warmup: float,
              wall_s: float, sim_ms: float) -> dict[str, Any]:
    at = np.array([t for t, _ in loop_ms])
    ms = np.array([v for _, v in loop_ms])
    first, last = ms[at <= 3600], ms[at > at.max() - 3600]
    mean_iter = float(np.mean(iter_ms))
    return {
        "loop_ms": {
            "median": float(np.median(ms)),
            "p95": float(np.percentile(ms, 95)),
            "max": float(ms.max()),
            "first_hour_median": float(np.median(first)),
            "last_hour_median": float(np.median(last)),
        },
        "iteration_ms": {"mean": mean_iter, "median": float(np.median(iter_ms)),
                         "p95": float(np.percentile(iter_ms, 95))},
        "jobs": jobs,
        "jobs_per_minute": 60_000.0 / mean_iter,
        "iterations": len(iter_ms),
        "hours": hours,
        "warmup_hours": warmup,
        "wall_s": wall_s,
        "simulator_s": sim_ms / 1000,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
