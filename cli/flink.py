"""`daedalus demo --engine flink` and `daedalus bench flink`: the command line over the Flink demo's run
(runtime/flink_demo.py) and the calibration (bench/flink.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from daedalus.bench import flink as bench_flink
from daedalus.cli.common import console, fail
from daedalus.models.errors import DaedalusError
from daedalus.runtime.flink import FLINK_VERSION
from daedalus.runtime.flink_demo import DEFAULT_MINUTES, WORK_US, DemoPlan, run_demo

MAX_LEVEL = 8  # TaskManagers (1 GB each) `daedalus bench flink --levels` may start


def flink_demo(out: Path, minutes: float = DEFAULT_MINUTES, seed: int = 0, bottleneck: bool = False) -> None:
    """`daedalus demo --engine flink [--bottleneck]`: run, print the summary, and fail loudly on lost or duplicated
    records."""
    try:
        report = run_demo(out, DemoPlan(minutes=minutes, seed=seed, bottleneck=bottleneck), log=console.print)
    except DaedalusError as exc:
        fail(exc)
    console.print(json.dumps({k: report[k] for k in ("rescales", "records_generated", "records_committed",
                                                     "duplicates", "max_lag_records", "capacity_error_pct",
                                                     "saturation_throughput", "rollbacks", "bottleneck",
                                                     "wall_s")}, indent=2))
    console.print(f"Wrote {out / 'report.json'} and {out / 'report.png'}")


def parse_levels(text: str) -> tuple[int, ...]:
    """`--levels 1,2,4` → (1, 2, 4): whole numbers from 1 to 8 (a TaskManager each on this machine), rising."""
    try:
        levels = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise DaedalusError(f"--levels: {text!r} is not a comma-separated list of parallelisms, e.g. 1,2,4") from None
    if not levels or any(not 1 <= p <= MAX_LEVEL for p in levels) or list(levels) != sorted(set(levels)):
        raise DaedalusError(f"--levels: {text!r} must rise, each from 1 to {MAX_LEVEL}, e.g. 1,2,4")
    return levels


def bench(
    out: Annotated[Path | None, typer.Option(help="Write the figures here (JSON)")] = None,
    work_us: Annotated[int, typer.Option(min=50, help="CPU microseconds per record")] = WORK_US,
    reactive: Annotated[bool, typer.Option(help="Also measure reactive mode's rescales")] = True,
    levels: Annotated[str, typer.Option(help="Parallelisms to measure, comma-separated and rising (one "
                                             "TaskManager each; utilisation is measured at 1 and 2)")] = "1,2,3,4",
) -> None:
    """Calibrate the simulator against a real Flink here: saturation at 1…4 workers, utilisation against
    throughput, rescale downtime per method."""
    try:
        results = bench_flink.calibrate(levels=parse_levels(levels), work_us=work_us, reactive=reactive,
                                        log=console.print)
    except DaedalusError as exc:
        fail(exc)
    from rich.table import Table

    table = Table(title=f"Flink {FLINK_VERSION} on this machine ({work_us} µs of CPU per record)")
    for column in ("measurement", "value", "compared", "detail"):
        table.add_column(column)
    for row in bench_flink.summary_rows(results):
        table.add_row(*row)
    console.print(table)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=str))
