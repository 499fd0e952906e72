"""`daedalus bench policies | loop | forecast | capacity`: benchmarks that print figures and write them to files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from daedalus.models.errors import DaedalusError

console = Console(stderr=True)
DEFAULT_WORKLOADS = ["paper", "recorded", "multiday"]
WORKLOADS_HELP = ("Groups (paper, recorded, multiday, multiday-all), file names in ../shared/workloads or paths; "
                  "repeat the option or separate with commas")


def _progress(unit: str) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console)


def _advance(progress: Progress, bar: TaskID, what: str) -> None:
    """One more run done; without a terminal (CI logs), a line per run instead of a bar."""
    progress.update(bar, advance=1, description=what)
    if not console.is_terminal:
        task = next(t for t in progress.tasks if t.id == bar)
        console.print(f"{task.completed:.0f}/{task.total:.0f} {what}")


def _fail(exc: Exception) -> None:
    console.print(f"[red]{type(exc).__name__}:[/red] {exc}")
    raise typer.Exit(1)


def _split(items: list[str] | None, default: list[str]) -> list[str]:
    return [part.strip() for item in (items or default) for part in item.split(",") if part.strip()]


def _write_json(path: Path | None, data: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2))
        console.print(f"Wrote {path}")


def _policies_table(summary: dict[str, Any]) -> Table:
    """The headline figures of `bench policies` for the terminal (the full tables are in policies.md)."""
    t = Table(title="worker-seconds (% of static, × lower bound), p95 latency, seconds over the SLO, rescales")
    for column in ("workload", "policy", "worker-s %", "× lower bound", "p95 (s)", "over SLO", "rescales"):
        t.add_column(column, justify="left" if column in ("workload", "policy") else "right")
    for workload, table in summary["results"].items():
        for i, (policy, e) in enumerate(table.items()):
            t.add_row(workload if i == 0 else "", policy, f"{e['worker_seconds_pct_of_static']:.1f}",
                      f"{e['ratio_to_lower_bound']:.2f}", f"{e['latency_p95_s']:.1f}",
                      f"{e['seconds_over_slo_pct']:.2f} %", f"{e['rescales']:.1f}", end_section=i == len(table) - 1)
    return t


# The Daedalus loop settings `bench policies` and `simulate` take, as LoopConfig overrides (loop_overrides below).
TargetRecovery = Annotated[float | None, typer.Option(
    min=1.0, help="Daedalus's recovery-time target in seconds (default 600, the paper's)")]
ScaleInInterval = Annotated[float | None, typer.Option(
    min=0.0, help="Daedalus: no scale-in within this many seconds of a rescale (default 1200)")]


def loop_overrides(target_recovery: float | None, scale_in_interval: float | None) -> dict[str, float]:
    """The Daedalus loop settings given on the command line (LoopConfig field names)."""
    given = {"target_recovery_time": target_recovery, "scale_in_interval": scale_in_interval}
    return {k: v for k, v in given.items() if v is not None}


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this area's commands to the `bench` group."""

    @bench.command("policies")
    def policies_cmd(
        workloads: Annotated[list[str] | None, typer.Option(help=WORKLOADS_HELP)] = None,
        seeds: Annotated[int, typer.Option(min=1, help="Seeds per policy and workload (0 … N−1)")] = 3,
        out: Annotated[Path, typer.Option(help="Folder for policies.json, policies.md and the figures")] = Path(
            "bench-output"),
        jobs_parallel: Annotated[int, typer.Option(min=1, help="Worker processes")] = os.cpu_count() or 1,
        policy: Annotated[list[str] | None, typer.Option(help="Policies to compare (default: all)")] = None,
        max_scaleout: Annotated[int, typer.Option(min=1, max=128)] = 12,
        peak_utilization: Annotated[float, typer.Option(min=0.05, max=2.0)] = 0.9,
        target_recovery: TargetRecovery = None,
        scale_in_interval: ScaleInInterval = None,
    ) -> None:
        """Every policy × every workload × several seeds on the simulator: tables, JSON and a figure per workload."""
        from daedalus.bench.policies import POLICIES, resolve_workloads, run_benchmark

        try:
            chosen = resolve_workloads(_split(workloads, DEFAULT_WORKLOADS))
            with _progress("runs") as progress:
                bar = progress.add_task("policies × workloads × seeds", total=None)
                summary = run_benchmark(
                    chosen, out, seeds=range(seeds), policies=_split(policy, list(POLICIES)),
                    processes=jobs_parallel, max_scaleout=max_scaleout, peak_utilization=peak_utilization,
                    loop_overrides=loop_overrides(target_recovery, scale_in_interval),
                    on_start=lambda n: progress.update(bar, total=n),
                    on_done=lambda r: _advance(progress, bar, f"{r['policy']} {r['workload']} seed {r['seed']}"),
                )
        except (DaedalusError, ValueError) as exc:
            _fail(exc)
        console.print(_policies_table(summary))
        console.print(f"Wrote {out / 'policies.json'}, {out / 'policies.md'} and {len(summary['figures'])} figures")

    @bench.command("loop")
    def loop_cmd(
        jobs: Annotated[int, typer.Option(min=1, max=100_000, help="Jobs stepped together in this process")] = 1,
        json_out: Annotated[Path | None, typer.Option("--json", help="Where to write the figures (JSON)")] = None,
        hours: Annotated[float, typer.Option(min=0.05, help="Measured simulated hours")] = 6.0,
        warmup_hours: Annotated[float | None, typer.Option(
            min=0.0, help="Warm-up of the template job before N jobs start (default: 0 for one job, 2 h else)")] = None,
        seed: Annotated[int, typer.Option()] = 0,
    ) -> None:
        """The cost of one MAPE-K iteration per job, and how many jobs one process serves per minute."""
        from daedalus.bench.loop import run_loop_bench

        with _progress("simulated minutes") as progress:
            bar = progress.add_task(f"{jobs} job(s)", total=None)
            report = run_loop_bench(jobs, hours, warmup_hours, seed,
                                    on_minute=lambda done, total: progress.update(bar, completed=done, total=total))
        loop, it = report["loop_ms"], report["iteration_ms"]
        console.print(
            f"{report['jobs']} job(s), {report['hours']:g} h measured after {report['warmup_hours']:g} h warm-up, "
            f"{report['iterations']:,} iterations in {report['wall_s']:.1f} s\n"
            f"analyze + plan per iteration: median {loop['median']:.2f} ms, p95 {loop['p95']:.2f} ms, "
            f"max {loop['max']:.0f} ms; first hour median {loop['first_hour_median']:.2f} ms, "
            f"last hour median {loop['last_hour_median']:.2f} ms\n"
            f"whole iteration: mean {it['mean']:.2f} ms → {report['jobs_per_minute']:,.0f} jobs per minute "
            f"in one process; simulator {report['simulator_s']:.1f} s apart; peak memory {report['max_rss_mb']:.0f} MB"
        )
        _write_json(json_out, report)

    @bench.command("forecast")
    def forecast_cmd(
        workloads: Annotated[list[str] | None, typer.Option(help=WORKLOADS_HELP)] = None,
        json_out: Annotated[Path | None, typer.Option("--json", help="Where to write the figures (JSON)")] = None,
    ) -> None:
        """15-minute-horizon WAPE of the forecaster on each trace, against last value and seasonal naive."""
        from daedalus.bench.models import forecast_markdown, run_forecast_bench
        from daedalus.bench.policies import load_all, resolve_workloads

        try:
            chosen = resolve_workloads(_split(workloads, DEFAULT_WORKLOADS))
            traces = load_all(chosen)
        except DaedalusError as exc:
            _fail(exc)
        with _progress("traces") as progress:
            bar = progress.add_task("forecast", total=len(chosen))
            report = run_forecast_bench(chosen, traces, on_done=lambda name: progress.update(bar, advance=1))
        console.print(Markdown(forecast_markdown(report)))
        _write_json(json_out, report)

    @bench.command("capacity")
    def capacity_cmd(
        seeds: Annotated[int, typer.Option(min=1, help="Seeds per scale-out (0 … N−1)")] = 3,
        json_out: Annotated[Path | None, typer.Option("--json", help="Where to write the figures (JSON)")] = None,
        max_scaleout: Annotated[int, typer.Option(min=1, max=128)] = 12,
        hours: Annotated[float, typer.Option(min=0.1, help="Simulated hours per run")] = 1.0,
    ) -> None:
        """Capacity estimate against the simulator's true capacity at each scale-out, with and without skew."""
        from daedalus.bench.models import capacity_markdown, run_capacity_bench

        with _progress("runs") as progress:
            bar = progress.add_task("capacity", total=2 * max_scaleout * seeds)
            report = run_capacity_bench(range(seeds), max_scaleout, hours,
                                        on_done=lambda: progress.update(bar, advance=1))
        console.print(Markdown(capacity_markdown(report)))
        for key, s in report["summary"].items():
            console.print(f"{key}: |error| median {s['abs_error_pct_median']:.1f} %, "
                          f"p95 {s['abs_error_pct_p95']:.1f} %, max {s['abs_error_pct_max']:.1f} %, "
                          f"within 5 %: {100 * s['share_within_5_pct']:.0f} %")
        _write_json(json_out, report)
