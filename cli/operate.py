"""Operating the deployed loops: `daedalus status`, `approve`, `reject`, `pause`, `resume` and `scale`.

They work from the knowledge store alone; with a Prefect API configured, status adds the last runs and
approvals resume the proposal's waiting approval run.
"""

from __future__ import annotations

import getpass
import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from daedalus.cli.common import JobsFile, JobsFileToCheck, Store, console, fail, out
from daedalus.connectors.store import DEFAULT_URL
from daedalus.models.errors import DaedalusError
from daedalus.models.text import utc

Operator = Annotated[str, typer.Option(help="Who acts; recorded in the ledger")]


def _user() -> str:
    """Who acts when --operator is not given: the login, or `cli` where there is none (a container's uid)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


USER = _user()


def _api_configured() -> bool:
    """True when a Prefect API is configured; never start an ephemeral server from the CLI."""
    from prefect.settings import PREFECT_API_URL

    return bool(PREFECT_API_URL.value())


# --- status ------------------------------------------------------------------------------------------------


def prefect_runs(jobs: list[str]) -> dict[str, dict[str, Any]]:
    """Per job: its mape-k deployment (schedule paused?) and its last runs, from the Prefect API."""
    from datetime import UTC, datetime

    from prefect import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterName,
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterDeploymentId,
        FlowRunFilterExpectedStartTime,
    )
    from prefect.client.schemas.sorting import FlowRunSort

    info: dict[str, dict[str, Any]] = {}
    with get_client(sync_client=True) as client:
        deployments = client.read_deployments(
            flow_filter=FlowFilter(name=FlowFilterName(any_=["mape-k"])),
            deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=jobs)))
        by_id = {d.id: d for d in deployments}
        due = FlowRunFilter(deployment_id=FlowRunFilterDeploymentId(any_=list(by_id)),
                            expected_start_time=FlowRunFilterExpectedStartTime(before_=datetime.now(UTC)))
        runs = client.read_flow_runs(flow_run_filter=due, sort=FlowRunSort.EXPECTED_START_TIME_DESC,
                                     limit=min(200, 5 * max(1, len(by_id)))) if by_id else []
    for d in deployments:
        info[d.name] = {"deployment": str(d.id), "paused": d.paused, "last": None, "late_s": None}
    for r in runs:
        d = by_id.get(r.deployment_id)
        if d is None:
            continue
        entry = info[d.name]
        if entry["last"] is None:
            entry["last"] = r.state.name if r.state else "?"
        if entry["late_s"] is None and r.start_time is not None:
            entry["late_s"] = (r.start_time - r.expected_start_time).total_seconds()
    return info


def _job_names(store_url: str, jobs_file: Path | None) -> list[tuple[str, str]]:
    """(job, mode) from the jobs file when given; else every job the store knows, its mode unknown."""
    from daedalus.connectors.store import KnowledgeStore

    if jobs_file is not None:
        from daedalus.connectors.jobs import load_jobs

        return [(j.name, j.mode) for j in load_jobs(jobs_file).jobs]
    return [(name, "?") for name in KnowledgeStore(store_url).jobs()]


def fleet_table(store_url: str, jobs_file: Path | None) -> Table:
    """One row per job from the store, with its last runs when a Prefect API answers."""
    from daedalus.connectors.switches import kill_switch
    from daedalus.tasks.dashboards import fleet_rows

    jobs = _job_names(store_url, jobs_file)
    rows = fleet_rows(jobs, store_url, time.time())
    api: dict[str, dict[str, Any]] = {}
    api_note = "no Prefect API configured (PREFECT_API_URL): store only"
    if _api_configured():
        try:
            api = prefect_runs([j for j, _ in jobs])
            api_note = ""
        except Exception as exc:  # the store's view is still worth showing
            api_note = f"Prefect API not reachable ({type(exc).__name__}): store only"
    switch = kill_switch(store_url)
    title = f"{len(rows)} job(s) in {store_url}"
    if switch:
        title += f" — KILL SWITCH ON for all jobs (by {switch.get('operator')}: {switch.get('reason')})"
    t = Table(title=title, caption=api_note or None)
    for col in ("job", "mode", "now", "recommended", "decision", "last action", "pending proposal", "health",
                "last loop (UTC)", "last run", "start delay"):
        t.add_column(col)
    for r in rows:
        a = api.get(r["job"], {})
        last_run = a.get("last") or ("" if not api else "no deployment" if not a else "")
        if a.get("paused"):
            last_run = f"{last_run} (schedule paused)".strip()
        late = a.get("late_s")
        t.add_row(r["job"], r["mode"], str(r["current"] or ""), str(r["recommended"] or ""), r["decision"] or "",
                  r["last action"], r["pending"], r["health"] or "", r["last loop (UTC)"], last_run,
                  "" if late is None else f"{late:.1f} s")
    return t


def job_detail(job: str, store_url: str) -> None:
    """One job in full: its last loop, pending proposal, ledger and inbox, so an operator can answer it."""
    from daedalus.connectors.inbox import Inbox
    from daedalus.connectors.status import read_status
    from daedalus.connectors.store import KnowledgeStore
    from daedalus.tasks.dashboards import ledger_rows

    status = read_status(store_url, job)
    k = KnowledgeStore(store_url).load(job).knowledge
    if status is None and k is None:
        raise DaedalusError(f"nothing stored for job {job!r} in {store_url}: has its loop run yet?")
    if status:
        out.print(f"[bold]{job}[/bold] ({status['mode']}): scale-out {status['current']}, recommended "
                  f"{status['recommended']} ({status['kind']}); health: {status['health']}")
        out.print(f"  last loop {utc(status['wall'])}; capacity now {status['capacity']:,.0f}/s, workload "
                  f"{status['workload']:,.0f}/s, forecast peak {status['forecast_peak']:,.0f}/s "
                  f"({status['forecast_method']})")
        for reason in status["reasons"]:
            out.print(f"  • {reason}", soft_wrap=True)
    if k is not None:
        if k.paused:
            out.print("[yellow]  paused (kill switch for this job): `daedalus resume` to let it act again[/yellow]")
        if k.pending:
            out.print(f"[bold]  pending proposal {k.pending.id}: {k.pending.current} → {k.pending.target}[/bold] "
                      f"(answer: daedalus approve|reject {k.pending.id})")
        t = Table(title=f"ledger of {job} (newest first)")
        rows = ledger_rows(k, limit=15)
        for col in (rows[0] if rows else {"ledger": ""}):
            t.add_column(col)
        for row in rows:
            t.add_row(*("" if v is None else str(v) for v in row.values()))
        out.print(t)
    waiting = Inbox(store_url).pending(job)
    if waiting:
        out.print(f"  inbox: {len(waiting)} message(s) waiting for the next loop run: "
                  + ", ".join(f"{m.kind} {m.body}" for _, m in waiting), soft_wrap=True)


# --- approvals ---------------------------------------------------------------------------------------------


def find_approval_run(proposal: str) -> Any | None:
    """The `approve-scale` flow run of a proposal, if a Prefect API is configured and it has one."""
    if not _api_configured():
        return None
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:
        tagged = FlowRunFilter(tags=FlowRunFilterTags(all_=[f"proposal:{proposal}"]))
        runs = client.read_flow_runs(flow_run_filter=tagged, sort=FlowRunSort.EXPECTED_START_TIME_DESC, limit=1)
    return runs[0] if runs else None


def answer(proposal: str, decision: str, scaleout: int | None, operator: str, reason: str,
           jobs_file: Path | None, store_url: str) -> dict[str, Any]:
    """Check the answer against the jobs file and the job's knowledge, then resume the proposal's approval run
    (or, without one, post to the job's inbox). Refused before anything is sent."""
    from daedalus.connectors.jobs import load_jobs
    from daedalus.tasks.approval import Refused, check_answer, post_answer

    run = find_approval_run(proposal)
    if run is not None:
        request = run.parameters.get("request", {})
        store_url, jobs = run.parameters.get("store_url", store_url), run.parameters.get("jobs_file")
        job = request.get("job")
        state = run.state
        if state is None or not state.is_paused():
            name = state.name if state else "unknown"
            if state is not None and state.is_failed():
                raise Refused(f"proposal {proposal} expired: its approval run {run.id} ended {name} "
                              f"({state.message}); nothing was done")
            if (state is not None and state.is_final()) or run.empirical_policy.resuming:
                raise Refused(f"proposal {proposal} was already answered: its approval run {run.id} is {name}")
            raise Refused(f"the approval run of {proposal} is {name}, not waiting yet: try again in a few seconds")
    else:
        if jobs_file is None:
            raise Refused(f"no approval run found for proposal {proposal}; give --jobs-file FILE (and --store URL) to "
                          "answer it directly")
        jobs, job = str(jobs_file), proposal.rsplit("-", 1)[0]
    spec = load_jobs(jobs).job(job)
    if run is None:
        return post_answer(spec, proposal, decision, scaleout, operator, reason, store_url)
    target = check_answer(spec, proposal, decision, scaleout, store_url)
    from prefect.exceptions import FlowPauseTimeout
    from prefect.flow_runs import resume_flow_run

    run_input = {"decision": decision, "scaleout": target, "operator": operator, "reason": reason}
    try:
        resume_flow_run(run.id, run_input=run_input)
    except FlowPauseTimeout:
        raise Refused(f"proposal {proposal} expired: its approval run can no longer resume") from None
    except RuntimeError as exc:
        raise Refused(f"the Prefect API refused the answer to {proposal}: {exc}") from None
    return {"job": job, "proposal": proposal, "decision": decision, "scaleout": target, "operator": operator,
            "approval_run": str(run.id)}


def _switch(kind: str, job: str | None, all_jobs: bool, operator: str, reason: str, store_url: str,
            jobs_file: Path | None) -> None:
    """Pause or resume one job through its inbox, or every job through the store-wide kill switch."""
    from daedalus.connectors.inbox import Inbox
    from daedalus.connectors.switches import clear_kill_switch, set_kill_switch

    if (job is None) == (not all_jobs):
        raise typer.BadParameter("give a JOB or --all")
    if all_jobs:
        if kind == "pause":
            set_kill_switch(store_url, operator, reason)
            console.print("[yellow]kill switch ON[/yellow]: every job keeps monitoring and deciding, none acts")
        else:
            was = clear_kill_switch(store_url)
            console.print("kill switch off" if was else "the kill switch was not on")
        return
    assert job is not None
    if jobs_file is not None:
        from daedalus.connectors.jobs import load_jobs

        load_jobs(jobs_file).job(job)
    msg = Inbox(store_url).post(job, kind, {"operator": operator, "reason": reason})
    console.print(f"{kind} of {job} posted ({msg.id}); its loop applies it at its next run")


# --- the commands ------------------------------------------------------------------------------------------


def status(
    job: Annotated[str | None, typer.Argument(help="One job (default: the fleet)")] = None,
    store: Store = DEFAULT_URL,
    jobs_file: JobsFileToCheck = None,
) -> None:
    """The fleet or one job: scale-out, recommendation, last action, pending proposal, health, last runs."""
    try:
        if job is None:
            out.print(fleet_table(store, jobs_file))
        else:
            job_detail(job, store)
    except DaedalusError as exc:
        fail(exc)


def approve(
    proposal: Annotated[str, typer.Argument(help="Proposal id (as `daedalus status` shows it)")],
    scaleout: Annotated[int | None, typer.Option(help="Apply this scale-out instead of the proposed")] = None,
    operator: Operator = USER,
    reason: Annotated[str, typer.Option(help="Why; recorded in the ledger")] = "",
    jobs_file: JobsFileToCheck = None,
    store: Store = DEFAULT_URL,
) -> None:
    """Approve a scale proposal (optionally with another scale-out within the job's limits)."""
    try:
        result = answer(proposal, "approve", scaleout, operator, reason, jobs_file, store)
    except DaedalusError as exc:
        fail(exc)
    console.print(f"[green]approved[/green] {proposal} at scale-out {result['scaleout']}: the loop of "
                  f"{result['job']} applies it at its next run")
    out.print(json.dumps(result))


def reject(
    proposal: Annotated[str, typer.Argument(help="Proposal id")],
    reason: Annotated[str, typer.Option(help="Why; recorded in the ledger")] = "",
    operator: Operator = USER,
    jobs_file: JobsFileToCheck = None,
    store: Store = DEFAULT_URL,
) -> None:
    """Reject a scale proposal: nothing is done and the loop may propose again."""
    try:
        result = answer(proposal, "reject", None, operator, reason, jobs_file, store)
    except DaedalusError as exc:
        fail(exc)
    console.print(f"[green]rejected[/green] {proposal}")
    out.print(json.dumps(result))


def pause(
    job: Annotated[str | None, typer.Argument(help="The job to pause")] = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Kill switch for every job")] = False,
    reason: Annotated[str, typer.Option(help="Why")] = "",
    operator: Operator = USER,
    store: Store = DEFAULT_URL,
    jobs_file: JobsFileToCheck = None,
) -> None:
    """Kill switch: the job (or every job) keeps monitoring and deciding but never acts on its own."""
    try:
        _switch("pause", job, all_jobs, operator, reason, store, jobs_file)
    except DaedalusError as exc:
        fail(exc)


def resume(
    job: Annotated[str | None, typer.Argument(help="The job to resume")] = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Turn the kill switch for every job off")] = False,
    reason: Annotated[str, typer.Option(help="Why")] = "",
    operator: Operator = USER,
    store: Store = DEFAULT_URL,
    jobs_file: JobsFileToCheck = None,
) -> None:
    """Undo `pause`."""
    try:
        _switch("resume", job, all_jobs, operator, reason, store, jobs_file)
    except DaedalusError as exc:
        fail(exc)


def scale(
    job: Annotated[str, typer.Argument(help="The job")],
    scaleout: Annotated[int, typer.Argument(help="The scale-out to apply")],
    reason: Annotated[str, typer.Option(help="Why; recorded in the ledger")],
    jobs_file: JobsFile,
    operator: Operator = USER,
    store: Store = DEFAULT_URL,
) -> None:
    """Scale a job by hand, within its limits (what the `scale-job` deployment does from the UI)."""
    from daedalus.connectors.jobs import load_jobs
    from daedalus.tasks.approval import post_manual_scale

    try:
        msg = post_manual_scale(load_jobs(jobs_file).job(job), scaleout, reason, operator, store)
    except DaedalusError as exc:
        fail(exc)
    console.print(f"manual scale of {job} to {scaleout} posted ({msg}); its loop applies it at its next run")
