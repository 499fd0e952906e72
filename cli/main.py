"""The `daedalus` command line: a thin typer layer over flows, the simulator and the benchmark.

Each command group lives in its own module with its commands as plain functions; this module only assembles
them into one application.
"""

from __future__ import annotations

import signal
import sys

import typer

from daedalus.cli import backtest as cli_backtest
from daedalus.cli import bench as cli_bench
from daedalus.cli import deploy as cli_deploy
from daedalus.cli import explain as cli_explain
from daedalus.cli import exporter as cli_exporter
from daedalus.cli import fleet as cli_fleet
from daedalus.cli import flink as cli_flink
from daedalus.cli import jobs as cli_jobs
from daedalus.cli import observe as cli_observe
from daedalus.cli import operate as cli_operate
from daedalus.cli import pipeline as cli_pipeline
from daedalus.cli import release as cli_release
from daedalus.cli import settings as cli_settings
from daedalus.cli import simulate as cli_simulate
from daedalus.cli import step as cli_step
from daedalus.cli.common import console
from daedalus.models.errors import DaedalusError

app = typer.Typer(help="Daedalus: self-adaptive autoscaling for stream processing jobs, on Prefect.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
for _command in (cli_simulate.simulate, cli_simulate.demo, cli_observe.observe, cli_deploy.deploy,
                 cli_operate.status, cli_operate.approve, cli_operate.reject, cli_operate.pause, cli_operate.resume,
                 cli_operate.scale, cli_release.release, cli_deploy.worker, cli_pipeline.validate, cli_pipeline.retrain,
                 cli_pipeline.compact, cli_exporter.exporter, cli_step.step, cli_settings.config,
                 cli_backtest.backtest, cli_explain.explain):
    app.command()(_command)

bench = typer.Typer(help="Benchmarks that print figures (policies, loop cost, forecast, capacity, ...).",
                    no_args_is_help=True)
for _command in (cli_bench.monitor, cli_bench.deploy, cli_bench.schedule, cli_bench.operate, cli_bench.retrain,
                 cli_bench.validate, cli_bench.policies, cli_bench.cv, cli_bench.loop, cli_bench.forecast,
                 cli_bench.capacity, cli_bench.fleet, cli_bench.chaos):
    bench.command()(_command)
bench.command(name="flink")(cli_flink.bench)  # calibration on a real local Flink (docs/engines.md)
bench.command(name="backtest")(cli_backtest.bench)  # the fleet backtest on Spark (docs/backtest.md)
app.add_typer(bench, name="bench")

jobs = typer.Typer(help="The jobs file: one entry per streaming job.", no_args_is_help=True)
jobs.command()(cli_jobs.check)
app.add_typer(jobs, name="jobs")

fleet = typer.Typer(help="Prefect's distributed topology on this machine: PostgreSQL, Redis, API replicas behind "
                         "HAProxy, the services, workers.", no_args_is_help=True)
for _command in (cli_fleet.up, cli_fleet.down, cli_fleet.status):
    fleet.command()(_command)
app.add_typer(fleet, name="fleet")


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    """SIGTERM (`kill`, systemd, Kubernetes) ends a command as Ctrl-C does, through its `finally` blocks: a benchmark
    stops the fleet and servers it started instead of leaving them running. Commands that stop in their own way
    (`daedalus worker`, the exporter) set their own handler."""
    raise SystemExit(128 + signum)


def main() -> None:  # pragma: no cover - console entry point
    """Run the application; a Daedalus error that escaped a command still ends in one line, not a traceback."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        app()
    except DaedalusError as exc:
        console.print(f"[red]{type(exc).__name__}:[/red] {exc}")
        sys.exit(1)
