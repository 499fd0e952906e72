"""`daedalus jobs check`: the jobs file read as the loops will read it, before anything is deployed."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from daedalus.cli.common import JobsFile, JobsFileArgument, fail, one_jobs_file, out
from daedalus.cli.settings import HOW, resolve
from daedalus.models.errors import DaedalusError


def jobs_table(path: Path) -> Table:
    """Every job with the settings the loop will use, so a typo shows before deploying."""
    from daedalus.connectors.jobs import load_jobs

    jobs = load_jobs(path)
    t = Table(title=f"{path}: {len(jobs.jobs)} job(s), valid")
    for col in ("job", "engine", "mode", "scaleout", "target recovery", "checkpoint", "approval timeout",
                "blackout (UTC)", "scale target"):
        t.add_column(col)
    for j in jobs.jobs:
        t.add_row(j.name, j.engine, j.mode, f"{j.scaleout.min}–{j.scaleout.max}",
                  f"{j.target_recovery_time:.0f} s", f"{j.checkpoint_interval:.0f} s", f"{j.approval_timeout:.0f} s",
                  ", ".join(f"{b.start:%H:%M}–{b.end:%H:%M}" for b in j.blackout) or "—",
                  f"{j.scale_target.kind} {j.scale_target.namespace}/{j.scale_target.name}")
    return t


def check(file: JobsFileArgument = None, jobs_file: JobsFile = None) -> None:
    """Validate the jobs file; every error names the file, the job and the field."""
    try:
        path = resolve(jobs_file=one_jobs_file(jobs_file, file)).settings.jobs_file
        if path is None:
            raise typer.BadParameter(f"no jobs file to check: {HOW}")
        out.print(jobs_table(path))
    except DaedalusError as exc:
        fail(exc)
