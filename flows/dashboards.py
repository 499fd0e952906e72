"""The fleet view for the Prefect UI: every job's status in one `fleet-overview` table (tasks/dashboards.py)."""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact

from daedalus.connectors.clock import WALL
from daedalus.connectors.jobs import load_jobs
from daedalus.connectors.store import DEFAULT_URL, Store
from daedalus.tasks.dashboards import fleet_rows


@flow(name="fleet-overview", description="Every job's current and recommended scale-out, mode, last action, health.")
def fleet_overview(jobs_file: str = "jobs.yaml", store_url: str = DEFAULT_URL) -> list[dict[str, Any]]:
    jobs = [(j.name, j.mode) for j in load_jobs(jobs_file).jobs]
    progress = create_progress_artifact(progress=0.0, description=f"Reading the status of {len(jobs)} jobs")

    def on_job(done: int, total: int) -> None:
        if done == total or done % 10 == 0:
            update_progress_artifact(progress, progress=100.0 * done / total)

    rows = fleet_rows(jobs, Store(store_url), WALL.now(), on_job)
    create_table_artifact(key="fleet-overview", table=rows,
                          description=f"{len(rows)} jobs: current and recommended scale-out, mode, last action, health")
    return rows
