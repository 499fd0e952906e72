"""Approval: the proposal an operator sees, and the loop run's task that keeps the `approve-scale` runs in step with
the ledger — starting the run of an open proposal, and closing the waiting runs of proposals answered, expired or
superseded outside them.

The loop never blocks on an operator. In `approve` mode it records a proposal (models/loop/execute.py) and starts an
`approve-scale` flow run, which suspends itself waiting for an answer from the Prefect UI (a form with the job's
limits). `daedalus approve|reject` does not go through that run: it posts the answer to the job's inbox itself
(connectors/answers.py), dated when it was given, so the answer is durable before the command returns and needs no
worker. The loop's next run applies it (models/loop/messages.py) and closes the approval run with its outcome. An
unanswered proposal expires: the loop drops it and closes its run, nothing happens. The flows are in
flows/approval.py.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field, create_model

from daedalus.connectors.jobs import JobSpec
from daedalus.models.loop.approvals import answer
from daedalus.models.text import capacity_source, duration, numbered, utc

if TYPE_CHECKING:
    from prefect.input import RunInput

    from daedalus.models.knowledge import Knowledge
    from daedalus.models.loop.approvals import ApprovalRuns
    from daedalus.models.loop.iteration import Iteration

APPROVE_DEPLOYMENT = "approve-scale/approve-scale"


# --- the proposal an operator sees ----------------------------------------------------------------


class ApprovalRequest(BaseModel):
    """A proposal with its reasoning, as the `approve-scale` flow run shows it."""

    job: str
    proposal: str
    current: int
    proposed: int
    min_scaleout: int
    max_scaleout: int
    capacities: list[float]  # C_i for i = 1 … max, tuples/s
    observed: list[bool]  # whether C_i was observed
    observed_load: list[float] = []  # the load C_i was observed at (Analysis.observed_load); [] in older requests
    recovery_times: list[float | None]  # predicted recovery at i, s (None: never)
    avg_workload: float
    lag: float
    forecast_peak: float
    forecast_method: str
    forecast_horizon_s: float | None = None  # how far the forecast reaches; None in older requests
    predicted_recovery_s: float | None
    reasons: list[str]
    created: float  # the job's clock
    expires: float  # the wall clock: when the proposal expires and the run stops waiting


def approval_request(it: Iteration, knowledge: Knowledge, spec: JobSpec) -> ApprovalRequest:
    """The pending proposal as the run `it` sees it: its own analysis (a run that starts the request for a proposal
    an earlier run made shows today's capacities), the recovery predicted when it was proposed."""
    a, p = it.analysis, knowledge.pending
    assert p is not None, "an approval request needs a pending proposal"
    entry = knowledge.entry(p.id)
    recovery = it.decision.predicted_recovery_s if entry is None else entry.predicted_recovery_s
    return ApprovalRequest(
        job=knowledge.job, proposal=p.id, current=p.current, proposed=p.target,
        min_scaleout=spec.scaleout.min, max_scaleout=spec.scaleout.max,
        capacities=[round(c, 1) for c in a.capacities], observed=list(a.observed),
        observed_load=[round(u, 3) for u in a.observed_load],
        recovery_times=[None if math.isinf(r) else round(r, 1) for r in a.recovery_times],
        avg_workload=a.avg_workload, lag=a.lag, forecast_peak=a.forecast.peak, forecast_method=a.forecast.method,
        forecast_horizon_s=float(len(a.forecast.values)),
        predicted_recovery_s=recovery, reasons=list(p.reasons), created=p.created, expires=p.expires,
    )


def approval_markdown(r: ApprovalRequest) -> str:
    """What the operator needs to decide: the proposal, the capacities behind it and why now."""
    direction = "Scale out" if r.proposed > r.current else "Scale in"
    rec = "n/a" if r.predicted_recovery_s is None else f"{r.predicted_recovery_s:,.0f} s"
    ahead = "" if not r.forecast_horizon_s else f"next {duration(r.forecast_horizon_s)}, "
    lines = [
        f"# {r.job}: {direction} {r.current} → {r.proposed}?",
        "",
        f"Proposal `{r.proposal}`: approve, reject, or approve with another scale-out within the job's limits "
        f"[{r.min_scaleout}, {r.max_scaleout}]. Unanswered, it expires at {utc(r.expires)} and nothing "
        "happens.",
        "",
        "| | now | proposed |",
        "|---|---:|---:|",
        f"| scale-out | {r.current} | **{r.proposed}** |",
        f"| capacity (tuples/s) | {r.capacities[r.current - 1]:,.0f} | {r.capacities[r.proposed - 1]:,.0f} |",
        f"| workload: average last loop / forecast peak ({ahead}{r.forecast_method}) | "
        f"{r.avg_workload:,.0f} | {r.forecast_peak:,.0f} |",
        f"| predicted recovery time | | {rec} |",
        f"| consumer lag (tuples) | {r.lag:,.0f} | |",
        "",
        "## Why now",
        *numbered(r.reasons or ["(no reason recorded)"]),
        "",
        "## Capacity per scale-out",
        "| scale-out | capacity (tuples/s) | source | predicted recovery (s) |",
        "|---:|---:|---|---:|",
    ]
    loads: list[float | None] = list(r.observed_load) or [None] * len(r.capacities)
    for i, (c, obs, rt, load) in enumerate(zip(r.capacities, r.observed, r.recovery_times, loads, strict=True),
                                           start=1):
        mark = " ← now" if i == r.current else (" ← proposed" if i == r.proposed else "")
        lines.append(f"| {i}{mark} | {c:,.0f} | {capacity_source(obs, load)} | "
                     f"{'never' if rt is None else f'{rt:,.0f}'} |")
    return "\n".join(lines)


def approval_form_markdown(r: ApprovalRequest) -> str:
    """The proposal as the UI's resume form shows it above its fields: the same facts as the approval page, in
    four short paragraphs. The form is a narrow dialog (about 450 px at a 1,400 × 1,000 px window) that shrinks its
    description to the height its fields leave (about 440 px) and scrolls it inside the dialog beyond that, draws a
    Markdown table in a scroll box of its own and a heading as large as its title: no heading, no table, no list."""
    direction = "scale out" if r.proposed > r.current else "scale in"
    ahead = "" if not r.forecast_horizon_s else f" over the next {duration(r.forecast_horizon_s)}"
    loads: list[float | None] = list(r.observed_load) or [None] * len(r.capacities)
    recovery = "n/a" if r.predicted_recovery_s is None else duration(r.predicted_recovery_s)
    steps = []
    for i, (c, obs, rt, load) in enumerate(zip(r.capacities, r.observed, r.recovery_times, loads, strict=True),
                                           start=1):
        seen = f", {capacity_source(obs, load)}" if obs else ""
        step = f"{i}: {c:,.0f}{seen}, {'never' if rt is None else duration(rt)}"
        steps.append(f"**{step} ← now**" if i == r.current else f"**{step} ← proposed**" if i == r.proposed else step)
    why = " ".join(f"**{n}.** {reason}" for n, reason in enumerate(r.reasons or ["(no reason recorded)"], start=1))
    return "\n\n".join([
        f"**{r.job}: {direction} {r.current} → {r.proposed}?** Proposal `{r.proposal}` expires at {utc(r.expires)}; "
        "unanswered, nothing happens.",
        f"Capacity {r.capacities[r.current - 1]:,.0f} tuples/s at {r.current}, **{r.capacities[r.proposed - 1]:,.0f}** "
        f"at {r.proposed}; workload {r.avg_workload:,.0f}, forecast peak {r.forecast_peak:,.0f}{ahead} "
        f"({r.forecast_method}); recovery at {r.proposed}: {recovery}.",
        f"**Why now:** {why}",
        "**Capacity per scale-out** (tuples/s, predicted recovery): " + " · ".join(steps),
    ])


def answer_model(r: ApprovalRequest) -> type[RunInput]:
    """The form the UI shows: limits from the jobs file, so the server itself refuses a scale-out outside."""
    from prefect.input import RunInput

    return create_model(
        "ScaleApproval",
        __base__=RunInput,
        # No descriptions under the fields: each line they take is a line less for the proposal above them (the
        # dialog shrinks its description to what the fields leave). The limits stay in the schema.
        decision=(Literal["approve", "reject"], Field("approve")),
        scaleout=(int, Field(r.proposed, ge=r.min_scaleout, le=r.max_scaleout)),
        # Prefect's open-source UI has no logged-in user to default to: the operator names themself, or the
        # server refuses the form (a default such as "prefect-ui" would put nobody in the ledger).
        operator=(str, Field(min_length=1)),
        reason=(str, Field("")),
    )


def outcome_markdown(r: ApprovalRequest, outcome: str) -> str:
    return f"# {r.job}: proposal `{r.proposal}` ({r.current} → {r.proposed})\n\n{outcome}\n"


OUTCOME_STATES = {"expired": "Expired", "superseded": "Superseded", "approved": "Approved", "rejected": "Rejected"}


def _outcome(proposal: str, outcome: str, knowledge: Knowledge | None) -> str:
    """What became of a proposal, in the words of its ledger: who answered and why, or that nothing was done."""
    entry = None if knowledge is None else knowledge.entry(proposal)
    given = None if entry is None else answer(entry)
    if outcome in ("approved", "rejected") and given is not None:  # the answer, not what followed it
        return f"proposal {proposal} {given} (recorded in the job's ledger)"
    return f"proposal {proposal} {outcome}: nothing was done"


def _request(it: Iteration, knowledge: Knowledge, spec: JobSpec, store_url: str, jobs_file: str) -> None:
    """Start the `approve-scale` run of the open proposal. Keyed by the proposal, so that a run already started for
    it (by the run that proposed, before it died) is returned by the server rather than started twice."""
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound

    logger = get_run_logger()
    request = approval_request(it, knowledge, spec)
    try:
        run = run_deployment(APPROVE_DEPLOYMENT, parameters={"request": request.model_dump(), "store_url": store_url,
                                                             "jobs_file": jobs_file},
                             timeout=0, as_subflow=False, flow_run_name=f"approve-{request.proposal}",
                             idempotency_key=f"approve-{request.proposal}",
                             tags=["daedalus", f"job:{request.job}", f"proposal:{request.proposal}"])
    except ObjectNotFound:
        logger.warning("no %s deployment: answer proposal %s with `daedalus approve|reject %s`",
                       APPROVE_DEPLOYMENT, request.proposal, request.proposal)
        return
    logger.info("proposal %s awaits an operator in flow run %s", request.proposal, run.id)


@task(name="reconcile-approval-runs", cache_policy=NO_CACHE)
def reconcile_approval_runs(wanted: ApprovalRuns, it: Iteration, knowledge: Knowledge, spec: JobSpec,
                            store_url: str, jobs_file: str) -> None:
    """Make the server's `approve-scale` runs match the ledger (models/loop/approvals.py): start the open proposal's
    run if it has none, and end the waiting run of each proposal answered outside it (`daedalus approve`), expired
    or superseded, as a Completed run named for its outcome, with the outcome on the job's approval page: an
    unanswered proposal is a normal outcome, not a failure. One read of the server when there is nothing to do."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags
    from prefect.states import Completed

    from daedalus.tasks.artifacts import artifact_key

    logger = get_run_logger()
    outcomes = dict(wanted.closed)
    proposals = [*([wanted.open] if wanted.open else []), *outcomes]
    with get_client(sync_client=True) as client:
        tagged = FlowRunFilter(tags=FlowRunFilterTags(any_=[f"proposal:{p}" for p in proposals]))
        runs = client.read_flow_runs(flow_run_filter=tagged)
        of = {p: [r for r in runs if f"proposal:{p}" in r.tags] for p in proposals}
        if wanted.open and not of[wanted.open]:
            _request(it, knowledge, spec, store_url, jobs_file)
        for proposal, outcome in outcomes.items():
            for run in of[proposal]:
                if run.state is not None and run.state.is_final():
                    continue
                message = _outcome(proposal, outcome, knowledge)
                client.set_flow_run_state(run.id, Completed(name=OUTCOME_STATES[outcome], message=message),
                                          force=True)
                logger.info("approval run %s of proposal %s closed: %s", run.id, proposal, outcome)
                if outcome in ("approved", "rejected"):
                    create_markdown_artifact(key=artifact_key("approval", knowledge.job),
                                             markdown=f"# {knowledge.job}: proposal `{proposal}`\n\n{message}\n",
                                             description=f"Proposal {proposal}: {outcome}")
