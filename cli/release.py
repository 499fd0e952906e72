"""`daedalus release JOB`: lift a job's metric-validation quarantine by hand, recorded with who and why.

A quarantine holds every scaling decision, so one that holds an overloaded job lets its backlog grow until someone
lifts it. The release goes through the job's inbox like `pause` (the `release-job` deployment does the same from
the UI); a later validation that still fails quarantines the job again.
"""

from __future__ import annotations

from typing import Annotated

import typer

from daedalus.cli.common import JobsFile, Store, console, fail
from daedalus.cli.operate import Operator, operator_in_force, posted
from daedalus.cli.settings import known_job, resolve
from daedalus.models.errors import DaedalusError


def release(
    job: Annotated[str, typer.Argument(help="The quarantined job")],
    reason: Annotated[str, typer.Option(help="Why; recorded in the ledger")],
    jobs_file: JobsFile = None,
    operator: Operator = None,
    store: Store = None,
) -> None:
    """Lift a job's quarantine by metric validation: its loop scales again from its next run."""
    from daedalus.connectors.answers import post_release

    try:
        resolved = resolve(store=store, jobs_file=jobs_file)
        who = operator_in_force(operator, resolved)
        msg = post_release(known_job(resolved, job), reason, who, resolved.settings.store)
    except DaedalusError as exc:
        fail(exc)
    console.print(f"release of {job} posted ({msg.id}); its loop lifts the quarantine at its next run, and a later "
                  "validation that still fails quarantines it again", soft_wrap=True)
    posted({"job": job, "action": "release", "operator": who, "reason": reason, "message": msg.id})
