"""`daedalus validate`, `retrain` and `compact`: run the Spark pipeline's flows once, by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from daedalus.cli.common import FROM_SETTINGS, Lake, Store, console, fail, progress
from daedalus.cli.settings import Resolved, resolve
from daedalus.connectors.lake import COMPACT_MIN_AGE_S
from daedalus.models.errors import DaedalusError


def _jobs(values: list[str] | None) -> list[str] | None:
    """`--jobs a --jobs b` or `--jobs a,b`."""
    if not values:
        return None
    return [name for value in values for name in value.split(",") if name]


def _failure_table(result: dict[str, Any]) -> Table:
    """Every failed expectation with its job, row count and example rows: what to look at in the lake."""
    t = Table(title=f"Metric validation: {len(result['failed_jobs'])} of {result['jobs']} jobs failed")
    for column in ("job", "expectation", "rows", "example rows"):
        t.add_column(column, overflow="fold")  # names fold rather than end in "…" in a narrow terminal
    for job, failures in result["failures"].items():
        for f in failures:
            examples = "\n".join(json.dumps(e, default=str) for e in f["examples"])
            t.add_row(job, f"{f['check']}: {f['meaning']}", str(f["count"]), examples)
    return t


def _retrain_table(rows: list[dict[str, Any]]) -> Table:
    """Old and new WAPE per job, so a promotion (or its absence) can be read at a glance."""
    t = Table(title=f"Forecaster retraining: {sum(r['promoted'] for r in rows)} of {len(rows)} promoted")
    for column in ("job", "old WAPE %", "new WAPE %", "promoted", "fit s", "model", "note"):
        t.add_column(column, overflow="fold")
    for r in rows:
        t.add_row(r["job"], str(r["old_wape_pct"]), str(r["new_wape_pct"]), "yes" if r["promoted"] else "no",
                  f"{r['fit_s']:.2f}", r["model"], r["note"])
    return t


def _settings(**options: str | None) -> Resolved:
    try:
        return resolve(**options)
    except DaedalusError as exc:
        fail(exc)


def validate(
    lake: Lake = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the full report (JSON) here")] = None,
    store: Annotated[str | None, typer.Option(
        help=f"Knowledge store URL: quarantine / release the jobs {FROM_SETTINGS}; without a configured store, "
             "nothing is quarantined", show_default=False)] = None,
    window_s: Annotated[float, typer.Option(min=1.0, help="Validate the last this many seconds")] = 900.0,
    until: Annotated[float | None, typer.Option(help="End of the window, epoch seconds (default: now)")] = None,
    max_gap_steps: Annotated[int, typer.Option(min=0)] = 5,
    master: Annotated[str | None, typer.Option(help="Spark master (default local[N], N half the cores)")] = None,
) -> None:
    """Run the validate-metrics flow once; exits 1 when a job fails, listing job, expectation and rows."""
    from daedalus.flows.pipeline import validate_metrics

    resolved = _settings(lake=lake, store=store)
    # The default store folder is nobody's fleet: quarantine only in a store given or configured.
    store_url = None if resolved.sources["store"] == "default" else resolved.settings.store
    with progress() as bars:
        bars.add_task("validating the metric history on Spark", total=None)
        result = validate_metrics(lake_url=resolved.settings.lake, store_url=store_url, window_s=window_s, until=until,
                                  max_gap_steps=max_gap_steps, spark_master=master)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=2, default=str))
    if result["passed"]:
        console.print(f"[green]metric validation passed[/green]: {result['jobs']} jobs")
        return
    console.print(_failure_table(result))
    raise typer.Exit(1)


def retrain(
    lake: Lake = None,
    jobs: Annotated[list[str] | None, typer.Option(help="Only these jobs (repeat, or comma-separated)")] = None,
    store: Store = None,
    history_s: Annotated[float, typer.Option(min=600.0)] = 6 * 3600.0,
    until: Annotated[float | None, typer.Option(help="End of the history, epoch seconds (default: now)")] = None,
    master: Annotated[str | None, typer.Option(help="Spark master (default local[N], N half the cores)")] = None,
) -> None:
    """Run the retrain-forecasters flow once: fit, backtest, promote only where better."""
    from daedalus.flows.pipeline import retrain_forecasters

    resolved = _settings(lake=lake, store=store)
    with progress() as bars:
        bars.add_task("retraining forecasters on Spark", total=None)
        result = retrain_forecasters(lake_url=resolved.settings.lake, store_url=resolved.settings.store,
                                     history_s=history_s, until=until,
                                     jobs=_jobs(jobs), spark_master=master)
    console.print(_retrain_table(result["outcomes"]))


def compact(
    lake: Lake = None,
    min_age_s: Annotated[float, typer.Option(min=0.0)] = COMPACT_MIN_AGE_S,
) -> None:
    """Run the compact-lake flow once: merge each partition's old small files."""
    from daedalus.flows.pipeline import compact_lake

    lake_url = _settings(lake=lake).settings.lake
    report = compact_lake(lake_url=lake_url, min_age_s=min_age_s)
    console.print(f"compacted {report['partitions']} partitions: {report['files_before']} files → "
                  f"{report['files_after']}, {report['duplicates_dropped']} duplicate rows dropped")
