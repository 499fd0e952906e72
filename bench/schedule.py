"""The Prefect side at fleet scale: `daedalus bench deploy` (how long deploying N jobs takes) and `daedalus bench
schedule` (can one local Prefect server and one process worker keep up with N jobs every minute?).

`bench schedule` starts a server (SQLite) and one worker, deploys N simulated jobs (real time, speedup 1), lets the
schedules run them for the given minutes and measures, from the Prefect API: how late each run started (start
time − scheduled time), how many runs came due, ran, were cancelled by the concurrency limit or are still waiting
(the backlog, sampled every minute), how long loop runs took; and the CPU the server, the worker and the flow runs
used.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from daedalus.runtime.local_prefect import LocalPrefect, start_postgres, start_server

TICK = os.sysconf("SC_CLK_TCK")
# The worker polls every POLL_S and starts at most WORKER_LIMIT runs in flight. Prefect's defaults (10 s, and
# the limit 10 an earlier version used) cap a worker at about 60 starts a minute, whatever the CPU: a hundred
# jobs then fall behind with the machine half idle. 30 runs in flight and a 3 s poll keep up (README).
WORKER_LIMIT = 30
POLL_S = 3.0
SETTLE_S = 120.0  # runs scheduled before the worker was warm are not counted

OnProgress = Callable[[str, int, int | None], None]


def bench_jobs_file(path: Path, n: int, speedup: float, mode: str = "auto", peaks: tuple[float, ...] = ()) -> Path:
    """A jobs file of `n` simulated jobs with different seeds; with `peaks`, job i's workload peaks at
    peaks[i mod len] × its capacity at the largest scale-out (default 0.9): a low peak has the loop scale in at
    once (a simulated job starts at its largest scale-out)."""
    import yaml

    def sim(i: int) -> dict[str, float]:
        return {"seed": i, "speedup": speedup, **({"peak_utilization": peaks[i % len(peaks)]} if peaks else {})}

    doc = {"defaults": {"engine": "sim", "scale_target": {"kind": "sim", "name": "sim"}, "mode": mode,
                        "sim": {"speedup": speedup}},
           "jobs": [{"name": f"bench-{i:03d}", "sim": sim(i)} for i in range(n)]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _deploy(phase: str, path: Path, root: Path, prefork: bool, background: bool, on_progress: OnProgress | None
            ) -> tuple[dict[str, str], float]:
    """Deploy the bench's jobs file to the pool `bench`, reporting progress as `phase`; (ids, seconds)."""
    from daedalus.deployments.deploy import deploy_jobs
    from daedalus.runtime.prefork import job_variables

    def deployed(done: int, total: int) -> None:
        if on_progress is not None:
            on_progress(phase, done, total)

    ids, _, seconds = deploy_jobs(path, str(root / "store"), "bench", create_pool=True, lake_url=str(root / "lake"),
                                  job_variables=job_variables() if prefork else None, background=background,
                                  on_progress=deployed)
    return ids, seconds


def run_deploy_bench(jobs: int, console: Console, on_progress: OnProgress | None = None) -> dict[str, Any]:
    """Deploy N simulated jobs to a fresh local Prefect server (SQLite), then again unchanged; both timed."""
    with tempfile.TemporaryDirectory(prefix="daedalus-bench-") as tmp:
        console.print("Starting a local Prefect server (SQLite) ...")
        server = start_server(Path(tmp) / "prefect", many_deployments=True)
        try:
            os.environ.update({"PREFECT_API_URL": server.api_url, "PREFECT_HOME": str(server.home)})
            path = bench_jobs_file(Path(tmp) / "jobs.yaml", jobs, 1.0)
            ids, first = _deploy("deploying", path, Path(tmp), True, True, on_progress)
            _, again = _deploy("deploying again", path, Path(tmp), True, True, on_progress)
        finally:
            server.stop()
    return {"jobs": jobs, "deployments": len(ids), "first_deploy_s": first, "redeploy_s": again}


def _cpu_s(pid: int) -> float:
    """CPU seconds of a process and its waited-for children (utime + stime + cutime + cstime)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return kids


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process tree as it stands (live descendants included)."""
    return _cpu_s(pid) + sum(_tree_cpu_s(c) for c in _children(pid))


def _zygote(worker_pid: int) -> int | None:
    """The preloaded process under `daedalus worker`: its tree is the flow runs' CPU."""
    for pid in _children(worker_pid):
        try:
            if b"daedalus.runtime.prefork\0serve" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    return None


def _cpu_parts(server_pid: int, worker_pid: int, database_pid: int | None) -> dict[str, float]:
    """CPU seconds so far of the server, the worker with its runs, the runs alone (preloaded) and the database."""
    zygote = _zygote(worker_pid)
    return {"server": _tree_cpu_s(server_pid), "worker_and_runs": _tree_cpu_s(worker_pid),
            "runs": 0.0 if zygote is None else _tree_cpu_s(zygote),
            "database": 0.0 if database_pid is None else _tree_cpu_s(database_pid)}


def _machine_busy() -> tuple[float, float]:
    parts = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + parts[4]
    return sum(parts) - idle, sum(parts)


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "max": None}
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered), 2), "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
            "max": round(ordered[-1], 2)}


def _filter(since: float | None = None, until: float | None = None, states: list[str] | None = None) -> Any:
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterExpectedStartTime,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )

    return FlowRunFilter(
        expected_start_time=FlowRunFilterExpectedStartTime(
            after_=None if since is None else datetime.fromtimestamp(since, UTC),
            before_=None if until is None else datetime.fromtimestamp(until, UTC)),
        state=None if states is None else FlowRunFilterState(type=FlowRunFilterStateType(any_=states)))


async def _runs(flow_name: str, since: float, until: float) -> list[Any]:
    """The flow's runs scheduled in [since, until]."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    found: list[Any] = []
    async with get_client() as client:
        while True:
            page = await client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])),
                                               flow_run_filter=_filter(since, until), limit=200, offset=len(found))
            found += page
            if len(page) < 200:
                return found


async def _sample(flow_name: str, now: float) -> dict[str, int]:
    """Backlog (runs more than a minute overdue, not started) and runs in flight, counted by the server."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    flows = FlowFilter(name=FlowFilterName(any_=[flow_name]))
    async with get_client() as client:
        backlog = await client.count_flow_runs(flow_filter=flows,
                                               flow_run_filter=_filter(None, now - 60, ["SCHEDULED", "PENDING"]))
        running = await client.count_flow_runs(flow_filter=flows, flow_run_filter=_filter(states=["RUNNING"]))
    return {"backlog": backlog, "running": running}


def _cpu_between(samples: list[dict[str, Any]], m0: float, m1: float) -> float | None:
    """CPU-seconds (server, worker with runs, database) used between the samples nearest minutes m0 and m1."""
    at = {round(s["minute"]): s["cpu_s"] for s in samples}
    at[0] = 0.0
    a, b = at.get(round(m0)), at.get(round(m1))
    return None if a is None or b is None else b - a


def summarise(runs: list[Any], since: float, until: float) -> dict[str, Any]:
    """Runs that came due in [since, until): how many of each state, how late they started, how long they took."""
    due = [r for r in runs if r.expected_start_time and since <= r.expected_start_time.timestamp() < until]
    states: dict[str, int] = {}
    for r in due:
        states[r.state.name if r.state else "?"] = states.get(r.state.name if r.state else "?", 0) + 1
    started = [r for r in due if r.start_time is not None]
    delays = [(r.start_time - r.expected_start_time).total_seconds() for r in started]
    durations = [r.total_run_time.total_seconds() for r in started if r.state and r.state.is_completed()]
    return {"due": len(due), "states": states, "start_delay_s": _percentiles(delays),
            "run_s": _percentiles(durations)}


def run_schedule_bench(jobs: int, minutes: float, prefork: bool, keep: Path | None, console: Console,
                       background: bool = True, postgres: bool = False, worker_limit: int = WORKER_LIMIT,
                       poll_s: float = POLL_S, on_progress: OnProgress | None = None) -> dict[str, Any]:
    """Start a server and a worker, deploy `jobs` simulated jobs and let them run `minutes`; the figures."""
    tmp = None if keep else tempfile.TemporaryDirectory(prefix="daedalus-bench-")
    root = keep or Path(tmp.name)  # type: ignore[union-attr]
    root.mkdir(parents=True, exist_ok=True)
    database = start_postgres() if postgres else None
    console.print(f"Starting a local Prefect server ({'PostgreSQL' if postgres else 'SQLite'}) in {root} ...")
    try:
        server: LocalPrefect = start_server(root / "prefect", many_deployments=True,
                                            database_url=None if database is None else database.url)
    except BaseException:
        if database is not None:
            database.stop()
        raise
    os.environ.update({"PREFECT_API_URL": server.api_url, "PREFECT_HOME": str(server.home)})
    try:
        path = bench_jobs_file(root / "jobs.yaml", jobs, 1.0)
        console.print(f"Starting one worker ({'daedalus worker, preloaded' if prefork else 'prefect worker start'})"
                      f", then deploying {jobs} jobs ...")
        worker = server.start_worker("bench", prefork=prefork, limit=worker_limit or None,
                                     env={"PREFECT_WORKER_QUERY_SECONDS": f"{poll_s:g}"})
        _, deploy_s = _deploy("deploying", path, root, prefork, background, on_progress)
        console.print(f"Deployed in {deploy_s:.1f} s")
        start = time.time()
        db_pid = None if database is None else database.pid
        cpu0 = _cpu_parts(server.server.pid, worker.pid, db_pid)
        busy0 = _machine_busy()
        samples: list[dict[str, Any]] = []
        end = start + 60 * minutes
        while time.time() < end:
            time.sleep(min(60.0, max(0.0, end - time.time())))
            now = time.time()
            used = _cpu_parts(server.server.pid, worker.pid, db_pid)
            samples.append({"minute": round((now - start) / 60, 1), **asyncio.run(_sample("mape-k", now)),
                            "cpu_s": round(sum(used[k] - cpu0[k] for k in ("server", "worker_and_runs", "database")),
                                           1)})
            console.print(f"  minute {samples[-1]['minute']:.0f}: backlog {samples[-1]['backlog']}, "
                          f"running {samples[-1]['running']}")
        busy1 = _machine_busy()
        cpu1 = _cpu_parts(server.server.pid, worker.pid, db_pid)
        cpu = {k: cpu1[k] - cpu0[k] for k in cpu0}
        time.sleep(20)  # let the last runs finish before counting them
        runs = asyncio.run(_runs("mape-k", start, end))
        segments = []
        for s0 in range(0, int(minutes), 10):
            a, b = start + max(SETTLE_S, 60 * s0), min(start + 60 * min(s0 + 10, minutes), end)
            if b > a:
                seg = summarise(runs, a, b)
                used = _cpu_between(samples, (a - start) / 60, (b - start) / 60)
                segments.append({"from_minute": s0, "to_minute": min(s0 + 10, minutes), **seg,
                                 "cpu_s_per_run": None if used is None else round(used / max(1, seg["due"]), 3)})
        elapsed = end - start
        completed = sum(1 for r in runs if r.state and r.state.is_completed())  # the CPU was measured over all
        return {
            "cpu_s_per_completed_run": round((cpu["server"] + cpu["worker_and_runs"]) / max(1, completed), 3),
            "cpu_s_per_completed_run_by_part": {k: round(v / max(1, completed), 3) for k, v in cpu.items()},
            "jobs": jobs, "minutes": minutes, "prefork": prefork, "background": background,
            "worker_limit": worker_limit, "poll_s": poll_s,
            "database": "postgresql" if postgres else "sqlite",
            "deploy_s": round(deploy_s, 2),
            "started": datetime.fromtimestamp(start, UTC).isoformat(),
            "overall": summarise(runs, start + SETTLE_S, end), "segments": segments, "backlog": samples,
            "cpu_percent_of_one_core": {k: round(100 * v / elapsed, 1) for k, v in cpu.items()},
            "machine_busy_percent": round(100 * (busy1[0] - busy0[0]) / max(1.0, busy1[1] - busy0[1]), 1),
            "cores": os.cpu_count(), "scheduler_errors": len(server.scheduler_errors()),
        }
    finally:
        server.stop()
        if database is not None:
            database.stop()
        if tmp is not None:
            tmp.cleanup()


def schedule_table(report: dict[str, Any]) -> Table:
    o = report["overall"]
    t = Table(title=f"{report['jobs']} jobs every minute for {report['minutes']:g} min, one worker "
                    f"({'preloaded' if report['prefork'] else 'plain'}, limit {report['worker_limit'] or 'none'}, "
                    f"polling every {report['poll_s']:g} s), {report['database']}, {report['cores']} cores")
    t.add_column("figure")
    t.add_column("value", justify="right")
    d, r = o["start_delay_s"], o["run_s"]
    by_part = report["cpu_s_per_completed_run_by_part"]
    rows = [
        (f"runs due (after {SETTLE_S / 60:g} min warm-up)", str(o["due"])),
        ("states", ", ".join(f"{k} {v}" for k, v in sorted(o["states"].items()))),
        ("start delay p50 / p95 / max", f"{d['p50']} / {d['p95']} / {d['max']} s"),
        ("loop run time p50 / p95", f"{r['p50']} / {r['p95']} s"),
        ("backlog per minute (runs > 1 min overdue)", " ".join(str(s["backlog"]) for s in report["backlog"])),
        ("CPU: server / worker + runs (% of one core)", "{server} / {worker_and_runs}".format(
            **report["cpu_percent_of_one_core"])),
        ("CPU-seconds per completed loop run (server + worker + run)", str(report["cpu_s_per_completed_run"])),
        ("  of which server / worker / run / database", "{server} / {worker} / {runs} / {database}".format(
            **by_part, worker=round(by_part["worker_and_runs"] - by_part["runs"], 3))),
        ("machine busy (all processes, other work included)", f"{report['machine_busy_percent']} %"),
        ("deploy time", f"{report['deploy_s']} s"),
    ]
    for seg in report["segments"]:
        sd = seg["start_delay_s"]
        first = max(SETTLE_S / 60, seg["from_minute"])
        rows.append((f"minutes {first:g}–{seg['to_minute']:g}: due, delay p50/p95, CPU-s per run",
                     f"{seg['due']}, {sd['p50']} / {sd['p95']} s, {seg['cpu_s_per_run']}"))
    for row in rows:
        t.add_row(*row)
    return t
