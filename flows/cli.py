"""The `daedalus` command line: a thin typer layer over flows, the simulator and the benchmark."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from flows import cli_bench, cli_connectors, cli_ops, cli_pipeline
from models.errors import DaedalusError

app = typer.Typer(help="Daedalus: self-adaptive autoscaling for stream processing jobs, on Prefect.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
bench = typer.Typer(help="Benchmarks that print figures (policies, loop cost, forecast, capacity, ...).",
                    no_args_is_help=True)
app.add_typer(bench, name="bench")
console = Console(stderr=True)


def _progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("simulated loops"), TimeRemainingColumn(), console=console)


def _summary_table(report: dict[str, Any]) -> Table:
    t = Table(title=f"{report['policy']} over {report['duration_s'] / 3600:.1f} simulated hours")
    t.add_column("figure")
    t.add_column("value", justify="right")
    lat, loop = report["latency_s"], report["loop_ms"]
    rows = [
        ("worker-seconds (% of static)", f"{report['worker_seconds_pct_of_static']:.1f} %"),
        ("ratio to the lower bound", f"{report['ratio_to_lower_bound']:.2f}"),
        ("latency p50 / p95 / max (s)", f"{lat['p50']:.1f} / {lat['p95']:.1f} / {lat['max']:.1f}"),
        (f"seconds over the {report['slo_s']:.0f} s SLO", str(report["seconds_over_slo"])),
        ("rescales", str(report["rescales"])),
        ("downtime (s)", str(report["downtime_s"])),
    ]
    if report["capacity_error_pct"]["median"] is not None:
        rows.append(("capacity error median / p95", "{:.1f} % / {:.1f} %".format(
            report["capacity_error_pct"]["median"], report["capacity_error_pct"]["p95"])))
    if report["forecast_wape"]["median"] is not None:
        rows.append(("forecast WAPE median", f"{100 * report['forecast_wape']['median']:.1f} %"))
    if loop["median"] is not None:
        rows.append(("loop cost: analyze + plan, median / p95 (ms)", f"{loop['median']:.1f} / {loop['p95']:.1f}"))
    for row in rows:
        t.add_row(*row)
    return t


def _fail(exc: Exception) -> None:
    console.print(f"[red]{type(exc).__name__}:[/red] {exc}")
    raise typer.Exit(1)


def _run_sim(workload_values: Any, policy: str, max_scaleout: int, peak_utilization: float, seed: int,
             orchestrated: bool, description: str, loop_overrides: dict[str, float] | None = None
             ) -> tuple[Any, dict[str, Any]]:
    from models import policies
    from sim.report import score
    from sim.runner import run
    from sim.scenario import scenario

    sim_config, loop_config, workload = scenario(workload_values, max_scaleout, peak_utilization, seed,
                                                 loop_overrides)
    with _progress() as progress:
        bar = progress.add_task(description, total=None)
        result = run(workload, policies.make(policy, max_scaleout), sim_config, loop_config, seed=seed,
                     orchestrated=orchestrated,
                     on_loop=lambda done, total: progress.update(bar, completed=done, total=total))
    return result, score(result)


@app.command()
def simulate(
    workload: Annotated[Path, typer.Option(help="Workload trace (second|count, timestamp|value or date,messages)")],
    json_out: Annotated[Path, typer.Option("--json", help="Where to write the report (JSON)")],
    policy: Annotated[str, typer.Option(help="static, hpa-80, hpa-85, ds2 or daedalus")] = "daedalus",
    max_scaleout: Annotated[int, typer.Option(min=1, max=128)] = 12,
    peak_utilization: Annotated[float, typer.Option(min=0.05, max=2.0)] = 0.9,
    seed: Annotated[int, typer.Option()] = 0,
    hours: Annotated[float | None, typer.Option(min=0.1, help="Run length; multi-day traces are compressed")] = None,
    prefect: Annotated[bool, typer.Option(help="Run every loop through the Prefect flow")] = False,
    target_recovery: cli_bench.TargetRecovery = None,
    scale_in_interval: cli_bench.ScaleInInterval = None,
) -> None:
    """One simulated run of a policy on a workload trace, scored against static and the lower bound."""
    from models import policies
    from sim.workloads import load_workload

    if policy not in policies.names():
        _fail(ValueError(f"no policy {policy!r}; known: {', '.join(policies.names())}"))
    try:
        values = load_workload(workload, hours=hours)
        _, report = _run_sim(values, policy, max_scaleout, peak_utilization, seed, prefect, workload.name,
                             cli_bench.loop_overrides(target_recovery, scale_in_interval))
    except DaedalusError as exc:
        _fail(exc)
    report["workload"] = str(workload)
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(report, indent=2))
    console.print(_summary_table(report))


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Output folder for report.json and report.png")] = Path("demo-output"),
    hours: Annotated[float, typer.Option(min=0.5)] = 6.0,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """The whole loop on the embedded simulator: a 6-hour sine workload through the Prefect flow."""
    from sim.plot import plot_run
    from sim.workloads import sine_workload

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    for name in ("prefect", "prefect.flow_runs", "prefect.task_runs"):  # the progress bar tells the story
        logging.getLogger(name).setLevel(logging.WARNING)
    console.print("Starting Prefect (ephemeral mode) and the simulated job: 12 workers at most, "
                  "sine workload with two periods, peak at 90 % of the true capacity of 12 workers.")
    result, report = _run_sim(sine_workload(hours=hours), "daedalus", 12, 0.9, seed, True, "mape-k")
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    plot_run(result, out / "report.png")
    console.print(_summary_table(report))
    console.print(f"Wrote {out / 'report.json'} and {out / 'report.png'}")


for _area in (cli_connectors, cli_ops, cli_pipeline, cli_bench):
    _area.register(app, bench)


def main() -> None:  # pragma: no cover - console entry point
    try:
        app()
    except DaedalusError as exc:
        console.print(f"[red]{type(exc).__name__}:[/red] {exc}")
        sys.exit(1)
