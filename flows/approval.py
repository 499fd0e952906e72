"""Operator flows: approving or rejecting a scale proposal, and scaling a job by hand (tasks/approval.py shows the
proposal; connectors/answers.py checks and posts the answer)."""

from __future__ import annotations

import math
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.states import Completed

from daedalus.connectors.answers import post_answer, post_manual_scale, recorded_answer
from daedalus.connectors.clock import WALL
from daedalus.connectors.jobs import load_jobs
from daedalus.connectors.store import DEFAULT_URL
from daedalus.models.errors import Refused
from daedalus.models.loop.approvals import EXPIRY_MARGIN_S
from daedalus.models.text import utc
from daedalus.tasks.approval import (
    OUTCOME_STATES,
    ApprovalRequest,
    answer_model,
    approval_form_markdown,
    approval_markdown,
    outcome_markdown,
)
from daedalus.tasks.artifacts import artifact_key


def resumed_at(flow_run_id: Any) -> float | None:
    """When this run was last resumed (an operator's answer from the UI form), on the wall clock; None when it was
    never paused and resumed. Read from the run's state history: the first state after its last Paused one."""
    from prefect import get_client

    with get_client(sync_client=True) as client:
        states = sorted(client.read_flow_run_states(flow_run_id), key=lambda st: st.timestamp)
    paused = [i for i, st in enumerate(states) if st.is_paused()]
    if not paused or paused[-1] + 1 >= len(states):
        return None
    return states[paused[-1] + 1].timestamp.timestamp()


@flow(name="approve-scale", description="Wait for an operator to approve, reject or change a scale proposal.")
def approve_scale(request: ApprovalRequest, store_url: str = DEFAULT_URL, jobs_file: str = "jobs.yaml"
                  ) -> dict[str, Any] | Completed:
    from prefect.context import FlowRunContext
    from prefect.flow_runs import suspend_flow_run

    logger = get_run_logger()
    key = artifact_key("approval", request.job)
    ctx = FlowRunContext.get()
    # Answered in the UI: when (the run's resume), not when a busy worker got round to starting it again, which
    # may be after the deadline; the flag alone is not enough, a run restarted late may no longer carry it.
    answered_at = None if ctx is None or ctx.flow_run is None else resumed_at(ctx.flow_run.id)
    resuming = answered_at is not None or bool(ctx and ctx.flow_run and ctx.flow_run.empirical_policy.resuming)
    timeout = math.ceil(request.expires - WALL.now())
    answered = None if resuming else recorded_answer(store_url, request.job, request.proposal)
    if answered is not None:  # answered with `daedalus approve|reject` before this run got to wait for it
        outcome, what = answered
        create_markdown_artifact(key=key, markdown=outcome_markdown(request, what),
                                 description=f"Proposal {request.proposal}: {outcome}")
        return Completed(name=OUTCOME_STATES[outcome], message=what)
    if timeout <= 0 and not resuming:
        outcome = f"Expired before an operator could answer ({utc(request.expires)}): nothing was done."
        create_markdown_artifact(key=key, markdown=outcome_markdown(request, outcome),
                                 description=f"Proposal {request.proposal}: expired")
        return Completed(name="Expired", message=outcome)  # a normal outcome, not a failure
    form = answer_model(request).with_initial_data(description=approval_form_markdown(request))
    if not resuming:
        create_markdown_artifact(key=key, markdown=approval_markdown(request),
                                 description=f"Proposal {request.proposal}: awaiting an operator")
    # The job's loop closes an unanswered run as Expired at `expires` (plus its grace for answers on their way); the
    # server's own timeout, a little later, is only the backstop for a loop that stopped running.
    answer = suspend_flow_run(wait_for_input=form, timeout=max(timeout, 1) + EXPIRY_MARGIN_S,
                              key=f"approval-{request.proposal}")
    spec = load_jobs(jobs_file).job(request.job)
    try:
        result = post_answer(spec, request.proposal, answer.decision, answer.scaleout, answer.operator,
                             answer.reason, store_url, given=answered_at, late_ok=True)
    except Refused as exc:
        create_markdown_artifact(key=key, markdown=outcome_markdown(request, f"**Refused**: {exc}"),
                                 description=f"Proposal {request.proposal}: refused")
        logger.warning("%s", exc)
        return {"proposal": request.proposal, "decision": "refused", "reason": str(exc)}
    verb = ("approved at scale-out " + str(result["scaleout"])) if answer.decision == "approve" else "rejected"
    outcome = (f"**{verb.capitalize()}** by {answer.operator}{': ' + answer.reason if answer.reason else ''}. "
               "The job's loop applies it at its next run.")
    create_markdown_artifact(key=key, markdown=outcome_markdown(request, outcome),
                             description=f"Proposal {request.proposal}: {answer.decision}")
    logger.info("proposal %s %s by %s", request.proposal, verb, answer.operator)
    return result


@flow(name="scale-job", description="Scale a job by hand, within its limits; recorded in its ledger.")
def scale_job(job: str, scaleout: int, reason: str, operator: str = "prefect-ui", store_url: str = DEFAULT_URL,
              jobs_file: str = "jobs.yaml") -> dict[str, Any]:
    spec = load_jobs(jobs_file).job(job)
    msg = post_manual_scale(spec, scaleout, reason, operator, store_url)
    create_markdown_artifact(
        key=artifact_key("manual", job),
        markdown=f"# {job}: manual scale to {scaleout}\n\nBy {operator}: {reason}\n\n"
                 f"Posted as `{msg}`; the job's loop applies it at its next run and records it in the ledger.\n",
        description=f"Manual scale of {job} to {scaleout}")
    return {"job": job, "scaleout": scaleout, "message": msg}
