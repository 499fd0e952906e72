"""`daedalus bench retrain` and `daedalus bench validate`: the Spark pipeline on a synthetic fleet, timed.

A lake of N jobs is written first (windows of the multi-day traces shipped in data/ at random offsets and levels, or
a noisy daily sine when they are absent), unless an existing lake is given. Spark is started before the clock
starts, so the times are the work alone: retraining (fit, backtest, promotion) on each master asked for, or the
whole validation suite over the last hours on one master.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from daedalus.data import WORKLOADS

BENCH_START = 1_767_225_600  # 2026-01-01T00:00:00Z, the simulator's epoch

OnProgress = Callable[[str, int, int | None], None]


def _silent(phase: str, done: int, total: int | None) -> None:
    """No progress to show."""


def fleet_workloads(jobs: int, seconds: int, seed: int = 0) -> list[np.ndarray]:
    """Per-second workloads: windows of the multi-day traces (data/workloads/multiday, 5 min steps,
    interpolated) at random offsets and levels with 2 % noise; a daily sine with noise when they are absent."""
    from daedalus.sim.workloads import load_workload

    rng = np.random.default_rng(seed)
    traces = sorted((WORKLOADS / "multiday").glob("*_5min.csv"))
    loaded = [load_workload(p) for p in traces]
    out = []
    for j in range(jobs):
        if loaded:
            trace = loaded[j % len(loaded)]
            start = int(rng.integers(0, len(trace) - seconds))
            base = trace[start:start + seconds] * rng.uniform(0.3, 1.5)
        else:
            t = np.arange(seconds) + rng.uniform(0, 86_400)
            base = rng.uniform(20_000, 150_000) * (1 + 0.4 * np.sin(2 * np.pi * t / 86_400))
        out.append(np.maximum(base * (1 + rng.normal(0, 0.02, seconds)), 0.0))
    return out


def write_fleet(lake_url: str, jobs: int, hours: float, workers: int, seed: int = 0, start: float = BENCH_START,
                on_progress: OnProgress = _silent) -> tuple[float, int]:
    """A lake of `jobs` jobs × `hours` of per-second rows × `workers` workers; returns (end time, rows)."""
    import pyarrow as pa

    from daedalus.connectors.lake import SCHEMA, Lake

    lake, seconds = Lake(lake_url), round(hours * 3600)
    ts = start + 1 + np.arange(seconds)
    names = np.array([f"worker-{k}" for k in range(workers)], dtype=object)
    on_progress("writing the lake", 0, jobs)
    for j, workload in enumerate(fleet_workloads(jobs, seconds, seed)):
        n = seconds * workers
        per_worker = np.repeat(workload, workers) / workers
        lake.append_table(pa.table({
            "job": pa.array(np.full(n, f"job-{j:04d}", dtype=object)),
            "worker": pa.array(np.tile(names, seconds)),
            "timestamp": pa.array(np.repeat(ts, workers) * 1_000_000).cast(SCHEMA.field("timestamp").type),
            "workload": np.repeat(workload, workers),
            "throughput": per_worker,
            "cpu": np.clip(0.085 + 0.915 * per_worker / 110_000, 0.0, 1.0),
            "lag": np.zeros(n),
            "scaleout": np.full(n, workers, dtype=np.int32),
        }, schema=SCHEMA))
        on_progress("writing the lake", j + 1, jobs)
    return start + seconds, seconds * workers * jobs


def _lake_end(url: str, jobs: int, hours: float, workers: int, seed: int, on_progress: OnProgress
              ) -> tuple[float, int | None]:
    """The end of an existing lake's history (rows unknown), or of the fleet written there now."""
    from daedalus.connectors.lake import Lake

    if Lake(url).jobs():
        return max(f.last or 0.0 for f in Lake(url).files()), None
    return write_fleet(url, jobs, hours, workers, seed, on_progress=on_progress)


def _start_spark(master: str, on_progress: OnProgress) -> Any:
    """Start the session before timing, so the figures do not include the JVM's start."""
    from daedalus.connectors.spark import SparkSettings, session

    settings = SparkSettings.from_env(master)
    on_progress(f"starting Spark {master}", 0, None)
    session(settings)
    on_progress(f"starting Spark {master}", 1, 1)
    return settings


def run_retrain_bench(jobs: int, hours: float, workers: int, masters: list[str], lake: str | None = None,
                      seed: int = 0, on_progress: OnProgress = _silent) -> dict[str, Any]:
    """Retrain the fleet's forecasters on each master; per master: wall time, fit times and outcome counts.

    `rows` is the lake's size when it was written here (None for a given, existing lake).
    """
    from daedalus.connectors.lake import Lake
    from daedalus.connectors.spark import stop
    from daedalus.tasks.retrain import promote, retrain_fleet

    report: dict[str, Any] = {"jobs": jobs, "hours": hours, "workers": workers, "masters": {}}
    with tempfile.TemporaryDirectory() as tmp:
        url = lake or f"{tmp}/lake"
        end, report["rows"] = _lake_end(url, jobs, hours, workers, seed, on_progress)
        for master in masters:
            settings = _start_spark(master, on_progress)
            phase = f"retraining {jobs} jobs on {master}"
            on_progress(phase, 0, None)
            started = time.perf_counter()
            outcomes = retrain_fleet(Lake(url), None, end, hours * 3600, jobs=None, spark_settings=settings)
            promote(f"{tmp}/store-{master}", outcomes)
            seconds = time.perf_counter() - started
            on_progress(phase, 1, 1)
            fits = [o.fit_s for o in outcomes if o.status in ("promoted", "kept")]
            report["masters"][master] = {
                "seconds": seconds,
                "fit_s_median": float(np.median(fits)) if fits else None,
                "fit_s_p95": float(np.percentile(fits, 95)) if fits else None,
                "fitted": len(fits), "failed": sum(o.status == "failed" for o in outcomes),
                "skipped": sum(o.status == "skipped" for o in outcomes)}
        stop()
    return report


def run_validate_bench(jobs: int, hours: float, workers: int, master: str, lake: str | None = None, seed: int = 0,
                       on_progress: OnProgress = _silent) -> dict[str, Any]:
    """Validate the fleet's last `hours` with the whole suite on one master: rows, checks, failures, wall time."""
    from daedalus.connectors.lake import Lake
    from daedalus.connectors.spark import stop
    from daedalus.tasks.validate import validate

    with tempfile.TemporaryDirectory() as tmp:
        url = lake or f"{tmp}/lake"
        end, _ = _lake_end(url, jobs, hours, workers, seed, on_progress)
        settings = _start_spark(master, on_progress)
        phase = f"validating {jobs} jobs × {hours:g} h on {master}"
        on_progress(phase, 0, None)
        started = time.perf_counter()
        result = validate(Lake(url), end - hours * 3600, end, spark_settings=settings)
        seconds = time.perf_counter() - started
        on_progress(phase, 1, 1)
        stop()
    return {"jobs": jobs, "hours": hours, "workers": workers, "master": master,
            "rows": sum(v.rows for v in result.jobs.values()), "checks": len(result.checks),
            "failed_jobs": len(result.failed_jobs), "seconds": seconds}
