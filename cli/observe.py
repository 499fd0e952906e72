"""`daedalus observe` (check a job's PromQL before turning the loop on) and `daedalus bench monitor`."""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from daedalus.models.errors import ConnectorError, DaedalusError
from daedalus.models.types import Observation

console = Console(stderr=True)


def _fail(exc: Exception) -> None:
    console.print(f"[red]{type(exc).__name__}:[/red] {exc}")
    raise typer.Exit(1)


def _finite(values: np.ndarray) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in values.tolist()]


def _stats(values: np.ndarray) -> tuple[str, str]:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return "—", "—"
    return f"{finite[-1]:,.3f}" if abs(finite[-1]) < 10 else f"{finite[-1]:,.0f}", (
        f"{finite.mean():,.3f}" if abs(finite.mean()) < 10 else f"{finite.mean():,.0f}")


def observation_report(obs: Observation, holds: tuple[str, ...], queries: dict[str, str]) -> dict[str, Any]:
    """What the loop would see, as JSON-safe data."""
    return {"job": obs.job, "scaleout": obs.scaleout, "step_s": obs.step_s,
            "timestamps": obs.timestamps.tolist(), "workload": _finite(obs.workload), "lag": _finite(obs.lag),
            "uptime_s": _finite(obs.uptime_s),
            "workers": {w: {"throughput": _finite(obs.throughput[w]), "cpu": _finite(obs.cpu[w])}
                        for w in obs.workers},
            "holds": list(holds), "queries": queries}


def _print_observation(obs: Observation, holds: tuple[str, ...], queries: dict[str, str]) -> None:
    span = f"{obs.timestamps.size} steps of {obs.step_s:g} s" if obs.timestamps.size else "no samples"
    summary = Table(title=f"{obs.job}: what the monitor phase sees ({span})")
    summary.add_column("metric")
    summary.add_column("last", justify="right")
    summary.add_column("mean", justify="right")
    summary.add_row("scaleout", str(obs.scaleout), "")
    for name, series in (("workload (tuples/s)", obs.workload), ("consumer lag (tuples)", obs.lag),
                         ("job uptime (s)", obs.uptime_s)):
        summary.add_row(name, *_stats(series))
    console.print(summary)
    workers = Table(title="per worker")
    for col in ("pod", "throughput last", "throughput mean", "CPU last", "CPU mean", "samples"):
        workers.add_column(col, justify="left" if col == "pod" else "right")
    for w in obs.workers:
        thr, cpu = obs.throughput[w], obs.cpu[w]
        workers.add_row(w, *_stats(thr), *_stats(cpu), str(int(np.isfinite(thr).sum())))
    console.print(workers)
    for key, q in queries.items():
        console.print(f"[dim]{key}:[/dim] {q}", soft_wrap=True)
    if holds:
        console.print("[yellow]The loop would hold:[/yellow]")
        for h in holds:
            console.print(f"  • {h}", soft_wrap=True)
    else:
        console.print("[green]No hold: the loop would learn from and act on this observation.[/green]")


def observe_job(jobs_file: Path, job: str, window_s: float, at: float | None) -> tuple[Observation, tuple[str, ...],
                                                                                       dict[str, str]]:
    """Run the monitor phase once for a job of the jobs file, and the loop's validation on its result."""
    from daedalus.connectors.jobs import load_jobs
    from daedalus.connectors.prometheus import PrometheusSource
    from daedalus.models.loop import unavailable
    from daedalus.models.validation import validate_observation

    spec = load_jobs(jobs_file).job(job)
    if spec.engine == "sim":
        raise DaedalusError(f"job {job!r} has engine 'sim': `observe` reads Prometheus (flink, kafka-streams, spark)")
    source = PrometheusSource.from_spec(spec)
    now = time.time() if at is None else at
    try:
        obs = source.observe(job, now - window_s, now)
    except ConnectorError as exc:
        obs = unavailable(job, 1, f"metrics unavailable: {exc}")
    cfg = spec.loop_config()
    holds = validate_observation(obs, now, None, cfg.warmup_s, cfg.stale_after_s)
    queries = {k: source.queries.query(k, window_s) for k in source.queries.templates}
    return obs, holds, queries


def bench_monitor(hours: float, repeats: int, progress: Progress) -> dict[str, Any]:
    """Monitor cost for one 12-worker job against a local Prometheus holding `hours` of simulated history."""
    from daedalus.connectors.prometheus import PrometheusSource
    from daedalus.connectors.promql import QuerySet
    from daedalus.sim.exporter import SimExporter, local_prometheus
    from daedalus.sim.scenario import scenario
    from daedalus.sim.simulator import SimConfig, Simulator
    from daedalus.sim.workloads import sine_workload

    sim_config, _, workload = scenario(sine_workload(hours=hours), 12, 0.9, 0)
    start = float(int(time.time()) - int(hours * 3600) - 60)
    sim = Simulator(workload, SimConfig(**{**sim_config.__dict__, "start": start}), seed=0)
    labels = {"namespace": "bench", "cluster": "sim-flink"}
    figures: dict[str, Any] = {"hours": hours, "workers": 12, "repeats": repeats, "cases": []}
    with tempfile.TemporaryDirectory() as tmp, SimExporter(sim, labels, "bench-events") as exporter, \
            local_prometheus(Path(tmp), [f"127.0.0.1:{exporter.port}"], "200ms", lookback="500ms") as url:
        chunk = 60
        bar = progress.add_task("backfilling through scrapes", total=len(workload))
        done = 0
        while done < len(workload):
            n = min(chunk, len(workload) - done)
            exporter.step(n)
            exporter.sync(url)
            done += n
            progress.update(bar, completed=done)
        end = sim.now
        cases = [("one loop (60 s) at step 1 s", 1, 60.0), ("one loop (60 s) at step 15 s", 15, 60.0),
                 (f"{hours:g} h at step 15 s", 15, hours * 3600), (f"{hours:g} h at step 1 s", 1, hours * 3600)]
        bar = progress.add_task("timing the monitor phase", total=len(cases) * repeats)
        for name, step, window in cases:
            queries = QuerySet("bench", "flink", labels, {"topic": "bench-events"}, {}, 4 * step)
            source = PrometheusSource("bench", queries, url, step_s=step)
            ms = []
            for _ in range(repeats):
                started = time.perf_counter()
                obs = source.observe("bench", end - window, end)
                ms.append(1000 * (time.perf_counter() - started))
                progress.advance(bar)
            ms.sort()
            figures["cases"].append({"case": name, "steps": int(obs.timestamps.size), "workers": len(obs.workers),
                                     "median_ms": round(statistics.median(ms), 1),
                                     "p95_ms": round(ms[max(0, math.ceil(0.95 * len(ms)) - 1)], 1),
                                     "holds": list(obs.holds)})
    return figures


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this area's commands."""

    @app.command()
    def observe(
        job: Annotated[str, typer.Argument(help="The job's name in the jobs file")],
        jobs_file: Annotated[Path, typer.Option("--jobs-file", help="The jobs file (YAML)")],
        json_out: Annotated[Path | None, typer.Option("--json", help="Also write what was seen as JSON")] = None,
        window: Annotated[float, typer.Option(min=1, help="Seconds of history to read")] = 600.0,
        at: Annotated[float | None, typer.Option(help="Observe as of this epoch second (default: now)")] = None,
    ) -> None:
        """Run the monitor phase once against the job's Prometheus and show what the loop would see."""
        try:
            obs, holds, queries = observe_job(jobs_file, job, window, at)
        except DaedalusError as exc:
            _fail(exc)
        _print_observation(obs, holds, queries)
        if json_out is not None:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_text(json.dumps(observation_report(obs, holds, queries), indent=2))
            console.print(f"Wrote {json_out}")

    @bench.command("monitor")
    def monitor_bench(
        hours: Annotated[float, typer.Option(min=0.1, max=2.5, help="Simulated history held by Prometheus")] = 1.0,
        repeats: Annotated[int, typer.Option(min=1, max=1000)] = 30,
        json_out: Annotated[Path | None, typer.Option("--json", help="Also write the figures as JSON")] = None,
    ) -> None:
        """Monitor-phase cost for one 12-worker Flink job against a local Prometheus (started here)."""
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      console=console) as progress:
            figures = bench_monitor(hours, repeats, progress)
        table = Table(title=f"monitor phase, one job, 12 workers, {hours:g} h of history in Prometheus")
        for col in ("range queried", "steps", "median (ms)", "p95 (ms)"):
            table.add_column(col, justify="left" if col == "range queried" else "right")
        for c in figures["cases"]:
            table.add_row(c["case"], str(c["steps"]), f"{c['median_ms']:.1f}", f"{c['p95_ms']:.1f}")
        console.print(table)
        if json_out is not None:
            json_out.write_text(json.dumps(figures, indent=2))
