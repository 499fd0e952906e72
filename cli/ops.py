"""Operating Daedalus from the command line: the jobs file, deployments, status, approvals, kill switches, the
worker, and the benchmarks of the Prefect side (`daedalus bench deploy`, `daedalus bench schedule`)."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from daedalus.bench.schedule import POLL_S, WORKER_LIMIT
from daedalus.connectors.lake import DEFAULT_URL as DEFAULT_LAKE
from daedalus.connectors.store import DEFAULT_URL
from daedalus.models.errors import DaedalusError
from daedalus.models.text import utc

console = Console(stderr=True)
out = Console()

Store = Annotated[str, typer.Option("--store", help="Knowledge store URL (a folder by default)")]
JobsOption = Annotated[Path | None, typer.Option("--jobs", help="The jobs file (to name the jobs and check limits)")]
Operator = Annotated[str, typer.Option(help="Who acts; recorded in the ledger")]


def _fail(exc: Exception) -> None:
    console.print(f"[red]{type(exc).__name__}:[/red] {exc}", soft_wrap=True)
    raise typer.Exit(1)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


USER = _user()


def _api_configured() -> bool:
    """True when a Prefect API is configured; never start an ephemeral server from the CLI."""
    from prefect.settings import PREFECT_API_URL

    return bool(PREFECT_API_URL.value())


# --- the jobs file -----------------------------------------------------------------------------------------


def jobs_table(path: Path) -> Table:
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
    from daedalus.connectors.store import KnowledgeStore

    if jobs_file is not None:
        from daedalus.connectors.jobs import load_jobs

        return [(j.name, j.mode) for j in load_jobs(jobs_file).jobs]
    return [(name, "?") for name in KnowledgeStore(store_url).jobs()]


def fleet_table(store_url: str, jobs_file: Path | None) -> Table:
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
            raise Refused(f"no approval run found for proposal {proposal}; give --jobs FILE (and --store URL) to "
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


# --- the benchmarks --------------------------------------------------------------------------------------


def bench_jobs_file(path: Path, n: int, speedup: float, mode: str = "auto") -> Path:
    """A jobs file of `n` simulated jobs with different seeds."""
    import yaml

    doc = {"defaults": {"engine": "sim", "scale_target": {"kind": "sim", "name": "sim"}, "mode": mode,
                        "sim": {"speedup": speedup}},
           "jobs": [{"name": f"bench-{i:03d}", "sim": {"seed": i, "speedup": speedup}} for i in range(n)]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console)


def deploy_jobs(jobs_file: Path, store_url: str, pool: str, only: list[str], prune: bool, create_pool: bool,
                prefork: bool, lake_url: str | None, background: bool = True
                ) -> tuple[dict[str, str], list[str], float]:
    from daedalus.connectors.jobs import load_jobs
    from daedalus.deployments.deploy import apply_deployments, plan_deployments, prune_deployments
    from daedalus.runtime.prefork import job_variables

    started = time.perf_counter()
    jobs = load_jobs(jobs_file)
    planned, notes = plan_deployments(jobs, store_url, only, lake_url,
                                      job_variables=job_variables() if prefork else None, with_background=background)
    with _progress() as progress:
        bar = progress.add_task("deploying", total=len(planned))
        applied = asyncio.run(apply_deployments(planned, pool, create_pool=create_pool,
                                                on_done=lambda _: progress.advance(bar)))
    if applied.unchanged:
        notes.append(f"{len(applied.unchanged)} deployment(s) unchanged, left alone; {len(applied.written)} written")
    ids = applied.ids
    if prune:
        notes += [f"deleted {name}: not in the jobs file" for name in
                  asyncio.run(prune_deployments([j.name for j in jobs.jobs]))]
    return ids, notes, time.perf_counter() - started


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this area's commands."""
    jobs_app = typer.Typer(help="The jobs file: one entry per streaming job.", no_args_is_help=True)
    app.add_typer(jobs_app, name="jobs")

    @jobs_app.command("check")
    def jobs_check(file: Annotated[Path, typer.Argument(help="The jobs file (YAML)")]) -> None:
        """Validate the jobs file; every error names the file, the job and the field."""
        try:
            out.print(jobs_table(file))
        except DaedalusError as exc:
            _fail(exc)

    @app.command()
    def deploy(
        file: Annotated[Path, typer.Argument(help="The jobs file (YAML)")],
        pool: Annotated[str, typer.Option(help="Work pool (a process pool is created if missing)")] = "daedalus",
        job: Annotated[list[str] | None, typer.Option("--job", help="Deploy only these jobs (repeatable)")] = None,
        store: Store = DEFAULT_URL,
        lake: Annotated[str, typer.Option(help="Metric-history lake the loops append to and the pipeline reads")
                        ] = DEFAULT_LAKE,
        no_lake: Annotated[bool, typer.Option("--no-lake", help="Loops keep no metric history")] = False,
        background: Annotated[bool, typer.Option(help="Also deploy the event-triggered and periodic flows "
                                                      "(recovery monitor, retraining, validation)")] = True,
        create_pool: Annotated[bool, typer.Option(help="Create a process pool when missing")] = True,
        prune: Annotated[bool, typer.Option(help="Delete mape-k deployments of jobs no longer in the file")] = False,
        prefork: Annotated[bool, typer.Option(help="Start runs through `daedalus worker`'s preloaded process "
                                                   "(process pools; falls back to a plain start without it)")] = True,
        prefect_yaml: Annotated[Path | None, typer.Option(help="Write a prefect.yaml for `prefect deploy --all` "
                                                               "instead of deploying")] = None,
    ) -> None:
        """One `mape-k` deployment per job (every minute, one run at a time) plus the operator and background flows."""
        try:
            if prefect_yaml is not None:
                from daedalus.connectors.jobs import load_jobs
                from daedalus.deployments.deploy import plan_deployments
                from daedalus.deployments.deploy import prefect_yaml as render
                from daedalus.runtime.prefork import job_variables

                planned, notes = plan_deployments(load_jobs(file), store, job or (), None if no_lake else lake,
                                                  job_variables=job_variables() if prefork else None,
                                                  with_background=background)
                prefect_yaml.write_text(render(planned, pool))
                console.print(f"Wrote {prefect_yaml} ({len(planned)} deployments); apply it with "
                              f"`prefect --no-prompt deploy --all --prefect-file {prefect_yaml}`")
            else:
                ids, notes, seconds = deploy_jobs(file, store, pool, job or [], prune, create_pool, prefork,
                                                  None if no_lake else lake, background)
                t = Table(title=f"{len(ids)} deployments applied in {seconds:.1f} s (work pool {pool})")
                t.add_column("deployment")
                t.add_column("id")
                for name, did in sorted(ids.items()):
                    t.add_row(name, did)
                out.print(t)
                console.print(f"Start a worker: daedalus worker --pool {pool}")
            for note in notes:
                console.print(f"[yellow]note:[/yellow] {note}")
        except DaedalusError as exc:
            _fail(exc)

    @app.command()
    def status(
        job: Annotated[str | None, typer.Argument(help="One job (default: the fleet)")] = None,
        store: Store = DEFAULT_URL,
        jobs: JobsOption = None,
    ) -> None:
        """The fleet or one job: scale-out, recommendation, last action, pending proposal, health, last runs."""
        try:
            if job is None:
                out.print(fleet_table(store, jobs))
            else:
                job_detail(job, store)
        except DaedalusError as exc:
            _fail(exc)

    @app.command()
    def approve(
        proposal: Annotated[str, typer.Argument(help="Proposal id (as `daedalus status` shows it)")],
        scaleout: Annotated[int | None, typer.Option(help="Apply this scale-out instead of the proposed")] = None,
        operator: Operator = USER,
        reason: Annotated[str, typer.Option(help="Why; recorded in the ledger")] = "",
        jobs: JobsOption = None,
        store: Store = DEFAULT_URL,
    ) -> None:
        """Approve a scale proposal (optionally with another scaleout within the job's limits)."""
        try:
            result = answer(proposal, "approve", scaleout, operator, reason, jobs, store)
        except DaedalusError as exc:
            _fail(exc)
        console.print(f"[green]approved[/green] {proposal} at scaleout {result['scaleout']}: the loop of "
                      f"{result['job']} applies it at its next run")
        out.print(json.dumps(result))

    @app.command()
    def reject(
        proposal: Annotated[str, typer.Argument(help="Proposal id")],
        reason: Annotated[str, typer.Option(help="Why; recorded in the ledger")] = "",
        operator: Operator = USER,
        jobs: JobsOption = None,
        store: Store = DEFAULT_URL,
    ) -> None:
        """Reject a scale proposal: nothing is done and the loop may propose again."""
        try:
            result = answer(proposal, "reject", None, operator, reason, jobs, store)
        except DaedalusError as exc:
            _fail(exc)
        console.print(f"[green]rejected[/green] {proposal}")
        out.print(json.dumps(result))

    def _switch(kind: str, job: str | None, all_jobs: bool, operator: str, reason: str, store_url: str,
                jobs_file: Path | None) -> None:
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

    @app.command()
    def pause(
        job: Annotated[str | None, typer.Argument(help="The job to pause")] = None,
        all_jobs: Annotated[bool, typer.Option("--all", help="Kill switch for every job")] = False,
        reason: Annotated[str, typer.Option(help="Why")] = "",
        operator: Operator = USER,
        store: Store = DEFAULT_URL,
        jobs: JobsOption = None,
    ) -> None:
        """Kill switch: the job (or every job) keeps monitoring and deciding but never acts on its own."""
        try:
            _switch("pause", job, all_jobs, operator, reason, store, jobs)
        except DaedalusError as exc:
            _fail(exc)

    @app.command()
    def resume(
        job: Annotated[str | None, typer.Argument(help="The job to resume")] = None,
        all_jobs: Annotated[bool, typer.Option("--all", help="Turn the kill switch for every job off")] = False,
        reason: Annotated[str, typer.Option(help="Why")] = "",
        operator: Operator = USER,
        store: Store = DEFAULT_URL,
        jobs: JobsOption = None,
    ) -> None:
        """Undo `pause`."""
        try:
            _switch("resume", job, all_jobs, operator, reason, store, jobs)
        except DaedalusError as exc:
            _fail(exc)

    @app.command()
    def scale(
        job: Annotated[str, typer.Argument(help="The job")],
        scaleout: Annotated[int, typer.Argument(help="The scale-out to apply")],
        reason: Annotated[str, typer.Option(help="Why; recorded in the ledger")],
        jobs: Annotated[Path, typer.Option("--jobs", help="The jobs file")],
        operator: Operator = USER,
        store: Store = DEFAULT_URL,
    ) -> None:
        """Scale a job by hand, within its limits (what the `scale-job` deployment does from the UI)."""
        from daedalus.connectors.jobs import load_jobs
        from daedalus.tasks.approval import post_manual_scale

        try:
            msg = post_manual_scale(load_jobs(jobs).job(job), scaleout, reason, operator, store)
        except DaedalusError as exc:
            _fail(exc)
        console.print(f"manual scale of {job} to {scaleout} posted ({msg}); its loop applies it at its next run")

    @app.command()
    def worker(
        pool: Annotated[str, typer.Option(help="Work pool")] = "daedalus",
        socket_path: Annotated[Path | None, typer.Option("--socket", help="Where the preloaded process listens")
                               ] = None,
        limit: Annotated[int, typer.Option(min=0, help="Flow runs in flight at most (0: no limit). Not with "
                                                       "approve-mode jobs: Prefect 3.8.8's worker crashes when a "
                                                       "resumed run comes back while its slot is still held")] = 0,
    ) -> None:
        """A Prefect process worker whose flow runs fork from a preloaded process (seconds of imports saved)."""
        from daedalus.runtime.prefork import run_worker

        raise typer.Exit(run_worker(pool, socket_path, limit or None))

    @bench.command("deploy")
    def bench_deploy(
        jobs: Annotated[int, typer.Option("--jobs", min=1, help="Simulated jobs to deploy")] = 100,
        json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures here")] = None,
    ) -> None:
        """Time `daedalus deploy` of N simulated jobs against a fresh local Prefect server."""
        import tempfile

        from daedalus.runtime.local_prefect import start_server

        with tempfile.TemporaryDirectory(prefix="daedalus-bench-") as tmp:
            console.print("Starting a local Prefect server (SQLite) ...")
            server = start_server(Path(tmp) / "prefect", many_deployments=True)
            try:
                os.environ.update({"PREFECT_API_URL": server.api_url, "PREFECT_HOME": str(server.home)})
                path = bench_jobs_file(Path(tmp) / "jobs.yaml", jobs, 1.0)
                ids, _, first = deploy_jobs(path, f"{tmp}/store", "bench", [], False, True, True, f"{tmp}/lake")
                _, _, again = deploy_jobs(path, f"{tmp}/store", "bench", [], False, True, True, f"{tmp}/lake")
            finally:
                server.stop()
        report = {"jobs": jobs, "deployments": len(ids), "first_deploy_s": round(first, 2),
                  "redeploy_s": round(again, 2)}
        t = Table(title=f"deploying {jobs} jobs ({len(ids)} deployments)")
        t.add_column("figure")
        t.add_column("value", justify="right")
        t.add_row("first deploy (create)", f"{first:.1f} s")
        t.add_row("deploy again (update)", f"{again:.1f} s")
        out.print(t)
        if json_out:
            json_out.write_text(json.dumps(report, indent=2))

    @bench.command("schedule")
    def bench_schedule(
        jobs: Annotated[int, typer.Option("--jobs", min=1, help="Simulated jobs on the one-minute schedule")] = 100,
        minutes: Annotated[float, typer.Option(min=1, help="How long to run")] = 30,
        prefork: Annotated[bool, typer.Option(help="Worker with the preloaded process (`daedalus worker`)")] = True,
        background: Annotated[bool, typer.Option(help="Deploy the background flows too (a recovery monitor "
                                                      "follows every rescale)")] = True,
        postgres: Annotated[bool, typer.Option(help="The server's database in a throwaway PostgreSQL cluster "
                                                    "(Debian `postgresql`) instead of SQLite")] = False,
        json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures here")] = None,
        keep: Annotated[Path | None, typer.Option(help="Keep the server home and store here")] = None,
        worker_limit: Annotated[int, typer.Option(min=0, help="The worker's --limit (0: none)")] = WORKER_LIMIT,
        poll_seconds: Annotated[float, typer.Option(min=1, help="The worker's query interval "
                                                           "(PREFECT_WORKER_QUERY_SECONDS)")] = POLL_S,
    ) -> None:
        """Can one local server and one process worker keep up with N jobs every minute? Start delays and backlog."""
        from daedalus.bench.schedule import run_schedule_bench, schedule_table

        report = run_schedule_bench(jobs, minutes, prefork, keep, console, background, postgres, worker_limit,
                                    poll_seconds)
        out.print(schedule_table(report))
        if json_out:
            json_out.write_text(json.dumps(report, indent=2))
