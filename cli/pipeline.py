"""`daedalus validate`, `retrain`, `compact`, and `daedalus bench retrain|validate`: the Spark pipeline's commands."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from daedalus.connectors.lake import DEFAULT_URL as DEFAULT_LAKE
from daedalus.connectors.store import DEFAULT_URL as DEFAULT_STORE

console = Console(stderr=True)
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
BENCH_START = 1_767_225_600  # 2026-01-01T00:00:00Z, the simulator's epoch


def _quiet_prefect() -> None:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def _jobs(values: list[str] | None) -> list[str] | None:
    """`--jobs a --jobs b` or `--jobs a,b`."""
    if not values:
        return None
    return [name for value in values for name in value.split(",") if name]


# ---------------------------------------------------------------------- a synthetic fleet for the benchmarks


def fleet_workloads(jobs: int, seconds: int, seed: int = 0) -> list[np.ndarray]:
    """Per-second workloads: windows of the multi-day traces (../shared/workloads/multiday, 5 min steps,
    interpolated) at random offsets and levels with 2 % noise; a daily sine with noise when they are absent."""
    from daedalus.sim.workloads import load_workload

    rng = np.random.default_rng(seed)
    traces = sorted((SHARED / "workloads" / "multiday").glob("*_5min.csv"))
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


def write_fleet(lake_url: str, jobs: int, hours: float, workers: int, seed: int = 0,
                start: float = BENCH_START) -> tuple[float, int]:
    """A lake of `jobs` jobs × `hours` of per-second rows × `workers` workers; returns (end time, rows)."""
    import pyarrow as pa

    from daedalus.connectors.lake import SCHEMA, Lake

    lake, seconds = Lake(lake_url), round(hours * 3600)
    ts = start + 1 + np.arange(seconds)
    names = np.array([f"worker-{k}" for k in range(workers)], dtype=object)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        bar = progress.add_task("writing the lake", total=jobs)
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
            progress.update(bar, advance=1)
    return start + seconds, seconds * workers * jobs


def _spinner(description: str) -> Progress:
    return Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), TimeElapsedColumn(), console=console)


# ---------------------------------------------------------------------- output


def _failure_table(result: dict[str, Any]) -> Table:
    t = Table(title=f"Metric validation: {len(result['failed_jobs'])} of {result['jobs']} jobs failed")
    for column in ("job", "expectation", "rows", "example rows"):
        t.add_column(column)
    for job, failures in result["failures"].items():
        for f in failures:
            examples = "\n".join(json.dumps(e, default=str) for e in f["examples"])
            t.add_row(job, f"{f['check']}: {f['meaning']}", str(f["count"]), examples)
    return t


def _retrain_table(rows: list[dict[str, Any]]) -> Table:
    t = Table(title=f"Forecaster retraining: {sum(r['promoted'] for r in rows)} of {len(rows)} promoted")
    for column in ("job", "old WAPE %", "new WAPE %", "promoted", "fit s", "model", "note"):
        t.add_column(column)
    for r in rows:
        t.add_row(r["job"], str(r["old_wape_pct"]), str(r["new_wape_pct"]), "yes" if r["promoted"] else "no",
                  f"{r['fit_s']:.2f}", r["model"], r["note"])
    return t


def _figures(title: str, rows: list[tuple[str, str]]) -> Table:
    t = Table(title=title)
    t.add_column("figure")
    t.add_column("value", justify="right")
    for row in rows:
        t.add_row(*row)
    return t


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this area's commands."""

    @app.command()
    def validate(
        lake: Annotated[str, typer.Option(help="Metric-history lake URL")] = DEFAULT_LAKE,
        json_out: Annotated[Path | None, typer.Option("--json", help="Write the full report (JSON) here")] = None,
        store: Annotated[str | None, typer.Option(help="Knowledge store URL: quarantine / release the jobs")] = None,
        window_s: Annotated[float, typer.Option(min=1.0, help="Validate the last this many seconds")] = 900.0,
        until: Annotated[float | None, typer.Option(help="End of the window, epoch seconds (default: now)")] = None,
        max_gap_steps: Annotated[int, typer.Option(min=0)] = 5,
        master: Annotated[str | None, typer.Option(help="Spark master (default local[*])")] = None,
    ) -> None:
        """Run the validate-metrics flow once; exits 1 when a job fails, listing job, expectation and rows."""
        from daedalus.flows.pipeline import validate_metrics

        _quiet_prefect()
        with _spinner("") as progress:
            progress.add_task("validating the metric history on Spark", total=None)
            result = validate_metrics(lake_url=lake, store_url=store, window_s=window_s, until=until,
                                      max_gap_steps=max_gap_steps, spark_master=master)
        if json_out is not None:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_text(json.dumps(result, indent=2, default=str))
        if result["passed"]:
            console.print(f"[green]metric validation passed[/green]: {result['jobs']} jobs")
            return
        console.print(_failure_table(result))
        raise typer.Exit(1)

    @app.command()
    def retrain(
        lake: Annotated[str, typer.Option(help="Metric-history lake URL")] = DEFAULT_LAKE,
        jobs: Annotated[list[str] | None, typer.Option(help="Only these jobs (repeat, or comma-separated)")] = None,
        store: Annotated[str, typer.Option(help="Knowledge store URL (current models; promotions)")] = DEFAULT_STORE,
        history_s: Annotated[float, typer.Option(min=600.0)] = 6 * 3600.0,
        until: Annotated[float | None, typer.Option(help="End of the history, epoch seconds (default: now)")] = None,
        master: Annotated[str | None, typer.Option(help="Spark master (default local[*])")] = None,
    ) -> None:
        """Run the retrain-forecasters flow once: fit, backtest, promote only where better."""
        from daedalus.flows.pipeline import retrain_forecasters

        _quiet_prefect()
        with _spinner("") as progress:
            progress.add_task("retraining forecasters on Spark", total=None)
            result = retrain_forecasters(lake_url=lake, store_url=store, history_s=history_s, until=until,
                                         jobs=_jobs(jobs), spark_master=master)
        console.print(_retrain_table(result["outcomes"]))

    @app.command()
    def compact(
        lake: Annotated[str, typer.Option(help="Metric-history lake URL")] = DEFAULT_LAKE,
        min_age_s: Annotated[float, typer.Option(min=0.0)] = 7200.0,
    ) -> None:
        """Run the compact-lake flow once: merge each partition's old small files."""
        from daedalus.flows.pipeline import compact_lake

        _quiet_prefect()
        report = compact_lake(lake_url=lake, min_age_s=min_age_s)
        console.print(f"compacted {report['partitions']} partitions: {report['files_before']} files → "
                      f"{report['files_after']}, {report['duplicates_dropped']} duplicate rows dropped")

    @bench.command("retrain")
    def bench_retrain(
        jobs: Annotated[int, typer.Option(min=1, help="Jobs in the fleet")] = 1000,
        hours: Annotated[float, typer.Option(min=1.0, help="History per job")] = 6.0,
        workers: Annotated[int, typer.Option(min=1, help="Workers (rows per second) per job")] = 2,
        masters: Annotated[str, typer.Option(help="Spark masters to compare, comma-separated")] = "local[1],local[2]",
        lake: Annotated[str | None, typer.Option(help="Reuse or keep the generated lake here")] = None,
        seed: Annotated[int, typer.Option()] = 0,
    ) -> None:
        """Retrain N jobs' forecasters (fit + backtest + promotion) on each master; prints times and speed-up."""
        from daedalus.connectors.lake import Lake
        from daedalus.connectors.spark import SparkSettings, session, stop
        from daedalus.tasks.retrain import promote, retrain_fleet

        with tempfile.TemporaryDirectory() as tmp:
            url = lake or f"{tmp}/lake"
            if Lake(url).jobs():
                end = max(f.last or 0.0 for f in Lake(url).files())
                rows = None
            else:
                end, rows = write_fleet(url, jobs, hours, workers, seed)
            figures: list[tuple[str, str]] = [("jobs × history × workers", f"{jobs} × {hours:g} h × {workers}")]
            if rows is not None:
                figures.append(("lake rows", f"{rows:,}"))
            seconds: dict[str, float] = {}
            for master in [m.strip() for m in masters.split(",") if m.strip()]:
                settings = SparkSettings.from_env(master)
                with _spinner("") as progress:
                    progress.add_task(f"starting Spark {master}", total=None)
                    session(settings)
                with _spinner("") as progress:
                    progress.add_task(f"retraining {jobs} jobs on {master}", total=None)
                    started = time.perf_counter()
                    outcomes = retrain_fleet(Lake(url), None, end, hours * 3600, jobs=None, spark_settings=settings)
                    promote(f"{tmp}/store-{master}", outcomes)
                    seconds[master] = time.perf_counter() - started
                fits = [o.fit_s for o in outcomes if o.status in ("promoted", "kept")]
                figures += [
                    (f"{master}: wall time", f"{seconds[master]:.1f} s"),
                    (f"{master}: per job", f"{seconds[master] / jobs:.3f} s"),
                    (f"{master}: fit time per job, median / p95",
                     f"{np.median(fits):.2f} / {np.percentile(fits, 95):.2f} s" if fits else "n/a"),
                    (f"{master}: fitted / failed / skipped",
                     f"{len(fits)} / {sum(o.status == 'failed' for o in outcomes)} / "
                     f"{sum(o.status == 'skipped' for o in outcomes)}"),
                ]
            stop()
        if "local[1]" in seconds and "local[2]" in seconds:
            figures.append(("speed-up local[2] vs local[1]", f"{seconds['local[1]'] / seconds['local[2]']:.2f}×"))
        console.print(_figures("daedalus bench retrain", figures))
        typer.echo(json.dumps({"jobs": jobs, "hours": hours, "workers": workers, "seconds": seconds}))

    @bench.command("validate")
    def bench_validate(
        jobs: Annotated[int, typer.Option(min=1, help="Jobs in the fleet")] = 1000,
        hours: Annotated[float, typer.Option(min=0.1, help="Window validated (the last hours)")] = 1.0,
        workers: Annotated[int, typer.Option(min=1, help="Workers (rows per second) per job")] = 4,
        master: Annotated[str, typer.Option(help="Spark master")] = "local[2]",
        lake: Annotated[str | None, typer.Option(help="Reuse or keep the generated lake here")] = None,
        seed: Annotated[int, typer.Option()] = 0,
    ) -> None:
        """Validate N jobs' last hour with the whole suite on one master; prints the time."""
        from daedalus.connectors.lake import Lake
        from daedalus.connectors.spark import SparkSettings, session, stop
        from daedalus.tasks.validate import validate as run_validation

        with tempfile.TemporaryDirectory() as tmp:
            url = lake or f"{tmp}/lake"
            if Lake(url).jobs():
                end = max(f.last or 0.0 for f in Lake(url).files())
            else:
                end, _ = write_fleet(url, jobs, hours, workers, seed)
            settings = SparkSettings.from_env(master)
            with _spinner("") as progress:
                progress.add_task(f"starting Spark {master}", total=None)
                session(settings)
            with _spinner("") as progress:
                progress.add_task(f"validating {jobs} jobs × {hours:g} h on {master}", total=None)
                started = time.perf_counter()
                report = run_validation(Lake(url), end - hours * 3600, end, spark_settings=settings)
                elapsed = time.perf_counter() - started
            stop()
        rows = sum(v.rows for v in report.jobs.values())
        console.print(_figures("daedalus bench validate", [
            ("jobs × window × workers", f"{jobs} × {hours:g} h × {workers}"),
            ("rows validated", f"{rows:,}"),
            ("checks", str(len(report.checks))),
            (f"{master}: wall time", f"{elapsed:.1f} s"),
            ("jobs failed", str(len(report.failed_jobs))),
        ]))
        typer.echo(json.dumps({"jobs": jobs, "hours": hours, "workers": workers, "rows": rows, "seconds": elapsed}))
