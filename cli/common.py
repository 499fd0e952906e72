"""What every command group shares: the two consoles, one way to fail, one progress bar, one way to print a
table, and the options that name the same thing on every command (`--jobs-file`, `--store`, `--lake`, `--pool`,
`--output`). Their defaults come from the settings in force (cli/settings.py), so each option's own default is
None: not given."""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.measure import Measurement
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

console = Console(stderr=True)  # messages, progress and figures for people
out = Console()  # what a script may read (tables of the jobs file and the fleet, JSON answers)

FROM_SETTINGS = "(default: from the settings, see `daedalus config`)"
Store = Annotated[str | None, typer.Option("--store", help=f"Knowledge store URL {FROM_SETTINGS}",
                                           show_default=False)]
JobsFile = Annotated[Path | None, typer.Option("--jobs-file", help=f"The jobs file (YAML) {FROM_SETTINGS}",
                                               show_default=False)]
Lake = Annotated[str | None, typer.Option("--lake", help=f"Metric-history lake URL {FROM_SETTINGS}",
                                          show_default=False)]
Pool = Annotated[str | None, typer.Option("--pool", help=f"Prefect work pool {FROM_SETTINGS}", show_default=False)]
# `deploy` and `jobs check` took the jobs file as their argument before `--jobs-file`; both ways stay valid.
JobsFileArgument = Annotated[Path | None, typer.Argument(help="The jobs file, when not given as --jobs-file",
                                                         show_default=False)]


class Format(StrEnum):
    """How a listing is printed, as kubectl's `-o`: a table, a table with more columns, or JSON for scripts."""

    table = "table"
    wide = "wide"
    json = "json"


Seed = Annotated[int, typer.Option(min=0, help="The random seed, 0 or more: the same seed gives the same run")]
Output = Annotated[Format, typer.Option("--output", "-o", help="table, wide (more columns) or json (for scripts)")]


def show(table: Table) -> None:
    """Print a table that never cuts a word, a job's name least of all. In a terminal it takes the terminal's width
    and wraps its columns at spaces, never narrower than its longest word; piped or redirected, every row is one
    line at the table's natural width (rich's 80 columns would cut names), so `grep JOB` finds the job."""
    natural = Measurement.get(out, out.options.update(width=100_000), table)
    width = max(out.width, natural.minimum) if out.is_terminal else natural.maximum
    if isinstance(table.title, str):  # the title is wrapped to the table's width: not to a word per line
        table.min_width = max(table.min_width or 0, min(len(table.title), width))
    Console(file=out.file, width=max(width, table.min_width or 0)).print(table)


def print_json(value: object) -> None:
    """One JSON document on stdout, whatever the terminal's width."""
    typer.echo(json.dumps(value, indent=2, default=str))


def fail(exc: Exception) -> NoReturn:
    """Print `Type: message` (the message names the object and the fix) and exit 1: no traceback."""
    console.print(f"[red]{type(exc).__name__}:[/red] {exc}", soft_wrap=True)
    raise typer.Exit(1)


def progress(unit: str = "") -> Progress:
    """A progress bar for long work: done of total, elapsed and remaining time (a spinner-like bar while the
    total is None)."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console)


def phases(bars: Progress) -> Callable[[str, int, int | None], None]:
    """The `on_progress(phase, done, total)` callback the benchmarks in `daedalus.bench` report to, drawn as one
    bar per phase: they measure, the command line draws."""
    tasks: dict[str, TaskID] = {}

    def update(phase: str, done: int, total: int | None) -> None:
        if phase not in tasks:
            tasks[phase] = bars.add_task(phase, total=total)
        bars.update(tasks[phase], completed=done, total=total)

    return update


def one_jobs_file(option: Path | None, argument: Path | None) -> Path | None:
    """The jobs file given either as `--jobs-file FILE` or as the command's argument (None: neither)."""
    if option is not None and argument is not None and option != argument:
        raise typer.BadParameter(f"two jobs files given ({argument} and --jobs-file {option}): give one")
    return option or argument
