"""What every command group shares: the error console, one way to fail, one progress bar."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

console = Console(stderr=True)


def fail(exc: Exception) -> NoReturn:
    """Print `Type: message` (the message names the object and the fix) and exit 1: no traceback."""
    console.print(f"[red]{type(exc).__name__}:[/red] {exc}", soft_wrap=True)
    raise typer.Exit(1)


def progress(unit: str = "") -> Progress:
    """A progress bar for long work: done of total, elapsed and remaining time."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console)
