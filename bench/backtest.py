"""`daedalus bench backtest`: the fleet backtest on Spark, timed, on a lake of simulated jobs' histories.

Each job's history is what its loop would have appended to the lake: a simulated job under a baseline policy
(`hpa-80`, cheap to run), observed minute by minute, and compacted as the lake's hourly compaction leaves it (one
file per loop for the last two hours, one file per job and date before). Spark is started before the clock starts,
so the times are the backtest alone (validating the window, reading it, replaying every policy of every job in the
executors).
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from typing import Any

import numpy as np
import pyarrow as pa

from daedalus.bench.pipeline import BENCH_START, fleet_workloads
from daedalus.connectors.lake import COMPACT_MIN_AGE_S, Lake, observation_table
from daedalus.models import policies
from daedalus.models.config import LoopConfig
from daedalus.models.ports import Target
from daedalus.sim.job import SimulatedJob
from daedalus.sim.simulator import SimConfig, Simulator
from daedalus.sim.workloads import rescale_to_peak

OnProgress = Callable[[str, int, int | None], None]
HISTORY_POLICY = "hpa-80"


def _silent(phase: str, done: int, total: int | None) -> None:
    """No progress to show."""


def record_history(lake: Lake, job: str, workload: np.ndarray, policy: str = HISTORY_POLICY, max_scaleout: int = 12,
                   peak_utilization: float = 0.8, seed: int = 0, start: float = BENCH_START,
                   compacted_before_s: float | None = None) -> int:
    """Run `policy` on a simulated job and append each loop's observation to the lake, as the loop does; returns the
    rows written. With `compacted_before_s`, the rows older than that many seconds before the history's end are
    appended in one piece instead, one file per job and date: what the lake's compaction leaves of them."""
    sim_config = SimConfig(max_scaleout=max_scaleout, start=start)
    cfg = LoopConfig(max_scaleout=max_scaleout)
    probe = Simulator(np.zeros(1), sim_config, seed=seed)
    values = rescale_to_peak(workload, peak_utilization * probe.true_capacity(max_scaleout))
    sim = Simulator(values, sim_config, seed=seed, job=job)
    adapter = SimulatedJob(sim)
    target = Target(job, metrics=adapter, scaler=adapter, clock=adapter, config=cfg)
    chosen = policies.make(policy, max_scaleout, cfg)
    step, rows, since = int(cfg.loop_interval_s), 0, sim.now
    compacted_until = -math.inf if compacted_before_s is None else start + len(values) - compacted_before_s
    old: list[pa.Table] = []
    for n in range(math.ceil(len(values) / step)):
        sim.advance(min(step, len(values) - n * step))
        table = observation_table(sim.observe(since, sim.now))
        if sim.now <= compacted_until:
            old.append(table)
        else:
            if old:
                lake.append_table(pa.concat_tables(old).sort_by([("timestamp", "ascending"), ("worker", "ascending")]))
                old = []
            lake.append_table(table)
        since = sim.now
        rows += table.num_rows
        chosen.step(target)
    if old:
        lake.append_table(pa.concat_tables(old).sort_by([("timestamp", "ascending"), ("worker", "ascending")]))
    return rows


def _record_one(lake_url: str, job: str, workload: np.ndarray, seed: int) -> int:
    return record_history(Lake(lake_url), job, workload, seed=seed, compacted_before_s=COMPACT_MIN_AGE_S)


def write_histories(lake_url: str, jobs: int, hours: float, seed: int = 0,
                    on_progress: OnProgress = _silent) -> int:
    """A lake of `jobs` simulated jobs × `hours` of history, as the loops and the hourly compaction leave it (one
    file per loop for the last two hours, one file per job and date before); returns the rows written. The jobs are
    recorded in parallel, one process per core."""
    seconds = round(hours * 3600)
    on_progress("recording the histories", 0, jobs)
    rows = 0
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(_record_one, lake_url, f"job-{j:04d}", workload, seed + j)
                   for j, workload in enumerate(fleet_workloads(jobs, seconds, seed))]
        for done, future in enumerate(as_completed(futures), start=1):
            rows += future.result()
            on_progress("recording the histories", done, jobs)
    return rows


def _cpu_figures(cpu_s: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The executors' CPU seconds: in all and per phase over the jobs, and the median and largest job."""
    per_job = sorted(sum(phases.values()) for phases in cpu_s.values())
    by_phase: dict[str, float] = {}
    for phases in cpu_s.values():
        for phase, seconds in phases.items():
            by_phase[phase] = by_phase.get(phase, 0.0) + seconds
    return {"total": sum(per_job), "by_phase": by_phase,
            "job_median": float(np.median(per_job)) if per_job else None,
            "job_max": per_job[-1] if per_job else None}


def run_backtest_bench(jobs: int, hours: float, masters: list[str], names: list[str], lake: str | None = None,
                       seed: int = 0, on_progress: OnProgress = _silent) -> dict[str, Any]:
    """Backtest every job of the lake with `names` on each master: wall time, jobs done and refused, the executors'
    CPU seconds and the load average before and after. A `lake` that holds jobs is backtested as it is; an empty
    one is recorded first and kept."""
    from daedalus.bench.pipeline import _start_spark
    from daedalus.connectors.spark import stop
    from daedalus.tasks.backtest import backtest_fleet

    report: dict[str, Any] = {"jobs": jobs, "hours": hours, "policies": names, "masters": {}}
    with tempfile.TemporaryDirectory() as tmp:
        url = lake or f"{tmp}/lake"
        held = Lake(url).jobs()
        report["rows"] = None if held else write_histories(url, jobs, hours, seed, on_progress)
        report["jobs"] = len(held) or jobs
        for master in masters:
            settings = _start_spark(master, on_progress)
            phase = f"backtesting {report['jobs']} jobs on {master}"
            on_progress(phase, 0, None)
            load_before = os.getloadavg()
            started = time.perf_counter()
            fleet = backtest_fleet(Lake(url), names, since=None, until=None, spark_settings=settings)
            seconds = time.perf_counter() - started
            on_progress(phase, 1, 1)
            report["masters"][master] = {"seconds": seconds, "backtested": len(fleet.reports),
                                         "refused": len(fleet.refused), "cpu_s": _cpu_figures(fleet.cpu_s),
                                         "load_average": {"before": load_before, "after": os.getloadavg()}}
            report["refused"] = fleet.refused  # the same on every master: why each job was not backtested
        stop()
    firsts = [report["masters"][m]["seconds"] for m in masters]
    if len(firsts) >= 2:
        report["speedup"] = firsts[0] / firsts[-1]
    return report
