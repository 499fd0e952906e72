"""`daedalus fleet up/down/status`: Prefect's distributed topology as processes on this machine (runtime/fleet.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from daedalus.cli.common import console, fail, out, show
from daedalus.models.errors import DaedalusError

Dir = Annotated[Path, typer.Option("--dir", help="The fleet's folder: configs, data, logs, pid files")]


def up(
    folder: Dir,
    pool: Annotated[str, typer.Option(help="The work pool both workers serve")] = "fleet",
    workers: Annotated[int, typer.Option(min=1, max=8, help="`daedalus worker`s on the pool")] = 2,
    replicas: Annotated[int, typer.Option(min=1, max=8, help="Prefect API replicas behind the load balancer")] = 2,
) -> None:
    """Start PostgreSQL, Redis, the API replicas (--no-services) behind HAProxy, Prefect's services and the workers;
    return once all serve and print the API URL."""
    from daedalus.runtime.fleet import up as start

    try:
        fleet = start(folder, pool=pool, workers=workers, replicas=replicas,
                      on_progress=lambda name: console.print(f"starting {name} ..."))
    except DaedalusError as exc:
        fail(exc)
    console.print(f"Fleet up in {fleet.folder} (logs in {fleet.folder / 'logs'}); stop it with "
                  f"`daedalus fleet down --dir {folder}`. Clients: PREFECT_API_URL={fleet.api_url}")
    out.print(fleet.api_url)


def down(folder: Dir) -> None:
    """Stop every process `fleet up` started in the folder (SIGTERM, then SIGKILL); nothing is left running."""
    from daedalus.runtime.fleet import down as stop

    try:
        stopped = stop(folder)
    except DaedalusError as exc:
        fail(exc)
    console.print(f"Stopped {len(stopped)} processes: {', '.join(stopped) or 'none was running'}")


def status(folder: Dir) -> None:
    """The fleet's API URL and whether each of its processes runs."""
    from daedalus.runtime.fleet import status as read

    try:
        found = read(folder)
    except DaedalusError as exc:
        fail(exc)
    t = Table(title=f"fleet in {folder}: {found['api_url']} (pool {found['pool']})")
    for column in ("process", "running", "pid", "log"):
        t.add_column(column)
    for name, p in found["processes"].items():
        t.add_row(name, "yes" if p["running"] else "no", str(p["pid"] or "–"), p["log"])
    show(t)
