"""`daedalus observe`: check a job's PromQL before turning the loop on, by running the monitor phase once."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer
from rich.table import Table

from daedalus.cli.common import JobsFile, console, fail
from daedalus.cli.settings import known_job, resolve
from daedalus.models.errors import ConnectorError, DaedalusError
from daedalus.models.types import Observation

if TYPE_CHECKING:
    from daedalus.connectors.jobs import JobSpec


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
        workers.add_column(col, justify="left" if col == "pod" else "right", overflow="fold")
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


def observe_job(spec: JobSpec, window_s: float, at: float | None) -> tuple[Observation, tuple[str, ...],
                                                                          dict[str, str]]:
    """Run the monitor phase once for a job of the jobs file, and the loop's validation on its result."""
    from daedalus.connectors.prometheus import PrometheusSource
    from daedalus.models.loop.monitor import unavailable
    from daedalus.models.loop.validation import validate_observation

    job = spec.name
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


def observe(
    job: Annotated[str, typer.Argument(help="The job's name in the jobs file")],
    jobs_file: JobsFile = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write what was seen as JSON")] = None,
    window: Annotated[float, typer.Option(min=1, help="Seconds of history to read")] = 600.0,
    at: Annotated[float | None, typer.Option(help="Observe as of this epoch second (default: now)")] = None,
) -> None:
    """Run the monitor phase once against the job's Prometheus and show what the loop would see."""
    try:
        obs, holds, queries = observe_job(known_job(resolve(jobs_file=jobs_file), job), window, at)
    except DaedalusError as exc:
        fail(exc)
    _print_observation(obs, holds, queries)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(observation_report(obs, holds, queries), indent=2))
        console.print(f"Wrote {json_out}")
