"""Run a policy against the simulated job on the virtual clock, one decision per simulated minute.

The Daedalus policy goes through the same iteration code as the Prefect flow: its plain task functions by
default (fast, for benchmarks), or the `mape-k` flow itself with `orchestrated=True` (the demo).
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from connectors import targets
from connectors.simulated import SimulatedJob
from models.config import LoopConfig
from models.knowledge import Knowledge
from models.policies.base import Policy
from sim.simulator import SimConfig, SimHistory, Simulator

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


def _capacity_error(sim: Simulator, estimate: float) -> float | None:
    true = sim.true_capacity(sim.scaleout)
    if sim.rescaling or not math.isfinite(estimate) or true <= 0:
        return None
    return 100.0 * abs(estimate - true) / true


@contextlib.contextmanager
def _in_process_prefect(orchestrated: bool) -> Iterator[None]:
    """Flow-run heartbeats detect crashed workers; in one process on a virtual clock they only add a
    second-long thread join to every run, so they are off here."""
    if not orchestrated:
        yield
        return
    from prefect.settings import PREFECT_RUNNER_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_RUNNER_HEARTBEAT_FREQUENCY: None}):
        yield


def run(
    workload: np.ndarray,
    policy: str | Policy = "daedalus",
    sim_config: SimConfig | None = None,
    loop_config: LoopConfig | None = None,
    seed: int = 0,
    orchestrated: bool = False,
    store_url: str | None = None,
    on_loop: Callable[[int, int], None] | None = None,
    retrain_every_s: float | None = 3600.0,
) -> RunResult:
    """Simulate the whole workload; `on_loop(done, total)` reports progress.

    The background retraining of a deployment (WAPE-triggered, and the periodic fleet retraining every
    `retrain_every_s`) is emulated between loops, outside the loop's measured cost.
    """
    sim_config = sim_config or SimConfig()
    cfg = loop_config or LoopConfig(max_parallelism=sim_config.max_scaleout,
                                    checkpoint_interval_s=sim_config.checkpoint_interval_s)
    sim = Simulator(workload, sim_config, seed=seed, job=JOB)
    job = SimulatedJob(sim)
    target = targets.Target(JOB, metrics=job, scaler=job, clock=job, config=cfg)
    name = policy if isinstance(policy, str) else policy.name
    result = RunResult(name, sim.history(), sim_config.max_scaleout, sim.true_capacities(),
                       sim.lower_bound_scaleout(workload))
    knowledge = Knowledge.new(JOB, cfg)
    loops = math.ceil(len(workload) / cfg.loop_interval_s)
    step = int(cfg.loop_interval_s)
    with tempfile.TemporaryDirectory() as tmp, _in_process_prefect(orchestrated):
        store = store_url or f"{tmp}/knowledge"
        if orchestrated:
            targets.register(target)
        try:
            for n in range(loops):
                sim.advance(min(step, len(workload) - n * step))
                elapsed = n * step + step
                if isinstance(policy, str) and policy == "daedalus":
                    _daedalus_loop(result, sim, target, knowledge, orchestrated, store, elapsed)
                    if not orchestrated:
                        _retrain_in_background(result, knowledge, sim.now, elapsed, retrain_every_s)
                else:
                    _policy_loop(result, sim, target, policy, elapsed)
                if on_loop is not None:
                    on_loop(n + 1, loops)
        finally:
            if orchestrated:
                targets.unregister(JOB)
        if orchestrated:
            from connectors.store import KnowledgeStore

            knowledge = KnowledgeStore(store).load(JOB).knowledge or knowledge
    result.history = sim.history()
    result.knowledge = knowledge if name == "daedalus" else None
    return result


def _daedalus_loop(result: RunResult, sim: Simulator, target: targets.Target, knowledge: Knowledge,
                   orchestrated: bool, store: str, elapsed: float) -> None:
    if orchestrated:
        from flows.mape_k import mape_k

        summary = mape_k(job=JOB, store_url=store)
        kind, cur, tgt, ms = summary["kind"], summary["current"], summary["target"], summary["loop_ms"]
        action, capacity, wape = summary["action"], summary["capacity_current"], summary["forecast_wape"]
    else:
        from flows.mape_k import PLAIN, iterate

        it = iterate(target, knowledge, PLAIN)
        d, a = it.decision, it.analysis
        kind, cur, tgt, ms = d.kind, d.current, d.target, it.loop_ms
        action = None if it.action is None else it.action.state
        capacity, wape = a.capacity(a.scaleout), a.forecast.previous_wape
    result.loop_ms.append((elapsed, ms))
    result.decisions.append((elapsed, kind, cur, tgt))
    if action == "executed":
        result.rescales += 1
    err = _capacity_error(sim, capacity) if kind != "hold" else None
    if err is not None:
        result.capacity_error_pct.append(err)
    if wape is not None and math.isfinite(wape):
        result.forecast_wape.append(wape)


def _retrain_in_background(result: RunResult, knowledge: Knowledge, now: float, elapsed: float,
                           every_s: float | None) -> None:
    f = knowledge.forecaster
    periodic = every_s is not None and f.fitted and elapsed % every_s == 0
    if f.retrain_needed or periodic:
        try:
            f.retrain(now)
            result.retrains += 1
        except ValueError:  # too little data in the window: the loop keeps its model
            pass


def _policy_loop(result: RunResult, sim: Simulator, target: targets.Target, policy: str | Policy,
                 elapsed: float) -> None:
    if isinstance(policy, str):
        raise ValueError(f"unknown policy {policy!r}")
    now = sim.now
    obs = sim.observe(now - target.config.loop_interval_s, now)
    started = time.perf_counter()
    wanted = policy.decide(obs, sim.scaleout, now)
    result.loop_ms.append((elapsed, 1000 * (time.perf_counter() - started)))
    cfg = target.config
    wanted = min(max(wanted, cfg.min_parallelism), cfg.max_parallelism)
    if wanted != sim.scaleout:
        result.decisions.append((elapsed, "scale-out" if wanted > sim.scaleout else "scale-in", sim.scaleout,
                                 wanted))
        sim.scale(wanted)
        result.rescales += 1
