"""`daedalus` commands of this area; `register` adds them to the main app and its `bench` group."""

from __future__ import annotations

import typer


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this area's commands."""
