"""`daedalus bench fleet`: what a fleet of N one-minute jobs costs on Prefect's distributed topology, per part.

For each size a fresh fleet (`runtime/fleet.py`: PostgreSQL, Redis, two API replicas behind HAProxy, the services
process, two workers) is started, N simulated jobs are deployed to it exactly as `bench schedule` deploys them
(real time, speedup 1, the background flows too), and after a warm-up (each job's first runs fit its models and
are not the steady state) the fleet runs for the given minutes. Measured over that window:

- CPU-seconds per job-minute of each kind of process, from /proc/PID/stat of each process tree (utime + stime of
  the live processes and of the children they reaped): `api` (the replicas and HAProxy), `services`, `workers`
  (the `daedalus worker`s without their runs), `runs` (the flow runs, forked from the workers' preloaded
  processes), `postgres` (the postmaster and its backends), `redis`;
- the start delay of every run that came due (actual − expected start; a run that never started counts with the
  time it had waited when the window closed);
- the most runs more than a minute late at once (sampled every 30 s);
- the machine's speed: the CPU time of a fixed piece of work (`bench/reference.py`) before the fleet starts
  (`idle`) and at the window's start and end (`loaded`). On a virtual machine a CPU-second under load does less
  work than an idle one (here the same work took 0.12 CPU-s idle and 0.28 beside a 50-job fleet): figures in units
  of `loaded` compare across machines and loads.

A straight line per kind (CPU-seconds per minute against jobs) is fitted over the sizes and projected to 1,000 and
10,000 jobs, in cores; where the total crosses this machine's cores is where it stops keeping up.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from daedalus.bench.reference import reference_cpu_s
from daedalus.bench.schedule import (
    _deploy,
    _machine_busy,
    _percentiles,
    _runs,
    _sample,
    _tree_cpu_s,
    _zygote,
    bench_jobs_file,
)
from daedalus.runtime.fleet import ZOMBIE_AFTER_S, Fleet, down, kind_of, up

KINDS = ("api", "services", "workers", "runs", "postgres", "redis")
POOL = "bench"  # bench schedule's pool, which its deploy step names
# Besides each job's first runs (they fit its models), the first five minutes after a deploy are not the steady
# state. Prefect's scheduler inserts runs without a Scheduled event, and a run's Pending event follows its Scheduled
# state when that was set less than five minutes before (prefect.server.models.events._timing_is_tight). Until the
# scheduler's runs are scheduled further ahead, the server's causal ordering holds every event of every run for 15
# minutes, and the zombie automation, not seeing their ends, tries to crash runs that completed, up to ZOMBIE_AFTER_S
# after the last of them (docs/fleet.md). Seen in a 20-job fleet: the last such attempt 6 min 27 s after the deploy.
WARMUP_MIN = 5.0 + math.ceil(ZOMBIE_AFTER_S / 60) + 0.5  # 7.5
SAMPLE_S = 30.0
PROJECT_TO = (1_000, 10_000)
DRAIN_S = 20.0  # after the window, for the last runs to record their start before they are read

OnProgress = Callable[[str, int, int | None], None]


def cpu_by_kind(fleet: Fleet) -> dict[str, float]:
    """CPU-seconds so far of each kind of process in the fleet (live trees; a process restarted since is new)."""
    used = dict.fromkeys(KINDS, 0.0)
    for name in fleet.names:
        found = fleet.process(name)
        if found is None or not found.alive():
            continue
        total = _tree_cpu_s(found.pid)
        kind = kind_of(name)
        if kind == "worker":
            zygote = _zygote(found.pid)
            runs = 0.0 if zygote is None else _tree_cpu_s(zygote)
            used["runs"] += runs
            used["workers"] += total - runs
        else:
            used["api" if kind == "lb" else kind] += total
    return used


@contextlib.contextmanager
def fleet_client(fleet: Fleet) -> Iterator[None]:
    """This process as a client of `fleet`: Prefect's settings (read once per process) and the environment the
    deploy step passes on, both put back afterwards."""
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings

    env = fleet.client_env()
    saved = {k: os.environ.get(k) for k in ("PREFECT_API_URL", "PREFECT_HOME")}
    os.environ.update({k: env[k] for k in saved})
    Path(env["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
    try:
        with temporary_settings(updates={PREFECT_API_URL: fleet.api_url, PREFECT_HOME: env["PREFECT_HOME"]}):
            yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def start_delays(runs: list[Any], since: float, until: float, closed: float) -> tuple[list[float], dict[str, int]]:
    """Start delays of the runs due in [since, until) (one never started counts `closed` − expected) and their
    states."""
    delays: list[float] = []
    states: dict[str, int] = {}
    for r in runs:
        expected = r.expected_start_time.timestamp() if r.expected_start_time else None
        if expected is None or not since <= expected < until:
            continue
        name = r.state.name if r.state else "?"
        states[name] = states.get(name, 0) + 1
        if r.start_time is not None:
            delays.append(max(0.0, r.start_time.timestamp() - expected))
        elif name not in ("Cancelled", "Cancelling"):  # CANCEL_NEW: a collision, not a wait
            delays.append(closed - expected)
    return delays, states


def measure_size(jobs: int, minutes: float, root: Path, warmup_min: float = WARMUP_MIN,
                 say: Callable[[str], None] = print, on_progress: OnProgress | None = None) -> dict[str, Any]:
    """One size: a fresh fleet in `root`, N jobs deployed, the warm-up, then `minutes` measured."""
    idle = reference_cpu_s()
    say(f"{jobs} jobs: starting the fleet in {root} ...")
    fleet = up(root, pool=POOL)
    try:
        with fleet_client(fleet):
            path = bench_jobs_file(root / "jobs.yaml", jobs, 1.0)
            _, deploy_s = _deploy(f"deploying {jobs} jobs", path, root, True, True, on_progress)
            say(f"{jobs} jobs: deployed in {deploy_s:.0f} s; warming up {warmup_min:g} min")
            time.sleep(60 * warmup_min)
            loaded = [reference_cpu_s()]
            start, cpu0, busy0 = time.time(), cpu_by_kind(fleet), _machine_busy()
            end = start + 60 * minutes
            late: list[int] = []
            while (now := time.time()) < end:
                time.sleep(min(SAMPLE_S, end - now))
                late.append(asyncio.run(_sample("mape-k", time.time()))["backlog"])
                say(f"{jobs} jobs: minute {(time.time() - start) / 60:.1f}, runs > 1 min late: {late[-1]}")
            cpu1, busy1 = cpu_by_kind(fleet), _machine_busy()
            loaded.append(reference_cpu_s())
            time.sleep(DRAIN_S)
            runs = asyncio.run(_runs("mape-k", start, end))
            delays, states = start_delays(runs, start, end, end + DRAIN_S)
    finally:
        down(root)
    used = {k: cpu1[k] - cpu0[k] for k in KINDS}
    job_minutes = jobs * minutes
    per = {k: round(v / job_minutes, 4) for k, v in used.items()}
    busy = 100 * (busy1[0] - busy0[0]) / max(1.0, busy1[1] - busy0[1])
    delay = _percentiles(delays)
    return {
        "jobs": jobs, "minutes": minutes, "warmup_minutes": warmup_min, "deploy_s": round(deploy_s, 1),
        "cpu_s_per_job_minute": {"total": round(sum(used.values()) / job_minutes, 4), **per},
        "cpu_cores": {"total": round(sum(used.values()) / (60 * minutes), 3),
                      **{k: round(v / (60 * minutes), 3) for k, v in used.items()}},
        "start_delay_s": delay, "late_runs_max": max(late, default=0), "runs_due": sum(states.values()),
        "states": states, "machine_busy_percent": round(busy, 1),
        "reference_cpu_s": {"idle": idle, "loaded": round(sum(loaded) / len(loaded), 4)},
        # Kept up: every run that came due completed (none cancelled by a collision, none still waiting) and the
        # p95 start delay stayed under a minute. A size that did not has done less work than it was given: its CPU
        # per job-minute is too low, and it is left out of the fitted lines.
        "kept_up": kept_up(states, delay),
    }


def kept_up(states: dict[str, int], delay: dict[str, float | None]) -> bool:
    """Every run due completed and the p95 start delay stayed under a minute."""
    return set(states) <= {"Completed"} and (delay["p95"] or 0) < 60


def fit(sizes: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per kind and in total, CPU-seconds per minute = intercept + per_job × jobs (least squares over the sizes that
    kept up, when two or more did; else over all)."""
    import numpy as np

    sizes = [s for s in sizes if s["kept_up"]] if sum(s["kept_up"] for s in sizes) >= 2 else sizes

    xs = np.array([s["jobs"] for s in sizes], dtype=float)
    lines = {}
    for kind in ("total", *KINDS):
        ys = np.array([s["cpu_s_per_job_minute"][kind] * s["jobs"] for s in sizes])
        if len(sizes) >= 2:
            slope, intercept = np.polyfit(xs, ys, 1)
        else:  # one size: through the origin
            slope, intercept = ys[0] / xs[0], 0.0
        lines[kind] = {"intercept_cpu_s_per_min": round(float(intercept), 3),
                       "per_job_cpu_s_per_min": round(float(slope), 4)}
    return lines


def sizing(lines: dict[str, dict[str, float]], cores: int, project_to: tuple[int, ...] = PROJECT_TO
           ) -> dict[str, Any]:
    """Cores each kind needs at the projected sizes, and the jobs at which the total reaches this machine's cores."""
    def cores_at(kind: str, jobs: int) -> float:
        line = lines[kind]
        return round(max(0.0, line["intercept_cpu_s_per_min"] + line["per_job_cpu_s_per_min"] * jobs) / 60, 2)

    total = lines["total"]
    limit = (None if total["per_job_cpu_s_per_min"] <= 0 else
             int((60 * cores - total["intercept_cpu_s_per_min"]) / total["per_job_cpu_s_per_min"]))
    return {"projected_cores": [{"jobs": n, **{k: cores_at(k, n) for k in ("total", *KINDS)}} for n in project_to],
            "machine_cores": cores, "jobs_at_machine_cores": limit}


def run_fleet_bench(sizes: list[int], minutes: float, keep: Path | None = None, warmup_min: float = WARMUP_MIN,
                    say: Callable[[str], None] = print, on_progress: OnProgress | None = None) -> dict[str, Any]:
    """Every size in turn on its own fleet; the figures, the fitted lines and the sizing table."""
    tmp = None
    if keep is None:
        tmp = tempfile.mkdtemp(prefix="daedalus-bench-fleet-")
        os.chmod(tmp, 0o755)  # the cluster's `postgres` user reaches its folder
    root = keep or Path(tmp)  # type: ignore[arg-type]
    try:
        measured = [measure_size(n, minutes, root / f"jobs-{n}", warmup_min, say, on_progress) for n in sizes]
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return summarise(measured)


def summarise(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """The sizes' figures with the fitted lines and the sizing table."""
    lines = fit(measured)
    return {"sizes": measured, "fit": lines, "fitted_over_jobs": [s["jobs"] for s in measured if s["kept_up"]]
            if sum(s["kept_up"] for s in measured) >= 2 else [s["jobs"] for s in measured],
            "sizing": sizing(lines, os.cpu_count() or 1),
            "topology": "postgres, redis, 2 API replicas (--no-services) behind haproxy, services, 2 daedalus workers"}
