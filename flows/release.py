"""The `release-job` flow: lift a job's metric-validation quarantine from the Prefect UI, as `daedalus release`
does from a terminal (connectors/answers.py `post_release`)."""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from daedalus.connectors.answers import post_release
from daedalus.connectors.jobs import load_jobs
from daedalus.connectors.store import DEFAULT_URL
from daedalus.tasks.artifacts import artifact_key


@flow(name="release-job", description="Lift a job's quarantine by metric validation by hand; recorded in its ledger.")
def release_job(job: str, reason: str, operator: str = "prefect-ui", store_url: str = DEFAULT_URL,
                jobs_file: str = "jobs.yaml") -> dict[str, Any]:
    msg = post_release(load_jobs(jobs_file).job(job), reason, operator, store_url)
    create_markdown_artifact(
        key=artifact_key("release", job),
        markdown=f"# {job}: released from quarantine\n\nBy {operator}: {reason}\n\n"
                 f"Posted as `{msg.id}`; the job's loop lifts the quarantine at its next run. A later metric "
                 "validation that still fails quarantines it again.\n",
        description=f"Release of {job} from quarantine")
    get_run_logger().info("release of %s posted by %s: %s", job, operator, reason)
    return {"job": job, "message": msg.id, "operator": operator, "reason": reason}
