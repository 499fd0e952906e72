"""Run a policy against the simulated job on the simulated job's clock, one policy step per simulated minute.

Every policy — Daedalus (the MAPE-K loop body of models.loop) and the baselines — takes its step through the
same ports (models.ports.Target) over the same simulated job, so only the policy differs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daedalus.models.config import LoopConfig
from daedalus.models.knowledge import Knowledge
from daedalus.models.policies.base import Policy, Step
from daedalus.models.ports import Target
from daedalus.sim.job import SimulatedJob
from daedalus.sim.simulator import SimConfig, SimHistory, Simulator

JOB = "sim"


@dataclass
class RunResult:
    """Everything a report needs from one simulated run."""

    policy: str
    history: SimHistory
    max_scaleout: int
    true_capacities: np.ndarray
    lower_bound: np.ndarray  # per second
    rescales: int = 0
    retrains: int = 0
    loop_ms: list[tuple[float, float]] = field(default_factory=list)  # (elapsed s, ms)
    capacity_error_pct: list[float] = field(default_factory=list)
    forecast_wape: list[float] = field(default_factory=list)
    decisions: list[tuple[float, str, int, int]] = field(default_factory=list)  # (elapsed s, kind, from, to)
    knowledge: Knowledge | None = None
    rescale_times: list[float] = field(default_factory=list)  # elapsed s of each executed rescale
    # Per loop, what `daedalus explain` shows of it: the decision, its reasons and the capacities, estimated and true
    steps: list[dict[str, Any]] = field(default_factory=list)
    rescale_budget: int = 6  # rescales allowed in any `RESCALE_WINDOW_S` (the loop config's), for `budget_exceeded`


def _capacity_error(sim: Simulator, estimate: float) -> float | None:
    true = sim.true_capacity(sim.scaleout)
    if sim.rescaling or not math.isfinite(estimate) or true <= 0:
        return None
    return 100.0 * abs(estimate - true) / true


def run(
    workload: np.ndarray,
    policy: Policy,
    sim_config: SimConfig | None = None,
    loop_config: LoopConfig | None = None,
    seed: int = 0,
    on_loop: Callable[[int, int], None] | None = None,
    sim: Simulator | None = None,
) -> RunResult:
    """Simulate the whole workload under `policy`; `on_loop(done, total)` reports progress. `sim` is a simulated job
    the caller built over the same workload and config (a backtest's replayed job, from the scale-out its history
    started at); by default, the simulator from the maximum scale-out."""
    sim_config = sim_config or SimConfig()
    cfg = loop_config or LoopConfig(max_scaleout=sim_config.max_scaleout,
                                    checkpoint_interval=sim_config.checkpoint_interval)
    sim = sim or Simulator(workload, sim_config, seed=seed, job=JOB)
    job = SimulatedJob(sim)
    target = Target(JOB, metrics=job, scaler=job, clock=job, config=cfg)
    result = RunResult(policy.name, sim.history(), sim_config.max_scaleout, sim.true_capacities(),
                       sim.lower_bound_scaleout(workload), rescale_budget=cfg.rescale_budget)
    loops = math.ceil(len(workload) / cfg.loop_interval_s)
    step = int(cfg.loop_interval_s)
    for n in range(loops):
        sim.advance(min(step, len(workload) - n * step))
        _record(result, sim, policy.step(target), elapsed=n * step + step)
        if on_loop is not None:
            on_loop(n + 1, loops)
    result.history = sim.history()
    result.knowledge = getattr(policy, "knowledge", None)
    return result


def _record(result: RunResult, sim: Simulator, s: Step, elapsed: float) -> None:
    result.loop_ms.append((elapsed, s.loop_ms))
    result.decisions.append((elapsed, s.kind, s.current, s.target))
    result.rescales += s.executed
    result.steps.append({"t": elapsed, "kind": s.kind, "from": s.current, "to": s.target, "executed": s.executed,
                         "reasons": list(s.reasons), "forecast_peak": s.forecast_peak, "capacity_estimate": s.capacity,
                         "capacity_estimate_target": s.capacity_target,
                         "true_capacity": sim.true_capacity(s.current) if s.current >= 1 else None,
                         "true_capacity_target": sim.true_capacity(s.target) if s.target >= 1 else None})
    if s.executed:
        result.rescale_times.append(elapsed)
    result.retrains += s.retrained
    err = None if s.capacity is None or s.kind == "hold" else _capacity_error(sim, s.capacity)
    if err is not None:
        result.capacity_error_pct.append(err)
    if s.forecast_wape is not None and math.isfinite(s.forecast_wape):
        result.forecast_wape.append(s.forecast_wape)
