"""Operator actions: approving or rejecting a scale proposal, scaling by hand, and the kill switches.

The loop never blocks on an operator. In `approve` mode it records a proposal (tasks/execute.py) and starts an
`approve-scale` flow run, which suspends itself waiting for an answer from the Prefect UI (a form with the job's
limits) or from `daedalus approve|reject`. The answer is checked against the job's knowledge (read, never
written) and posted to the job's inbox; the loop's next run applies it (models/control.py checks again).
An unanswered proposal expires: the suspended run times out and the loop drops the proposal, nothing happens.
`scale-job` posts a manual action the same way, refused outside the job's limits.

Guardrails that stop the loop's own actions (never an operator's): the kill switch for all jobs (a flag in
the store, read at the start of every run, so it also covers jobs deployed later) and the job's blackout
windows. The loop still monitors, decides and reports; its ledger records the action it did not take.
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import fsspec
from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.input import RunInput
from pydantic import BaseModel, Field, create_model

from connectors.inbox import Inbox
from connectors.store import DEFAULT_URL, KnowledgeStore
from deployments.jobs import JobSpec, load_jobs
from models.control import check_parallelism
from models.errors import DaedalusError
from tasks.publish import artifact_key

if TYPE_CHECKING:
    from flows.mape_k import Iteration
    from models.knowledge import Knowledge

APPROVE_DEPLOYMENT = "approve-scale/approve-scale"
KILL_SWITCH = "PAUSED-ALL.json"  # a file at the store's root: job folders are the only directories there


class Refused(DaedalusError):
    """An operator's request that cannot be applied; the message says why and what would be accepted."""


# --- kill switch and blackout ---------------------------------------------------------------------


def _root(store_url: str) -> tuple[Any, str]:
    return fsspec.core.url_to_fs(store_url.rstrip("/"))


def kill_switch(store_url: str) -> dict[str, Any] | None:
    """The kill switch for all jobs, if it is on: who set it, when and why."""
    fs, root = _root(store_url)
    try:
        with fs.open(f"{root}/{KILL_SWITCH}", "r") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"operator": "?", "reason": "unreadable kill-switch file: treated as on", "time": None}


def set_kill_switch(store_url: str, operator: str, reason: str) -> None:
    fs, root = _root(store_url)
    fs.makedirs(root, exist_ok=True)
    tmp = f"{root}/.tmp-{KILL_SWITCH}"
    with fs.open(tmp, "w") as f:
        json.dump({"operator": operator, "reason": reason, "time": time.time()}, f)
    fs.mv(tmp, f"{root}/{KILL_SWITCH}")


def clear_kill_switch(store_url: str) -> bool:
    """Turn the kill switch off; False if it was not on."""
    fs, root = _root(store_url)
    path = f"{root}/{KILL_SWITCH}"
    if not fs.exists(path):
        return False
    fs.rm(path)
    return True


def _utc(t: float | None) -> str:
    return "?" if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def stop_reason(store_url: str, spec: JobSpec | None, now: float) -> str | None:
    """Why the loop must not act now (kill switch for all jobs, a blackout window), or None."""
    switch = kill_switch(store_url)
    if switch is not None:
        return (f"kill switch for all jobs is on (set by {switch.get('operator')} at {_utc(switch.get('time'))}: "
                f"{switch.get('reason') or 'no reason given'})")
    if spec is not None:
        clock = datetime.fromtimestamp(now, UTC).time()
        for b in spec.blackout:
            if b.contains(clock):
                return f"blackout window {b.start:%H:%M}–{b.end:%H:%M} UTC"
    return None


# --- the proposal an operator sees ----------------------------------------------------------------


class ApprovalRequest(BaseModel):
    """A proposal with its reasoning, as the `approve-scale` flow run shows it."""

    job: str
    proposal: str
    current: int
    proposed: int
    min_parallelism: int
    max_parallelism: int
    capacities: list[float]  # C_i for i = 1 … max, tuples/s
    observed: list[bool]  # whether C_i was observed
    recovery_times: list[float | None]  # predicted recovery at i, s (None: never)
    avg_workload: float
    lag: float
    forecast_peak: float
    forecast_method: str
    predicted_recovery_s: float | None
    reasons: list[str]
    created: float  # job clock
    expires: float  # job clock
    deadline: float  # wall clock: when the suspended run stops waiting


def clock_rate(spec: JobSpec) -> float:
    """Job-clock seconds per wall-clock second (a simulated job may run faster than real time)."""
    if spec.engine != "sim":
        return 1.0
    from connectors.sim_persistent import settings

    return settings(spec).speedup


def approval_request(it: Iteration, knowledge: Knowledge, spec: JobSpec, wall_now: float) -> ApprovalRequest:
    a, d, p = it.analysis, it.decision, knowledge.pending
    assert p is not None, "an approval request needs a pending proposal"
    return ApprovalRequest(
        job=knowledge.job, proposal=p.id, current=p.current, proposed=p.target,
        min_parallelism=spec.parallelism.min, max_parallelism=spec.parallelism.max,
        capacities=[round(c, 1) for c in a.capacities], observed=list(a.observed),
        recovery_times=[None if math.isinf(r) else round(r, 1) for r in a.recovery_times],
        avg_workload=a.avg_workload, lag=a.lag, forecast_peak=a.forecast.peak, forecast_method=a.forecast.method,
        predicted_recovery_s=d.predicted_recovery_s, reasons=list(p.reasons), created=p.created, expires=p.expires,
        deadline=wall_now + max(0.0, p.expires - a.now) / clock_rate(spec),
    )


def approval_markdown(r: ApprovalRequest) -> str:
    """What the operator needs to decide: the proposal, the capacities behind it and why now."""
    direction = "Scale out" if r.proposed > r.current else "Scale in"
    rec = "n/a" if r.predicted_recovery_s is None else f"{r.predicted_recovery_s:,.0f} s"
    lines = [
        f"# {r.job}: {direction} {r.current} → {r.proposed}?",
        "",
        f"Proposal `{r.proposal}`: approve, reject, or approve with another parallelism within the job's limits "
        f"[{r.min_parallelism}, {r.max_parallelism}]. Unanswered, it expires at {_utc(r.deadline)} and nothing "
        "happens.",
        "",
        "| | now | proposed |",
        "|---|---:|---:|",
        f"| scale-out | {r.current} | **{r.proposed}** |",
        f"| capacity (tuples/s) | {r.capacities[r.current - 1]:,.0f} | {r.capacities[r.proposed - 1]:,.0f} |",
        f"| workload: average last loop / forecast peak (15 min, {r.forecast_method}) | "
        f"{r.avg_workload:,.0f} | {r.forecast_peak:,.0f} |",
        f"| predicted recovery time | | {rec} |",
        f"| consumer lag (tuples) | {r.lag:,.0f} | |",
        "",
        "## Why now",
        *(f"1. {reason}" for reason in r.reasons or ["(no reason recorded)"]),
        "",
        "## Capacity per scale-out",
        "| scale-out | capacity (tuples/s) | source | predicted recovery (s) |",
        "|---:|---:|---|---:|",
    ]
    for i, (c, obs, rt) in enumerate(zip(r.capacities, r.observed, r.recovery_times, strict=True), start=1):
        mark = " ← now" if i == r.current else (" ← proposed" if i == r.proposed else "")
        lines.append(f"| {i}{mark} | {c:,.0f} | {'observed' if obs else 'estimated'} | "
                     f"{'never' if rt is None else f'{rt:,.0f}'} |")
    return "\n".join(lines)


def answer_model(r: ApprovalRequest) -> type[RunInput]:
    """The form the UI shows: limits from the jobs file, so the server itself refuses a parallelism outside."""
    return create_model(
        "ScaleApproval",
        __base__=RunInput,
        decision=(Literal["approve", "reject"], Field("approve", description="approve or reject the proposal")),
        parallelism=(int, Field(r.proposed, ge=r.min_parallelism, le=r.max_parallelism,
                                description=f"scale-out to apply when approving, within "
                                            f"[{r.min_parallelism}, {r.max_parallelism}]")),
        operator=(str, Field("prefect-ui", description="who answers; recorded in the ledger")),
        reason=(str, Field("", description="why; recorded in the ledger")),
    )


# --- checking and posting an answer ---------------------------------------------------------------


def job_now(spec: JobSpec, store_url: str) -> float:
    """The job's clock, read without changing anything (a simulated job's clock runs at its speedup)."""
    if spec.engine != "sim":
        return time.time()
    from connectors.sim_persistent import peek_now
    from models.errors import ConnectorError

    try:
        return peek_now(spec, store_url)
    except ConnectorError:  # not simulated yet: its clock starts at the wall clock
        return time.time()


def check_answer(spec: JobSpec, proposal: str, decision: str, parallelism: int | None, store_url: str) -> int | None:
    """Refuse an answer that cannot apply, before anything is posted; returns the parallelism to apply."""
    job = spec.name
    if decision == "approve" and parallelism is not None:
        refusal = check_parallelism(spec.loop_config(), parallelism)
        if refusal:
            raise Refused(f"approval of {proposal} refused: {refusal} (min {spec.parallelism.min}, "
                          f"max {spec.parallelism.max} in the jobs file)")
    k = KnowledgeStore(store_url).load(job).knowledge
    if k is None:
        raise Refused(f"no knowledge stored for job {job!r} in {store_url}: no proposal {proposal} to answer")
    for _, msg in Inbox(store_url).pending(job):
        if msg.kind in ("approve", "reject") and msg.body.get("proposal") == proposal:
            raise Refused(f"proposal {proposal} was already answered ({msg.kind} by "
                          f"{msg.body.get('operator', '?')}); the loop applies it at its next run")
    if k.pending is None or k.pending.id != proposal:
        entry = k.entry(proposal)
        if entry is None:
            raise Refused(f"job {job!r} has no proposal {proposal}")
        raise Refused(f"proposal {proposal} is no longer pending: it was {entry.state}")
    now = job_now(spec, store_url)
    if now >= k.pending.expires:
        raise Refused(f"proposal {proposal} expired at {_utc(k.pending.expires)} (job clock): nothing was done")
    return parallelism if parallelism is not None else k.pending.target


def post_answer(spec: JobSpec, proposal: str, decision: str, parallelism: int | None, operator: str, reason: str,
                store_url: str) -> dict[str, Any]:
    """Check, then post the answer to the job's inbox for its loop to apply."""
    target = check_answer(spec, proposal, decision, parallelism, store_url)
    body: dict[str, Any] = {"proposal": proposal, "operator": operator}
    if decision == "approve":
        body["parallelism"] = target
    else:
        body["reason"] = reason
    msg = Inbox(store_url).post(spec.name, decision, body, now=job_now(spec, store_url))
    return {"job": spec.name, "proposal": proposal, "decision": decision, "parallelism": body.get("parallelism"),
            "operator": operator, "message": msg.id}


def request_approval(it: Iteration, knowledge: Knowledge, store_url: str, jobs_file: str) -> str | None:
    """Start the `approve-scale` run for a new proposal (deployed runs only); returns its flow run id."""
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound

    logger = get_run_logger()
    spec = load_jobs(jobs_file).job(knowledge.job)
    request = approval_request(it, knowledge, spec, time.time())
    try:
        run = run_deployment(APPROVE_DEPLOYMENT, parameters={"request": request.model_dump(), "store_url": store_url,
                                                             "jobs_file": jobs_file},
                             timeout=0, as_subflow=False, flow_run_name=f"approve-{request.proposal}",
                             tags=["daedalus", f"job:{request.job}", f"proposal:{request.proposal}"])
    except ObjectNotFound:
        logger.warning("no %s deployment: answer proposal %s with `daedalus approve|reject %s`",
                       APPROVE_DEPLOYMENT, request.proposal, request.proposal)
        return None
    logger.info("proposal %s awaits an operator in flow run %s", request.proposal, run.id)
    return str(run.id)


def _outcome_markdown(r: ApprovalRequest, outcome: str) -> str:
    return f"# {r.job}: proposal `{r.proposal}` ({r.current} → {r.proposed})\n\n{outcome}\n"


@flow(name="approve-scale", description="Wait for an operator to approve, reject or change a scale proposal.")
def approve_scale(request: ApprovalRequest, store_url: str = DEFAULT_URL, jobs_file: str = "jobs.yaml"
                  ) -> dict[str, Any]:
    from prefect.context import FlowRunContext
    from prefect.flow_runs import suspend_flow_run

    logger = get_run_logger()
    key = artifact_key("approval", request.job)
    ctx = FlowRunContext.get()
    resuming = bool(ctx and ctx.flow_run and ctx.flow_run.empirical_policy.resuming)
    timeout = math.ceil(request.deadline - time.time())
    if timeout <= 0 and not resuming:
        outcome = f"Expired before an operator could answer (deadline {_utc(request.deadline)}): nothing was done."
        create_markdown_artifact(key=key, markdown=_outcome_markdown(request, outcome),
                                 description=f"Proposal {request.proposal}: expired")
        return {"proposal": request.proposal, "decision": "expired"}
    form = answer_model(request).with_initial_data(description=approval_markdown(request))
    if not resuming:
        create_markdown_artifact(key=key, markdown=approval_markdown(request),
                                 description=f"Proposal {request.proposal}: awaiting an operator")
    answer = suspend_flow_run(wait_for_input=form, timeout=max(timeout, 1), key=f"approval-{request.proposal}")
    spec = load_jobs(jobs_file).job(request.job)
    try:
        result = post_answer(spec, request.proposal, answer.decision, answer.parallelism, answer.operator,
                             answer.reason, store_url)
    except Refused as exc:
        create_markdown_artifact(key=key, markdown=_outcome_markdown(request, f"**Refused**: {exc}"),
                                 description=f"Proposal {request.proposal}: refused")
        logger.warning("%s", exc)
        return {"proposal": request.proposal, "decision": "refused", "reason": str(exc)}
    verb = ("approved at parallelism " + str(result["parallelism"])) if answer.decision == "approve" else "rejected"
    outcome = (f"**{verb.capitalize()}** by {answer.operator}{': ' + answer.reason if answer.reason else ''}. "
               "The job's loop applies it at its next run.")
    create_markdown_artifact(key=key, markdown=_outcome_markdown(request, outcome),
                             description=f"Proposal {request.proposal}: {answer.decision}")
    logger.info("proposal %s %s by %s", request.proposal, verb, answer.operator)
    return result


@flow(name="scale-job", description="Scale a job by hand, within its limits; recorded in its ledger.")
def scale_job(job: str, parallelism: int, reason: str, operator: str = "prefect-ui", store_url: str = DEFAULT_URL,
              jobs_file: str = "jobs.yaml") -> dict[str, Any]:
    spec = load_jobs(jobs_file).job(job)
    msg = post_manual_scale(spec, parallelism, reason, operator, store_url)
    create_markdown_artifact(
        key=artifact_key("manual", job),
        markdown=f"# {job}: manual scale to {parallelism}\n\nBy {operator}: {reason}\n\n"
                 f"Posted as `{msg}`; the job's loop applies it at its next run and records it in the ledger.\n",
        description=f"Manual scale of {job} to {parallelism}")
    return {"job": job, "parallelism": parallelism, "message": msg}


def post_manual_scale(spec: JobSpec, parallelism: int, reason: str, operator: str, store_url: str) -> str:
    """Refuse a manual action outside the job's limits, else post it to the job's inbox."""
    refusal = check_parallelism(spec.loop_config(), parallelism)
    if refusal:
        raise Refused(f"manual scale of {spec.name!r} refused: {refusal} (min {spec.parallelism.min}, "
                      f"max {spec.parallelism.max} in the jobs file)")
    if not reason.strip():
        raise Refused(f"manual scale of {spec.name!r} refused: give a reason; it goes into the ledger")
    body = {"parallelism": parallelism, "reason": reason, "operator": operator}
    return Inbox(store_url).post(spec.name, "scale", body, now=job_now(spec, store_url)).id
