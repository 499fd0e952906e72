"""The `daedalus` command line: a thin typer layer over flows, the simulator and the benchmark.

Each command group lives in its own module with its commands as plain functions; this module only assembles
them into one application.
"""

from __future__ import annotations

import sys

import typer

from daedalus.cli import bench as cli_bench
from daedalus.cli import observe as cli_observe
from daedalus.cli import ops as cli_ops
from daedalus.cli import pipeline as cli_pipeline
from daedalus.cli import simulate as cli_simulate
from daedalus.cli.common import console
from daedalus.models.errors import DaedalusError

app = typer.Typer(help="Daedalus: self-adaptive autoscaling for stream processing jobs, on Prefect.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
bench = typer.Typer(help="Benchmarks that print figures (policies, loop cost, forecast, capacity, ...).",
                    no_args_is_help=True)
app.add_typer(bench, name="bench")
app.command()(cli_simulate.simulate)
app.command()(cli_simulate.demo)
for _area in (cli_observe, cli_ops, cli_pipeline, cli_bench):
    _area.register(app, bench)


def main() -> None:  # pragma: no cover - console entry point
    try:
        app()
    except DaedalusError as exc:
        console.print(f"[red]{type(exc).__name__}:[/red] {exc}")
        sys.exit(1)
