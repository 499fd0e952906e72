"""Operating the deployed loops: `daedalus status`, `approve`, `reject`, `pause`, `resume` and `scale`.

Which fleet they talk about comes from the settings in force (cli/settings.py). A job they name must be in the
jobs file. Status works from the knowledge store and adds the last runs when the Prefect API answers; approvals
resume the proposal's waiting approval run through that API.
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from daedalus.cli.common import Format, JobsFile, Output, Store, console, fail, out, print_json, show
from daedalus.cli.settings import HOW, Resolved, api_url, known_job, operator_in_force, resolve
from daedalus.models.errors import ConfigurationError, DaedalusError
from daedalus.models.text import duration, number, percent, utc

if TYPE_CHECKING:
    from daedalus.models.types import LedgerEntry

Operator = Annotated[str | None, typer.Option(
    help="Who acts; recorded in the ledger (default: the settings' operator, else your login)", show_default=False)]


# --- status ------------------------------------------------------------------------------------------------


def prefect_runs(url: str, jobs: list[str]) -> dict[str, dict[str, Any]]:
    """Per job: its mape-k deployment (schedule paused?) and its last runs, from the Prefect API at `url`.

    Two REST calls with httpx, not Prefect's client: importing the client costs a second or more of CPU, and an
    operator reading `status` on a machine busy with the loops and the pipeline should not wait for it."""
    import os

    import httpx

    key = os.environ.get("PREFECT_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(base_url=url.rstrip("/") + "/", headers=headers, timeout=30) as client:
        found = client.post("deployments/filter", json={"flows": {"name": {"any_": ["mape-k"]}},
                                                        "deployments": {"name": {"any_": jobs}}})
        found.raise_for_status()
        deployments = found.json()
        by_id = {d["id"]: d for d in deployments}
        runs: list[dict[str, Any]] = []
        if by_id:
            due = {"deployment_id": {"any_": list(by_id)},
                   "expected_start_time": {"before_": datetime.now(UTC).isoformat()}}
            got = client.post("flow_runs/filter", json={"flow_runs": due, "sort": "EXPECTED_START_TIME_DESC",
                                                        "limit": min(200, 5 * max(1, len(by_id)))})
            got.raise_for_status()
            runs = got.json()
    info: dict[str, dict[str, Any]] = {}
    for d in deployments:
        info[d["name"]] = {"deployment": d["id"], "paused": d.get("paused"), "last": None, "late_s": None}
    for r in runs:
        d = by_id.get(r.get("deployment_id"))
        state = r.get("state") or {}
        if d is None or _skipped(state):
            continue
        entry = info[d["name"]]
        if entry["last"] is None:
            entry["last"] = state.get("name") or "?"
        if entry["late_s"] is None and r.get("start_time") and r.get("expected_start_time"):
            # a worker may start a run before it is due
            late = (datetime.fromisoformat(r["start_time"]) - datetime.fromisoformat(r["expected_start_time"]))
            entry["late_s"] = max(0.0, late.total_seconds())
    return info


def _skipped(state: dict[str, Any]) -> bool:
    """A run the deployment's one-at-a-time limit cancelled because the previous loop still ran (a worker catching
    up on late runs): no loop was missed, so it is not what "last run" should show. `state` as the API returns it."""
    return state.get("type") == "CANCELLED" and "concurrency limit" in (state.get("message") or "").lower()


def _job_names(resolved: Resolved) -> tuple[list[tuple[str, str]], str]:
    """(job, mode) from the jobs file in force, else every job the store knows (mode unknown), with a note
    saying which; nowhere to look is an error that says how to configure it."""
    from daedalus.connectors import store as job_store

    settings = resolved.settings
    if settings.jobs_file is not None:
        from daedalus.connectors.jobs import load_jobs

        return [(j.name, j.mode) for j in load_jobs(settings.jobs_file).jobs], ""
    stored = job_store.Store(settings.store).jobs()
    if not stored:
        raise ConfigurationError(f"no jobs file configured and no job in the store {settings.store} "
                                 f"({resolved.sources['store']}): {HOW}")
    return [(name, "?") for name in stored], "no jobs file configured: the jobs found in the store"


FLEET = ("job", "health", "scale-out", "mode", "decision", "last action", "pending proposal", "last loop (UTC)")
WIDE = ("capacity (tuples/s)", "workload (tuples/s)", "forecast peak (tuples/s)", "reason")


def fleet(resolved: Resolved) -> tuple[list[dict[str, Any]], str, str]:
    """One record per job of the jobs file in force (every job of the store without one): its stored status and
    its last runs when the Prefect API answers; with the table's title and a caption saying what is missing."""
    from daedalus.connectors import store as job_store
    from daedalus.tasks.dashboards import fleet_rows

    store_url = resolved.settings.store
    store = job_store.Store(store_url)
    jobs, note = _job_names(resolved)
    rows = fleet_rows(jobs, store, time.time())
    api: dict[str, dict[str, Any]] = {}
    try:
        url = api_url(resolved)
    except ConfigurationError as exc:
        api_note = f"store only: {exc}"
    else:
        try:
            api = prefect_runs(url, [j for j, _ in jobs])
            api_note = ""
        except Exception as exc:  # the store's view is still worth showing
            api_note = f"store only: the Prefect API failed ({type(exc).__name__}: {exc})"
    records = []
    for row in rows:
        a, s = api.get(row["job"], {}), store.job(row["job"]).status() or {}
        last_run = a.get("last") or ("" if not api else "no deployment" if not a else "")
        records.append({**row, "status": s, "last run": last_run, "schedule paused": a.get("paused"),
                        "start delay": a.get("late_s")})
    switch = store.kill_switch()
    title = f"{len(rows)} job(s) in {store_url}"
    if switch:
        title += f" — KILL SWITCH ON for all jobs (by {switch.get('operator')}: {switch.get('reason')})"
    return records, title, "; ".join(n for n in (note, api_note) if n)


def fleet_table(records: list[dict[str, Any]], title: str, caption: str, wide: bool) -> Table:
    """Health and recommendation first, the last runs when the Prefect API answered; `wide` adds the figures the
    last loop saw and its first reason."""
    t = Table(title=title, caption=caption or None)
    for col in (*FLEET, "last run", "start delay", *(WIDE if wide else ())):
        t.add_column(col, no_wrap=col == "job")  # a job's name is never cut: the other columns wrap first
    for r in records:
        s = r["status"]
        last_run = f"{r['last run']} (schedule paused)".strip() if r["schedule paused"] else r["last run"]
        # The health in full (the UI's fleet table cuts it to fit its column): a table here wraps it instead
        health = r["health"] if not s or r["health"].startswith("stale:") else str(s.get("health"))
        cells = [*(health if c == "health" else r[c] for c in FLEET), last_run, duration(r["start delay"], unknown="")]
        if wide:
            cells += [number(s.get("capacity"), unknown=""), number(s.get("workload"), unknown=""),
                      number(s.get("forecast_peak"), unknown=""), (s.get("reasons") or [""])[0]]
        t.add_row(*cells)
    return t


def _iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(float(t), UTC).isoformat(timespec="seconds")


def status_json(s: dict[str, Any]) -> dict[str, Any]:
    """A job's stored status (its last loop) for scripts: values, not table cells; every time in ISO 8601 UTC on the
    wall clock (a simulated job's own clock runs faster and is left out)."""
    last, o, p = s.get("last_action"), s.get("override"), s.get("pending")
    return {
        "health": s.get("health"), "scaleout": s.get("current"), "recommended": s.get("recommended"),
        "decision": s.get("kind"), "reasons": s.get("reasons") or [], "capacity": s.get("capacity"),
        "workload": s.get("workload"), "forecast_peak": s.get("forecast_peak"),
        # status.json keeps the entry's events as the text people read: named for what it is beside the ledger's list
        "last_action": None if not last else {**{k: v for k, v in last.items() if k != "events"},
                                              "time": _iso(last.get("time")), "what_happened": last.get("events")},
        "pending": None if not p else {**p, "expires": _iso(p.get("expires"))},
        "held": None if not o else {**o, "until": _iso(o.get("until"))},
        "paused": s.get("paused"), "last_loop": _iso(s.get("wall")),
    }


def fleet_json(records: list[dict[str, Any]], store_url: str) -> dict[str, Any]:
    """The fleet for scripts: values, not table cells (times in ISO 8601 UTC, numbers as numbers)."""
    jobs = []
    for r in records:
        s = r["status"]
        jobs.append({"job": r["job"], "mode": r["mode"], **status_json(s),
                     "health": s.get("health") if s else r["health"],
                     "stale": bool(s) and r["health"].startswith("stale:"), "last_run": r["last run"] or None,
                     "schedule_paused": r["schedule paused"], "start_delay_s": r["start delay"]})
    return {"store": store_url, "jobs": jobs}


def _seconds(value: float | None) -> float | str | None:
    """A duration for JSON: seconds, `never` where it is unbounded (JSON has no infinity), None where unknown."""
    return None if value is None else value if math.isfinite(value) else "never"


def entry_json(e: LedgerEntry) -> dict[str, Any]:
    """A ledger entry for scripts: what `status JOB` shows, as values; each event at its own wall-clock time."""
    return {
        "decision": e.id, "time": _iso(e.shown_time), "from": e.current, "to": e.target, "kind": e.kind,
        "state": e.state, "operator": e.operator,
        "events": [{"time": _iso(t), "event": label} for t, label in e.events],
        "predicted_recovery_s": _seconds(e.predicted_recovery_s),
        "observed_recovery_s": _seconds(e.observed_recovery_s),
        "verdict": e.verdict, "capacity_ratio": e.capacity_ratio, "reasons": list(e.reasons),
        "held_until": _iso(e.held_until), "hold_ended": _iso(e.hold_ended),
    }


def job_detail(job: str, store_url: str, fmt: Format = Format.table) -> None:
    """One job in full: its last loop, pending proposal, ledger and inbox, so an operator can answer it. Values
    an older loop stored as infinite or missing show as such, never as a crash."""
    from daedalus.connectors import store as job_store
    from daedalus.tasks.dashboards import ledger_rows, verification_lines

    store = job_store.Store(store_url).job(job)
    status = store.status()
    k = store.load().knowledge
    if status is None and k is None:
        raise DaedalusError(f"nothing stored for job {job!r} in {store_url}: has its loop run yet?")
    waiting = [m for _, m in store.pending()]
    if fmt == Format.json:  # the same values as the table, for scripts: no cell text, every time in ISO 8601 UTC
        p, entries = (None, []) if k is None else (k.pending, sorted(k.ledger[-15:], key=lambda e: e.changed,
                                                                      reverse=True))
        print_json({"job": job, "status": status and {"mode": status.get("mode"), **status_json(status)},
                    "ledger": [entry_json(e) for e in entries],
                    "pending": p and {"id": p.id, "from": p.current, "to": p.target, "expires": _iso(p.expires),
                                      "reasons": list(p.reasons)},
                    "inbox": [{"kind": m.kind, "time": _iso(m.time), "message": m.describe()} for m in waiting]})
        return
    ledger = [] if k is None else ledger_rows(k, limit=15, full_reasons=True)
    if status:
        out.print(f"[bold]{job}[/bold] ({status.get('mode', '?')}): health {status.get('health') or '?'}; "
                  f"scale-out {status.get('current')}, recommended {status.get('recommended')} "
                  f"({status.get('kind')})", soft_wrap=True)
        out.print(f"  last loop {utc(status.get('wall'))}; capacity now {number(status.get('capacity'), 'tuples/s')}, "
                  f"workload {number(status.get('workload'), 'tuples/s')}, forecast peak "
                  f"{number(status.get('forecast_peak'), 'tuples/s')} ({status.get('forecast_method')}, WAPE "
                  f"{percent(status.get('wape'))})", soft_wrap=True)
        for reason in status.get("reasons") or ():
            out.print(f"  • {reason}", soft_wrap=True)
    if k is not None:
        if k.paused:
            out.print("[yellow]  paused (kill switch for this job): `daedalus resume` to let it act again[/yellow]")
        if k.pending:
            out.print(f"[bold]  pending proposal {k.pending.id}: {k.pending.current} → {k.pending.target}[/bold] "
                      f"(answer: daedalus approve|reject {k.pending.id})", soft_wrap=True)
        for line in verification_lines(k):  # the stage limiting the job, the ceiling in force
            out.print(f"  {line}", soft_wrap=True, markup=False)
        t = Table(title=f"ledger of {job} (newest first)")
        for col in (ledger[0] if ledger else {"ledger": ""}):
            t.add_column(col, no_wrap=col in ("time (UTC)", "scale-out", "decision"),
                         ratio=2 if col in ("what happened", "reason") else None)
        for row in ledger:
            t.add_row(*("" if v is None else str(v) for v in row.values()))
        show(t)
    if waiting:
        out.print(f"  inbox: {len(waiting)} message(s) waiting for the next loop run:", soft_wrap=True)
        for m in waiting:
            out.print(f"  • {utc(m.time)}: {m.describe()}", soft_wrap=True, markup=False)


# --- approvals ---------------------------------------------------------------------------------------------


def _next_loop(store_url: str, job: str, now: float) -> float | None:
    """When the job's loop should next run, from its last run (status) and the loops' interval; None before its
    first run. What an operator is told to expect, not a promise: a busy worker starts runs late."""
    from daedalus.connectors import store as job_store
    from daedalus.deployments.deploy import LOOP_INTERVAL_S

    last = (job_store.Store(store_url).job(job).status() or {}).get("wall")
    if last is None:
        return None
    due = float(last) + LOOP_INTERVAL_S
    while due < now:
        due += LOOP_INTERVAL_S
    return due


def answer(proposal: str, decision: str, scaleout: int | None, operator: str, reason: str, resolved: Resolved,
           given: float) -> dict[str, Any]:
    """Check the answer against the jobs file and the job's knowledge, then record it in the job's inbox, dated
    `given` (the command's start): once this returns the answer is on disk where the loop reads it, and a proposal
    answered before its deadline is honoured even when the loop's run starts after it. No Prefect call: an answer
    must not wait for a busy server or worker (the loop closes the proposal's approval run when it applies it)."""
    from daedalus.connectors.answers import post_answer
    from daedalus.models.errors import Refused

    job, store_url = proposal.rsplit("-", 1)[0], resolved.settings.store
    spec = known_job(resolved, job)
    try:
        result = post_answer(spec, proposal, decision, scaleout, operator, reason, store_url, given)
    except OSError as exc:
        raise Refused(f"the answer to {proposal} could not be recorded in {store_url} ({type(exc).__name__}: "
                      f"{exc}); nothing was done: answer again") from None
    return {**result, "given": _iso(given), "expires": _iso(result["expires"]),
            "next_loop": _iso(_next_loop(store_url, job, time.time()))}


def _answered(verb: str, result: dict[str, Any]) -> None:
    """What was recorded and what happens next, for people (stderr); the JSON line for scripts (stdout)."""
    next_loop = result["next_loop"]
    when = (f"at its next run, due about {utc(datetime.fromisoformat(next_loop).timestamp())}" if next_loop else
            "at its next run")
    expires = result["expires"]
    deadline = f", deadline {utc(datetime.fromisoformat(expires).timestamp())}" if expires else ""
    at = f" at scale-out {result['scaleout']}" if result["decision"] == "approve" else ""
    console.print(f"[green]{verb}[/green] {result['proposal']}{at} by {result['operator']} (given "
                  f"{utc(datetime.fromisoformat(result['given']).timestamp())}{deadline}): recorded in the inbox of "
                  f"{result['job']}; its loop applies it {when}", soft_wrap=True)
    posted(result)


def _switch(kind: str, job: str | None, all_jobs: bool, operator: str, reason: str, resolved: Resolved) -> None:
    """Pause or resume one job of the jobs file through its inbox, or every job through the store-wide kill
    switch."""
    from daedalus.connectors import store as job_store

    store_url = resolved.settings.store
    if (job is None) == (not all_jobs):
        raise typer.BadParameter("give a JOB or --all")
    if all_jobs:
        if kind == "pause":
            job_store.Store(store_url).set_kill_switch(operator, reason)
            console.print(f"[yellow]kill switch ON[/yellow] in {store_url}: every job keeps monitoring and deciding, "
                          "none acts", soft_wrap=True)
        else:
            was = job_store.Store(store_url).clear_kill_switch()
            console.print("kill switch off" if was else "the kill switch was not on")
        posted({"all": True, "action": kind, "kill_switch": kind == "pause", "store": store_url,
                "operator": operator, "reason": reason})
        return
    assert job is not None
    known_job(resolved, job)
    msg = job_store.Store(store_url).job(job).post(kind, {"operator": operator, "reason": reason, "wall": time.time()})
    console.print(f"{kind} of {job} posted ({msg.id}); its loop applies it at its next run", soft_wrap=True)
    posted({"job": job, "action": kind, "operator": operator, "reason": reason, "message": msg.id})


def posted(result: dict[str, Any]) -> None:
    """What an operator's command did, as one JSON line on stdout (the sentence for people is on stderr): a script
    piping `daedalus scale …` or `pause …` reads it whatever the width."""
    typer.echo(json.dumps(result))


# --- the commands ------------------------------------------------------------------------------------------


def status(
    job: Annotated[str | None, typer.Argument(help="One job (default: the fleet)")] = None,
    store: Store = None,
    jobs_file: JobsFile = None,
    output: Output = Format.table,
) -> None:
    """The fleet or one job: health, scale-out and recommendation, last action, pending proposal, last runs.

    Piped or redirected, every row is one line and no job's name is cut; `--output json` is for scripts.
    """
    try:
        resolved = resolve(store=store, jobs_file=jobs_file)
        if job is not None:
            known_job(resolved, job)
            job_detail(job, resolved.settings.store, output)
            return
        records, title, caption = fleet(resolved)
        if output == Format.json:
            print_json(fleet_json(records, resolved.settings.store))
        else:
            show(fleet_table(records, title, caption, wide=output == Format.wide))
    except DaedalusError as exc:
        fail(exc)


def approve(
    proposal: Annotated[str, typer.Argument(help="Proposal id (as `daedalus status` shows it)")],
    scaleout: Annotated[int | None, typer.Option(help="Apply this scale-out instead of the proposed")] = None,
    operator: Operator = None,
    reason: Annotated[str, typer.Option(help="Why; recorded in the ledger")] = "",
    jobs_file: JobsFile = None,
    store: Store = None,
) -> None:
    """Approve a scale proposal (optionally with another scale-out within the job's limits).

    Recorded in the job's inbox before the command returns, dated when it started; applied at the loop's next run.
    """
    given = time.time()  # when the operator answered: the deadline is judged then
    try:
        resolved = resolve(store=store, jobs_file=jobs_file)
        result = answer(proposal, "approve", scaleout, operator_in_force(operator, resolved), reason, resolved,
                        given)
    except DaedalusError as exc:
        fail(exc)
    _answered("approved", result)


def reject(
    proposal: Annotated[str, typer.Argument(help="Proposal id")],
    reason: Annotated[str, typer.Option(help="Why; recorded in the ledger")] = "",
    operator: Operator = None,
    jobs_file: JobsFile = None,
    store: Store = None,
) -> None:
    """Reject a scale proposal: nothing is done and the loop may propose again.

    Recorded in the job's inbox before the command returns, dated when it started; applied at the loop's next run.
    """
    given = time.time()
    try:
        resolved = resolve(store=store, jobs_file=jobs_file)
        result = answer(proposal, "reject", None, operator_in_force(operator, resolved), reason, resolved, given)
    except DaedalusError as exc:
        fail(exc)
    _answered("rejected", result)


def pause(
    job: Annotated[str | None, typer.Argument(help="The job to pause")] = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Kill switch for every job")] = False,
    reason: Annotated[str, typer.Option(help="Why")] = "",
    operator: Operator = None,
    store: Store = None,
    jobs_file: JobsFile = None,
) -> None:
    """Kill switch: the job (or every job) keeps monitoring and deciding but never acts on its own."""
    try:
        resolved = resolve(store=store, jobs_file=jobs_file)
        _switch("pause", job, all_jobs, operator_in_force(operator, resolved), reason, resolved)
    except DaedalusError as exc:
        fail(exc)


def resume(
    job: Annotated[str | None, typer.Argument(help="The job to resume")] = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Turn the kill switch for every job off")] = False,
    reason: Annotated[str, typer.Option(help="Why")] = "",
    operator: Operator = None,
    store: Store = None,
    jobs_file: JobsFile = None,
) -> None:
    """Undo `pause`."""
    try:
        resolved = resolve(store=store, jobs_file=jobs_file)
        _switch("resume", job, all_jobs, operator_in_force(operator, resolved), reason, resolved)
    except DaedalusError as exc:
        fail(exc)


def scale(
    job: Annotated[str, typer.Argument(help="The job")],
    scaleout: Annotated[int, typer.Argument(help="The scale-out to apply")],
    reason: Annotated[str, typer.Option(help="Why; recorded in the ledger")],
    jobs_file: JobsFile = None,
    operator: Operator = None,
    store: Store = None,
) -> None:
    """Scale a job by hand, within its limits (what the `scale-job` deployment does from the UI).

    Recorded in the job's inbox before the command returns, dated when it started; applied at the loop's next run.
    """
    from daedalus.connectors.answers import post_manual_scale

    given = time.time()
    try:
        resolved = resolve(store=store, jobs_file=jobs_file)
        who = operator_in_force(operator, resolved)
        msg = post_manual_scale(known_job(resolved, job), scaleout, reason, who, resolved.settings.store, given)
    except DaedalusError as exc:
        fail(exc)
    except OSError as exc:
        fail(DaedalusError(f"the manual scale of {job} could not be recorded ({type(exc).__name__}: {exc}); "
                           "nothing was done: ask again"))
    next_loop = _next_loop(resolved.settings.store, job, time.time())
    when = f", due about {utc(next_loop)}" if next_loop else ""
    console.print(f"manual scale of {job} to {scaleout} by {who} recorded ({msg}, given {utc(given)}); its loop "
                  f"applies it at its next run{when}", soft_wrap=True)
    posted({"job": job, "action": "scale", "scaleout": scaleout, "operator": who, "reason": reason, "message": msg,
            "given": _iso(given), "next_loop": _iso(next_loop)})
