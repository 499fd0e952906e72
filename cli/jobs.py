"""`daedalus jobs check`: the jobs file read as the loops will read it, before anything is deployed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from daedalus.cli.common import Format, JobsFile, JobsFileArgument, Output, fail, one_jobs_file, print_json, show
from daedalus.cli.settings import HOW, resolve
from daedalus.connectors.fields import redact
from daedalus.models.errors import DaedalusError
from daedalus.models.text import duration


def jobs_table(jobs: Any, path: Path, wide: bool = False) -> Table:
    """Every job with the settings the loop will use, so a typo shows before deploying; `wide` adds the planner's."""
    t = Table(title=f"{path}: {len(jobs.jobs)} job(s), valid")
    columns = ["job", "engine", "mode", "scaleout", "target recovery", "checkpoint", "approval timeout",
               "blackout (UTC)", "scale target"]
    if wide:
        columns += ["planner", "latency SLO", "scale-in interval", "manual hold"]
    for col in columns:
        t.add_column(col, no_wrap=col == "job")  # a job's name is never cut: the other columns wrap first
    for j in jobs.jobs:
        cells = [j.name, j.engine, j.mode, f"{j.scaleout.min}–{j.scaleout.max}",
                 f"{j.target_recovery_time:.0f} s", f"{j.checkpoint_interval:.0f} s", f"{j.approval_timeout:.0f} s",
                 ", ".join(f"{b.start:%H:%M}–{b.end:%H:%M}" for b in j.blackout) or "—",
                 f"{j.scale_target.kind} {j.scale_target.namespace}/{j.scale_target.name}"]
        if wide:
            cells += [j.planner, duration(j.latency_slo), duration(j.loop_config().scale_in_s), duration(j.manual_hold)]
        t.add_row(*cells)
    return t


def check(file: JobsFileArgument = None, jobs_file: JobsFile = None, output: Output = Format.table) -> None:
    """Validate the jobs file; every error names the file, the job and the field. `--output json` gives every
    job's settings as the loops read them (defaults filled in), for scripts."""
    from daedalus.connectors.jobs import load_jobs

    try:
        path = resolve(jobs_file=one_jobs_file(jobs_file, file)).settings.jobs_file
        if path is None:
            raise typer.BadParameter(f"no jobs file to check: {HOW}")
        jobs = load_jobs(path)
        if output == Format.json:  # URLs without their credentials, as everywhere else
            specs = json.loads(redact(json.dumps([j.model_dump(mode="json", exclude_none=True) for j in jobs.jobs])))
            print_json({"file": str(path), "valid": True, "jobs": specs})
        else:
            show(jobs_table(jobs, path, wide=output == Format.wide))
    except DaedalusError as exc:
        fail(exc)
