"""`daedalus bench backtest`: the fleet backtest on Spark, timed, on a lake of simulated jobs' histories.

Each job's history is what its loop would have appended to the lake: a simulated job under a baseline policy
(`hpa-80`, cheap to run), observed minute by minute. Spark is started before the clock starts, so the times are
the backtest alone (reading, validating nothing, replaying every policy of every job in the executors).
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from daedalus.bench.pipeline import BENCH_START, fleet_workloads
from daedalus.connectors.lake import Lake, observation_table
from daedalus.models.config import LoopConfig
from daedalus.models.planning import policies
from daedalus.models.ports import Target
from daedalus.sim.job import SimulatedJob
from daedalus.sim.simulator import SimConfig, Simulator
from daedalus.sim.workloads import rescale_to_peak

OnProgress = Callable[[str, int, int | None], None]
HISTORY_POLICY = "hpa-80"


def _silent(phase: str, done: int, total: int | None) -> None:
    """No progress to show."""


def record_history(lake: Lake, job: str, workload: np.ndarray, policy: str = HISTORY_POLICY, max_scaleout: int = 12,
                   peak_utilization: float = 0.8, seed: int = 0, start: float = BENCH_START) -> int:
    """Run `policy` on a simulated job and append each loop's observation to the lake, as the loop does; returns the
    rows written."""
    sim_config = SimConfig(max_scaleout=max_scaleout, start=start)
    cfg = LoopConfig(max_scaleout=max_scaleout)
    probe = Simulator(np.zeros(1), sim_config, seed=seed)
    values = rescale_to_peak(workload, peak_utilization * probe.true_capacity(max_scaleout))
    sim = Simulator(values, sim_config, seed=seed, job=job)
    adapter = SimulatedJob(sim)
    target = Target(job, metrics=adapter, scaler=adapter, clock=adapter, config=cfg)
    chosen = policies.make(policy, max_scaleout, cfg)
    step, rows, since = int(cfg.loop_interval_s), 0, sim.now
    for n in range(math.ceil(len(values) / step)):
        sim.advance(min(step, len(values) - n * step))
        table = observation_table(sim.observe(since, sim.now))
        since = sim.now
        lake.append_table(table)
        rows += table.num_rows
        chosen.step(target)
    return rows


def write_histories(lake_url: str, jobs: int, hours: float, seed: int = 0,
                    on_progress: OnProgress = _silent) -> int:
    """A lake of `jobs` simulated jobs × `hours` of history; returns the rows written."""
    lake, seconds, rows = Lake(lake_url), round(hours * 3600), 0
    on_progress("recording the histories", 0, jobs)
    for j, workload in enumerate(fleet_workloads(jobs, seconds, seed)):
        rows += record_history(lake, f"job-{j:04d}", workload, seed=seed + j)
        on_progress("recording the histories", j + 1, jobs)
    return rows


def run_backtest_bench(jobs: int, hours: float, masters: list[str], names: list[str], lake: str | None = None,
                       seed: int = 0, on_progress: OnProgress = _silent) -> dict[str, Any]:
    """Backtest every job of the lake with `names` on each master: wall time, jobs done and refused."""
    from daedalus.bench.pipeline import _start_spark
    from daedalus.connectors.spark import stop
    from daedalus.tasks.backtest import backtest_fleet

    report: dict[str, Any] = {"jobs": jobs, "hours": hours, "policies": names, "masters": {}}
    with tempfile.TemporaryDirectory() as tmp:
        url = lake or f"{tmp}/lake"
        report["rows"] = None if lake else write_histories(url, jobs, hours, seed, on_progress)
        for master in masters:
            settings = _start_spark(master, on_progress)
            phase = f"backtesting {jobs} jobs on {master}"
            on_progress(phase, 0, None)
            started = time.perf_counter()
            fleet = backtest_fleet(Lake(url), names, since=None, until=None, spark_settings=settings)
            seconds = time.perf_counter() - started
            on_progress(phase, 1, 1)
            report["masters"][master] = {"seconds": seconds, "backtested": len(fleet.reports),
                                         "refused": len(fleet.refused)}
            report["refused"] = fleet.refused  # the same on every master: why each job was not backtested
        stop()
    firsts = [report["masters"][m]["seconds"] for m in masters]
    if len(firsts) >= 2:
        report["speedup"] = firsts[0] / firsts[-1]
    return report
