"""`daedalus deploy` (the jobs file onto Prefect) and `daedalus worker` (the process worker that runs it)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from daedalus.cli.common import (
    JobsFileArgument,
    JobsFileOrArgument,
    Store,
    console,
    fail,
    one_jobs_file,
    out,
    progress,
)
from daedalus.connectors.lake import DEFAULT_URL as DEFAULT_LAKE
from daedalus.connectors.store import DEFAULT_URL as DEFAULT_STORE
from daedalus.models.errors import DaedalusError


def deploy(
    file: JobsFileArgument = None,
    jobs_file: JobsFileOrArgument = None,
    pool: Annotated[str, typer.Option(help="Work pool (a process pool is created if missing)")] = "daedalus",
    job: Annotated[list[str] | None, typer.Option("--job", help="Deploy only these jobs (repeatable)")] = None,
    store: Store = DEFAULT_STORE,
    lake: Annotated[str, typer.Option(help="Metric-history lake the loops append to and the pipeline reads")
                    ] = DEFAULT_LAKE,
    no_lake: Annotated[bool, typer.Option("--no-lake", help="Loops keep no metric history")] = False,
    background: Annotated[bool, typer.Option(help="Also deploy the event-triggered and periodic flows "
                                                  "(recovery monitor, retraining, validation)")] = True,
    create_pool: Annotated[bool, typer.Option(help="Create a process pool when missing")] = True,
    prune: Annotated[bool, typer.Option(help="Delete mape-k deployments of jobs no longer in the file")] = False,
    prefork: Annotated[bool, typer.Option(help="Start runs through `daedalus worker`'s preloaded process "
                                               "(process pools; falls back to a plain start without it)")] = True,
    prefect_yaml: Annotated[Path | None, typer.Option(help="Write a prefect.yaml for `prefect deploy --all` "
                                                           "instead of deploying")] = None,
) -> None:
    """One `mape-k` deployment per job (every minute, one run at a time) plus the operator and background flows."""
    from daedalus.runtime.prefork import job_variables

    path = one_jobs_file(jobs_file, file)
    variables = job_variables() if prefork else None
    lake_url = None if no_lake else lake
    try:
        if prefect_yaml is not None:
            from daedalus.connectors.jobs import load_jobs
            from daedalus.deployments.deploy import plan_deployments
            from daedalus.deployments.deploy import prefect_yaml as render

            planned, notes = plan_deployments(load_jobs(path), store, job or (), lake_url, job_variables=variables,
                                              with_background=background)
            prefect_yaml.write_text(render(planned, pool))
            console.print(f"Wrote {prefect_yaml} ({len(planned)} deployments); apply it with "
                          f"`prefect --no-prompt deploy --all --prefect-file {prefect_yaml}`")
        else:
            from daedalus.deployments.deploy import deploy_jobs

            with progress() as bars:
                bar = bars.add_task("deploying", total=None)
                ids, notes, seconds = deploy_jobs(
                    path, store, pool, job or (), prune=prune, create_pool=create_pool, lake_url=lake_url,
                    job_variables=variables, background=background,
                    on_progress=lambda done, total: bars.update(bar, completed=done, total=total))
            t = Table(title=f"{len(ids)} deployments applied in {seconds:.1f} s (work pool {pool})")
            t.add_column("deployment")
            t.add_column("id")
            for name, did in sorted(ids.items()):
                t.add_row(name, did)
            out.print(t)
            console.print(f"Start a worker: daedalus worker --pool {pool}")
        for note in notes:
            console.print(f"[yellow]note:[/yellow] {note}")
    except DaedalusError as exc:
        fail(exc)


def worker(
    pool: Annotated[str, typer.Option(help="Work pool")] = "daedalus",
    socket_path: Annotated[Path | None, typer.Option("--socket", help="Where the preloaded process listens")
                           ] = None,
    limit: Annotated[int, typer.Option(min=0, help="Flow runs in flight at most (0: no limit). Not with "
                                                   "approve-mode jobs: Prefect 3.8.8's worker crashes when a "
                                                   "resumed run comes back while its slot is still held")] = 0,
) -> None:
    """A Prefect process worker whose flow runs fork from a preloaded process (seconds of imports saved)."""
    from daedalus.runtime.prefork import run_worker

    raise typer.Exit(run_worker(pool, socket_path, limit or None))
