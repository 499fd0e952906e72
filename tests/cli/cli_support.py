"""Shared pieces of the command-line tests: one command module mounted alone, and its output read flat."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from typer.testing import CliRunner, Result


def tiny_app(*commands: Callable[..., Any]) -> Callable[..., Result]:
    """A typer app with only these commands, each under its function's name, and a way to invoke it: a command
    module that needs nothing else from the application can be tested alone.

    The callback keeps the command's name on the command line even when only one is registered.
    """
    app = typer.Typer()
    app.callback()(lambda: None)
    for command in commands:
        app.command()(command)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


def flat(text: str) -> str:
    """The output on one line without the tables' column rules: rich wraps long messages and draws cells."""
    return " ".join(text.replace("│", " ").replace("┃", " ").split())
