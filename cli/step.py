"""`daedalus step`: one iteration of a job's control loop now, with the same code as a scheduled `mape-k` run.

Operators use it to see what the loop would do (in `dry-run` mode it only reports); tests and outside checks
drive the loop with it. It runs the `mape-k` flow through Prefect: the configured API, or an ephemeral one.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from daedalus.cli.common import JobsFile, Store, console, fail, out
from daedalus.cli.settings import api_url, known_job, prefect_api, prefect_api_url, resolve
from daedalus.models.errors import DaedalusError


def step_report(job: str, summary: dict[str, Any]) -> dict[str, Any]:
    """What one iteration decided and did, as `--json` writes it."""
    return {
        "job": job,
        "decision": {"id": summary["decision"], "kind": summary["kind"], "current": summary["current"],
                     "target": summary["target"], "reasons": summary["reasons"]},
        "executed": summary["action"] == "executed",
        "action": summary["action"],
        "notes": summary["notes"],
        "knowledge_version": summary.get("knowledge_version"),
    }


def step(
    job: Annotated[str, typer.Argument(help="The job (a name in the jobs file)")],
    jobs_file: JobsFile = None,
    store: Store = None,
    at: Annotated[float | None, typer.Option(help="Evaluate as of this epoch second, replaying the metrics "
                                                  "already in Prometheus")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the decision as JSON here")] = None,
) -> None:
    """Run one iteration of JOB's control loop now, through Prefect, and show its decision.

    Exits 0 whatever the decision (hold, no change, scale-out, scale-in); non-zero only when the run failed.
    """
    from daedalus.flows.mape_k import mape_k

    for name in ("prefect", "prefect.flow_runs", "prefect.task_runs"):  # the decision is the output
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        resolved = resolve(store=store, jobs_file=jobs_file)
        known_job(resolved, job)
        # The API in force (from any source) once it answers; with none configured, Prefect's ephemeral one.
        configured = prefect_api_url(resolved)[0] is not None
        with prefect_api(api_url(resolved)) if configured else contextlib.nullcontext():
            summary = mape_k(job=job, store_url=resolved.settings.store,
                             jobs_file=str(resolved.settings.jobs_file), at=at)
    except DaedalusError as exc:
        fail(exc)
    report = step_report(job, summary)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2))
    d = report["decision"]
    out.print(f"{job}: {d['kind']} {d['current']} → {d['target']}"
              + ("" if report["action"] is None else f" ({report['action']})"))
    for reason in d["reasons"]:
        out.print(f"  - {reason}", soft_wrap=True)
    for note in report["notes"]:
        console.print(f"  note: {note}", soft_wrap=True)
