"""`daedalus deploy` (the jobs file onto Prefect) and `daedalus worker` (the process worker that runs it)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from daedalus.cli.common import (
    JobsFile,
    JobsFileArgument,
    Lake,
    Pool,
    Store,
    console,
    fail,
    one_jobs_file,
    progress,
    show,
)
from daedalus.cli.settings import HOW, api_url, prefect_api, resolve, save
from daedalus.models.errors import DaedalusError


def deploy(
    file: JobsFileArgument = None,
    jobs_file: JobsFile = None,
    pool: Pool = None,
    job: Annotated[list[str] | None, typer.Option("--job", help="Deploy only these jobs (repeatable)")] = None,
    store: Store = None,
    lake: Lake = None,
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
    """One `mape-k` deployment per job (every minute, one run at a time) plus the operator and background flows.

    Afterwards the settings file holds the jobs file, store, lake, pool and Prefect API URL deployed with, so
    every other command without options talks about this fleet.
    """
    from daedalus.connectors.jobs import load_jobs
    from daedalus.deployments.deploy import absolute, deploy_jobs, plan_deployments, sqlite_warning
    from daedalus.deployments.deploy import prefect_yaml as render
    from daedalus.runtime.prefork import job_variables

    variables = job_variables() if prefork else None
    try:
        resolved = resolve(jobs_file=one_jobs_file(jobs_file, file), store=store, lake=lake, pool=pool)
        settings = resolved.settings
        if settings.jobs_file is None:
            raise typer.BadParameter(f"no jobs file to deploy: {HOW}")
        # Absolute, as deployed: the saved settings then hold wherever a command is run from.
        path, store_url = Path(absolute(str(settings.jobs_file))), absolute(settings.store)
        lake_url = None if no_lake else absolute(settings.lake)
        # Every check (the jobs file, the jobs named) before anything needs or touches the Prefect API.
        planned, notes = plan_deployments(load_jobs(path), store_url, job or (), lake_url, job_variables=variables,
                                          with_background=background)
        if prefect_yaml is not None:
            prefect_yaml.write_text(render(planned, settings.pool))
            console.print(f"Wrote {prefect_yaml} ({len(planned)} deployments); apply it with "
                          f"`prefect --no-prompt deploy --all --prefect-file {prefect_yaml}`")
        else:
            url = api_url(resolved)
            with prefect_api(url), progress() as bars:
                bar = bars.add_task("deploying", total=None)
                ids, notes, seconds = deploy_jobs(
                    path, store_url, settings.pool, job or (), prune=prune, create_pool=create_pool,
                    lake_url=lake_url, job_variables=variables, background=background,
                    on_progress=lambda done, total: bars.update(bar, completed=done, total=total))
            t = Table(title=f"{len(ids)} deployments applied in {seconds:.1f} s (work pool {settings.pool})")
            t.add_column("deployment", no_wrap=True)
            t.add_column("id", no_wrap=True)
            for name, did in sorted(ids.items()):
                t.add_row(name, did)
            show(t)
            saved = save({"jobs_file": path, "store": store_url, "lake": None if no_lake else lake_url,
                          "pool": settings.pool, "prefect_api_url": url})
            console.print(f"Settings saved to {saved}: commands without options now use this fleet "
                          "(`daedalus config` shows them)")
            console.print(f"Start a worker: daedalus worker --pool {settings.pool}")
            warning = sqlite_warning(url, len(load_jobs(path).jobs), background and lake_url is not None)
            if warning:
                console.print(f"[yellow]warning:[/yellow] {warning}", soft_wrap=True)
        for note in notes:
            console.print(f"[yellow]note:[/yellow] {note}")
    except DaedalusError as exc:
        fail(exc)


def worker(
    pool: Pool = None,
    socket_path: Annotated[Path | None, typer.Option("--socket", help="Where the preloaded process listens")
                           ] = None,
    limit: Annotated[int, typer.Option(min=0, help="Flow runs in flight at most (0: no limit). Not with "
                                                   "approve-mode jobs: Prefect 3.8.8's worker crashes when a "
                                                   "resumed run comes back while its slot is still held")] = 0,
    queue: Annotated[list[str] | None, typer.Option(help="Serve only this work queue of the pool (repeat for more; "
                                                         "default: all). `--queue pipeline` on another machine "
                                                         "runs the Spark pipeline there")] = None,
) -> None:
    """A Prefect process worker whose flow runs fork from a preloaded process (seconds of imports saved).

    It serves every work queue of the pool unless given `--queue`: due loops (queue `default`, priority 1) start
    before any pipeline run (queue `pipeline`, priority 10, one at a time).
    """
    from daedalus.runtime.prefork import run_worker

    try:
        resolved = resolve(pool=pool)
        url = api_url(resolved)
    except DaedalusError as exc:
        fail(exc)
    with prefect_api(url):
        raise typer.Exit(run_worker(resolved.settings.pool, socket_path, limit or None, queues=tuple(queue or ())))
