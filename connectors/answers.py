"""An operator's answers, manual scales and releases: checked against the job's knowledge (read, never written) and
posted to its inbox in the job store, dated when they were given, with who and why.

What `daedalus approve|reject|scale|release` and the operator flows (flows/approval.py, flows/release.py) share.
Nothing here starts Prefect: the command line answers at once on a busy machine, and the answer is durable before
it returns (issue 36). The loop applies it at its next run (models/loop/messages.py checks it again).
"""

from __future__ import annotations

from typing import Any

from daedalus.connectors.clock import WALL
from daedalus.connectors.jobs import JobSpec
from daedalus.connectors.store import JobStore, Store
from daedalus.models.errors import Refused
from daedalus.models.loop.approvals import answer
from daedalus.models.loop.messages import ANSWER_GRACE_S, ControlMessage, check_scaleout
from daedalus.models.text import utc


def job_now(spec: JobSpec, store_url: str) -> float:
    """The job's clock, read without changing anything (a simulated job's clock runs at its speedup)."""
    if spec.engine != "sim":
        return WALL.now()
    from daedalus.connectors.sim_persistent import peek_now
    from daedalus.models.errors import ConnectorError

    try:
        return peek_now(spec, store_url)
    except ConnectorError:  # not simulated yet: its clock starts at the wall clock
        return WALL.now()


def checked_answer(spec: JobSpec, proposal: str, decision: str, scaleout: int | None, store_url: str,
                   given: float | None = None, late_ok: bool = False) -> tuple[int | None, float]:
    """Refuse an answer that cannot apply, before anything is posted; returns the scale-out to apply and the
    proposal's deadline.

    `given` (default now) is when the operator answered, on the wall clock: the deadline is judged then, not when
    the answer gets here. One that would land later than half the loop's grace past the deadline is refused too,
    as too late to be sure the loop sees it before it expires the proposal."""
    job = spec.name
    given = WALL.now() if given is None else given
    if decision == "approve" and scaleout is not None:
        refusal = check_scaleout(spec.loop_config(), scaleout)
        if refusal:
            raise Refused(f"approval of {proposal} refused: {refusal} (min {spec.scaleout.min}, "
                          f"max {spec.scaleout.max} in the jobs file)")
    for _, msg in Store(store_url).job(job).pending():
        if msg.kind in ("approve", "reject") and msg.body.get("proposal") == proposal:
            raise Refused(f"proposal {proposal} was already answered ({msg.kind} by "
                          f"{msg.body.get('operator', '?')}); the loop applies it at its next run")
    expires, proposed = pending_proposal(store_url, job, proposal)
    if given >= expires:
        raise Refused(f"proposal {proposal} expired at {utc(expires)}, before the answer given at "
                      f"{utc(given)}: nothing was done")
    if not late_ok and WALL.now() >= expires + ANSWER_GRACE_S / 2:
        raise Refused(f"the answer to {proposal}, given at {utc(given)}, arrived at {utc(WALL.now())}: too late to "
                      f"record before the loop expires the proposal (deadline {utc(expires)}); nothing was done")
    return (scaleout if scaleout is not None else proposed), expires


def pending_proposal(store_url: str, job: str, proposal: str) -> tuple[float, int]:
    """(deadline, proposed scale-out) of the job's pending proposal `proposal`; Refused, saying what became of it,
    when it is not pending.

    From the status the job's last loop wrote, when that status describes the newest stored knowledge version:
    loading the knowledge unpickles its forecaster (statsmodels, a second of CPU that an operator on a busy machine
    waits for), the status is a small JSON file. Otherwise, and for a refusal's message, from the knowledge."""
    store = Store(store_url).job(job)
    status = store.status() or {}
    p = status.get("pending")
    if p and p.get("id") == proposal and status.get("knowledge_version") is not None:
        versions = store.versions()
        if versions and versions[-1] == status["knowledge_version"]:
            return float(p["expires"]), int(p["to"])
    k = store.load().knowledge
    if k is None:
        raise Refused(f"no knowledge stored for job {job!r} in {store_url}: no proposal {proposal} to answer")
    if k.pending is None or k.pending.id != proposal:
        entry = k.entry(proposal)
        if entry is None:
            raise Refused(f"job {job!r} has no proposal {proposal}")
        raise Refused(f"proposal {proposal} is no longer pending: it was {entry.state}")
    return k.pending.expires, k.pending.target


def post_answer(spec: JobSpec, proposal: str, decision: str, scaleout: int | None, operator: str, reason: str,
                store_url: str, given: float | None = None, late_ok: bool = False) -> dict[str, Any]:
    """Check, then post the answer to the job's inbox for its loop to apply: once this returns the answer is on
    disk, dated `given` (default now), with who and why, for the ledger. `late_ok`: an answer given in time that
    reaches the store after the loop's grace (a UI answer whose run a busy worker resumed late) is still posted
    while the proposal is pending, rather than refused; the loop applies it if it has not expired the proposal."""
    given = WALL.now() if given is None else given
    target, expires = checked_answer(spec, proposal, decision, scaleout, store_url, given, late_ok)
    body: dict[str, Any] = {"proposal": proposal, "operator": operator, "reason": reason, "wall": given}
    if decision == "approve":
        body["scaleout"] = target
    msg = Store(store_url).job(spec.name).post(decision, body, now=job_now(spec, store_url))
    return {"job": spec.name, "proposal": proposal, "decision": decision, "scaleout": body.get("scaleout"),
            "operator": operator, "reason": reason, "message": msg.id, "given": given, "expires": expires}


def recorded_answer(store_url: str, job: str, proposal: str) -> tuple[str, str] | None:
    """(outcome, what) of an answer to `proposal` recorded outside its approval run — `daedalus approve|reject`
    writes to the job's inbox, and the loop then to its ledger — or None. An approval run that starts late (a busy
    worker) must report that answer, not "expired before an operator could answer"."""
    for _, msg in Store(store_url).job(job).pending():
        if msg.kind in ("approve", "reject") and msg.body.get("proposal") == proposal:
            when = f", given at {utc(float(msg.body['wall']))}" if msg.body.get("wall") else ""
            return ("approved" if msg.kind == "approve" else "rejected",
                    f"proposal {proposal} {msg.answer_label()}{when}: the job's loop applies it at its next run")
    k = Store(store_url).job(job).load().knowledge
    entry = None if k is None else k.entry(proposal)
    label = None if entry is None else answer(entry)
    if label is None:
        return None
    return ("approved" if label.startswith("approved") else "rejected",
            f"proposal {proposal} {label} (recorded in the job's ledger)")


def post_manual_scale(spec: JobSpec, scaleout: int, reason: str, operator: str, store_url: str,
                      given: float | None = None) -> str:
    """Refuse a manual action outside the job's limits, else post it to the job's inbox, dated `given` (default
    now: when it was asked)."""
    refusal = check_scaleout(spec.loop_config(), scaleout)
    if refusal:
        raise Refused(f"manual scale of {spec.name!r} refused: {refusal} (min {spec.scaleout.min}, "
                      f"max {spec.scaleout.max} in the jobs file)")
    if not reason.strip():
        raise Refused(f"manual scale of {spec.name!r} refused: give a reason; it goes into the ledger")
    body = {"scaleout": scaleout, "reason": reason, "operator": operator,
            "wall": WALL.now() if given is None else given}
    return Store(store_url).job(spec.name).post("scale", body, now=job_now(spec, store_url)).id


def quarantined(store: JobStore) -> bool:
    """Quarantined now, or about to be (a quarantine message the loop has not applied yet)."""
    waiting = [m.kind for _, m in store.pending() if m.kind in ("quarantine", "release")]
    if waiting:
        return waiting[-1] == "quarantine"
    knowledge = store.load().knowledge
    return knowledge is not None and knowledge.quarantine is not None


def post_release(spec: JobSpec, reason: str, operator: str, store_url: str) -> ControlMessage:
    """An operator lifts a job's quarantine (`daedalus release`, the `release-job` flow): validation was wrong, or
    the job cannot wait. Refused without a reason or when nothing is quarantined; the loop applies it at its next
    run, with who released it and why."""
    if not reason.strip():
        raise Refused(f"release of {spec.name!r} refused: give a reason; it goes into the ledger")
    store = Store(store_url).job(spec.name)
    if not quarantined(store):
        raise Refused(f"release of {spec.name!r} refused: {spec.name} is not quarantined (or its release already "
                      "waits for its loop)")
    return store.post("release", {"operator": operator, "reason": reason})
