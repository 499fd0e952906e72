"""`daedalus backtest`: what other policies would have done on a job's own history (or every job's, `--all`)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from daedalus.cli.common import FROM_SETTINGS, Lake, Seed, console, fail, progress
from daedalus.cli.settings import resolve
from daedalus.models.errors import ConfigurationError, DaedalusError
from daedalus.models.text import number


def _epoch(option: str, text: str | None) -> float | None:
    """ISO 8601 (UTC unless it says otherwise) or epoch seconds."""
    if text is None:
        return None
    try:
        value = float(text)
        if math.isfinite(value):
            return value
    except ValueError:
        pass
    import pandas as pd  # here, not at the top: every command's start would pay for it

    try:
        stamp = pd.Timestamp(text)
    except ValueError:
        raise ConfigurationError(f"--{option}: {text!r} is neither an ISO 8601 time nor epoch seconds") from None
    return (stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp).timestamp()


def _names(text: str | None) -> list[str]:
    """The policies asked for (checked against the registry), or the default comparison."""
    from daedalus.connectors.replay import check_policies, default_policies

    names = [n.strip() for n in text.split(",") if n.strip()] if text else default_policies()
    check_policies(names)
    return names


def _table(rows: list[dict[str, Any]], title: str) -> Table:
    t = Table(title=title)
    # Headers wrap at their spaces and names fold, so that nothing is cut in an 80-column terminal.
    for column in ("job", "policy", "worker hours", "% of actual", "s over SLO", "rescales", "p95 latency"):
        t.add_column(column, justify="left" if column in ("job", "policy") else "right", overflow="fold")
    for r in rows:
        pct = "—" if r["pct_of_actual"] is None else f"{r['pct_of_actual']:.1f} %"
        t.add_row(r["job"], r["policy"], number(r["worker_hours"], digits=1), pct, number(r["seconds_over_slo"]),
                  number(r["rescales"]), number(r["latency_p95_s"], "s"))
    return t


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _capacity_line(report: dict[str, Any]) -> str:
    never = report["capacity"]["never_observed"]
    observed = [c for c in report["capacity"]["per_scaleout"] if c["observed"]]
    seen = ", ".join(f"{c['scaleout']}: {number(c['fitted'])}/s" for c in observed) or "none"
    return (f"capacity fitted on the history at the scale-outs it ran: {seen}; never observed (extrapolated): "
            f"{', '.join(map(str, never)) or 'none'}")


def backtest(
    job: Annotated[str | None, typer.Argument(help="The job whose history to replay (or --all)",
                                              show_default=False)] = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Every job of the lake's window, in parallel on Spark")
                        ] = False,
    lake: Lake = None,
    policies: Annotated[str | None, typer.Option(
        help="Comma-separated policies to replay (default: daedalus, ds2, flink-autoscaler, static)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the report (JSON) here")] = None,
    out: Annotated[Path, typer.Option(help="Folder for the Pareto plot (PNG) and the tables")] = Path("backtest"),
    start: Annotated[str | None, typer.Option(help="Window start: ISO 8601 (UTC) or epoch seconds "
                                                   "(default: the history's first second)")] = None,
    end: Annotated[str | None, typer.Option(help="Window end (default: the history's last second)")] = None,
    store: Annotated[str | None, typer.Option(
        help=f"Knowledge store whose learned downtimes to replay with {FROM_SETTINGS}; without a configured "
             "store, the configured downtimes", show_default=False)] = None,
    max_scaleout: Annotated[int | None, typer.Option(min=1, max=1024, help="The job's maximum scale-out "
                                                     "(default: the largest in its history)")] = None,
    master: Annotated[str | None, typer.Option(help="Spark master (default local[N], N half the cores)")] = None,
) -> None:
    """Replay policies on a job's own history from the lake and compare them with what actually ran: worker-hours,
    seconds over the SLO, p95 latency, rescales. Exits 1 when the history cannot be backtested, saying why."""
    from daedalus.connectors.lake import Lake as LakeAt
    from daedalus.connectors.spark import SparkSettings

    try:
        if (job is None) == (not all_jobs):
            raise ConfigurationError("name one JOB or give --all")
        resolved = resolve(lake=lake, store=store)
        store_url = None if resolved.sources["store"] == "default" else resolved.settings.store
        names, since, until = _names(policies), _epoch("start", start), _epoch("end", end)
        settings = SparkSettings.from_env(master)
        if all_jobs:
            _fleet(LakeAt(resolved.settings.lake), names, since, until, settings, json_out, out)
        else:
            assert job is not None
            _one(LakeAt(resolved.settings.lake), job, names, since, until, store_url, max_scaleout, settings,
                 json_out, out)
    except (DaedalusError, ValueError) as exc:
        fail(exc)


def _one(lake: Any, job: str, names: list[str], since: float | None, until: float | None, store_url: str | None,
         max_scaleout: int | None, settings: Any, json_out: Path | None, out: Path) -> None:
    from daedalus.sim.backtest_plot import plot_backtest
    from daedalus.tasks.backtest import backtest_job, learned_downtimes, require_job, rows_of

    require_job(lake, job)  # before Spark starts: a mistyped job costs nothing
    with progress() as bars:
        bar = bars.add_task(f"{job}: starting Spark", total=None)
        report = backtest_job(lake, job, names, since, until, max_scaleout, learned_downtimes(store_url, job),
                              settings, on_phase=lambda p: bars.update(bar, description=f"{job}: {p}"))
    png = plot_backtest(report, out / f"backtest-{job}.png")
    rows = rows_of(report)
    _write_csv(out / f"backtest-{job}.csv", rows)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2))
    console.print(_table(rows, f"Backtest of {job}, {report['window']['start']} – {report['window']['end']}"))
    console.print(_capacity_line(report), soft_wrap=True)
    console.print(f"Pareto plot: {png}; table: {out / f'backtest-{job}.csv'}", soft_wrap=True)


def _fleet(lake: Any, names: list[str], since: float | None, until: float | None, settings: Any,
           json_out: Path | None, out: Path) -> None:
    from daedalus.sim.backtest_plot import plot_backtest
    from daedalus.tasks.backtest import backtest_fleet, rows_of

    with progress() as bars:
        bars.add_task(f"backtesting every job of {lake.url} on Spark {settings.master}", total=None)
        fleet = backtest_fleet(lake, names, since, until, settings)
    rows = [r for report in fleet.reports.values() for r in rows_of(report)]
    for job, report in fleet.reports.items():
        _write_csv(out / "jobs" / f"backtest-{job}.csv", rows_of(report))
        plot_backtest(report, out / "jobs" / f"backtest-{job}.png")
    if rows:
        _write_csv(out / "backtest-fleet.csv", rows)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({"jobs": fleet.reports, "refused": fleet.refused}, indent=2))
    if rows:
        console.print(_table(rows, f"Backtest of {len(fleet.reports)} jobs"))
    for job, why in fleet.refused.items():
        console.print(f"[yellow]{job} not backtested[/yellow]: {why}", soft_wrap=True)
    console.print(f"Tables: {out / 'backtest-fleet.csv'} and one per job in {out / 'jobs'}")
    if not fleet.reports:
        raise typer.Exit(1)


def bench(
    jobs: Annotated[int, typer.Option(min=1, help="Jobs in the fleet")] = 100,
    hours: Annotated[float, typer.Option(min=1.0, help="History per job (the forecaster needs 1 h)")] = 24.0,
    policies: Annotated[str | None, typer.Option(
        help="Policies to replay, comma-separated (default: daedalus, ds2, flink-autoscaler, static)")] = None,
    masters: Annotated[str, typer.Option(help="Spark masters to compare, comma-separated")] = "local[1],local[2]",
    lake: Annotated[str | None, typer.Option(help="Reuse or keep the recorded lake here")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures (JSON) here")] = None,
    seed: Seed = 0,
) -> None:
    """The fleet backtest on Spark, timed on each master: N simulated jobs' histories, every policy replayed in the
    executors; prints wall time, time per job and the speed-up."""
    from daedalus.bench.backtest import run_backtest_bench
    from daedalus.cli.common import phases

    try:
        names = _names(policies)
        with progress() as bars:
            report = run_backtest_bench(jobs, hours, [m.strip() for m in masters.split(",") if m.strip()], names,
                                        lake, seed, on_progress=phases(bars))
    except (DaedalusError, ValueError) as exc:
        fail(exc)
    t = Table(title=f"daedalus bench backtest: {jobs} jobs × {hours:g} h × {len(names)} policies")
    t.add_column("master")
    for column in ("wall time", "per job", "backtested", "refused", "executor CPU", "job CPU median / max",
                   "load average before / after"):
        t.add_column(column, justify="right")
    for master, m in report["masters"].items():
        cpu, load = m["cpu_s"], m["load_average"]
        per_job = "—" if cpu["job_median"] is None else f"{cpu['job_median']:.1f} / {cpu['job_max']:.1f} s"
        loads = f"{load['before'][0]:.1f} / {load['after'][0]:.1f}"
        t.add_row(master, f"{m['seconds']:.1f} s", f"{m['seconds'] / report['jobs']:.2f} s", str(m["backtested"]),
                  str(m["refused"]), f"{cpu['total']:.0f} s", per_job, loads)
    console.print(t)
    phases = next(iter(report["masters"].values()))["cpu_s"]["by_phase"]
    console.print("executor CPU per phase (first master): " + ", ".join(f"{k} {v:.0f} s" for k, v in phases.items()))
    if "speedup" in report:
        console.print(f"speed-up {' → '.join(report['masters'])}: {report['speedup']:.2f}×")
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2))
