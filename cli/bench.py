"""`daedalus bench …`: every benchmark's command. The measuring is in `daedalus.bench`; these only draw its
progress and print (and write) its figures."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markdown import Markdown
from rich.progress import Progress, TaskID
from rich.table import Table

from daedalus.bench.fleet import WARMUP_MIN
from daedalus.bench.schedule import POLL_S, WORKER_LIMIT
from daedalus.cli.common import Seed, console, fail, out, phases, progress
from daedalus.models.config import MPC_SCALE_IN_S, PAPER_SCALE_IN_S, RESCALE_WINDOW_S, LoopConfig
from daedalus.models.errors import ConfigurationError, DaedalusError

DEFAULT_WORKLOADS = ["paper", "recorded", "multiday", "families"]
WORKLOADS_HELP = ("Groups (paper, recorded, multiday, multiday-all, families, new-families, all-families), generated "
                  "families (random-walk, spikes, level-shifts, noisy-diurnal, heavy-tailed, flapping, flat, "
                  "slow-drift; with -N: one seed), file names in data/workloads or paths; repeat the option or "
                  "separate with commas")


def _advance(bars: Progress, bar: TaskID, what: str) -> None:
    """One more run done; without a terminal (CI logs), a line per run instead of a bar."""
    bars.update(bar, advance=1, description=what)
    if not console.is_terminal:
        task = next(t for t in bars.tasks if t.id == bar)
        console.print(f"{task.completed:.0f}/{task.total:.0f} {what}")


def _split(items: list[str] | None, default: list[str]) -> list[str]:
    return [part.strip() for item in (items or default) for part in item.split(",") if part.strip()]


def _write_json(path: Path | None, data: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2))
        console.print(f"Wrote {path}")


def _policies_table(summary: dict[str, Any]) -> Table:
    """The headline figures of `bench policies` for the terminal (the full tables are in policies.md); the last
    rows of each workload are its lower bound (every second the smallest sufficient scale-out, rescales free) and,
    with the oracle, the oracle's relaxation (a certified lower bound under the oracle's own constraints)."""
    t = Table(title="worker-seconds (% of static, × oracle, × lower bound), p95 latency, seconds over the SLO, "
                    "rescales")
    for column in ("workload", "policy", "worker-s %", "× oracle", "× lower bound", "p95 (s)", "s over SLO",
                   "rescales"):
        t.add_column(column, justify="left" if column in ("workload", "policy") else "right")

    def ratio(value: float | None) -> str:
        return "–" if value is None else f"{value:.2f}"

    for workload, table in summary["results"].items():
        for i, (policy, e) in enumerate(table.items()):
            t.add_row(workload if i == 0 else "", policy, f"{e['worker_seconds_pct_of_static']:.1f}",
                      ratio(e.get("ratio_to_oracle")), ratio(e["ratio_to_lower_bound"]), f"{e['latency_p95_s']:.1f}",
                      f"{e['seconds_over_slo']:,.0f}", f"{e['rescales']:.1f}")
        e = next(iter(table.values()))
        t.add_row("", "lower bound", f"{e['worker_seconds_pct_of_static'] / e['ratio_to_lower_bound']:.1f}", "", "1.00",
                  "", "", "", end_section="oracle" not in table)
        relaxed = table.get("oracle", {}).get("oracle_relaxed_pct_of_static")
        if "oracle" in table:
            t.add_row("", "oracle's relaxation", "–" if relaxed is None else f"{relaxed:.1f}", "", "", "", "", "",
                      end_section=True)
    return t


# The Daedalus loop settings `bench policies` and `simulate` take, as LoopConfig overrides (loop_overrides below).
TargetRecovery = Annotated[float | None, typer.Option(
    min=1.0, help=f"Daedalus's recovery-time target in seconds (default {LoopConfig.target_recovery_time:g}, the "
                  "paper's)")]
ScaleInInterval = Annotated[float | None, typer.Option(
    min=0.0, help=f"Daedalus: no scale-in within this many seconds of a rescale (default: the planner's own, "
                  f"{MPC_SCALE_IN_S:g}; {PAPER_SCALE_IN_S:g} for daedalus-paper)")]
MaxRescalesPerHour = Annotated[float | None, typer.Option(
    min=0.01, help=f"Daedalus: the rescale budget, rescales per hour over a rolling {RESCALE_WINDOW_S / 3600:g} hours "
                   f"(default {LoopConfig.max_rescales_per_hour:g}: "
                   f"{LoopConfig.max_rescales_per_hour * RESCALE_WINDOW_S / 3600:g} in {RESCALE_WINDOW_S / 3600:g} h)")]
RescalePrice = Annotated[float | None, typer.Option(
    min=0.0, help=f"Daedalus: the worker-seconds each rescale is priced at in the planner's cost, before the budget "
                  f"raises it (default {LoopConfig.rescale_price:g}; replays a cross-validation run)")]
ForecastZ = Annotated[float | None, typer.Option(
    min=0.0, help=f"Daedalus: the forecast band's width, in recent relative errors at each lead (default "
                  f"{LoopConfig.forecast_z:g}; replays a cross-validation run)")]


# The dedicated options of the loop settings a benchmark run may change (LoopConfig field → option).
OPTION_OF = {"target_recovery_time": "--target-recovery", "scale_in_interval": "--scale-in-interval",
             "max_rescales_per_hour": "--max-rescales-per-hour", "rescale_price": "--rescale-price",
             "forecast_z": "--forecast-z"}


def loop_overrides(target_recovery: float | None, scale_in_interval: float | None,
                   max_rescales_per_hour: float | None = None, rescale_price: float | None = None,
                   forecast_z: float | None = None, settings: Sequence[str] = ()) -> dict[str, float]:
    """The Daedalus loop settings given on the command line (LoopConfig field names): the dedicated options and any
    `--set NAME=VALUE`. A setting given both ways is refused: which of two values was meant is not for us to guess."""
    from daedalus.bench.cv import parse_settings

    given = zip(OPTION_OF, (target_recovery, scale_in_interval, max_rescales_per_hour, rescale_price, forecast_z),
                strict=True)
    named = {k: v for k, v in given if v is not None}
    chosen = parse_settings(settings)
    both = sorted(named.keys() & chosen.keys())
    if both:
        raise ConfigurationError(f"--set {both[0]} and {OPTION_OF[both[0]]} both set {both[0]}: give it once")
    return named | chosen


def _figures(title: str, rows: list[tuple[str, str]]) -> Table:
    """A two-column table of named figures, the shape every Prefect- and Spark-side benchmark prints."""
    t = Table(title=title)
    t.add_column("figure")
    t.add_column("value", justify="right")
    for row in rows:
        t.add_row(*row)
    return t


def monitor(
    hours: Annotated[float, typer.Option(min=0.1, max=2.5, help="Simulated history held by Prometheus")] = 1.0,
    repeats: Annotated[int, typer.Option(min=1, max=1000)] = 30,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the figures as JSON")] = None,
) -> None:
    """Monitor-phase cost for one 12-worker Flink job against a local Prometheus (started here)."""
    from daedalus.bench.monitor import run_monitor_bench

    with progress() as bars:
        figures = run_monitor_bench(hours, repeats, on_progress=phases(bars))
    table = Table(title=f"monitor phase, one job, 12 workers, {hours:g} h of history in Prometheus")
    for col in ("range queried", "steps", "median (ms)", "p95 (ms)"):
        table.add_column(col, justify="left" if col == "range queried" else "right")
    for c in figures["cases"]:
        table.add_row(c["case"], str(c["steps"]), f"{c['median_ms']:.1f}", f"{c['p95_ms']:.1f}")
    console.print(table)
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2))


def deploy(
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Simulated jobs to deploy")] = 100,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures here")] = None,
) -> None:
    """Time `daedalus deploy` of N simulated jobs against a fresh local Prefect server."""
    from daedalus.bench.schedule import run_deploy_bench

    with progress() as bars:
        report = run_deploy_bench(jobs, console, on_progress=phases(bars))
    first, again = report["first_deploy_s"], report["redeploy_s"]
    out.print(_figures(f"deploying {jobs} jobs ({report['deployments']} deployments)", [
        ("first deploy (create)", f"{first:.1f} s"), ("deploy again (update)", f"{again:.1f} s")]))
    if json_out:
        json_out.write_text(json.dumps({**report, "first_deploy_s": round(first, 2), "redeploy_s": round(again, 2)},
                                       indent=2))


def operate(
    minutes: Annotated[float, typer.Option(min=3, help="How long to run")] = 20,
    pipeline_every: Annotated[float, typer.Option(min=30, help="Seconds between the validate-metrics runs created "
                                                                "on top of its schedule (the pipeline always due)")
                              ] = 180,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures here")] = None,
    keep: Annotated[Path | None, typer.Option(help="Keep the server home, store and lake here")] = None,
) -> None:
    """Three jobs (two approve, one auto) with the pipeline due, one worker: the loops' start delays and cancelled
    runs, each operator command's time, and whether every answer reached the ledger dated when it was given."""
    from daedalus.bench.operate import operate_table, run_operate_bench

    report = run_operate_bench(minutes, console, keep, pipeline_every)
    out.print(operate_table(report))
    _write_json(json_out, report)


def schedule(
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Simulated jobs on the one-minute schedule")] = 100,
    minutes: Annotated[float, typer.Option(min=1, help="How long to run")] = 30,
    prefork: Annotated[bool, typer.Option(help="Worker with the preloaded process (`daedalus worker`)")] = True,
    background: Annotated[bool, typer.Option(help="Deploy the background flows too (a recovery monitor "
                                                  "follows every rescale)")] = True,
    postgres: Annotated[bool, typer.Option(help="The server's database in a throwaway PostgreSQL cluster "
                                                "(Debian `postgresql`) instead of SQLite")] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures here")] = None,
    keep: Annotated[Path | None, typer.Option(help="Keep the server home and store here")] = None,
    worker_limit: Annotated[int, typer.Option(min=0, help="The worker's --limit (0: none)")] = WORKER_LIMIT,
    poll_seconds: Annotated[float, typer.Option(min=1, help="The worker's query interval "
                                                       "(PREFECT_WORKER_QUERY_SECONDS)")] = POLL_S,
) -> None:
    """Can one local server and one process worker keep up with N jobs every minute? Start delays and backlog."""
    from daedalus.bench.schedule import run_schedule_bench, schedule_table

    with progress() as bars:
        report = run_schedule_bench(jobs, minutes, prefork, keep, console, background, postgres, worker_limit,
                                    poll_seconds, on_progress=phases(bars))
    out.print(schedule_table(report))
    if json_out:
        json_out.write_text(json.dumps(report, indent=2))


def retrain(
    jobs: Annotated[int, typer.Option(min=1, help="Jobs in the fleet")] = 1000,
    hours: Annotated[float, typer.Option(min=1.0, help="History per job")] = 6.0,
    workers: Annotated[int, typer.Option(min=1, help="Workers (rows per second) per job")] = 2,
    masters: Annotated[str, typer.Option(help="Spark masters to compare, comma-separated")] = "local[1],local[2]",
    lake: Annotated[str | None, typer.Option(help="Reuse or keep the generated lake here")] = None,
    seed: Seed = 0,
) -> None:
    """Retrain N jobs' forecasters (fit + backtest + promotion) on each master; prints times and speed-up."""
    from daedalus.bench.pipeline import run_retrain_bench

    with progress() as bars:
        report = run_retrain_bench(jobs, hours, workers, [m.strip() for m in masters.split(",") if m.strip()], lake,
                                   seed, on_progress=phases(bars))
    figures: list[tuple[str, str]] = [("jobs × history × workers", f"{jobs} × {hours:g} h × {workers}")]
    if report["rows"] is not None:
        figures.append(("lake rows", f"{report['rows']:,}"))
    seconds = {master: m["seconds"] for master, m in report["masters"].items()}
    for master, m in report["masters"].items():
        figures += [
            (f"{master}: wall time", f"{m['seconds']:.1f} s"),
            (f"{master}: per job", f"{m['seconds'] / jobs:.3f} s"),
            (f"{master}: fit time per job, median / p95",
             "n/a" if m["fit_s_median"] is None else f"{m['fit_s_median']:.2f} / {m['fit_s_p95']:.2f} s"),
            (f"{master}: fitted / failed / skipped", f"{m['fitted']} / {m['failed']} / {m['skipped']}"),
        ]
    if "local[1]" in seconds and "local[2]" in seconds:
        figures.append(("speed-up local[2] vs local[1]", f"{seconds['local[1]'] / seconds['local[2]']:.2f}×"))
    console.print(_figures("daedalus bench retrain", figures))
    typer.echo(json.dumps({"jobs": jobs, "hours": hours, "workers": workers, "seconds": seconds}))


def validate(
    jobs: Annotated[int, typer.Option(min=1, help="Jobs in the fleet")] = 1000,
    hours: Annotated[float, typer.Option(min=0.1, help="Window validated (the last hours)")] = 1.0,
    workers: Annotated[int, typer.Option(min=1, help="Workers (rows per second) per job")] = 4,
    master: Annotated[str, typer.Option(help="Spark master")] = "local[2]",
    lake: Annotated[str | None, typer.Option(help="Reuse or keep the generated lake here")] = None,
    seed: Seed = 0,
) -> None:
    """Validate N jobs' last hour with the whole suite on one master; prints the time."""
    from daedalus.bench.pipeline import run_validate_bench

    with progress() as bars:
        report = run_validate_bench(jobs, hours, workers, master, lake, seed, on_progress=phases(bars))
    console.print(_figures("daedalus bench validate", [
        ("jobs × window × workers", f"{jobs} × {hours:g} h × {workers}"),
        ("rows validated", f"{report['rows']:,}"),
        ("checks", str(report["checks"])),
        (f"{master}: wall time", f"{report['seconds']:.1f} s"),
        ("jobs failed", str(report["failed_jobs"])),
    ]))
    typer.echo(json.dumps({"jobs": jobs, "hours": hours, "workers": workers, "rows": report["rows"],
                           "seconds": report["seconds"]}))


def policies(
    workloads: Annotated[list[str] | None, typer.Option(help=WORKLOADS_HELP)] = None,
    seeds: Annotated[int, typer.Option(min=1, help="Seeds per policy and workload (0 … N−1)")] = 3,
    out: Annotated[Path, typer.Option(help="Folder for policies.json, policies.md and the figures")] = Path(
        "bench-output"),
    jobs_parallel: Annotated[int, typer.Option(min=1, help="Worker processes")] = os.cpu_count() or 1,
    policy: Annotated[list[str] | None, typer.Option(help="Policies to compare (default: all; `oracle`, the offline "
                                                          "optimum, gives the × oracle ratios)")] = None,
    max_scaleout: Annotated[int, typer.Option(min=1, max=128)] = 12,
    peak_utilization: Annotated[float, typer.Option(min=0.05, max=2.0)] = 0.9,
    target_recovery: TargetRecovery = None,
    scale_in_interval: ScaleInInterval = None,
    max_rescales_per_hour: MaxRescalesPerHour = None,
    rescale_price: RescalePrice = None,
    forecast_z: ForecastZ = None,
    runs: Annotated[Path | None, typer.Option(help="Keep each run's result in this folder and reuse it while its "
                                                   "code, trace and settings are unchanged (a re-run after a "
                                                   "planner change reruns the planners only; one cut short keeps "
                                                   "what it finished)")] = None,
) -> None:
    """Every policy × every workload × several seeds on the simulator: tables, JSON and a figure per workload."""
    from daedalus.bench.catalog import POLICIES
    from daedalus.bench.policies import resolve_workloads, run_benchmark

    try:
        chosen = resolve_workloads(_split(workloads, DEFAULT_WORKLOADS))
        with progress("runs") as bars:
            bar = bars.add_task("policies × workloads × seeds", total=None)
            summary = run_benchmark(
                chosen, out, seeds=range(seeds), policies=_split(policy, list(POLICIES)),
                processes=jobs_parallel, max_scaleout=max_scaleout, peak_utilization=peak_utilization,
                loop_overrides=loop_overrides(target_recovery, scale_in_interval, max_rescales_per_hour,
                                              rescale_price, forecast_z),
                runs_dir=runs,
                on_start=lambda n: bars.update(bar, total=n),
                on_done=lambda r: _advance(bars, bar, f"{r['policy']} {r['workload']} seed {r['seed']}"),
            )
    except (DaedalusError, ValueError) as exc:
        fail(exc)
    console.print(_policies_table(summary))
    console.print(f"Wrote {out / 'policies.json'}, {out / 'policies.md'} and {len(summary['figures'])} figures")


def cv(
    seeds: Annotated[int, typer.Option(min=1, max=3, help="Draws of each family (0 … N−1)")] = 1,
    out: Annotated[Path, typer.Option(help="Folder for cv.json and cv.md")] = Path("bench-output/cv"),
    jobs_parallel: Annotated[int, typer.Option(min=1, help="Worker processes")] = os.cpu_count() or 1,
    runs: Annotated[Path | None, typer.Option(help="Keep each run here (one folder per setting) and reuse it")] = None,
    grid: Annotated[list[str] | None, typer.Option(
        help="A loop setting and its values, e.g. forecast_z=0.5,1,2 (repeat for more axes; default: the "
             "envelope and the capacity spread)")] = None,
    seed: Annotated[int, typer.Option(min=0, help="The simulation's seed (the noise of capacity, CPU and downtime), as "
                                           "`bench policies` numbers its seeds")] = 0,
) -> None:
    """The planner's settings by leave-one-family-out cross-validation: the paper traces and every generated
    family under each setting of a small grid; prints the setting each fold chose and its held-out score."""
    from daedalus.bench.cv import GRID, parse_grid, run_cv, settings_grid
    from daedalus.bench.families import FAMILIES

    try:
        axes = parse_grid(grid) if grid else GRID
    except DaedalusError as exc:
        fail(exc)
    total = len(settings_grid(axes)) * (4 + len(FAMILIES) * seeds)
    with progress("runs") as bars:
        bar = bars.add_task("settings × workloads", total=total)
        summary = run_cv(out, family_seeds=range(seeds), seed=seed, processes=jobs_parallel, runs_dir=runs, grid=axes,
                         on_done=lambda r: _advance(bars, bar, f"{r['workload']}"))
    console.print(Markdown((out / "cv.md").read_text()))
    console.print(f"Chosen: {summary['chosen']}; wrote {out / 'cv.json'} and {out / 'cv.md'}")


def loop(
    jobs: Annotated[int, typer.Option(min=1, max=100_000, help="Jobs stepped together in this process")] = 1,
    json_out: Annotated[Path | None, typer.Option("--json", help="Where to write the figures (JSON)")] = None,
    hours: Annotated[float, typer.Option(min=0.05, help="Measured simulated hours")] = 6.0,
    warmup_hours: Annotated[float | None, typer.Option(
        min=0.0, help="Warm-up of the template job before N jobs start (default: 0 for one job, 2 h else)")] = None,
    seed: Seed = 0,
) -> None:
    """The cost of one MAPE-K iteration per job, and how many jobs one process serves per minute."""
    from daedalus.bench.loop import run_loop_bench

    with progress("simulated minutes") as bars:
        bar = bars.add_task(f"{jobs} job(s)", total=None)
        report = run_loop_bench(jobs, hours, warmup_hours, seed,
                                on_minute=lambda done, total: bars.update(bar, completed=done, total=total))
    cost, it = report["loop_ms"], report["iteration_ms"]
    console.print(
        f"{report['jobs']} job(s), {report['hours']:g} h measured after {report['warmup_hours']:g} h warm-up, "
        f"{report['iterations']:,} iterations in {report['wall_s']:.1f} s\n"
        f"analyze + plan per iteration: median {cost['median']:.2f} ms, p95 {cost['p95']:.2f} ms, "
        f"max {cost['max']:.0f} ms; first hour median {cost['first_hour_median']:.2f} ms, "
        f"last hour median {cost['last_hour_median']:.2f} ms\n"
        f"whole iteration: mean {it['mean']:.2f} ms → {report['jobs_per_minute']:,.0f} jobs per minute "
        f"in one process; simulator {report['simulator_s']:.1f} s apart; peak memory {report['max_rss_mb']:.0f} MB"
    )
    _write_json(json_out, report)


def forecast(
    workloads: Annotated[list[str] | None, typer.Option(help=WORKLOADS_HELP)] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Where to write the figures (JSON)")] = None,
) -> None:
    """15-minute-horizon WAPE of the forecaster on each trace, against last value and seasonal naive."""
    from daedalus.bench.estimates import forecast_markdown, run_forecast_bench
    from daedalus.bench.policies import load_all, resolve_workloads

    try:
        chosen = resolve_workloads(_split(workloads, DEFAULT_WORKLOADS))
        traces = load_all(chosen)
    except DaedalusError as exc:
        fail(exc)
    with progress("traces") as bars:
        bar = bars.add_task("forecast", total=len(chosen))
        report = run_forecast_bench(chosen, traces, on_done=lambda name: bars.update(bar, advance=1))
    console.print(Markdown(forecast_markdown(report)))
    _write_json(json_out, report)


def capacity(
    seeds: Annotated[int, typer.Option(min=1, help="Seeds per scale-out (0 … N−1)")] = 3,
    json_out: Annotated[Path | None, typer.Option("--json", help="Where to write the figures (JSON)")] = None,
    max_scaleout: Annotated[int, typer.Option(min=1, max=128)] = 12,
    hours: Annotated[float, typer.Option(min=0.1, help="Simulated hours per run")] = 1.0,
) -> None:
    """Capacity estimate against the simulator's true capacity at each scale-out, with and without skew."""
    from daedalus.bench.estimates import capacity_markdown, run_capacity_bench

    with progress("runs") as bars:
        bar = bars.add_task("capacity", total=2 * max_scaleout * seeds)
        report = run_capacity_bench(range(seeds), max_scaleout, hours,
                                    on_done=lambda: bars.update(bar, advance=1))
    console.print(Markdown(capacity_markdown(report)))
    for key, s in report["summary"].items():
        console.print(f"{key}: |error| median {s['abs_error_pct_median']:.1f} %, "
                      f"p95 {s['abs_error_pct_p95']:.1f} %, max {s['abs_error_pct_max']:.1f} %, "
                      f"within 5 %: {100 * s['share_within_5_pct']:.0f} %")
    _write_json(json_out, report)


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"--jobs takes sizes separated by commas (10,50,100), not {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise typer.BadParameter("--jobs needs at least one size ≥ 1")
    return sizes


def fleet(
    jobs: Annotated[str, typer.Option("--jobs", help="Fleet sizes to measure, comma-separated")] = "10,50,100,200",
    minutes: Annotated[float, typer.Option(min=1, help="Measured minutes per size (after the warm-up)")] = 15,
    warmup: Annotated[float, typer.Option(
        min=0, help="Minutes per size before measuring: the first fits, and Prefect's first five minutes after a "
                    "deploy (bench/fleet.py)")] = WARMUP_MIN,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures here")] = None,
    keep: Annotated[Path | None, typer.Option(help="Keep each size's fleet folder (logs, data) here")] = None,
) -> None:
    """The cost model of Prefect's distributed topology: CPU per job-minute per kind of process, start delays,
    late runs, at each size; a fitted line per kind and the cores projected for 1,000 and 10,000 jobs."""
    from daedalus.bench.fleet import KINDS, run_fleet_bench

    sizes = _sizes(jobs)
    try:
        with progress() as bars:
            report = run_fleet_bench(sizes, minutes, keep, warmup, say=console.print, on_progress=phases(bars))
    except DaedalusError as exc:
        fail(exc)
    t = Table(title=f"CPU-seconds per job-minute by process kind, {minutes:g} min per size, "
                    f"{report['sizing']['machine_cores']} cores")
    for column in ("jobs", "total", *KINDS, "delay p50/p95/max (s)", "late max", "busy %", "reference idle/loaded (s)"):
        t.add_column(column, justify="right")
    for s in report["sizes"]:
        c, d = s["cpu_s_per_job_minute"], s["start_delay_s"]
        t.add_row(str(s["jobs"]), f"{c['total']:.3f}", *(f"{c[k]:.3f}" for k in KINDS),
                  f"{d['p50']} / {d['p95']} / {d['max']}", str(s["late_runs_max"]),
                  f"{s['machine_busy_percent']:.0f}" + ("" if s["kept_up"] else " (behind)"),
                  f"{s['reference_cpu_s']['idle']:.3f} / {s['reference_cpu_s']['loaded']:.3f}")
    out.print(t)
    out.print("reference: CPU-s of a fixed piece of Python work before the fleet and during the window "
              "(bench/reference.py); divide by the loaded one to compare machines")
    p = Table(title="projected cores (fitted lines: CPU-s per minute = intercept + per job × jobs)")
    for column in ("jobs", "total", *KINDS):
        p.add_column(column, justify="right")
    for row in report["sizing"]["projected_cores"]:
        p.add_row(f"{row['jobs']:,}", *(f"{row[k]:.2f}" for k in ("total", *KINDS)))
    out.print(p)
    limit = report["sizing"]["jobs_at_machine_cores"]
    out.print(f"This machine's {report['sizing']['machine_cores']} cores are all used at about "
              f"{'n/a' if limit is None else f'{limit:,}'} jobs (fitted total).")
    _write_json(json_out, report)


def chaos(
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Simulated jobs on the one-minute schedule")] = 50,
    minutes: Annotated[float, typer.Option(min=5, help="How long to run (12 or more: every kind of fault)")] = 60,
    seed: Annotated[int, typer.Option(min=0, help="Seeds the fault plan and which replica or worker is hit")] = 0,
    speedup: Annotated[float, typer.Option(min=1, help="Simulated seconds per second (rescales during the run)")
                       ] = 10.0,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures here")] = None,
    keep: Annotated[Path | None, typer.Option(help="Keep the fleet's folder (logs, store) here")] = None,
) -> None:
    """Faults on a running fleet (an API replica, the services, a worker mid-run, Redis, PostgreSQL killed and
    restarted), checked against each simulated job's record of the rescales it received."""
    from daedalus.bench.chaos import run_chaos

    try:
        report = run_chaos(jobs, minutes, seed, keep, speedup, say=console.print)
    except DaedalusError as exc:
        fail(exc)
    t = Table(title=f"{jobs} jobs, {minutes:g} min, seed {seed}: faults")
    for column in ("kind", "process", "at (min)", "every job back on schedule after (s)"):
        t.add_column(column, justify="left" if column in ("kind", "process") else "right")
    for f in report["faults"]:
        t.add_row(f["kind"], f["process"], f"{f['time'] / 60:.1f}",
                  "not within the run" if f["recovered_s"] is None else f"{f['recovered_s']:.0f}")
    out.print(t)
    out.print(_figures("known answers", [
        ("rescales received by the jobs / executed in the ledgers",
         f"{report['actions_received']} / {report['actions_executed']}"),
        ("actions duplicated", str(report["actions_duplicated"])), ("actions lost", str(report["actions_lost"])),
        ("runs stuck past their deadline", str(report["stuck_runs"])),
        (f"every job back within {report['all_recovered_within_s']:.0f} s of each restart",
         "yes" if report["all_recovered"] else "no"),
        ("knowledge checksums valid", f"{'yes' if report['checksums_ok'] else 'NO'} "
                                      f"({report['knowledge_versions_checked']} versions)"),
        ("parts that died on their own (restarted)", str(len(report["unplanned_restarts"]))),
    ]))
    _write_json(json_out, report)
